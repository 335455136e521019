"""Agent hooks: memories that reach the model without anyone asking.

Claude Code, Codex and Gemini CLI run a command when a session starts and when the user submits
a prompt, pass it JSON on stdin (`session_id`, `cwd`, `prompt`...) and add what it prints to the
model's context. `run_hook` is that command's body:

- session start: the core memories, and the most relevant ones for the project;
- user prompt: the memories relevant to the prompt, none given before in the same session (a
  small state file per session remembers which), nothing at all when nothing is relevant;
- within a character budget and a time limit, and never failing the prompt: an internal error
  prints nothing and is logged to `hook-errors.log`, which `pmem doctor` shows.

Output conventions: Claude Code adds plain stdout to the context; Codex and Gemini CLI read a
JSON object with `hookSpecificOutput.additionalContext` (Gemini requires JSON on stdout).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import paths

if TYPE_CHECKING:
    from ..store import Filter, MemoryStore

CLIENTS = ("claude-code", "codex", "gemini")
EVENTS = ("session-start", "user-prompt")
# Each client's name for the two events (Gemini calls the prompt hook BeforeAgent).
EVENT_NAMES = {
    "claude-code": {"session-start": "SessionStart", "user-prompt": "UserPromptSubmit"},
    "codex": {"session-start": "SessionStart", "user-prompt": "UserPromptSubmit"},
    "gemini": {"session-start": "SessionStart", "user-prompt": "BeforeAgent"},
}
MAX_STDIN = 1_000_000  # characters of hook JSON read; a prompt longer than this is cut
MAX_PROMPT_CHARS = 2_000  # of the prompt used as the query
STATE_DAYS = 7  # session state files older than this are removed
LOG_MAX_BYTES = 256_000


def state_dir() -> Path:
    return paths.data_dir() / "hook-sessions"


def log_path() -> Path:
    return paths.hook_log_path()


def log_error(message: str) -> None:
    """Append to the hook log (kept small: it is cut in half when it grows past 256 kB)."""
    try:
        path = log_path()
        paths.ensure_private_dir(path.parent)
        if path.exists() and path.stat().st_size > LOG_MAX_BYTES:
            keep = path.read_bytes()[-LOG_MAX_BYTES // 2:]
            path.write_bytes(keep)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{stamp} {message.rstrip()}\n")
    except OSError:
        pass  # nowhere to log: still never fail the prompt


@dataclass
class HookInput:
    session_id: str | None = None
    cwd: str | None = None
    prompt: str | None = None
    source: str | None = None  # startup, resume, clear, compact
    raw: dict[str, Any] = field(default_factory=dict)


def parse_input(text: str) -> HookInput:
    """The hook JSON; an empty or unreadable stdin gives an empty input, not an error."""
    text = (text or "")[:MAX_STDIN].strip()
    if not text:
        return HookInput()
    try:
        data = json.loads(text)
    except ValueError:
        return HookInput(prompt=text)  # a person trying the command by hand
    if not isinstance(data, dict):
        return HookInput()

    def s(key: str) -> str | None:
        v = data.get(key)
        return v if isinstance(v, str) and v else None

    return HookInput(session_id=s("session_id"), cwd=s("cwd"), prompt=s("prompt"),
                     source=s("source") or s("trigger"), raw=data)


class SessionState:
    """The ids already given in one agent session, in a small JSON file per session."""

    def __init__(self, session_id: str | None):
        self.path: Path | None = None
        self.given: set[str] = set()
        if not session_id:
            return
        digest = hashlib.sha256(session_id.encode("utf-8", "replace")).hexdigest()[:24]
        self.path = state_dir() / f"{digest}.json"
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            self.given = {i for i in data.get("given", []) if isinstance(i, str)}
        except (OSError, ValueError, AttributeError):
            self.given = set()

    def reset(self) -> None:
        self.given = set()

    def save(self) -> None:
        if self.path is None:
            return
        paths.ensure_private_dir(self.path.parent)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"given": sorted(self.given)}), encoding="utf-8")
        os.replace(tmp, self.path)
        _prune(self.path.parent)


def _prune(folder: Path) -> None:
    cutoff = time.time() - STATE_DAYS * 86400
    try:
        for p in folder.iterdir():
            if p.suffix == ".json" and p.stat().st_mtime < cutoff:
                p.unlink(missing_ok=True)
    except OSError:
        pass


def _line(m) -> str:
    text = " ".join(m.text.split())
    tags = " " + " ".join("#" + t for t in m.tags) if m.tags else ""
    return f"- [{(m.valid_from or m.created_at)[:10]} · {m.id}] {text}{tags}"


def _pack(header: str, sections: list[tuple[str, list]], budget: int) -> tuple[str, list[str]]:
    """Lines under `budget` characters in all; a memory too long for what is left is cut, and
    nothing past the budget is printed. Returns the block and the ids it holds."""
    out = [header]
    used = len(header) + 1
    ids: list[str] = []
    for title, memories in sections:
        if not memories:
            continue
        title_cost = len(title) + 2
        if used + title_cost + 40 > budget:
            break
        lines: list[str] = []
        for m in memories:
            line = _line(m)
            room = budget - used - title_cost - sum(len(x) + 1 for x in lines) - 1
            if room < 40:
                break
            if len(line) > room:
                line = line[:room - 1] + "…"
            lines.append(line)
            ids.append(m.id)
        if lines:
            out += ["", title, *lines]
            used += title_cost + sum(len(x) + 1 for x in lines)
    if not ids:
        return "", []
    return "\n".join(out), ids


@dataclass
class HookSettings:
    budget: int = 4000  # characters printed at most
    timeout: float = 4.0  # seconds; past it the hook prints nothing
    limit: int = 8  # relevant memories considered per prompt
    min_similarity: float | None = None  # None: the vectors' model's (pmem.thresholds hook, hook_words)


def search_mode(store: MemoryStore) -> str:
    """"keyword" when the embedding model is not on disk yet: a hook must not start a download."""
    from ..provision import known_models, model_file

    spec = store.embed_model_name()
    if spec in known_models() and not model_file(spec).exists():
        return "keyword"
    return "hybrid"


def _relevant(store: MemoryStore, query: str, flt: Filter, limit: int, min_similarity: float | None) -> list:
    from ..search import search

    hits = search(store, query, replace(flt, pinned=False, tiers=("archival",)), limit=limit,
                  mode=search_mode(store))
    # A prompt always shares some words with something; keep only hits that are close in meaning,
    # or that match by words and are not far in meaning.
    if min_similarity is None:
        t = store.thresholds()
        close_at, words_at = t.hook, t.hook_words
    else:
        close_at, words_at = min_similarity, min_similarity / 2
    keep = []
    for h in hits:
        sim = None if h.distance is None else 1.0 - h.distance
        close = sim is not None and sim >= close_at
        words = (h.keyword_rank is not None and h.keyword_rank <= 3
                 and (sim is None or sim >= words_at))
        if close or words:
            keep.append(h.memory)
    return keep


def build_context(store: MemoryStore, event: str, data: HookInput, settings: HookSettings,
                  flt: Filter | None = None, project: str | None = None) -> str:
    """The block to print for one hook event ("" when there is nothing new and relevant)."""
    from ..store import Filter

    flt = flt or Filter()
    state = SessionState(data.session_id)
    if event == "session-start":
        if data.source != "resume":
            state.reset()  # a new or compacted conversation: everything may be given again
        core = store.list_memories(replace(flt, pinned=True, tiers=("core",)), sort="created", reverse=True, limit=50)
        query = project_query(project or data.cwd)
        relevant = _relevant(store, query, flt, settings.limit, settings.min_similarity) if query else []
        if not relevant:
            relevant = store.list_memories(replace(flt, pinned=False, tiers=("archival",)), sort="created", limit=5) \
                if project else []
        sections = [("## Core (always true for this user)", core),
                    ("## Recent and relevant" + (f" to {Path(project).name}" if project else ""),
                     [m for m in relevant if m.id not in {c.id for c in core}])]
    elif event == "user-prompt":
        query = (data.prompt or "").strip()[:MAX_PROMPT_CHARS]
        if not query:
            return ""
        relevant = _relevant(store, query, flt, settings.limit, settings.min_similarity)
        relevant = [m for m in relevant if m.id not in state.given]
        sections = [("## Relevant to this prompt", relevant)]
    else:
        raise ValueError(f"unknown hook event {event!r}")
    header = "# From the user's memory (pmem; quote it, do not invent more)"
    block, ids = _pack(header, [(t, [m for m in ms if m.id not in state.given]) for t, ms in sections],
                       settings.budget)
    if ids:
        state.given.update(ids)
        store.touch(ids)
    state.save()
    return block


def project_query(cwd: str | None) -> str | None:
    """Words that name a project for a search at session start: its directory name."""
    if not cwd:
        return None
    name = Path(cwd).name.replace("-", " ").replace("_", " ").strip()
    return name or None


def format_output(client: str, event: str, block: str) -> str:
    """What the hook prints: plain text for Claude Code, the JSON object Codex and Gemini read."""
    if not block:
        return "{}" if client == "gemini" else ""
    if client == "claude-code":
        return block
    return json.dumps({"hookSpecificOutput": {"hookEventName": EVENT_NAMES[client][event],
                                              "additionalContext": block}}, ensure_ascii=False)


def run_hook(client: str, event: str, stdin_text: str, open_store: Callable[[], MemoryStore], *,
             settings: HookSettings | None = None,
             make_filter: Callable[[HookInput], tuple[Filter | None, str | None]] | None = None) -> str:
    """The whole hook: never raises, never runs past `settings.timeout`; returns what to print.

    The work runs in a daemon thread; if it is not done in time the caller gets "" (and the
    thread is abandoned: the CLI exits right after printing)."""
    settings = settings or HookSettings()
    if client not in CLIENTS or event not in EVENTS:
        log_error(f"{client} {event}: unknown client or event")
        return ""
    result: dict[str, str] = {}

    def work() -> None:
        try:
            data = parse_input(stdin_text)
            flt, project = make_filter(data) if make_filter else (None, None)
            store = open_store()
            try:
                result["block"] = build_context(store, event, data, settings, flt, project)
            finally:
                store.close()
        except BaseException as exc:  # noqa: BLE001 - the hook must never fail the prompt
            tb = traceback.format_exception_only(type(exc), exc)[-1].strip()
            log_error(f"{client} {event}: {tb}")

    worker = threading.Thread(target=work, name="pmem-hook", daemon=True)
    worker.start()
    worker.join(settings.timeout)
    if worker.is_alive():
        log_error(f"{client} {event}: gave up after {settings.timeout:g} s (nothing printed)")
        return format_output(client, event, "")
    return format_output(client, event, result.get("block", ""))

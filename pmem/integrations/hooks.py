"""Agent hooks: memories that reach the model without anyone asking.

Claude Code, Codex and Gemini CLI run a command when a session starts and when the user submits
a prompt, pass it JSON on stdin (`session_id`, `cwd`, `prompt`...) and add what it prints to the
model's context. `run_hook` is that command's body:

- session start: the core memories, and the most relevant ones for the project;
- user prompt: the memories relevant to the prompt, none given before in the same session (a
  small state file per session remembers which), nothing at all when nothing is relevant;
- subagent start (Claude Code's and Codex's SubagentStart): a subagent starts with a context of
  its own, without the parent's conversation and without a SessionStart, so it gets what a
  session start gives (core memories, then those relevant to the project), in the host's JSON;
  its own session file (session id and agent id) keeps it apart from the parent's, so a memory
  given to the subagent is not withheld from the parent, nor the other way round;
- compact (Codex's PostCompact, Gemini CLI's PreCompress): the conversation was summarised, so
  what was given before may be given again (Claude Code and newer Codex say so with a
  SessionStart "compact" instead). Codex's PreCompact is not used: what a hook prints there
  never reaches the model (its output schema has no additionalContext), and before the
  compaction nothing is lost yet; pmem acts once it happened (PostCompact), and memories come
  back with the next prompt's;
- within a character budget and a time limit, and never failing the prompt: an internal error
  prints nothing and is logged to `hook-errors.log`, which `pmem doctor` shows. The limit covers
  reading stdin too: a host may keep the pipe open, so the hook reads one JSON object, not to EOF;
  and a writer holding the database's lock never makes it wait (the access counts wait instead).

Output conventions: Claude Code adds plain stdout to the context; Codex and Gemini CLI read a
JSON object with `hookSpecificOutput.additionalContext` (Gemini requires JSON on stdout).

Served: when `pmem serve` runs (server = auto or always), the hook's process only reads its
input and hands it to the server (`ask_server`), which runs the same `build_context` against the
same database, settings and session files (`serve_hook`) and sends the block back: the process
imports no store, search or model, and the server already holds the model
(docs/decisions/0038-hook-served-whole.md). That process does not import this module either: what it needs is in
`hook_wire`, which imports only what is cheap to start with
(docs/decisions/0041-hook-process-lean.md); the names are here too. No server, one of another build, a busy one or one
that does not answer within `server_wait()`: the hook does the work itself, as before.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from .. import ownblocks, paths
from ..display import prompt_safe
from .hook_wire import (  # noqa: F401 - the hook's names, kept here for its callers
    CLIENTS,
    EVENT_NAMES,
    EVENTS,
    MAX_STDIN,
    SERVER_MARGIN,
    SERVER_WAIT,
    SERVER_WAIT_MAX,
    ask_server,
    format_output,
    read_input,
    server_wait,
    settings_env,
)

if TYPE_CHECKING:
    from ..config import Settings
    from ..models.serve import Server
    from ..service import MemoryStore
    from ..store import Filter

# Gemini CLI fires PreCompress with trigger "auto" before every turn's compression check, whether
# or not it then compresses (docs/decisions/0033-hooks-hosts.md); only "manual" (/compress)
# means the history was summarised. So there a memory may come back after this many prompts.
DEDUP_TURNS = {"gemini": 20}
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
    trigger: str | None = None  # a compaction's: manual or auto
    agent_id: str | None = None  # a subagent's (SubagentStart; Codex sends it in a subagent's other hooks)
    raw: dict[str, Any] = field(default_factory=dict)


_DECODER = json.JSONDecoder()


def parse_input(text: str) -> HookInput:
    """The hook JSON; an empty or unreadable stdin gives an empty input, not an error."""
    text = (text or "")[:MAX_STDIN].strip()
    if not text:
        return HookInput()
    try:
        data, _end = _DECODER.raw_decode(text)  # what follows the first value is not ours to read
    except ValueError:
        return HookInput(prompt=text)  # a person trying the command by hand
    if not isinstance(data, dict):
        return HookInput()

    def s(key: str) -> str | None:
        v = data.get(key)
        return v if isinstance(v, str) and v else None

    return HookInput(session_id=s("session_id"), cwd=s("cwd"), prompt=s("prompt"),
                     source=s("source") or s("trigger"), trigger=s("trigger"), agent_id=s("agent_id"), raw=data)


class SessionState:
    """One agent session's state, in a small JSON file: the ids given and at which prompt (its
    number in the session), and the accesses not yet counted (the database was busy)."""

    def __init__(self, session_id: str | None, agent_id: str | None = None):
        self.path: Path | None = None
        self.given: dict[str, int] = {}
        self.turn = 0
        self.untouched: list[str] = []
        if not session_id:
            return
        import hashlib  # here: a served hook's process has no session file to name

        key = session_id if not agent_id else f"{session_id}\x00agent\x00{agent_id}"  # a subagent's own
        digest = hashlib.sha256(key.encode("utf-8", "replace")).hexdigest()[:24]
        self.path = state_dir() / f"{digest}.json"
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            given = data.get("given", [])
            if isinstance(given, list):  # the first format: ids only
                given = dict.fromkeys(given, 0)
            self.given = {i: t for i, t in given.items() if isinstance(i, str) and isinstance(t, int)}
            self.turn = data.get("turn", 0) if isinstance(data.get("turn"), int) else 0
            self.untouched = [i for i in data.get("untouched", []) if isinstance(i, str)][:1000]
        except (OSError, ValueError, AttributeError, TypeError):  # a damaged file: a fresh session
            self.given, self.turn, self.untouched = {}, 0, []

    def reset(self) -> None:
        self.given = {}

    def seen(self, memory_id: str, within: int | None = None) -> bool:
        """Whether `memory_id` was given in this session (in its last `within` prompts, if given)."""
        turn = self.given.get(memory_id)
        return turn is not None and (within is None or self.turn - turn < within)

    def save(self) -> None:
        if self.path is None:
            return
        paths.ensure_private_dir(self.path.parent)
        new = not self.path.exists()
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"given": dict(sorted(self.given.items())), "turn": self.turn,
                                   "untouched": self.untouched}), encoding="utf-8")
        os.replace(tmp, self.path)
        if new:  # once a session, not every prompt: a stat per session file (~3 ms at 170 of them)
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
    text = " ".join(prompt_safe(m.text).split())  # the one gate for text a model reads
    tags = " " + " ".join("#" + prompt_safe(t) for t in m.tags) if m.tags else ""
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
    min_similarity: float | None = None  # None: the vectors' model's (pmem.models.thresholds hook, hook_words)
    dedup_turns: int | None = None  # a memory may come back after this many prompts (None: never)


def search_mode(store: MemoryStore) -> str:
    """"keyword" when the embedding model is not on disk yet: a hook must not start a download."""
    from ..models.provision import known_models, model_file

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
                  flt: Filter | None = None, project: str | None = None,
                  commit: Callable[[], bool] | None = None) -> str:
    """The block to print for one hook event ("" when there is nothing new and relevant).

    `commit()`, asked before the session file and the access counts are written: False keeps
    them as they were (a served hook whose process stopped waiting does the work itself)."""
    from ..store import Filter

    flt = flt or Filter()
    state = SessionState(data.session_id, data.agent_id)
    within = settings.dedup_turns
    if event in ("session-start", "subagent-start"):
        if data.source != "resume":
            state.reset()  # a new or compacted conversation (or a new subagent): everything may be given again
        core = store.list_memories(replace(flt, pinned=True, tiers=("core",)), sort="created", reverse=True, limit=50)
        query = project_query(project or data.cwd)
        relevant = _relevant(store, query, flt, settings.limit, settings.min_similarity) if query else []
        if not relevant:
            relevant = store.list_memories(replace(flt, pinned=False, tiers=("archival",)), sort="created", limit=5) \
                if project else []
        sections = [("## Core (always true for this user)", core),
                    ("## Recent and relevant" + (f" to {prompt_safe(Path(project).name)}" if project else ""),
                     [m for m in relevant if m.id not in {c.id for c in core}])]
    elif event == "user-prompt":
        # The user's words: Gemini CLI's -p puts the session-start block (pmem's own) in front.
        query = ownblocks.user_words(data.prompt or "")[:MAX_PROMPT_CHARS]
        if not query:
            return ""
        state.turn += 1
        relevant = _relevant(store, query, flt, settings.limit, settings.min_similarity)
        relevant = [m for m in relevant if not state.seen(m.id, within)]
        sections = [("## Relevant to this prompt", relevant)]
    else:
        raise ValueError(f"unknown hook event {event!r}")
    header = "# From the user's memory (pmem; quote it, do not invent more)"
    block, ids = _pack(header, [(t, [m for m in ms if not state.seen(m.id, within)]) for t, ms in sections],
                       settings.budget - ownblocks.OVERHEAD)
    block = ownblocks.mark(block)  # so that it can be told from the user's words where it comes back
    if commit is not None and not commit():
        return block
    state.given.update(dict.fromkeys(ids, state.turn))
    count = [*state.untouched, *(i for i in ids if i not in state.untouched)]
    if count:  # never wait on a writer: what cannot be counted now is counted at the next hook
        state.untouched = [] if store.touch(count, wait=False) else count[:1000]
    state.save()
    return block


def compacted(client: str, data: HookInput) -> None:
    """A compaction hook: the conversation was summarised, so everything may be given again."""
    if client == "gemini" and data.trigger != "manual":
        return  # Gemini's "auto" comes before every turn, compressing or not: DEDUP_TURNS bounds it
    state = SessionState(data.session_id, data.agent_id)
    state.reset()
    state.save()


def project_query(cwd: str | None) -> str | None:
    """Words that name a project for a search at session start: its directory name."""
    if not cwd:
        return None
    name = Path(cwd).name.replace("-", " ").replace("_", " ").strip()
    return name or None


def settings_for(cfg: Settings, client: str) -> HookSettings:
    """The hook settings of `cfg` (hook_budget, hook_timeout) for `client`."""
    return HookSettings(budget=max(200, int(cfg.hook_budget)), timeout=float(cfg.hook_timeout),
                        dedup_turns=DEDUP_TURNS.get(client))


def hook_filter(data: HookInput, cwd: str | None = None) -> tuple[Filter, str | None]:
    """What a hook may give: the global memories and those of the project `data.cwd` is in (a
    relative one taken from `cwd`, the hook process's directory); returns (filter, project)."""
    from ..scope import auto_scope, read_filter

    where = data.cwd
    if where and cwd:
        where = os.path.join(cwd, os.path.expanduser(where))
    project = auto_scope(where) if where else None
    return read_filter(project), project


def run_hook(client: str, event: str, stdin: str | BinaryIO, open_store: Callable[[], MemoryStore], *,
             settings: HookSettings | None = None,
             make_filter: Callable[[HookInput], tuple[Filter | None, str | None]] | None = None,
             served: Callable[[str, float], str | None] | None = None) -> str:
    """The whole hook: never raises, never runs past `settings.timeout`; returns what to print.

    `stdin` is the hook's JSON, or the stream to read it from (within the time limit too). The
    work runs in a daemon thread; if it is not done in time the caller gets "" (and the thread is
    abandoned: the CLI exits right after printing). `served(text, wait)`: the block `pmem serve`
    made for this input within `wait` seconds (`ask_server`), or None, and then the work is done
    here; a compaction is always done here (it only resets the session file)."""
    settings = settings or HookSettings()
    if client not in CLIENTS or event not in EVENT_NAMES.get(client, {}):
        log_error(f"{client} {event}: unknown client or event")
        return format_output(client, event, "") if client in CLIENTS else ""
    if settings.dedup_turns is None:
        settings = replace(settings, dedup_turns=DEDUP_TURNS.get(client))
    result: dict[str, str] = {}
    started = time.monotonic()

    def work() -> None:
        try:
            text = stdin if isinstance(stdin, str) else read_input(stdin)
            if served is not None and event != "compact":
                block = served(text, server_wait(settings.timeout - (time.monotonic() - started)))
                if block is not None:
                    result["block"] = block
                    return
            data = parse_input(text)
            if event == "compact":
                compacted(client, data)
                return
            flt, project = make_filter(data) if make_filter else (None, None)
            store = open_store()
            try:
                result["block"] = build_context(store, event, data, settings, flt, project)
            finally:
                store.close()
        except BaseException as exc:  # noqa: BLE001 - the hook must never fail the prompt
            import traceback  # only here: a served hook's process imports as little as it can

            tb = traceback.format_exception_only(type(exc), exc)[-1].strip()
            log_error(f"{client} {event}: {tb}")

    worker = threading.Thread(target=work, name="pmem-hook", daemon=True)
    worker.start()
    worker.join(settings.timeout)
    if worker.is_alive():
        log_error(f"{client} {event}: gave up after {settings.timeout:g} s (nothing printed)")
        return format_output(client, event, "")
    return format_output(client, event, result.get("block", ""))


# --- served by `pmem serve` ------------------------------------------------------------------


def warm_hook() -> None:
    """What serve_hook needs, loaded when the server starts answering (`Server(warm=...)`): without
    it a server's first hook took 0.1-0.3 s longer than the next (the search's and store's modules,
    the sqlite driver and sqlite-vec: ~0.09 s of it), and under load that was past the hook's own
    wait, so it worked itself."""
    from .. import scope, search, service  # noqa: F401
    from ..models import provision  # noqa: F401
    from ..store import inspection  # noqa: F401 - the store package binds its names on first use

    inspection.vec_version()  # loads the driver and sqlite-vec


def serve_hook(server: Server, req: dict[str, Any], reply: Callable[[dict[str, Any]], None]) -> None:
    """`pmem serve`'s "hook" request (ask_server's): the same `build_context` the hook runs
    itself, against the database the request names, with the hook's settings and session file.

    Refused (the hook then does the work itself): a request of another build; one from another
    pmem home, models folder or config file (the session files and settings would not be the
    hook's); a database that does not exist (the hook creates it, not the server) or is not a
    file of this server's user; one whose hook stopped waiting. The socket admits this user only
    (0600 in a 0700 folder, and the peer's uid is checked), so a request is this user's own."""
    import stat

    from .. import config
    from ..errors import UsageError

    if req.get("build") != server.build:
        return reply({"ok": False, "error": "this pmem server is of another build", "build": server.build})
    client, event, text, deadline = req.get("client"), req.get("event"), req.get("input"), req.get("deadline")
    if not isinstance(client, str) or not isinstance(event, str) or event == "compact" \
            or event not in EVENT_NAMES.get(client, {}):
        raise UsageError("bad request: unknown client or event")
    if not isinstance(text, str) or len(text) > MAX_STDIN * 4:
        raise UsageError("bad request: input must be the hook's text")
    if not isinstance(deadline, (int, float)) or isinstance(deadline, bool):
        raise UsageError("bad request: no deadline")
    env, db, cwd = req.get("env"), req.get("db"), req.get("cwd")
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()) \
            or set(env) - {config.env_name(k) for k in config.KEYS}:
        raise UsageError("bad request: env must hold settings' variables only")
    if not (isinstance(db, str) and os.path.isabs(db) and isinstance(cwd, str) and os.path.isabs(cwd)):
        raise UsageError("bad request: db and cwd must be absolute paths")
    for key, here in (("home", paths.data_dir()), ("models", paths.models_dir()), ("config", paths.config_path())):
        sent = req.get(key)  # as the hook's process found it (pmem.dirs): a string, not normalised
        if not isinstance(sent, str) or not sent or Path(sent) != here:
            raise UsageError(f"this pmem server serves another {key}")
    try:
        st = os.stat(db)
    except OSError:
        raise UsageError("no database there") from None
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
        raise UsageError("the database is not a file of this server's user")
    if time.time() >= deadline - SERVER_MARGIN:
        return reply({"ok": False, "busy": True, "error": "the hook stopped waiting"})
    cfg = config.load(paths.config_path(), environ=env)  # the hook's settings, not this process's
    settings = settings_for(cfg, client)
    # The model is this server's own (embed.load_model_file_once), never asked for over the socket.
    cfg = cfg.with_values("pmem serve", server="never", threads=server.threads)
    data = parse_input(text)
    flt, project = hook_filter(data, cwd)
    kept: list[bool] = []

    def commit() -> bool:
        kept.append(time.time() < deadline - SERVER_MARGIN)
        return kept[-1]

    from ..service import MemoryStore

    server.fit_threads()
    store = MemoryStore(db, config=cfg)  # opened for each hook: see docs/decisions/0038-hook-served-whole.md
    try:
        block = build_context(store, event, data, settings, flt, project, commit=commit)
    finally:
        # Closed BEFORE the reply (~4 ms): closing the last connection checkpoints the WAL under an
        # exclusive lock on the file. After the reply, a server stopped in that window (SIGSTOP, a
        # suspended terminal) held the lock with the hook gone, and the next hook, finding the server
        # silent, then waited its whole time on the lock and printed nothing.
        try:
            store.close()
        except Exception:  # noqa: BLE001 - what the hook keeps is committed; the next open recovers the WAL
            pass
    if kept and not kept[-1]:
        return reply({"ok": False, "busy": True, "error": "the hook stopped waiting"})
    reply({"ok": True, "block": block, "build": server.build})

"""OpenAI Codex CLI sessions: `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl`
(CODEX_HOME defaults to ~/.codex); Codex compresses a rollout idle for a while to `.jsonl.zst`.

Each line is Codex's `RolloutLine`: `{"timestamp", "type", "payload"}` where `type` is
`session_meta` (the first line: `id`, `cwd`, `cli_version`, `source`, `git`), `turn_context`
(each turn's `cwd`, `model`), `response_item` (what the model saw and said: `message` items with
`role` and `content` parts, tool calls, reasoning), `event_msg` (what the UI showed:
`user_message`, `agent_message`, token counts, command output...) or `compacted` (a summary).

Every message is there twice, as a `response_item` and as an `event_msg`: the events are read
when the file has any (what the person typed and what Codex answered, nothing else), the
`message` items only in a file without them (rollouts of Codex before it recorded events, and
the first releases' lines that were bare items). Codex's own context is not the person's words
and is left out: `<environment_context>`, `<user_instructions>` and AGENTS.md content
(`# AGENTS.md instructions for ...`), and the other tagged blocks Codex adds to a user message
(a skill, a shell command's output, an aborted turn, a sub-agent's notification...); so are
developer and system messages, tool calls and outputs, reasoning and compaction summaries.
A sub-agent's session (a review, a compaction, a spawned agent: `source.subagent`) holds
prompts Codex wrote and is left out whole. The session's working directory becomes the
memory's project scope. `history.jsonl` (Codex's prompt history) repeats what the sessions
hold: it is recognised and nothing is taken from it.

Bad records: a line that is not JSON, not an object, or whose `type`, `payload`, `role`,
`content`, `message`, `id` or `cwd` has the wrong type is left out and counted.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any, Iterator

from ...records import Memory
from .base import (
    BadRecord,
    Entry,
    Turn,
    conversation_memories,
    ident,
    kind_of,
    need,
    optional,
    unzstd_head,
    when,
)

NAME = "codex"
DESCRIPTION = "Codex CLI sessions (~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl, .jsonl.zst)"
KIND = "turn"

# serde writes RolloutLine's fields in this order: {"timestamp":..,"type":..,"payload":{..}}
_LINE = re.compile(rb'\A\s*\{"timestamp": ?"[^"\\]{0,64}", ?"type": ?"(session_meta|response_item|event_msg|'
                   rb'turn_context|compacted)", ?"payload": ?\{')
# The first releases: a bare SessionMeta ({"id", "timestamp", "instructions"}) then bare items.
_LEGACY = re.compile(rb'\A\s*\{"id": ?"[0-9a-fA-F-]{36}", ?"timestamp": ?"[^"\\]{0,64}"')
_HISTORY = re.compile(rb'\A\s*\{"session_id": ?"[^"\\]{1,64}", ?"ts": ?\d+, ?"text":')
_ROLLOUT_ID = re.compile(r"rollout-.*?([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                         r"[0-9a-fA-F]{12})\.jsonl(?:\.zst)?$")

# Blocks Codex writes into a user message (codex-rs/core/src/context/): never the person's words.
CONTEXT_TAGS = frozenset({
    "environment_context", "user_instructions", "user_shell_command", "turn_aborted", "subagent_notification",
    "skill", "hook_prompt", "extension_context", "goal_context", "permissions instructions",
    "recommended_plugins", "skills_instructions", "plugins_instructions", "apps_instructions", "app-context",
    "collaboration_mode", "model_switch", "personality_spec", "realtime_conversation", "instructions",
})
_OPEN = re.compile(r"\A\s*<([A-Za-z][\w -]{0,60})>", re.S)
_AGENTS = re.compile(r"\A\s*# AGENTS\.md instructions\b", re.I)
USER_MESSAGE_BEGIN = "## My request for Codex:"  # older releases put it after the instructions


def accepts(name: str) -> bool:
    return name.endswith((".jsonl", ".jsonl.zst"))


def sniff(name: str, head: bytes) -> bool:
    if name.endswith(".zst"):
        head = unzstd_head(head)
    if _LINE.match(head):
        return True
    base = name.rsplit("/", 1)[-1]
    if base.startswith("rollout-") and _LEGACY.match(head):
        return True
    return base == "history.jsonl" and bool(_HISTORY.match(head))


def user_words(text: str) -> str:
    """What the person wrote in a user message: Codex's context blocks taken off its start, and
    nothing when it is all context."""
    rest = text
    while True:
        if _AGENTS.match(rest):
            end = rest.lower().find("</instructions>")
            if end < 0:
                return ""
            rest = rest[end + len("</instructions>"):]
            continue
        m = _OPEN.match(rest)
        if not m:
            break
        tag = m.group(1)
        close = f"</{tag.lower()}>"
        end = rest.lower().find(close, m.end())
        if tag.lower() not in CONTEXT_TAGS and not ("_" in tag and end >= 0):
            break  # a tag the person typed, not one of Codex's blocks
        if end < 0:
            return ""
        rest = rest[end + len(close):]
    if USER_MESSAGE_BEGIN in rest:
        rest = rest.split(USER_MESSAGE_BEGIN, 1)[1]
    return rest.strip()


def _parts(content: list[Any], role: str) -> str:
    """The text of a `message` item's content parts: `input_text` for the user (each part judged
    on its own: Codex sends its context as parts of their own), `output_text` for the answer."""
    texts = []
    for part in content:
        if not isinstance(part, dict):
            raise BadRecord(f"a content part is {kind_of(part)}, not an object")
        kind = part.get("type")
        text = part.get("text")
        if not isinstance(text, str):
            continue
        if role == "user" and kind == "input_text":
            text = user_words(text)
        elif not (role == "assistant" and kind == "output_text"):
            continue
        if text.strip():
            texts.append(text.strip())
    return "\n\n".join(texts)


class _Session:
    """What one rollout holds, line by line."""

    def __init__(self) -> None:
        self.id: str | None = None
        self.cwd: str | None = None
        self.meta: dict[str, Any] = {}
        self.subagent: str | None = None
        self.events: list[Turn] = []
        self.items: list[Turn] = []

    def line(self, n: int, obj: Any) -> None:
        if not isinstance(obj, dict):
            raise BadRecord(f"is {kind_of(obj)}, not an object")
        at = obj.get("timestamp")  # read (when()) only for the lines kept: most are not
        if "payload" in obj:
            kind = need(obj, "type", str)
            payload = need(obj, "payload", dict)
        elif "id" in obj and "type" not in obj:  # the first releases: a bare SessionMeta first...
            kind, payload = "session_meta", obj
        elif obj.get("type") == "message":       # ...then bare ResponseItems (and {"record_type": ...})
            kind, payload = "response_item", obj
        else:
            return
        if payload is None:
            return
        if kind == "session_meta":
            self._meta(payload)
        elif kind == "turn_context":
            cwd = need(payload, "cwd", str)
            self.cwd = self.cwd or cwd
            model = optional(payload, "model", str)
            if model:
                self.meta.setdefault("model", model)
        elif kind == "event_msg":
            self._event(n, payload, at)
        elif kind == "response_item":
            self._item(n, payload, at)

    def _meta(self, payload: dict[str, Any]) -> None:
        self.id = self.id or ident(payload.get("id"), "the session's 'id'")
        cwd = need(payload, "cwd", str)
        self.cwd = self.cwd or cwd or None
        for key in ("cli_version", "originator"):
            value = optional(payload, key, str)
            if value:
                self.meta.setdefault(key, value)
        source = payload.get("source")
        if isinstance(source, dict) and "subagent" in source:
            sub = source["subagent"]  # "review", "compact", or {"thread_spawn": {...}}, {"other": "..."}
            self.subagent = sub if isinstance(sub, str) else str(next(iter(sub), "agent")) if isinstance(
                sub, dict) else "agent"
        git = optional(payload, "git", dict)
        branch = optional(git, "branch", str) if git else None
        if branch:
            self.meta.setdefault("git_branch", branch)

    def _event(self, n: int, payload: dict[str, Any], at: Any) -> None:
        kind = need(payload, "type", str)
        if kind not in ("user_message", "agent_message"):
            return
        message = need(payload, "message", str) or ""
        if kind == "user_message":
            if optional(payload, "kind", str) not in (None, "plain"):  # 2025 releases: instructions, environment
                return
            self.events.append(Turn(f"L{n}", "user", "User", user_words(message), _when(at)))
        else:
            self.events.append(Turn(f"L{n}", "assistant", "Codex", message.strip(), _when(at)))

    def _item(self, n: int, payload: dict[str, Any], at: Any) -> None:
        if need(payload, "type", str) != "message":
            return
        role = need(payload, "role", str)
        content = need(payload, "content", list, str)
        if role not in ("user", "assistant") or content is None:
            return
        if isinstance(content, str):
            content = [{"type": "input_text" if role == "user" else "output_text", "text": content}]
        text = _parts(content, role)
        self.items.append(Turn(f"L{n}", role, "User" if role == "user" else "Codex", text, _when(at)))


_ISO_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z")


def _when(value: Any) -> str | None:
    """A line's timestamp as stored: Codex writes RFC 3339 in UTC with milliseconds, read here
    without the general parser (a third of the reading time); anything else goes through it."""
    if isinstance(value, str) and _ISO_UTC.fullmatch(value):
        try:
            datetime.fromisoformat(value[:19])
        except ValueError:
            return None
        return value[:19] + "Z"
    return when(value) if isinstance(value, str) else None


def read(entry: Entry) -> Iterator[Memory]:
    lines = list(entry.read_jsonl())
    base = entry.name.rsplit("/", 1)[-1]
    if base.endswith("history.jsonl") and lines and isinstance(lines[0][1], dict) and "session_id" in lines[0][1]:
        entry.counted(len(lines), "it is Codex's prompt history (history.jsonl); the same words are in the "
                                  "session files under sessions/, which pmem imports")
        return
    s = _Session()
    for n, obj in lines:
        try:
            s.line(n, obj)
        except BadRecord as exc:
            entry.skip(f"line {n}", str(exc))
    if s.subagent:
        entry.counted(len(lines), f"it is a Codex sub-agent's session ({s.subagent}): its prompts are Codex's, "
                                  "not yours")
        return
    turns = [t for t in (s.events or s.items) if t.text]
    entry.counted(len(lines), None if turns else
                  "no line holds a message you wrote or Codex answered (only Codex's context, tool calls "
                  "or other events)")
    if not turns:
        return
    session = s.id or _file_id(entry.name)
    yield from conversation_memories(NAME, session, turns, scope=s.cwd or None, meta=s.meta or None)


def _file_id(name: str) -> str:
    m = _ROLLOUT_ID.search(name)
    return m.group(1) if m else name.rsplit("/", 1)[-1].removesuffix(".zst").removesuffix(".jsonl")


def rollout_line(timestamp: str, kind: str, payload: dict[str, Any]) -> str:
    """One line as Codex writes it (serde's field order, compact separators): for tests and the
    benchmark, which write rollouts the way Codex does."""
    return json.dumps({"timestamp": timestamp, "type": kind, "payload": payload}, ensure_ascii=False,
                      separators=(",", ":"))

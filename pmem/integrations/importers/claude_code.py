"""Claude Code session transcripts: `~/.claude/projects/<project>/<session id>.jsonl`.

One JSON object per line. Lines of `type` "user" and "assistant" carry `message` ({role, content},
content a string or a list of blocks), `uuid`, `timestamp`, `sessionId` and `cwd`. Only what the
person typed and the text Claude answered are kept: tool calls, tool results, thinking, meta lines
(`isMeta`), sub-agent lines (`isSidechain`), slash-command records and system reminders are not.
An answer streamed over several lines (one `message.id`) becomes one turn. The session's working
directory becomes the memory's project scope.

Bad records: a line that is not JSON, not an object, or whose `type`, `message`, `role`,
`content`, `uuid`, `sessionId`, `cwd` or `gitBranch` has the wrong type is left out and counted
(a transcript being written ends in half a line); a timestamp of the wrong type is read as absent.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterator

from ...records import Memory
from .base import BadRecord, Entry, Turn, conversation_memories, ident, kind_of, need, optional, when

NAME = "claude-code"
DESCRIPTION = "Claude Code transcripts (~/.claude/projects/*/*.jsonl)"
FILES = re.compile(r"\.jsonl$")
KIND = "turn"
_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.S)
_COMMAND = re.compile(r"^\s*<(command-name|command-message|command-args|local-command-stdout|"
                      r"local-command-stderr|bash-input|bash-stdout|bash-stderr|user-memory-input)>")


def accepts(name: str) -> bool:
    return name.endswith(".jsonl")


_TYPES = (b'"type":"user"', b'"type": "user"', b'"type":"assistant"', b'"type": "assistant"')


def sniff(name: str, head: bytes) -> bool:
    """A line of the transcript's shape among the whole lines of `head`: `type` user or
    assistant, a `message` object and a `sessionId`. A line of another shape that no transcript
    holds (Gemini CLI's header, with `projectHash`; a line that is not an object) says it is
    not one. A first line longer than `head` is told by its keys."""
    lines = head.split(b"\n")
    whole = lines[:-1] if len(lines) > 1 else []
    for raw in whole:
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except (ValueError, RecursionError):
            return False
        if not isinstance(obj, dict) or "projectHash" in obj:
            return False
        if obj.get("type") in ("user", "assistant") and isinstance(obj.get("message"), dict) \
                and isinstance(obj.get("sessionId"), str):
            return True
    if whole:
        return False
    return (b'"sessionId"' in head and b'"uuid"' in head and b'"message"' in head
            and b'"projectHash"' not in head and any(t in head for t in _TYPES))


def _text(content: Any) -> str:
    if isinstance(content, str):
        texts = [content]
    elif isinstance(content, list):
        texts = [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
    else:
        return ""
    text = "\n\n".join(t for t in texts if isinstance(t, str))
    text = _REMINDER.sub("", text).strip()
    if _COMMAND.match(text) or text.startswith("Caveat: The messages below were generated"):
        return ""
    return text


def _line(obj: Any) -> tuple[str, str, dict[str, Any]] | None:
    """(role, text, the line) of a line to keep; None for what is not a turn; BadRecord for a
    line whose fields have the wrong type."""
    if not isinstance(obj, dict):
        raise BadRecord(f"is {kind_of(obj)}, not an object")
    if need(obj, "type", str) not in ("user", "assistant"):
        return None
    if obj.get("isSidechain") or obj.get("isMeta") or obj.get("isCompactSummary"):
        return None
    message = need(obj, "message", dict)
    if message is None:
        return None
    for key in ("sessionId", "cwd", "gitBranch"):
        need(obj, key, str)
    ident(obj.get("uuid"), "'uuid'")
    role = need(message, "role", str) or obj["type"]
    if role not in ("user", "assistant"):
        return None
    content = need(message, "content", str, list)
    if role == "assistant":
        ident(message.get("id"), "the message's 'id'")
    text = _text(content)
    return (role, text, obj) if text else None


def read(entry: Entry) -> Iterator[Memory]:
    turns: list[Turn] = []
    session = cwd = branch = None
    last_message_id = None
    for n, obj in entry.read_jsonl():
        try:
            kept = _line(obj)
        except BadRecord as exc:
            entry.skip(f"line {n}", str(exc))
            continue
        if kept is None:
            continue
        role, text, obj = kept
        session = session or obj.get("sessionId")
        cwd = cwd or obj.get("cwd")
        branch = branch or obj.get("gitBranch")
        api_id = obj["message"].get("id") if role == "assistant" else None
        if api_id and api_id == last_message_id and turns and turns[-1].role == "assistant":
            turns[-1].text += "\n\n" + text  # one answer streamed over several lines
            continue
        last_message_id = api_id
        turns.append(Turn(message_id=str(obj.get("uuid") or len(turns)), role=role,
                          speaker="User" if role == "user" else "Claude", text=text,
                          created_at=when(optional(obj, "timestamp", str, int, float))))
    if not turns:
        return
    session = str(session or entry.name.rsplit("/", 1)[-1].removesuffix(".jsonl"))
    parts = entry.location.rsplit("/", 2)
    project = parts[-2] if len(parts) >= 2 and parts[-2] else None  # ~/.claude/projects/<project>/
    meta: dict[str, Any] = {}
    if project:
        meta["project"] = project
    if branch:
        meta["git_branch"] = branch
    yield from conversation_memories(NAME, session, turns, scope=cwd or None, meta=meta or None)

"""Gemini CLI chats: `~/.gemini/tmp/<project>/chats/session-*.jsonl` (GEMINI_CLI_HOME moves
~/.gemini); read as Gemini CLI 0.61 reads them back when it resumes a session.

A `.jsonl` file is a log. Its first line is the session's header (`sessionId`, `projectHash`,
`startTime`, `kind`); then each line is one of: a message (`id`, `timestamp`, `type` user, gemini,
info, error or warning, `content` a string or a list of parts, `thoughts`, `toolCalls`, `model`),
written again whole under the same id when it changes (its tokens, its tool calls); a `$set` of
the header's fields, whose `messages`, when present, replaces every message so far; a
`$rewindTo` an id, which drops that message and every one after it (`/rewind`). Older versions
wrote `session-*.json`: one object, the header's fields and `messages`.

Kept: what the user typed and the text Gemini answered, one turn each, in the order written;
a rewind drops the turns it undid. A `$set` of `messages` (Gemini's working history written
back after a resume, a failed request or a compression) adds and replaces but drops nothing: a
turn it lacks was still said. Not kept: thoughts, tool calls and results, info, error and
warning messages, the `<session_context>` message Gemini writes first, slash commands and `?`
(what Gemini itself leaves out when it resumes), a compression's `<state_snapshot>` summary and
Gemini's fixed reply to it, sub-agents' chats (`kind` subagent), and the hook output Gemini puts
in the user's message (`<hook_context>` in front of it or as a part of its own: pmem's blocks and
other hooks'). The project's folder (`.project_root` beside `chats/`) becomes the memories' scope.

Who writes the file: Gemini CLI, or anyone who hands the user a chat file (a shared session, an
attachment). It must never raise a traceback, store what the file does not say, or make pmem read
elsewhere: the project folder comes from `.project_root` opened without following a link,
regular files only, 4 KB at most. Bad records: a line that is not JSON or not an object, a message
whose `type` or `content` has the wrong type, is left out and counted; a timestamp or model of the
wrong type is read as absent.
"""

from __future__ import annotations

import json
import os
import re
import stat
from typing import Any, Iterator

from ... import ownblocks
from ...errors import UsageError
from ...records import Memory
from .base import BadRecord, Entry, Turn, conversation_memories, kind_of, need, optional, when

NAME = "gemini"
DESCRIPTION = "Gemini CLI chats (~/.gemini/tmp/*/chats/session-*.jsonl, and the older .json)"
KIND = "turn"
_HEAD = 4096  # the header's keys come first in the file: `sessionId`, then `projectHash`
_MAX_ROOT = 4096  # bytes of `.project_root` read
# User messages that are no one's words: slash commands and `?` (Gemini does not resume them
# either), the context Gemini writes first, and a compression's summary (with Gemini's fixed reply).
_IGNORED = ("/", "?", "<session_context>", "<state_snapshot>")
_SUMMARY_REPLY = "Got it. Thanks for the additional context!"


def accepts(name: str) -> bool:
    return name.endswith((".jsonl", ".json"))


def sniff(name: str, head: bytes) -> bool:
    """The header Gemini writes first: `sessionId` and `projectHash` in the file's first object
    (its first line, or the start of an older pretty-printed `.json`); no other format has both."""
    text = head.lstrip()
    if not text.startswith(b"{"):
        return False
    first = text.split(b"\n", 1)[0] if text.startswith(b'{"') else text[:_HEAD]
    return re.search(rb'"sessionId"\s*:\s*"', first) is not None and \
        re.search(rb'"projectHash"\s*:\s*"', first) is not None


# -- the session, as Gemini replays it ---------------------------------------------------------

def _replay(entry: Entry) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(header fields, messages in order) of a `.jsonl` log or an older `.json` session."""
    text = entry.read_text()
    try:
        whole = json.loads(text)  # a log fails at its second line, having parsed only the first
    except RecursionError:
        raise UsageError(f"{entry.name}: JSON nested too deeply") from None
    except ValueError:
        whole = None
    if isinstance(whole, dict):  # an older .json session (or a log of its header alone)
        messages = whole.get("messages")
        return whole, [m for m in messages if _is_message(m)] if isinstance(messages, list) else []
    meta: dict[str, Any] = {}
    # By (id, type), in the order first written. Gemini gives a tool's answer the id of the call
    # it answers: keyed by id alone, it would take the place of the model's words before the call.
    messages: dict[tuple[str, str | None], dict[str, Any]] = {}
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:  # a session being written ends in half a line
            entry.skip(f"line {n}", f"not valid JSON ({getattr(exc, 'msg', exc)})")
            continue
        except RecursionError:
            entry.skip(f"line {n}", "JSON nested too deeply")
            continue
        if not isinstance(obj, dict):
            entry.skip(f"line {n}", f"is {kind_of(obj)}, not an object")
            continue
        rewind = obj.get("$rewindTo")
        if isinstance(rewind, str):  # /rewind: that message and what follows never happened
            keys = list(messages)
            at = next((i for i, k in enumerate(keys) if k[0] == rewind), 0)  # unknown: all, as Gemini
            for gone in keys[at:]:
                del messages[gone]
        elif _is_message(obj):
            messages[_key(obj)] = obj  # written again when it changes: in its place
        elif isinstance(obj.get("$set"), dict):
            # `messages` here is Gemini's working history written back: after a resume (which
            # leaves out a prompt that starts with hook output), a failed request or a compression
            # it lacks turns that were said. Those stay; a message it holds gives its content to
            # the one written before (whose time and model it may have lost, as Gemini keeps
            # them), or is added.
            update = obj["$set"]
            listed = update.get("messages")
            for m in listed if isinstance(listed, list) else ():
                if _is_message(m):
                    key = _key(m)
                    messages[key] = {**messages[key], "content": m.get("content")} if key in messages else m
            meta.update({k: v for k, v in update.items() if k != "messages"})
        elif isinstance(obj.get("sessionId"), str) and isinstance(obj.get("projectHash"), str):
            for k, v in obj.items():  # a resume writes the header again, with a later start
                if k != "messages":
                    meta.setdefault(k, v)
            if isinstance(obj.get("messages"), list):
                messages.update({_key(m): m for m in obj["messages"] if _is_message(m)})
    return meta, list(messages.values())


def _key(message: dict[str, Any]) -> tuple[str, str | None]:
    kind = message.get("type")
    return message["id"], kind if isinstance(kind, str) else None


def _is_message(obj: Any) -> bool:
    return isinstance(obj, dict) and isinstance(obj.get("id"), str)


# -- messages to turns -------------------------------------------------------------------------

def _parts(content: Any) -> list[str]:
    """The text parts of a message's content (thoughts left out)."""
    if isinstance(content, str):
        return [content]
    out = []
    for part in content:
        if isinstance(part, str):
            out.append(part)
        elif isinstance(part, dict) and isinstance(part.get("text"), str) and not part.get("thought"):
            out.append(part["text"])
    return out


def _turn(message: dict[str, Any]) -> Turn | None:
    kind = need(message, "type", str)
    if kind not in ("user", "gemini"):
        return None
    content = need(message, "content", str, list)
    if content is None:
        return None
    if kind == "user":
        # Hook output Gemini put in the message: in front of the prompt, or a part of its own.
        text = "\n\n".join(p for p in (ownblocks.user_words(p) for p in _parts(content)) if p)
        if text.startswith(_IGNORED):
            return None
    else:
        text = "".join(_parts(content)).strip()
        if text == _SUMMARY_REPLY:
            return None
    if not text:
        return None
    model = optional(message, "model", str) if kind == "gemini" else None
    return Turn(message_id=message["id"], role="user" if kind == "user" else "assistant",
                speaker="User" if kind == "user" else "Gemini", text=text,
                created_at=when(optional(message, "timestamp", str)),
                extra={"model": model} if model else None)


def _project_root(entry: Entry) -> str | None:
    """The project's folder, from `.project_root` beside the session's `chats/` folder (Gemini
    writes it): a regular file, not a link, of one absolute path."""
    if entry.path is None:
        return None
    path = entry.path.parent.parent / ".project_root"
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        raw = os.read(fd, _MAX_ROOT + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        root = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        return None
    ok = len(raw) <= _MAX_ROOT and root.startswith("/") and "\n" not in root and "\x00" not in root
    return root if ok else None


def read(entry: Entry) -> Iterator[Memory]:
    meta, messages = _replay(entry)
    if meta.get("kind") == "subagent":
        return  # a sub-agent's chat: the agent's words to another agent, not the user's
    turns: list[Turn] = []
    for message in messages:
        try:
            turn = _turn(message)
        except BadRecord as exc:
            entry.skip(f"message {message['id'][:60]!r}", str(exc))
            continue
        if turn is not None:
            turns.append(turn)
    if not turns:
        return
    session = optional(meta, "sessionId", str) or entry.name.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    parts = entry.location.rsplit("/", 3)  # .../tmp/<project>/chats/<file>
    extra: dict[str, Any] = {}
    if len(parts) == 4 and parts[-2] == "chats" and parts[-3]:
        extra["project"] = parts[-3]
    yield from conversation_memories(NAME, session, turns, created_at=when(optional(meta, "startTime", str)),
                                     scope=_project_root(entry), meta=extra or None)

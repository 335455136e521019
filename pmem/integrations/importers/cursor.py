"""Cursor's chats: the editor's `state.vscdb`, and the Cursor agent CLI's JSONL transcripts.

The editor (Linux `~/.config/Cursor/User/`, macOS `~/Library/Application Support/Cursor/User/`,
Windows `%APPDATA%\\Cursor\\User\\`) keeps its chats in SQLite key-value tables of
`globalStorage/state.vscdb`: table `cursorDiskKV`, key `composerData:<composerId>` a chat (JSON:
`name`, `createdAt` in ms, `fullConversationHeadersOnly` the list of its messages as
`{bubbleId, type}`, or in older releases the messages inline as `conversation`), key
`bubbleId:<composerId>:<bubbleId>` one message (`type` 1 the person, 2 the assistant; `text`;
`createdAt`; a user message's `workspaceUris`, whose first folder becomes the memory's scope).
Older releases kept chats per workspace (`workspaceStorage/<hash>/state.vscdb`, table `ItemTable`,
key `workbench.panel.aichat.view.aichat.chatdata`: `tabs` of `bubbles` typed "user" / "ai"),
the workspace's folder named by `workspace.json` beside it. Nothing Cursor documents: the shapes
are those several open-source exporters read (tests/data/cursor/README.md names them). Only
the words are kept: tool calls, code-block diffs, thinking and attached context are not.

The agent CLI (`cursor-agent`, `agent`) writes `~/.cursor/projects/<project>/agent-transcripts/
<id>/<id>.jsonl` (older: `<id>.jsonl`): one `{"role", "message": {"content": [...]}}` a line,
Anthropic's content blocks; the person's text is wrapped in `<user_query>` with a `<context>`
block, which is left out. Lines carry no time: the file's is used.

The database is opened read-only, never through a symbolic link; a value larger than
MAX_VALUE bytes is left out and counted, as is a key whose JSON is not the shape above.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import quote, unquote, urlparse

from ...errors import UsageError
from ...records import Memory
from .base import BadRecord, Entry, Turn, conversation_memories, kind_of, need, optional, when

NAME = "cursor"
DESCRIPTION = ("Cursor chats (User/globalStorage/state.vscdb, workspaceStorage/*/state.vscdb) and "
               "Cursor CLI transcripts (~/.cursor/projects/*/agent-transcripts/*.jsonl)")
KIND = "turn"
MAX_VALUE = 32 * 1024 * 1024  # bytes of one key's JSON (a chat with its attached context)
CHATDATA = "workbench.panel.aichat.view.aichat.chatdata"

_TRANSCRIPT = re.compile(rb'\A\s*\{"role":"(?:user|assistant)","message":\{')
_QUERY = re.compile(r"<user_query>(.*?)</user_query>", re.S)
_DROP = re.compile(r"<(context|timestamp|attached_files|system_reminder)>.*?</\1>", re.S)
_ROLES: dict[Any, str] = {1: "user", 2: "assistant", "user": "user", "ai": "assistant"}  # bubble types
_REDACTED = re.compile(r"^\s*\[REDACTED\]\s*$", re.M)


def accepts(name: str) -> bool:
    return name.endswith((".vscdb", ".jsonl"))


def sniff(name: str, head: bytes) -> bool:
    if name.endswith(".vscdb"):
        return head.startswith(b"SQLite format 3\x00") and (b"cursorDiskKV" in head or b"ItemTable" in head)
    if not _TRANSCRIPT.match(head):
        return False
    return "agent-transcripts/" in name.replace("\\", "/") or b"<user_query>" in head


# -- the editor's database ----------------------------------------------------------------------

def _open(path: Path) -> sqlite3.Connection:
    if path.is_symlink():
        raise UsageError(f"{path.name}: a symbolic link; name the database itself")
    try:
        conn = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True)
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise UsageError(f"{path.name}: cannot read it as Cursor's state.vscdb ({exc})") from None
    return conn


def _values(conn: sqlite3.Connection, table: str, lo: str, hi: str, entry: Entry) -> Iterator[tuple[str, Any]]:
    """(key, JSON value) for the keys in [lo, hi); a value too large, not UTF-8 or not JSON is
    left out and counted."""
    sql = (f"SELECT key, CASE WHEN length(CAST(value AS BLOB)) <= ? THEN value END, "
           f"length(CAST(value AS BLOB)) FROM {table} WHERE key >= ? AND key < ? ORDER BY key")
    for key, value, size in conn.execute(sql, (MAX_VALUE, lo, hi)):
        if not isinstance(key, str):
            continue
        if value is None:
            if size:
                entry.skip(key[:80], f"{size:,} bytes, more than pmem reads of one value ({MAX_VALUE:,})")
            continue
        try:
            text = value.decode("utf-8") if isinstance(value, bytes) else value
            yield key, json.loads(text)
        except (UnicodeDecodeError, AttributeError):
            entry.skip(key[:80], "not UTF-8 text")
        except (json.JSONDecodeError, RecursionError, TypeError):
            entry.skip(key[:80], "not valid JSON")


def _folder(uri: Any) -> str | None:
    if not isinstance(uri, str) or not uri.startswith("file://"):
        return None
    path = unquote(urlparse(uri).path)
    return path.rstrip("/") or None


def _bubble_turn(bubble: Any, bid: str, fallback_type: Any = None) -> tuple[Turn | None, str | None]:
    if not isinstance(bubble, dict):
        raise BadRecord(f"is {kind_of(bubble)}, not an object")
    kind = bubble.get("type", fallback_type)
    text = need(bubble, "text", str) or ""
    role = None if isinstance(kind, bool) else _ROLES.get(kind)
    uris = optional(bubble, "workspaceUris", list) or []
    folder = next((f for f in map(_folder, uris) if f), None)
    if role is None or not text.strip():
        return None, folder
    at = when(optional(bubble, "createdAt", str, int, float) or optional(bubble, "timestamp", str, int, float))
    return Turn(bid, role, "User" if role == "user" else "Cursor", text.strip(), at), folder


def _composer(conn: sqlite3.Connection, entry: Entry, cid: str, data: Any) -> Iterator[Memory]:
    if not isinstance(data, dict):
        raise BadRecord(f"is {kind_of(data)}, not an object")
    headers = need(data, "fullConversationHeadersOnly", list)
    inline = need(data, "conversation", list)
    prefix = f"bubbleId:{cid}:"
    stored = dict(_values(conn, "cursorDiskKV", prefix, prefix[:-1] + ";", entry)) if headers else {}
    turns: list[Turn] = []
    scope = None
    for n, item in enumerate(headers or inline or []):
        where = f"chat {cid[:36]}, message {n + 1}"
        try:
            if not isinstance(item, dict):
                raise BadRecord(f"is {kind_of(item)}, not an object")
            bid = str(item.get("bubbleId") or n)
            bubble = stored.get(prefix + bid) if headers else item
            if bubble is None:
                continue  # a header whose message Cursor has not written (or has dropped)
            turn, folder = _bubble_turn(bubble, bid, item.get("type"))
        except BadRecord as exc:
            entry.skip(where, str(exc))
            continue
        scope = scope or folder
        if turn:
            turns.append(turn)
    if turns:
        title = optional(data, "name", str)
        yield from conversation_memories(NAME, cid, turns, title=title or None,
                                         created_at=when(optional(data, "createdAt", int, float, str)),
                                         scope=scope)


def _workspace_folder(db: Path) -> str | None:
    """The folder a workspaceStorage database belongs to: `workspace.json` beside it."""
    path = db.parent / "workspace.json"
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > 65536:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    return _folder(data.get("folder")) if isinstance(data, dict) else None


def _tabs(entry: Entry, data: Any, scope: str | None) -> Iterator[Memory]:
    tabs = data.get("tabs") if isinstance(data, dict) else None
    if not isinstance(tabs, list):
        entry.skip(CHATDATA, "has no list of tabs")
        return
    for n, tab in enumerate(tabs):
        if not isinstance(tab, dict):
            entry.skip(f"chat tab {n + 1}", f"is {kind_of(tab)}, not an object")
            continue
        tid = str(tab.get("tabId") or n)
        turns = []
        for k, bubble in enumerate(optional(tab, "bubbles", list) or []):
            if isinstance(bubble, dict) and not isinstance(bubble.get("text"), str):
                bubble = {**bubble, "text": bubble.get("rawText") if isinstance(bubble.get("rawText"), str) else ""}
            try:
                turn, _ = _bubble_turn(bubble, str(bubble.get("id") or k) if isinstance(bubble, dict) else str(k))
            except BadRecord as exc:
                entry.skip(f"chat tab {n + 1}, message {k + 1}", str(exc))
                continue
            if turn:
                turns.append(turn)
        if turns:
            yield from conversation_memories(NAME, f"tab-{tid}", turns, title=optional(tab, "chatTitle", str) or None,
                                             created_at=when(optional(tab, "lastSendTime", int, float)), scope=scope)


def _read_db(entry: Entry, conn: sqlite3.Connection) -> Iterator[Memory]:
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    chats = 0
    if "cursorDiskKV" in tables:
        for key, data in _values(conn, "cursorDiskKV", "composerData:", "composerData;", entry):
            chats += 1
            cid = key.split(":", 1)[1]
            try:
                yield from _composer(conn, entry, cid, data)
            except BadRecord as exc:
                entry.skip(f"chat {cid[:36]}", str(exc))
    if "ItemTable" in tables:
        for _, data in _values(conn, "ItemTable", CHATDATA, CHATDATA + "\x00", entry):
            chats += 1
            yield from _tabs(entry, data, _workspace_folder(entry.path) if entry.path else None)
    entry.counted(chats, "it holds no Cursor chat (a workspace's database keeps only an index of the chats "
                         "in User/globalStorage/state.vscdb: import that one)" if not chats else
                  "its chats hold no message with text (only tool calls, or empty drafts)")


# -- the CLI's transcripts ----------------------------------------------------------------------

def _cli_text(content: Any, role: str) -> str:
    if isinstance(content, str):
        blocks: list[Any] = [content]
    elif isinstance(content, list):
        blocks = [b.get("text") for b in content if isinstance(b, dict) and b.get("type") == "text"]
    else:
        raise BadRecord(f"'content' is {kind_of(content)}, not a list or a string")
    text = "\n\n".join(b for b in blocks if isinstance(b, str))
    if role == "user":
        queries = _QUERY.findall(text)
        text = "\n\n".join(queries) if queries else _DROP.sub("", text)
    return _REDACTED.sub("", text).strip()


def _read_transcript(entry: Entry) -> Iterator[Memory]:
    turns: list[Turn] = []
    lines = 0
    for n, obj in entry.read_jsonl():
        lines += 1
        try:
            if not isinstance(obj, dict):
                raise BadRecord(f"is {kind_of(obj)}, not an object")
            role = need(obj, "role", str)
            if role not in ("user", "assistant"):
                continue  # a status line (turn_ended)
            message = need(obj, "message", dict)
            text = _cli_text(message.get("content") if message else None, role)
        except BadRecord as exc:
            entry.skip(f"line {n}", str(exc))
            continue
        if text:
            turns.append(Turn(f"L{n}", role, "User" if role == "user" else "Cursor", text))
    entry.counted(lines, None if turns else "no line holds text you wrote or the agent answered")
    if not turns:
        return
    parts = entry.name.replace("\\", "/").split("/")
    session = parts[-1].removesuffix(".jsonl")
    meta = None
    if "agent-transcripts" in parts and parts.index("agent-transcripts") > 0:
        meta = {"project": parts[parts.index("agent-transcripts") - 1]}
    elif entry.path is not None:
        above = entry.path.resolve().parents
        names = [p.name for p in above[:3]]
        if "agent-transcripts" in names and names.index("agent-transcripts") + 1 < len(above):
            meta = {"project": above[names.index("agent-transcripts") + 1].name}
    yield from conversation_memories(NAME, session, turns, created_at=entry.mtime, meta=meta)


def read(entry: Entry) -> Iterator[Memory]:
    if entry.name.endswith(".jsonl"):
        yield from _read_transcript(entry)
        return
    if entry.path is None:
        raise UsageError(f"{entry.name}: Cursor's database must be a file on disk (unpack the archive first)")
    if entry.path.is_symlink() and not entry.standalone:  # in a folder: passed over, said so
        entry.counted(0, "it is a symbolic link, and pmem opens no database through one")
        return
    conn = _open(entry.path)
    try:
        memories = list(_read_db(entry, conn))
    except sqlite3.DatabaseError as exc:
        raise UsageError(f"{entry.name}: cannot read it as Cursor's state.vscdb ({exc})") from None
    finally:
        conn.close()
    yield from memories

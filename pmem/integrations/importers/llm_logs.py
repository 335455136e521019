"""Simon Willison's `llm` logs database (`llm logs path`), read with sqlite-utils, read-only.

Since llm 0.32 (migration m023_message_store) each call is a row of `turns` (`id`, `thread_id`,
`parent_message_hash`, `tip_message_hash`, `model`, `resolved_model`, `datetime_utc`) in a
`threads` row (`id`, `name`); the messages themselves are content-addressed rows of `messages`
(`hash`, `parent_hash`, `role`), shared between every thread that reached them, whose text is in
`parts` (`message_hash`, `position`, `type`, `text`, `payload`). A turn is read as `llm logs`
shows it: its prompt is the trailing run of user (and tool) messages that ends at
`parent_message_hash`, its answer the assistant messages from there to `tip_message_hash`. So
each message is read once, by the turn that sent or received it, however many threads share it.
Only text parts are kept, and of a part whose text embeds a fragment (`-f file`) only what was
typed (`payload.text_ref`'s literals), as the older table kept the prompt without its fragments;
system prompts, tool calls and results, reasoning and attachments are not kept.

From llm 0.4 (m010) to 0.31 each prompt and its answer is a row of `responses` (`id`, `model`,
`prompt`, `system`, `response`, `conversation_id`, `datetime_utc`), grouped by `conversations`
(`id`, `name`, `model`); llm 0.32 and later keep those rows and write no more of them. A row
whose id is also a turn's is the same call written twice (llm does not show it either); a
conversation continued after the upgrade (`llm -c`) goes on as the thread of the same id, and
its older rows and newer turns make one pmem thread. Turn and row ids give the same memory ids
(`<id>:prompt`, `<id>:response`), so an import of the older table is not repeated.

Older databases keep the rows in `log` or `logs` (`id`, `model`, `prompt`, `system`,
`response`, `chat_id`, and `timestamp`, `timestamp_utc` or `datetime_utc`); a chat there is the
rows sharing `chat_id`. Each row gives two turns, the prompt and the answer.

SQLite lets any column hold any type: a prompt or response that is not text gives no turn, an id
that is not text or a whole number is replaced by the row's place, a message chain that loops or
breaks ends where it does, and a database that cannot be read (damaged pages, a table that is a
broken view) is refused.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import quote

from ...errors import UsageError
from ...records import Memory
from .base import Entry, Turn, conversation_memories, when

NAME = "llm"
DESCRIPTION = "llm logs database (logs.db: threads/turns/messages, or the older responses or log/logs table)"
FILES = re.compile(r"\.(db|sqlite3?)$")
KIND = "turn"
MAGIC = b"SQLite format 3\x00"
STORE_TABLES = {"threads", "turns", "messages", "parts"}   # llm >= 0.32 (m023_message_store)
LEGACY_TABLES = ("responses", "logs", "log")


def accepts(name: str) -> bool:
    return bool(FILES.search(name))


def sniff(name: str, head: bytes) -> bool:
    """From the first bytes alone: only a small database has its schema there (llm's own is
    past the first 64 KiB since 0.32); `sniff_entry` looks inside a file on disk."""
    if not head.startswith(MAGIC):
        return False
    return any(t in head for t in (b"CREATE TABLE [responses]", b'CREATE TABLE "responses"',
                                    b"CREATE TABLE responses", b"_llm_migrations",
                                    b"CREATE TABLE [log]", b"CREATE TABLE [logs]",
                                    b'CREATE TABLE "log"', b'CREATE TABLE "logs"',
                                    b"CREATE TABLE [turns]", b'CREATE TABLE "turns"'))


def sniff_entry(entry: Entry, head: bytes) -> bool:
    """A SQLite file on disk is llm's when its schema names llm's tables (read-only)."""
    if not head.startswith(MAGIC):
        return False
    if entry.path is None:
        return sniff(entry.name, head)
    try:
        conn = sqlite3.connect(f"file:{quote(str(entry.path.resolve()))}?mode=ro", uri=True)
        try:
            names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
        finally:
            conn.close()
    except (sqlite3.Error, OSError):
        return sniff(entry.name, head)
    return bool("_llm_migrations" in names or STORE_TABLES <= names or names & set(LEGACY_TABLES))


def _open(path: Path):
    import sqlite_utils

    try:
        conn = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True)
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise UsageError(f"{path.name}: cannot read it as an llm logs database ({exc})") from None
    return sqlite_utils.Database(conn)


def _key(value: Any) -> str | None:
    """An id or a conversation id as text: SQLite gives any column any type; a blob or a real
    number is no id."""
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, int):
        return str(value)
    return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def _at(value: Any) -> str | None:
    return when(value) if isinstance(value, (str, int, float)) else None


# -- llm >= 0.32: threads, turns, messages, parts ---------------------------------------------

def _columns(db, table: str, wanted: tuple[str, ...]) -> str:
    cols = db[table].columns_dict
    return ", ".join(f"[{c}]" if c in cols else f"NULL AS [{c}]" for c in wanted)


def _literal(text: Any, payload: Any) -> str:
    """A text part's text: the `text` column, or the typed literals of a `text_ref` payload
    (the fragments it embeds are left out)."""
    if isinstance(text, str):
        return text
    if not isinstance(payload, str) or not payload.strip():
        return ""
    try:
        data = json.loads(payload)
    except (ValueError, RecursionError):
        return ""
    pieces = data.get("text_ref") if isinstance(data, dict) else None
    if not isinstance(pieces, list):
        return ""
    return "".join(p["literal"] for p in pieces if isinstance(p, dict) and isinstance(p.get("literal"), str))


class _Store:
    """The content-addressed message tables, read once into memory."""

    def __init__(self, db) -> None:
        self.parent: dict[str, str | None] = {}
        self.role: dict[str, Any] = {}
        for r in db.query(f"SELECT {_columns(db, 'messages', ('hash', 'parent_hash', 'role'))} FROM messages"):
            if (h := _key(r["hash"])) is not None:
                self.parent[h] = _key(r["parent_hash"])
                self.role[h] = r["role"]
        self.texts: dict[str, list[str]] = {}
        cols = _columns(db, "parts", ("message_hash", "position", "type", "text", "payload"))
        for r in db.query(f"SELECT {cols} FROM parts WHERE [type] = 'text' "
                          "ORDER BY [message_hash], [position], rowid" if "type" in db["parts"].columns_dict
                          else f"SELECT {cols} FROM parts WHERE 0"):
            if (h := _key(r["message_hash"])) is not None:
                self.texts.setdefault(h, []).append(_literal(r["text"], r["payload"]))

    def text(self, hashes: list[str], role: str) -> str:
        return "\n\n".join(t for h in hashes if self.role.get(h) == role
                           and (t := "".join(self.texts.get(h, [])).strip()))

    def inputs(self, parent: str | None) -> list[str]:
        """The turn's own input: the run of user and tool messages that ends at its parent."""
        out: list[str] = []
        seen: set[str] = set()
        h = parent
        while h is not None and h not in seen and self.role.get(h) in ("user", "tool"):
            seen.add(h)
            out.append(h)
            h = self.parent.get(h)
        return out[::-1]

    def outputs(self, tip: str | None, parent: str | None) -> list[str]:
        """What the turn appended: the messages from its tip back to its parent."""
        out: list[str] = []
        seen: set[str] = set()
        h = tip
        while h is not None and h != parent and h not in seen and h in self.parent:
            seen.add(h)
            out.append(h)
            h = self.parent[h]
        return out[::-1]


def _store_chats(db, tables: set[str]) -> tuple[dict[str, list[tuple[Any, ...]]], dict[str, str], set[str]]:
    """(turns by thread as sortable rows, thread names, every turn id) of the newer tables."""
    if not {"turns", "messages"} <= tables:
        return {}, {}, set()
    names: dict[str, str] = {}
    if "threads" in tables:
        for r in db.query(f"SELECT {_columns(db, 'threads', ('id', 'name'))} FROM threads"):
            if (key := _key(r["id"])) and isinstance(r["name"], str) and r["name"].strip():
                names[key] = r["name"]
    store = _Store(db) if "parts" in tables else None
    cols = _columns(db, "turns", ("id", "thread_id", "parent_message_hash", "tip_message_hash", "model",
                                  "resolved_model", "datetime_utc"))
    chats: dict[str, list[tuple[Any, ...]]] = {}
    ids: set[str] = set()
    for n, r in enumerate(db.query(f"SELECT rowid AS [_rowid], {cols} FROM turns ORDER BY rowid")):
        tid = _key(r["id"]) or f"turn-{r['_rowid']}"
        ids.add(tid)
        if store is None:
            continue
        parent, tip = _key(r["parent_message_hash"]), _key(r["tip_message_hash"])
        prompt = store.text(store.inputs(parent), "user")
        response = store.text(store.outputs(tip, parent), "assistant")
        at = _at(r["datetime_utc"])
        thread = _key(r["thread_id"]) or tid
        chats.setdefault(thread, []).append((at or "", 1, n, tid, prompt, response, r["model"],
                                             r["resolved_model"], at))
    return chats, names, ids


# -- llm 0.4 to 0.31: responses; before: log, logs ---------------------------------------------

def _rows(db, table: str, conv_col: str, time_col: str | None) -> list[dict[str, Any]]:
    cols = db[table].columns_dict
    pick = [c for c in ("id", "model", "prompt", "response", conv_col) if c in cols]
    if time_col:
        pick.append(time_col)
    order = f"[{time_col}], rowid" if time_col else "rowid"
    columns = ", ".join(f"[{c}]" for c in dict.fromkeys(pick))
    sql = f"SELECT rowid AS [_rowid], {columns} FROM [{table}] ORDER BY {order}"
    return list(db.query(sql))


def _legacy_chats(rows: list[dict[str, Any]], conv_col: str, time_col: str | None,
                  skip: set[str] = frozenset()) -> dict[str, list[tuple[Any, ...]]]:  # type: ignore[assignment]
    chats: dict[str, list[tuple[Any, ...]]] = {}
    for n, r in enumerate(rows):
        rid = _key(r.get("id")) or f"row-{r['_rowid']}"
        if rid in skip:
            continue
        key = _key(r.get(conv_col)) or _key(r.get("id")) or f"row-{r['_rowid']}"
        at = _at(r.get(time_col)) if time_col else None
        chats.setdefault(key, []).append((at or "", 0, n, rid, r.get("prompt"), r.get("response"),
                                          r.get("model"), None, at))
    return chats


def _names(db, tables: set[str]) -> dict[str, str]:
    """Conversation names by id, where the conversations table has both columns."""
    if "conversations" not in tables or not {"id", "name"} <= set(db["conversations"].columns_dict):
        return {}
    return {key: r["name"] for r in db.query("SELECT id, name FROM conversations")
            if (key := _key(r["id"])) and isinstance(r["name"], str) and r["name"].strip()}


# -- both -------------------------------------------------------------------------------------

def _turns(calls: list[tuple[Any, ...]]) -> list[Turn]:
    """Two turns per call (its prompt, its answer), the calls in time order."""
    out: list[Turn] = []
    for _, _, _, rid, prompt, response, model, resolved, at in sorted(calls, key=lambda c: c[:3]):
        if isinstance(prompt, str) and prompt.strip():
            out.append(Turn(message_id=f"{rid}:prompt", role="user", speaker="User",
                            text=prompt.strip(), created_at=at))
        if isinstance(response, str) and response.strip():
            name = model if isinstance(model, str) and model.strip() else "assistant"
            extra: dict[str, Any] = {"model": name}
            if isinstance(resolved, str) and resolved.strip() and resolved != name:
                extra["resolved_model"] = resolved
            out.append(Turn(message_id=f"{rid}:response", role="assistant", speaker=name,
                            text=response.strip(), created_at=at, extra=extra))
    return out


def _read(entry: Entry, db) -> Iterator[Memory]:
    tables = set(db.table_names())
    if not tables & {"turns", *LEGACY_TABLES}:
        raise UsageError(f"{entry.name}: no llm turns, responses or log table in this database")
    chats, names, turn_ids = _store_chats(db, tables)
    if "responses" in tables:
        names.update(_names(db, tables))  # a conversation's own name, not the one its continuation gave the thread
        cols = db["responses"].columns_dict
        time_col = "datetime_utc" if "datetime_utc" in cols else None
        rows = _rows(db, "responses", "conversation_id", time_col)
        for cid, calls in _legacy_chats(rows, "conversation_id", time_col, turn_ids).items():
            chats.setdefault(cid, []).extend(calls)
    for cid, calls in chats.items():
        yield from conversation_memories(NAME, cid, _turns(calls), title=names.get(cid))
    for table in ("logs", "log"):
        if table not in tables:
            continue
        cols = db[table].columns_dict
        time_col = next((c for c in ("datetime_utc", "timestamp_utc", "timestamp") if c in cols), None)
        conv_col = "chat_id" if "chat_id" in cols else "id"
        rows = _rows(db, table, conv_col, time_col)
        for cid, calls in _legacy_chats(rows, conv_col, time_col).items():
            # the old tables' ids are integers that the newer table would reuse: keep them apart
            yield from conversation_memories(NAME, f"{table}-{cid}", _turns(calls))


def _counted(db) -> str:
    """What the database holds, for an import that found nothing in it."""
    tables = set(db.table_names())
    counts = [f"{db[t].count} {what}" for t, what in (("turns", "turns in threads"), ("responses", "rows in responses"),
                                                       ("logs", "rows in logs"), ("log", "rows in log")) if t in tables]
    held = " and ".join(counts)
    if all(c.startswith("0 ") for c in counts):
        return f"{held}: llm logged nothing here (`llm logs status` says whether logging is on)"
    return f"{held}, none with a prompt or an answer in text"


def read(entry: Entry) -> Iterator[Memory]:
    if entry.path is None:
        raise UsageError(f"{entry.name}: an llm database must be a file on disk (unpack the archive first)")
    db = _open(entry.path)
    try:
        memories = list(_read(entry, db))
        if not memories:
            entry.nothing = _counted(db)
    except sqlite3.DatabaseError as exc:  # damaged pages, a table that is a broken view
        raise UsageError(f"{entry.name}: cannot read it as an llm logs database ({exc})") from None
    finally:
        db.conn.close()
    yield from memories

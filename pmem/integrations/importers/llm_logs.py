"""Simon Willison's `llm` logs database (`llm logs path`), read with sqlite-utils, read-only.

Since llm 0.4 (migration m010) each prompt and its answer is a row of `responses` (`id`, `model`,
`prompt`, `system`, `response`, `conversation_id`, `datetime_utc`), grouped by `conversations`
(`id`, `name`, `model`). Older databases keep the rows in `log` or `logs` (`id`, `model`,
`prompt`, `system`, `response`, `chat_id`, and `timestamp`, `timestamp_utc` or `datetime_utc`);
a chat there is the rows sharing `chat_id`. Each row gives two turns, the prompt and the answer;
the system prompt is not a turn.

SQLite lets any column hold any type: a prompt or response that is not text gives no turn, an id
that is not text or a whole number is replaced by the row's place, and a database that cannot be
read (damaged pages, a table that is a broken view) is refused.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import quote

from ...errors import UsageError
from ...records import Memory
from .base import Entry, Turn, conversation_memories, when

NAME = "llm"
DESCRIPTION = "llm logs database (logs.db: responses, or the older log/logs table)"
FILES = re.compile(r"\.(db|sqlite3?)$")
KIND = "turn"


def accepts(name: str) -> bool:
    return bool(FILES.search(name))


def sniff(name: str, head: bytes) -> bool:
    if not head.startswith(b"SQLite format 3\x00"):
        return False
    return any(t in head for t in (b"CREATE TABLE [responses]", b'CREATE TABLE "responses"',
                                    b"CREATE TABLE responses", b"_llm_migrations",
                                    b"CREATE TABLE [log]", b"CREATE TABLE [logs]",
                                    b'CREATE TABLE "log"', b'CREATE TABLE "logs"'))


def _open(path: Path):
    import sqlite_utils

    try:
        conn = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True)
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise UsageError(f"{path.name}: cannot read it as an llm logs database ({exc})") from None
    return sqlite_utils.Database(conn)


def _rows(db, table: str, conv_col: str, time_col: str | None) -> list[dict[str, Any]]:
    cols = db[table].columns_dict
    pick = [c for c in ("id", "model", "prompt", "response", conv_col) if c in cols]
    if time_col:
        pick.append(time_col)
    order = f"[{time_col}], rowid" if time_col else "rowid"
    columns = ", ".join(f"[{c}]" for c in dict.fromkeys(pick))
    sql = f"SELECT rowid AS [_rowid], {columns} FROM [{table}] ORDER BY {order}"
    return list(db.query(sql))


def _key(value: Any) -> str | None:
    """An id or a conversation id as text: SQLite gives any column any type; a blob or a real
    number is no id."""
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, int):
        return str(value)
    return None


def _chats(rows: list[dict[str, Any]], conv_col: str) -> dict[str, list[dict[str, Any]]]:
    chats: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        key = _key(r.get(conv_col)) or _key(r.get("id")) or f"row-{r['_rowid']}"
        chats.setdefault(key, []).append(r)
    return chats


def _turns(rows: list[dict[str, Any]], time_col: str | None) -> list[Turn]:
    out: list[Turn] = []
    for r in rows:
        rid = _key(r.get("id")) or f"row-{r['_rowid']}"
        at = when(r.get(time_col)) if time_col and isinstance(r.get(time_col), (str, int, float)) else None
        prompt, response = r.get("prompt"), r.get("response")
        if isinstance(prompt, str) and prompt.strip():
            out.append(Turn(message_id=f"{rid}:prompt", role="user", speaker="User",
                            text=prompt.strip(), created_at=at))
        if isinstance(response, str) and response.strip():
            model = r.get("model") if isinstance(r.get("model"), str) and r["model"].strip() else "assistant"
            out.append(Turn(message_id=f"{rid}:response", role="assistant", speaker=model,
                            text=response.strip(), created_at=at, extra={"model": model}))
    return out


def _names(db, tables: set[str]) -> dict[str, str]:
    """Conversation names by id, where the conversations table has both columns."""
    if "conversations" not in tables or not {"id", "name"} <= set(db["conversations"].columns_dict):
        return {}
    return {key: r["name"] for r in db.query("SELECT id, name FROM conversations")
            if (key := _key(r["id"])) and isinstance(r["name"], str)}


def _read(entry: Entry, db) -> Iterator[Memory]:
    tables = set(db.table_names())
    if "responses" in tables:
        names = _names(db, tables)
        cols = db["responses"].columns_dict
        time_col = "datetime_utc" if "datetime_utc" in cols else None
        rows = _rows(db, "responses", "conversation_id", time_col)
        for cid, chat in _chats(rows, "conversation_id").items():
            yield from conversation_memories(NAME, cid, _turns(chat, time_col), title=names.get(cid) or None)
    for table in ("logs", "log"):
        if table not in tables:
            continue
        cols = db[table].columns_dict
        time_col = next((c for c in ("datetime_utc", "timestamp_utc", "timestamp") if c in cols), None)
        conv_col = "chat_id" if "chat_id" in cols else "id"
        rows = _rows(db, table, conv_col, time_col)
        for cid, chat in _chats(rows, conv_col).items():
            # the old tables' ids are integers that the newer table would reuse: keep them apart
            yield from conversation_memories(NAME, f"{table}-{cid}", _turns(chat, time_col))
    if not tables & {"responses", "logs", "log"}:
        raise UsageError(f"{entry.name}: no llm responses or log table in this database")


def read(entry: Entry) -> Iterator[Memory]:
    if entry.path is None:
        raise UsageError(f"{entry.name}: an llm database must be a file on disk (unpack the archive first)")
    db = _open(entry.path)
    try:
        memories = list(_read(entry, db))
    except sqlite3.DatabaseError as exc:  # damaged pages, a table that is a broken view
        raise UsageError(f"{entry.name}: cannot read it as an llm logs database ({exc})") from None
    finally:
        db.conn.close()
    yield from memories

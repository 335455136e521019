"""The llm importer on a message store someone altered: SQLite lets any column hold any type,
so each cell of one conversation's rows in threads, turns, messages and parts is set to NULL, a
number, a real, text and a blob, and each column is dropped; a message chain is made to loop.
The import ends in memories or in one UsageError, never a traceback, and the other
conversation, untouched, is read whole."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Callable, Iterator

import pytest

from pmem.errors import UsageError
from pmem.integrations.importers import load

pytest.importorskip("llm", reason="llm is not installed (pip install 'pmem[llm]')")

TABLES = ("threads", "turns", "messages", "parts")
# what is left of the untouched conversation without a column every conversation needs
NEEDED = {"turns without model": ["User: The untouched prompt", "assistant: {"],
          "turns without parent_message_hash": ["echo: {"],  # no parent: no prompt of its own
          "turns without tip_message_hash": ["User: The untouched prompt"],
          "messages without hash": [], "messages without role": [],
          "parts without message_hash": [], "parts without type": [], "parts without text": []}


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A logs.db llm wrote (in-process, the echo model): conversation A of two turns, B of one.
    Returns the path and, per table, the WHERE clause that picks A's rows."""
    import llm
    import sqlite_utils

    path = tmp_path_factory.mktemp("llm") / "base.db"
    db = sqlite_utils.Database(path)
    model = llm.get_model("echo")
    a = model.conversation()
    for prompt in ("Mutated prompt one", "Mutated prompt two"):
        a.prompt(prompt).text()
        a.responses[-1].log_to_db(db)
    b = model.conversation()
    response = b.prompt("The untouched prompt")
    response.text()
    response.log_to_db(db)
    assert response.text_or_raise().startswith("{")  # echo answers with the request as JSON
    hashes = [r[0] for r in db.execute(
        "WITH RECURSIVE chain(h) AS (SELECT tip_message_hash FROM threads WHERE id = ? "
        "UNION ALL SELECT parent_hash FROM messages JOIN chain ON hash = h WHERE parent_hash IS NOT NULL) "
        "SELECT h FROM chain", [a.id]).fetchall()]
    db.conn.close()
    inside = ", ".join(f"'{h}'" for h in hashes)
    return path, {"threads": f"id = '{a.id}'", "turns": f"thread_id = '{a.id}'",
                  "messages": f"hash IN ({inside})", "parts": f"message_hash IN ({inside})"}


def _kept_texts(path: Path) -> list[str]:
    plan = load(path)
    return [m.text.split("\n")[0] for m in plan.records if "untouched" in m.text]


def _cases(base: Path, where: dict[str, str], target: Path) -> Iterator[tuple[str, Callable[[], Path | None]]]:
    conn = sqlite3.connect(base)
    columns = {t: [r[1] for r in conn.execute(f"PRAGMA table_info([{t}])")] for t in TABLES}
    conn.close()
    for table in TABLES:
        for col in columns[table]:
            for value in (None, 7, 2.5, "x", b"\x00\xff"):
                def write(table=table, col=col, value=value) -> Path | None:
                    shutil.copy(base, target)
                    c = sqlite3.connect(target)
                    try:  # OR IGNORE: keys stay unique
                        c.execute(f"UPDATE OR IGNORE [{table}] SET [{col}] = ? WHERE {where[table]}", (value,))
                    except sqlite3.IntegrityError:
                        return None  # an INTEGER PRIMARY KEY holds only integers: no file can hold this
                    finally:
                        c.commit()
                        c.close()
                    return target
                yield f"{table}.{col} = {value!r}", write

            def drop(table=table, col=col) -> Path:
                shutil.copy(base, target)
                c = sqlite3.connect(target)
                rest = ", ".join(f"[{x}]" for x in columns[table] if x != col)
                triggers = [r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")]
                c.executescript("PRAGMA foreign_keys = OFF; DROP VIEW IF EXISTS message_tree;"
                                + "".join(f"DROP TRIGGER [{t}];" for t in triggers)
                                + f"CREATE TABLE [_new] AS SELECT {rest} FROM [{table}];"
                                f"DROP TABLE [{table}]; ALTER TABLE [_new] RENAME TO [{table}];")
                c.close()
                return target
            yield f"{table} without {col}", drop


def test_every_cell_of_every_type_and_every_column_gone(base, tmp_path):
    path, where = base
    assert _kept_texts(path) == ["User: The untouched prompt", "echo: {"]
    n = 0
    for name, make in _cases(path, where, tmp_path / "logs.db"):
        source = make()
        if source is None:
            continue
        try:
            plan = load(source)
        except UsageError:
            n += 1
            continue
        except Exception as exc:  # noqa: BLE001 - the test names the case that raised
            raise AssertionError(f"{name}: {type(exc).__name__}: {exc}") from exc
        texts = [m.text.split("\n")[0] for m in plan.records if "untouched" in m.text]
        assert texts == NEEDED.get(name, ["User: The untouched prompt", "echo: {"]), name
        n += 1
    assert n > 150


def test_a_message_chain_that_loops_ends_where_it_loops(base, tmp_path):
    path, where = base
    target = tmp_path / "logs.db"
    shutil.copy(path, target)
    c = sqlite3.connect(target)
    c.execute("PRAGMA foreign_keys = OFF")
    first = c.execute(f"SELECT hash FROM messages WHERE {where['messages']} AND parent_hash IS NULL").fetchone()[0]
    tip = c.execute(f"SELECT tip_message_hash FROM threads WHERE {where['threads']}").fetchone()[0]
    c.execute("UPDATE messages SET parent_hash = ? WHERE hash = ?", (tip, first))
    c.commit()
    c.close()
    plan = load(target)
    assert [m.text.split("\n")[0] for m in plan.records if "untouched" in m.text] == [
        "User: The untouched prompt", "echo: {"]

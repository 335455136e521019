"""Importers against exports whose fields have the wrong type: every field of a valid export, at
every depth, turned into each other JSON type (null, true, a number, a string, a list, an
object). Generated, not hand-picked: whatever a reader reads, one of these reaches it.

Each mutated export is imported through the CLI into a store holding a canary memory. The
import must end without a traceback, with exit 0 (the bad record left out, the rest imported)
or 2 (the file refused in one line, nothing stored), and the canary must be intact. The second
record of each export is never mutated: when the import succeeds, its memories are all stored.
"""

from __future__ import annotations

import copy
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any, Iterator

import pytest
from export_fixtures import (
    chatgpt_conversation,
    claude_ai_conversation,
    claude_code_session,
    llm_db_new,
    mutation_name,
    mutations,
    write_jsonl,
)

pytestmark = pytest.mark.slow

CANARY = "canary: the spare key is under the blue flowerpot"
TURNS = [("user", "I moved to Lisbon in May."), ("assistant", "How are you finding it?")]
KEPT = [("user", "The untouched conversation stays whole."), ("assistant", "It is imported as it was.")]


@pytest.fixture
def importer(tmp_path, monkeypatch, pmem_home):
    """run(path_of_input, fmt) -> (exit code, stderr, texts stored besides the canary), each on a
    fresh copy of one store that holds the canary."""
    import typer.testing
    from typer.testing import CliRunner

    from pmem.cli.app import app

    monkeypatch.setenv("PMEM_EMBED_MODEL", "fake-64")
    runner = CliRunner()
    command = typer.main.get_command(app)  # built once: typer's runner rebuilds it per call (half the time)
    monkeypatch.setattr(typer.testing, "_get_command", lambda _: command, raising=False)

    def invoke(args: list[str]):
        return runner.invoke(app, args)

    template = tmp_path / "template.db"
    r = invoke(["--db", str(template), "add", CANARY])
    assert r.exit_code == 0, r.output
    work = tmp_path / "case.db"

    def run(source: Path, fmt: str) -> tuple[int, str, list[str], BaseException | None]:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{work}{suffix}").unlink(missing_ok=True)
        shutil.copy(template, work)
        r = invoke(["--db", str(work), "import", str(source), "--format", fmt, "--json"])
        conn = sqlite3.connect(work)
        try:
            texts = [t for (t,) in conn.execute("SELECT text FROM memories WHERE forgotten_at IS NULL")]
        finally:
            conn.close()
        exception = r.exception if r.exception is not None and not isinstance(r.exception, SystemExit) else None
        return r.exit_code, r.stderr, texts, exception

    return run


Case = tuple  # (name, write() -> the path to import, [the kept record's texts, when not the default])


def check_all(run, cases: Iterator[Case], fmt: str, kept: list[str]) -> int:
    """Runs every case; returns how many ran. Fails listing every case that broke a rule."""
    broken: list[str] = []
    n = 0
    for name, write, *own in cases:
        n += 1
        expect = own[0] if own else kept
        code, stderr, texts, exception = run(write(), fmt)
        why = []
        if exception is not None or "Traceback" in stderr:
            why.append(f"traceback {type(exception).__name__}: {exception}")
        if code not in (0, 2):
            why.append(f"exit {code}")
        if CANARY not in texts:
            why.append("canary lost")
        stored = [t for t in texts if t != CANARY]
        if code == 0 and not all(k in stored for k in expect):
            why.append("the untouched record was not imported whole")
        if code == 2 and stored:
            why.append(f"refused, yet {len(stored)} memories stored")
        if code == 2 and (len(stderr.strip().splitlines()) != 1 or not stderr.startswith("pmem: error:")):
            why.append(f"not one error line: {stderr[:200]!r}")
        if why:
            broken.append(f"{name}: {'; '.join(why)}")
    assert not broken, f"{len(broken)} of {n} mutations broke a rule:\n" + "\n".join(broken[:40])
    return n


def _json_cases(doc: Any, record: tuple, target: Path, dump=json.dumps, kept: list[str] | None = None
                ) -> Iterator[Case]:
    """The mutations under `record`, each written to `target`; `kept` overrides the texts the
    untouched record must give (for a mutation that reaches it too)."""
    for path, wrong, mutated in mutations(doc, record):
        def write(mutated=mutated) -> Path:
            target.write_text(dump(mutated), encoding="utf-8")
            return target
        yield (mutation_name(path, wrong), write) + ((kept,) if kept is not None else ())


def _jsonl(rows: list[Any]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


# -- one test per format ------------------------------------------------------------------------

def test_chatgpt_fields_of_every_type(importer, tmp_path):
    doc = [chatgpt_conversation("c1", TURNS, branch=False, extras=False),
           chatgpt_conversation("c2", KEPT, branch=False, extras=False)]
    kept = ["User: " + KEPT[0][1], "ChatGPT: " + KEPT[1][1]]
    cases = list(_json_cases(doc, (0,), tmp_path / "conversations.json"))
    cases += [c for c in _json_cases(doc, (), tmp_path / "conversations.json", kept=[]) if " = " in c[0]
              and c[0].index(" = ") == 0]  # the whole file of each other type
    assert check_all(importer, iter(cases), "chatgpt", kept) > 300


def test_claude_ai_fields_of_every_type(importer, tmp_path):
    doc = [claude_ai_conversation("k1", [("human", "Plan a week in Kyoto"), ("assistant", "Day one: Fushimi Inari.")]),
           claude_ai_conversation("k2", [("human", KEPT[0][1]), ("assistant", KEPT[1][1])])]
    doc[0]["current_leaf_message_uuid"] = "k1-1"
    for i, m in enumerate(doc[0]["chat_messages"]):
        m["parent_message_uuid"] = f"k1-{i - 1}" if i else None
    kept = ["User: " + KEPT[0][1], "Claude: " + KEPT[1][1]]
    cases = list(_json_cases(doc, (0,), tmp_path / "conversations.json"))
    assert check_all(importer, iter(cases), "claude-ai", kept) > 150


def test_claude_code_lines_of_every_type(importer, tmp_path):
    folder = tmp_path / "projects"
    lines = claude_code_session("s-1", "/home/sam/parser")
    other = [line for line in claude_code_session("s-2", "/home/sam/other") if line.get("uuid") in ("u4", "a4")]
    write_jsonl(folder / "-home-sam-other" / "s-2.jsonl", other)
    kept = ["User: Please fix it and add a test.", "Claude: Fixed; the test covers the last line."]
    target = folder / "-home-sam-parser" / "s-1.jsonl"
    target.parent.mkdir(parents=True)
    rows = [lines[2], lines[3]]  # a user prompt and an answer: every field of both

    def cases() -> Iterator[Case]:
        for path, wrong, mutated in mutations(rows, ()):
            if not path:
                continue

            def write(mutated=mutated) -> Path:
                target.write_text(_jsonl(mutated), encoding="utf-8")
                return folder
            yield mutation_name(path, wrong), write

    assert check_all(importer, cases(), "claude-code", kept) > 100


def test_mem0_and_openmemory_fields_of_every_type(importer, tmp_path):
    from export_fixtures import MEM0_GET_ALL

    doc = copy.deepcopy(MEM0_GET_ALL)
    doc["results"][1]["memory"] = "The untouched memory stays whole."
    n = check_all(importer, _json_cases(doc, ("results", 0), tmp_path / "mem0.json"), "mem0",
                  ["The untouched memory stays whole."])
    backup = {"user": {"id": "u-1", "user_id": "sam"}, "categories": [{"id": "c-1", "name": "hobbies"}],
              "memories": [{"id": "m-1", "content": "Plays the cello on Sundays", "state": "active",
                            "category_ids": ["c-1"], "created_at": "2025-05-01T12:00:00+00:00", "metadata": {}},
                           {"id": "m-2", "content": "The untouched memory stays whole.", "state": "active",
                            "category_ids": [], "created_at": "2025-05-02T12:00:00+00:00"}]}
    cases = list(_json_cases(backup, ("memories", 0), tmp_path / "memories.json"))
    cases += list(_json_cases(backup, ("user",), tmp_path / "memories.json"))
    cases += list(_json_cases(backup, ("categories",), tmp_path / "memories.json"))
    cases += list(_json_cases(backup, ("memories",), tmp_path / "memories.json", kept=[]))
    n += check_all(importer, iter(cases), "mem0", ["The untouched memory stays whole."])
    lines = [{"id": "m-1", "content": "Plays the cello", "state": "active", "app": "cursor", "categories": ["x"]},
             {"id": "m-2", "content": "The untouched memory stays whole.", "state": "active"}]
    n += check_all(importer, _json_cases(lines, (0,), tmp_path / "memories.jsonl", dump=_jsonl), "mem0",
                   ["The untouched memory stays whole."])
    assert n > 150


def test_mcp_memory_fields_of_every_type(importer, tmp_path):
    rows = [{"type": "entity", "name": "Ada", "entityType": "person",
             "observations": ["Prefers tea", "Lives in Lisbon"]},
            {"type": "relation", "from": "Ada", "to": "Acme", "relationType": "works_at"},
            {"type": "entity", "name": "Bo", "entityType": "person", "observations": ["The untouched one"]}]
    kept = ["Bo: The untouched one"]
    target = tmp_path / "memory.jsonl"
    cases = list(_json_cases(rows, (0,), target, dump=_jsonl)) + list(_json_cases(rows, (1,), target, dump=_jsonl))
    n = check_all(importer, iter(cases), "mcp-memory", kept)
    graph = {"entities": [{k: v for k, v in rows[0].items() if k != "type"},
                          {k: v for k, v in rows[2].items() if k != "type"}],
             "relations": [{k: v for k, v in rows[1].items() if k != "type"}]}
    cases = list(_json_cases(graph, ("entities", 0), target, dump=lambda d: json.dumps(d, indent=1)))
    cases += list(_json_cases(graph, ("relations",), target, dump=lambda d: json.dumps(d, indent=1)))
    cases += list(_json_cases(graph, ("entities",), target, dump=lambda d: json.dumps(d, indent=1), kept=[]))
    n += check_all(importer, iter(cases), "mcp-memory", kept)
    assert n > 80


def test_pmem_jsonl_fields_of_every_type_refuse_the_file_or_import_it_whole(importer, tmp_path):
    rows = [{"text": "a memory", "tags": ["a"], "tier": "archival", "meta": {"k": "v"}, "source": "s",
             "created_at": "2026-01-01T00:00:00Z", "thread": "t", "thread_pos": 0, "pinned": False},
            {"text": "The untouched memory stays whole."}]
    assert check_all(importer, _json_cases(rows, (0,), tmp_path / "in.jsonl", dump=_jsonl), "jsonl",
                     ["The untouched memory stays whole."]) > 40


def test_llm_logs_columns_of_every_type_and_missing_columns(importer, tmp_path):
    """SQLite lets any column hold any type: each cell of a response and of its conversation as
    NULL, a number, a real, text and a blob; then each column of both tables gone."""
    base = llm_db_new(tmp_path / "base.db")
    conn = sqlite3.connect(base)
    conn.execute("INSERT INTO conversations VALUES ('01kept', 'Kept', 'm')")
    conn.execute("INSERT INTO responses (id, model, prompt, response, conversation_id, datetime_utc) VALUES "
                 "('01rk', 'm', 'The untouched prompt', 'The untouched answer', '01kept', '2026-03-12T00:00:00')")
    conn.commit()
    columns = {t: [r[1] for r in conn.execute(f"PRAGMA table_info([{t}])")] for t in ("responses", "conversations")}
    conn.close()
    target = tmp_path / "logs.db"

    def cases() -> Iterator[Case]:
        for table, key in (("responses", "01r1"), ("conversations", "01conv")):
            for col in columns[table]:
                for value in (None, 7, 2.5, "x", b"\x00\xff"):
                    def write(table=table, key=key, col=col, value=value) -> Path:
                        shutil.copy(base, target)
                        c = sqlite3.connect(target)
                        c.execute("PRAGMA foreign_keys = OFF")
                        c.execute(f"UPDATE [{table}] SET [{col}] = ? WHERE id = ?", (value, key))
                        c.commit()
                        c.close()
                        return target
                    yield f"{table}.{col} = {value!r}", write
                def drop(table=table, col=col) -> Path:
                    shutil.copy(base, target)
                    c = sqlite3.connect(target)
                    rest = ", ".join(f"[{x}]" for x in columns[table] if x != col)
                    c.executescript(f"PRAGMA foreign_keys = OFF; CREATE TABLE [_new] AS SELECT {rest} FROM [{table}];"
                                    f"DROP TABLE [{table}]; ALTER TABLE [_new] RENAME TO [{table}];")
                    c.close()
                    return target
                lost = {"prompt": ["m: The untouched answer"], "response": ["User: The untouched prompt"],
                        "model": ["User: The untouched prompt", "assistant: The untouched answer"]}
                yield (f"{table} without {col}", drop) + ((lost[col],) if table == "responses" and col in lost else ())

    kept = ["User: The untouched prompt", "m: The untouched answer"]
    assert check_all(importer, cases(), "llm", kept) > 100

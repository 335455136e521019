"""The llm importer against the logs.db that the installed llm itself writes (llm >= 0.32 keeps
threads, turns, messages and parts; the older responses table stays, and is still read).

The prompts are sent to the offline `echo` model of the llm-echo plugin (the `test` extra), by
the real `llm` command, with LLM_USER_PATH in the test's folder."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from pmem.integrations.importers import load

pytest.importorskip("llm", reason="llm is not installed (pip install 'pmem[llm]')")


def _llm_command() -> list[str]:
    exe = Path(sys.executable).with_name("llm")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "llm"]


@pytest.fixture
def llm_cli(tmp_path):
    """run(*args) -> stdout of the real llm, logging to tmp_path/llm/logs.db."""
    home = tmp_path / "llm"
    home.mkdir()
    env = {**os.environ, "LLM_USER_PATH": str(home), "LLM_LOAD_PLUGINS": "llm-echo"}

    def run(*args: str) -> str:
        r = subprocess.run([*_llm_command(), *args], env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return r.stdout

    run.db = home / "logs.db"  # type: ignore[attr-defined]
    return run


def _utc(text: str) -> str:
    """llm's datetime_utc, to the second, as pmem stores dates."""
    return datetime.fromisoformat(text).astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _migrated(path: Path) -> None:
    """An empty logs.db with every table llm's migrations make (as llm does before its first log)."""
    import sqlite_utils
    from llm.migrations import migrate

    db = sqlite_utils.Database(path)
    migrate(db)
    db.conn.close()


def _turns(db: Path) -> list[dict]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute("SELECT id, thread_id, model, datetime_utc FROM turns ORDER BY rowid")]
    finally:
        conn.close()


def test_what_llm_writes_imports_turn_by_turn_threaded_dated_and_with_its_model(llm_cli):
    started = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    a1 = llm_cli("-m", "echo", "What should I pack for Oslo in March?").strip()
    a2 = llm_cli("-c", "And for a day hike?").strip()
    a3 = llm_cli("-m", "echo", "-s", "SYSTEM PROMPT: be terse", "A haiku about tea").strip()
    ended = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    conn = sqlite3.connect(llm_cli.db)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"threads", "turns", "messages", "parts"} <= tables  # llm >= 0.32 writes the message store
    assert conn.execute("SELECT count(*) FROM responses").fetchone()[0] == 0  # and nothing more here
    conn.close()
    turns = _turns(llm_cli.db)
    assert len(turns) == 3 and turns[0]["thread_id"] == turns[1]["thread_id"] != turns[2]["thread_id"]

    plan = load(llm_cli.db)  # told by its shape: llm's schema is past the first 64 KiB

    assert plan.formats == {"llm": 1}
    got = [(m.thread, m.thread_pos, m.text, m.created_at, m.meta.get("model")) for m in plan.records]
    first, second = (f"llm:{turns[0]['thread_id']}", f"llm:{turns[2]['thread_id']}")
    at = [_utc(t["datetime_utc"]) for t in turns]
    assert got == [
        (first, 0, "User: What should I pack for Oslo in March?", at[0], None),
        (first, 1, f"echo: {a1}", at[0], "echo"),
        (first, 2, "User: And for a day hike?", at[1], None),
        (first, 3, f"echo: {a2}", at[1], "echo"),
        (second, 0, "User: A haiku about tea", at[2], None),
        (second, 1, f"echo: {a3}", at[2], "echo"),
    ]
    assert all(started <= t <= ended for t in at)
    conn = sqlite3.connect(llm_cli.db)
    names = dict(conn.execute("SELECT id, name FROM threads").fetchall())  # llm shortens the prompt
    conn.close()
    one, two = names[turns[0]["thread_id"]], names[turns[2]["thread_id"]]
    assert [m.meta["title"] for m in plan.records] == [one] * 4 + [two] * 2
    assert names[turns[0]["thread_id"]].startswith("What should I pack")
    assert plan.records[0].tier == "episodic" and "llm" in plan.records[0].tags
    assert all("SYSTEM PROMPT" not in m.text for m in plan.records if m.meta["role"] == "user")
    assert load(llm_cli.db, "llm").records == plan.records


def test_a_conversation_from_before_the_upgrade_continued_after_it_is_one_thread_each_message_once(llm_cli):
    """llm 0.32+ copies an older conversation's history into the message store when it is
    continued (`llm -c --cid`): those messages are in both tables, and pmem reads them once,
    with the ids an import of the older table gave them."""
    _migrated(llm_cli.db)
    conn = sqlite3.connect(llm_cli.db)
    conn.execute("INSERT INTO conversations (id, name, model) VALUES ('01oldconv', 'Packing list', 'echo')")
    conn.execute("INSERT INTO responses (id, model, prompt, system, prompt_json, options_json, response, "
                 "conversation_id, datetime_utc) VALUES ('01oldr1', 'echo', 'Old question', 'Old system', '{}', "
                 "'{}', 'Old answer', '01oldconv', '2024-05-01T10:00:00.000000+00:00')")
    conn.commit()
    conn.close()
    before = load(llm_cli.db)
    assert [m.text for m in before.records] == ["User: Old question", "echo: Old answer"]

    answer = llm_cli("-c", "--cid", "01oldconv", "New question").strip()
    conn = sqlite3.connect(llm_cli.db)
    copied = {r[0] for r in conn.execute("SELECT text FROM parts")}
    conn.close()
    assert {"Old question", "Old answer"} <= copied  # the same messages, now in both tables

    after = load(llm_cli.db)
    (turn,) = _turns(llm_cli.db)
    assert [(m.thread, m.thread_pos, m.text, m.created_at) for m in after.records] == [
        ("llm:01oldconv", 0, "User: Old question", "2024-05-01T10:00:00Z"),
        ("llm:01oldconv", 1, "echo: Old answer", "2024-05-01T10:00:00Z"),
        ("llm:01oldconv", 2, "User: New question", _utc(turn["datetime_utc"])),
        ("llm:01oldconv", 3, f"echo: {answer}", _utc(turn["datetime_utc"])),
    ]
    assert [m.id for m in after.records[:2]] == [m.id for m in before.records]
    assert {m.meta["title"] for m in after.records} == {"Packing list"}


def test_a_call_written_to_both_tables_is_read_once(llm_cli):
    """A row of responses whose id is a turn's (as llm wrote while it wrote both) is that turn."""
    answer = llm_cli("-m", "echo", "Only once").strip()
    (turn,) = _turns(llm_cli.db)
    conn = sqlite3.connect(llm_cli.db)
    conn.execute("INSERT INTO conversations (id, name, model) VALUES (?, 'Only once', 'echo')", (turn["thread_id"],))
    conn.execute("INSERT INTO responses (id, model, prompt, response, conversation_id, datetime_utc) "
                 "VALUES (?, 'echo', 'Only once', ?, ?, ?)",
                 (turn["id"], answer, turn["thread_id"], turn["datetime_utc"]))
    conn.commit()
    conn.close()
    plan = load(llm_cli.db)
    assert [m.text for m in plan.records] == ["User: Only once", f"echo: {answer}"]
    assert plan.duplicates == 0


def test_a_fork_keeps_the_shared_history_in_the_thread_that_wrote_it(tmp_path):
    """A fork (llm's LogStore.fork: a second thread pointing at a stored message) shares its
    history until it diverges; each message is read once, by the turn that sent it."""
    import llm
    import sqlite_utils
    from llm.logs import LogStore

    db = sqlite_utils.Database(tmp_path / "logs.db")
    store = LogStore(db)
    model = llm.get_model("echo")
    conversation = model.conversation()
    conversation.prompt("Plan a trip to Oslo").text()
    conversation.responses[-1].log_to_db(db)
    thread = conversation.id
    tip = store.thread_tip(thread)
    fork = store.fork(tip, name="Bergen instead", forked_from=thread)
    follow = model.prompt("What about Bergen?", messages=store.thread_messages(fork))
    follow.text()
    store.log(follow, thread_id=fork)
    db.conn.close()

    plan = load(tmp_path / "logs.db")
    users = [(m.thread, m.text) for m in plan.records if m.meta["role"] == "user"]
    assert users == [(f"llm:{thread}", "User: Plan a trip to Oslo"), (f"llm:{fork}", "User: What about Bergen?")]
    assert len(plan.records) == 4 and plan.duplicates == 0


def test_a_database_llm_made_and_never_logged_to_is_read_and_holds_nothing(llm_cli, tmp_path):
    _migrated(llm_cli.db)
    plan = load(llm_cli.db)
    assert plan.formats == {"llm": 1} and plan.records == []
    assert plan.empty == [f"{llm_cli.db.name}: 0 turns in threads and 0 rows in responses: llm logged nothing "
                          "here (`llm logs status` says whether logging is on)"]


def test_a_sqlite_file_of_another_program_in_a_folder_is_not_taken_for_llm(llm_cli, tmp_path):
    llm_cli("-m", "echo", "Hello")
    folder = tmp_path / "mixed"
    folder.mkdir()
    shutil.copy(llm_cli.db, folder / "logs.db")
    other = sqlite3.connect(folder / "places.sqlite")
    other.execute("CREATE TABLE moz_places (id INTEGER PRIMARY KEY, url TEXT)")
    other.commit()
    other.close()
    plan = load(folder)
    assert plan.formats == {"llm": 1} and plan.skipped_files == ["places.sqlite"]
    assert [m.text for m in plan.records][0] == "User: Hello"


def test_cli_import_of_llm_logs_stores_once(llm_cli, monkeypatch):
    from typer.testing import CliRunner

    from pmem.cli.app import app

    monkeypatch.setenv("PMEM_EMBED_MODEL", "fake-64")
    llm_cli("-m", "echo", "Remember the blue door")
    llm_cli("-c", "And the red one")
    first = CliRunner().invoke(app, ["import", str(llm_cli.db), "--json"])
    assert first.exit_code == 0, first.output
    assert json.loads(first.stdout)["imported"] == 4
    again = CliRunner().invoke(app, ["import", str(llm_cli.db), "--json"])
    assert json.loads(again.stdout)["imported"] == 0 and json.loads(again.stdout)["skipped_existing"] == 4


def test_the_cli_says_why_an_llm_database_gave_nothing(llm_cli, monkeypatch):
    from typer.testing import CliRunner

    from pmem.cli.app import app

    monkeypatch.setenv("PMEM_EMBED_MODEL", "fake-64")
    _migrated(llm_cli.db)
    r = CliRunner().invoke(app, ["import", str(llm_cli.db)])
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines() == [
        "imported 0 memories from llm",
        "  logs.db: 0 turns in threads and 0 rows in responses: llm logged nothing here "
        "(`llm logs status` says whether logging is on)"]
    as_json = json.loads(CliRunner().invoke(app, ["import", str(llm_cli.db), "--json"]).stdout)
    assert as_json["read"] == 0 and as_json["empty_files"] == [
        "logs.db: 0 turns in threads and 0 rows in responses: llm logged nothing here "
        "(`llm logs status` says whether logging is on)"]

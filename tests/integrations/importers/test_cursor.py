"""Cursor's state.vscdb and CLI transcripts, built in the shapes tests/data/cursor/README.md
traces to the open-source readers that document them."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from pmem.errors import UsageError
from pmem.integrations.importers import cursor as cursor_reader
from pmem.integrations.importers import load
from pmem.integrations.importers.registry import IMPORTERS

SCHEMA = ("CREATE TABLE ItemTable (key TEXT UNIQUE ON CONFLICT REPLACE, value BLOB);"
          "CREATE TABLE cursorDiskKV (key TEXT UNIQUE ON CONFLICT REPLACE, value BLOB);")
CID = "5f0c2a9e-3b1d-4c8e-9a7f-1e2d3c4b5a69"
OLD = "7a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"


def bubble(bid: str, kind: int, text: str, **extra) -> dict:
    return {"_v": 3, "type": kind, "bubbleId": bid, "text": text, "richText": json.dumps({"root": {}}),
            "createdAt": extra.pop("createdAt", "2025-11-20T14:02:11.512Z"), "codeBlocks": [], "toolResults": [],
            **extra}


def global_db(path: Path, *, extra_rows: list[tuple[str, object]] = ()) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    db.executescript(SCHEMA)
    rows: list[tuple[str, object]] = []
    bubbles = [
        bubble("b1", 1, "Why does the parser drop the last line?", workspaceUris=["file:///home/sam/parser"],
               createdAt="2025-11-20T14:02:11.512Z"),
        bubble("b2", 2, "", toolResults=[{"name": "read_file"}], createdAt="2025-11-20T14:02:15.000Z"),  # a tool call
        bubble("b3", 2, "It slices off the final element of split('\\n').", thinking={"text": "HIDDEN THOUGHT"},
               createdAt="2025-11-20T14:02:20.000Z"),
        bubble("b4", 1, "Fix it with splitlines.", createdAt="2025-11-20T14:03:00.000Z"),
    ]
    composer = {"_v": 10, "composerId": CID, "name": "Parser last line", "text": "DRAFT IN THE INPUT BOX",
                "createdAt": 1763647331000, "lastUpdatedAt": 1763647380000, "status": "completed",
                "fullConversationHeadersOnly": [{"bubbleId": b["bubbleId"], "type": b["type"]} for b in bubbles]
                + [{"bubbleId": "never-written", "type": 2}],
                "context": {"fileSelections": [{"uri": {"fsPath": "/home/sam/parser/SECRET_CONTEXT.py"}}]}}
    rows.append((f"composerData:{CID}", json.dumps(composer)))
    rows += [(f"bubbleId:{CID}:{b['bubbleId']}", json.dumps(b).encode()) for b in bubbles]  # BLOB values too
    legacy = {"composerId": OLD, "name": "Old chat", "createdAt": 1735725600000,
              "conversation": [{"type": 1, "bubbleId": "o1", "text": "What is a monad?"},
                               {"type": 2, "bubbleId": "o2", "text": "A way to chain computations."}]}
    rows.append((f"composerData:{OLD}", json.dumps(legacy)))
    rows.append(("messageRequestContext:x:y", json.dumps({"gitStatusRaw": "NOT A MESSAGE"})))
    rows += list(extra_rows)
    db.executemany("INSERT INTO cursorDiskKV VALUES (?, ?)", rows)
    db.execute("INSERT INTO ItemTable VALUES ('workbench.activityBar.hidden', 'false')")
    db.commit()
    db.close()
    return path


def workspace_db(folder: Path, chatdata: dict | None, workspace: str = "file:///home/sam/site") -> Path:
    folder.mkdir(parents=True)
    (folder / "workspace.json").write_text(json.dumps({"folder": workspace}))
    db = sqlite3.connect(folder / "state.vscdb")
    db.executescript(SCHEMA)
    db.execute("INSERT INTO ItemTable VALUES ('composer.composerData', ?)",
               (json.dumps({"allComposers": [{"composerId": CID}]}),))
    if chatdata is not None:
        db.execute("INSERT INTO ItemTable VALUES (?, ?)", (cursor_reader.CHATDATA, json.dumps(chatdata)))
    db.commit()
    db.close()
    return folder / "state.vscdb"


def test_the_editors_chats_with_their_folder_and_nothing_but_the_words(tmp_path):
    path = global_db(tmp_path / "User" / "globalStorage" / "state.vscdb")
    plan = load(path)
    assert plan.formats == {"cursor": 1}
    chat = [m for m in plan.records if m.thread == f"cursor:{CID}"]
    assert [m.text for m in chat] == ["User: Why does the parser drop the last line?",
                                      "Cursor: It slices off the final element of split('\\n').",
                                      "User: Fix it with splitlines."]
    assert {m.scope for m in chat} == {"/home/sam/parser"}
    assert chat[0].meta["title"] == "Parser last line" and chat[0].created_at == "2025-11-20T14:02:11Z"
    old = [m for m in plan.records if m.thread == f"cursor:{OLD}"]
    assert [m.text for m in old] == ["User: What is a monad?", "Cursor: A way to chain computations."]
    assert old[0].created_at == "2025-01-01T10:00:00Z" and old[0].scope is None
    joined = "\n".join(m.text for m in plan.records)
    assert not any(x in joined for x in ("HIDDEN THOUGHT", "DRAFT", "SECRET_CONTEXT", "NOT A MESSAGE"))
    assert [m.id for m in load(path).records] == [m.id for m in plan.records]


def test_the_older_workspace_chats_take_the_workspaces_folder(tmp_path):
    chatdata = {"tabs": [{"tabId": "t1", "chatTitle": "Site", "lastSendTime": 1700000000000, "bubbles": [
        {"type": "user", "id": "u1", "text": "Make the header sticky."},
        {"type": "ai", "id": "a1", "rawText": "Add position: sticky to .header."}]}]}
    plan = load(workspace_db(tmp_path / "workspaceStorage" / "abc123", chatdata))
    assert [m.text for m in plan.records] == ["User: Make the header sticky.",
                                              "Cursor: Add position: sticky to .header."]
    assert {m.scope for m in plan.records} == {"/home/sam/site"} and plan.records[0].meta["title"] == "Site"


def test_a_workspace_database_of_only_an_index_says_where_the_chats_are(tmp_path):
    plan = load(workspace_db(tmp_path / "workspaceStorage" / "abc123", None))
    assert plan.records == []
    assert plan.empty == ["state.vscdb (cursor): read 0 records, kept none: it holds no Cursor chat (a "
                          "workspace's database keeps only an index of the chats in "
                          "User/globalStorage/state.vscdb: import that one)"]


def test_a_link_is_not_followed_and_an_oversized_or_broken_value_is_counted(tmp_path, monkeypatch):
    real = global_db(tmp_path / "real" / "state.vscdb",
                     extra_rows=[("composerData:broken", "{not json"),
                                 ("composerData:huge", json.dumps({"conversation": [{"type": 1, "text": "x" * 5000}]})),
                                 ])
    link = tmp_path / "state.vscdb"
    os.symlink(real, link)
    with pytest.raises(UsageError, match="symbolic link"):
        load(link)
    monkeypatch.setattr(cursor_reader, "MAX_VALUE", 4000)
    in_folder = load(tmp_path)  # the link beside the real one, in a folder: passed over, said so
    assert len(in_folder.records) == 5 and any("state.vscdb (cursor): read 0 records, kept none: it is a "
                                               "symbolic link" in x for x in in_folder.empty)
    plan = load(real)
    assert len(plan.records) == 5
    assert plan.skipped_records == 2
    assert any("not valid JSON" in x for x in plan.skipped_named)
    assert any("more than pmem reads of one value" in x for x in plan.skipped_named)


def test_a_database_that_is_not_sqlite_after_its_header_is_a_usage_error(tmp_path):
    path = tmp_path / "state.vscdb"
    path.write_bytes(b"SQLite format 3\x00" + b"cursorDiskKV" + b"\x00" * 200)
    with pytest.raises(UsageError, match="cannot read it as Cursor's state.vscdb"):
        load(path)


def transcript(path: Path) -> Path:
    query = "<user_query>\nAdd a --verbose flag to the CLI.\n</user_query>\n<context>\nopen files: cli.py\n</context>"
    rows = [{"role": "user", "message": {"content": [{"type": "text", "text": query}]}},
            {"role": "assistant", "message": {"content": [
                {"type": "text", "text": "[REDACTED]"},
                {"type": "tool_use", "name": "Grep", "input": {"pattern": "argparse"}},
                {"type": "text", "text": "Added `--verbose`; it sets the log level to DEBUG."}]}},
            {"type": "turn_ended"},
            {"role": "user", "message": {"content": "<user_query>Thanks</user_query>"}}]
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows))
    return path


def test_the_cli_transcripts_words_without_its_context_or_tools(tmp_path):
    sid = "9d8c7b6a-5f4e-4d3c-8b2a-1f0e9d8c7b6a"
    path = transcript(tmp_path / ".cursor" / "projects" / "home-sam-cli" / "agent-transcripts" / sid / f"{sid}.jsonl")
    plan = load(path)
    assert plan.formats == {"cursor": 1}
    assert [m.text for m in plan.records] == ["User: Add a --verbose flag to the CLI.",
                                              "Cursor: Added `--verbose`; it sets the log level to DEBUG.",
                                              "User: Thanks"]
    assert plan.records[0].thread == f"cursor:{sid}" and plan.records[0].meta["project"] == "home-sam-cli"
    assert plan.records[0].created_at  # the file's time: the lines carry none
    folder = load(tmp_path / ".cursor" / "projects")
    assert folder.formats == {"cursor": 1} and folder.records[0].meta["project"] == "home-sam-cli"


def test_no_other_reader_takes_cursors_files_nor_cursor_theirs(tmp_path):
    from export_fixtures import claude_code_session, llm_db_new, write_jsonl

    db = global_db(tmp_path / "g" / "state.vscdb")
    t = transcript(tmp_path / "p" / "agent-transcripts" / "s" / "s.jsonl")
    for path in (db, t):
        head = path.read_bytes()[:65536]
        name = path.relative_to(tmp_path).as_posix()
        taken = [i.NAME for i in IMPORTERS if i.accepts(name) and i.sniff(name, head)]
        assert taken[0] == "cursor" and set(taken) - {"jsonl"} == {"cursor"}  # pmem's JSONL is the fallback
    logs = llm_db_new(tmp_path / "logs.db")
    claude = write_jsonl(tmp_path / "c" / "s-1.jsonl", claude_code_session("s-1", "/home/sam"))
    for path in (logs, claude):
        name = path.relative_to(tmp_path).as_posix()
        assert not cursor_reader.sniff(name, path.read_bytes()[:65536])
    # a pmem JSONL line shaped like a transcript's, outside agent-transcripts/, stays pmem's
    notes = tmp_path / "notes.jsonl"
    notes.write_text('{"role":"user","message":{"content":"x"},"text":"a memory"}\n')
    assert load(notes).formats == {"jsonl": 1}

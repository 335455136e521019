"""Importers of other tools' formats, against synthetic exports that follow the published structures."""

from __future__ import annotations

import json
import zipfile

import pytest
from export_fixtures import (
    BASIC_MEMORY_NOTE,
    MCP_MEMORY,
    MEM0_GET_ALL,
    OBSIDIAN_NOTE,
    chatgpt_conversation,
    chatgpt_zip,
    claude_ai_conversation,
    claude_code_session,
    llm_db_new,
    llm_db_old,
    openmemory_zip,
    write_jsonl,
)

from pmem.errors import UsageError
from pmem.integrations.importers import load, load_bytes, run_import
from pmem.integrations.importers.base import split_text, when
from pmem.integrations.importers.markdown import front_matter
from pmem.store import Filter

TURNS = [("user", "I moved to Lisbon in May."), ("assistant", "How are you finding it?"),
         ("user", "I love the trams."), ("assistant", "Tram 28 is a classic.")]


def texts(plan):
    return [m.text for m in plan.records]


def all_memories(store):
    return store.list_memories(Filter.everything(), limit=None, sort="id")


# -- ChatGPT ----------------------------------------------------------------------------------

def test_chatgpt_kept_branch_only_without_system_tool_or_hidden(tmp_path):
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([chatgpt_conversation("c1", TURNS, title="Moving")]))
    plan = load(path)
    assert plan.formats == {"chatgpt": 1}
    assert texts(plan) == ["User: I moved to Lisbon in May.", "ChatGPT: How are you finding it?",
                           "User: I love the trams.", "ChatGPT: Tram 28 is a classic."]
    joined = " ".join(texts(plan))
    assert "ABANDONED" not in joined and "TOOL OUTPUT" not in joined and "print(1)" not in joined
    first, second = plan.records[:2]
    assert first.tier == "episodic" and first.source == "chatgpt:c1"
    assert first.created_at == "2026-01-01T00:00:30Z" and second.created_at == "2026-01-01T00:01:00Z"
    assert first.meta["speaker"] == "User" and first.meta["title"] == "Moving"
    assert second.meta["model"] == "gpt-4o" and second.meta["role"] == "assistant"
    assert [m.thread_pos for m in plan.records] == [0, 1, 2, 3]
    assert {m.thread for m in plan.records} == {"chatgpt:c1"}
    assert "chatgpt" in first.tags
    # ids come from the export's ids: the same file gives the same ids
    assert [m.id for m in load(path).records] == [m.id for m in plan.records]


def test_chatgpt_without_current_node_takes_newest_leaf():
    from pmem.integrations.importers.chatgpt import turns

    conv = chatgpt_conversation("c2", TURNS)
    conv["current_node"] = None
    assert [t.text for t in turns(conv)][-1] == "Tram 28 is a classic."


def test_chatgpt_zip_with_split_files_skips_the_other_files(tmp_path):
    convs = [chatgpt_conversation(f"c{i}", TURNS, start=1_767_225_600 + i * 86400) for i in range(5)]
    path = chatgpt_zip(tmp_path / "export.zip", convs, split=2)
    plan = load(path)
    assert plan.formats == {"chatgpt": 3}
    assert len(plan.records) == 20 and plan.kinds == {"turn": 20}
    assert {"user.json", "message_feedback.json", "chat.html", "file-abc.png"} <= set(plan.skipped_files)


def test_since_and_until_select_by_the_source_dates(tmp_path):
    convs = [chatgpt_conversation(f"c{i}", TURNS, start=1_767_225_600 + i * 86400) for i in range(5)]
    path = chatgpt_zip(tmp_path / "export.zip", convs)
    plan = load(path, since="2026-01-03", until="2026-01-04T23:59:59Z")
    assert {m.source for m in plan.records} == {"chatgpt:c2", "chatgpt:c3"}
    assert plan.filtered == 12


def test_import_reimport_newer_export_undo(store, tmp_path):
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([chatgpt_conversation("c1", TURNS), chatgpt_conversation("c2", TURNS)]))
    result = run_import(store, load(path).records, summary="import test", batch=3)
    assert result.imported == 8 and store.count(Filter.everything()) == 8
    again = run_import(store, load(path).records, batch=3)
    assert again.imported == 0 and again.skipped_existing == 8 and again.operation is None
    # a newer export of the same account: one more exchange in c1
    newer = TURNS + [("user", "Next month I start Portuguese lessons."), ("assistant", "Boa sorte!")]
    path.write_text(json.dumps([chatgpt_conversation("c1", newer), chatgpt_conversation("c2", TURNS)]))
    third = run_import(store, load(path).records, batch=3)
    assert third.imported == 2 and store.count(Filter.everything()) == 10
    added = store.get_many(m.id for m in load(path).records if m.thread_pos >= 4)
    assert [(m.thread, m.thread_pos) for m in added] == [("chatgpt:c1", 4), ("chatgpt:c1", 5)]
    # one undo takes back one import, though it was stored in several batches
    op = store.undo()
    assert op.id == third.operation and store.count(Filter.everything()) == 8
    op = store.undo()
    assert op.id == result.operation and op.events == 8 and store.count(Filter.everything()) == 0


def test_interrupted_import_keeps_committed_batches_and_resumes(store, tmp_path):
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([chatgpt_conversation(f"c{i}", TURNS) for i in range(3)]))
    records = load(path).records

    def stop_after_first_batch(done, total):
        if done >= 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_import(store, records, batch=5, progress=stop_after_first_batch)
    assert store.count(Filter.everything()) == 5
    result = run_import(store, records, batch=5)
    assert result.imported == 7 and result.skipped_existing == 5
    assert store.count(Filter.everything()) == 12
    assert len({m.id for m in all_memories(store)}) == 12


def test_long_message_is_split_not_cut(tmp_path):
    long_text = ("word " * 50_000).strip()  # 250,000 characters
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([chatgpt_conversation("c1", [("user", long_text)], extras=False, branch=False)]))
    plan = load(path)
    assert len(plan.records) == 3
    assert sum(len(m.text) - len("User: ") for m in plan.records) + 2 == len(long_text)
    assert [m.meta["part"] for m in plan.records] == [0, 1, 2]
    assert len({m.id for m in plan.records}) == 3
    assert split_text("a b", limit=100) == ["a b"]


# -- Claude.ai --------------------------------------------------------------------------------

def test_claude_ai_text_blocks_only(tmp_path):
    path = tmp_path / "conversations.json"
    turns = [("human", "Plan a week in Kyoto"), ("assistant", "Day one: Fushimi Inari."), ("human", "Thanks")]
    path.write_text(json.dumps([claude_ai_conversation("k1", turns, name="Kyoto")]))
    plan = load(path)
    assert plan.formats == {"claude-ai": 1}
    assert texts(plan) == ["User: Plan a week in Kyoto", "Claude: Day one: Fushimi Inari.", "User: Thanks"]
    assert "TOOL" not in " ".join(texts(plan)) and "PRIVATE" not in " ".join(texts(plan))
    assert plan.records[1].created_at == "2026-02-01T09:01:00Z"
    assert plan.records[0].source == "claude-ai:k1" and plan.records[0].meta["title"] == "Kyoto"


def test_claude_ai_follows_the_current_leaf(tmp_path):
    conv = claude_ai_conversation("k2", [("human", "Q"), ("assistant", "first answer"), ("assistant", "kept answer")])
    msgs = conv["chat_messages"]
    msgs[1]["parent_message_uuid"] = msgs[2]["parent_message_uuid"] = msgs[0]["uuid"]
    msgs[0]["parent_message_uuid"] = "00000000-0000-4000-8000-000000000000"
    conv["current_leaf_message_uuid"] = msgs[2]["uuid"]
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([conv]))
    assert texts(load(path)) == ["User: Q", "Claude: kept answer"]


# -- Claude Code ------------------------------------------------------------------------------

def test_claude_code_projects_folder(tmp_path):
    projects = tmp_path / "projects"
    write_jsonl(projects / "-home-sam-parser" / "s-1.jsonl", claude_code_session("s-1", "/home/sam/parser"))
    write_jsonl(projects / "-home-sam-site" / "s-2.jsonl", claude_code_session("s-2", "/home/sam/site"))
    plan = load(projects)
    assert plan.formats == {"claude-code": 2}
    one = [m for m in plan.records if m.source == "claude-code:s-1"]
    assert [m.text for m in one] == ["User: The parser drops the last line",
                                     "Claude: Let me look.\n\nThe loop stops one line early.",
                                     "User: Please fix it and add a test.",
                                     "Claude: Fixed; the test covers the last line."]
    joined = " ".join(m.text for m in plan.records)
    for hidden in ("TOOL", "PRIVATE", "REMINDER", "SIDECHAIN", "Caveat", "command-name"):
        assert hidden not in joined
    assert one[0].scope == "/home/sam/parser" and one[0].meta["project"] == "-home-sam-parser"
    assert [m.thread_pos for m in one] == [0, 1, 2, 3] and one[0].thread == "claude-code:s-1"
    assert one[0].created_at == "2026-03-01T10:00:05Z"


# -- llm --------------------------------------------------------------------------------------

def test_llm_logs_new_schema(tmp_path):
    plan = load(llm_db_new(tmp_path / "logs.db"))
    assert plan.formats == {"llm": 1}
    conv = [m for m in plan.records if m.source == "llm:01conv"]
    assert [m.text for m in conv] == ["User: What should I pack for Oslo in March?",
                                      "gpt-4o-mini: Layers, a warm coat and boots.",
                                      "User: And for a day hike?", "gpt-4o-mini: Add crampons and a thermos."]
    assert conv[0].meta["title"] == "Packing list" and conv[0].created_at == "2026-03-10T08:00:00Z"
    assert "Be brief" not in " ".join(texts(plan))
    assert len(plan.records) == 6


def test_llm_logs_old_schema(tmp_path):
    plan = load(llm_db_old(tmp_path / "old.db"))
    assert texts(plan) == ["User: Name a red fruit", "gpt-3.5-turbo: Cherry.", "User: Another one",
                           "gpt-3.5-turbo: Strawberry."]
    assert {m.source for m in plan.records} == {"llm:logs-1"}
    assert plan.records[0].created_at == "2023-06-01T10:00:00Z"


# -- MCP memory server ------------------------------------------------------------------------

def test_mcp_memory_jsonl(tmp_path):
    path = write_jsonl(tmp_path / "memory.jsonl", MCP_MEMORY)
    plan = load(path)
    assert plan.formats == {"mcp-memory": 1}
    assert texts(plan) == ["Ada_Lovelace: Prefers tea to coffee", "Ada_Lovelace: Lives in Lisbon",
                           "Ada_Lovelace works at Analytical_Engines_Ltd"]
    assert {"ada_lovelace", "person", "mcp-memory"} <= set(plan.records[0].tags)
    assert {"ada_lovelace", "analytical_engines_ltd"} <= set(plan.records[2].tags)
    assert plan.kinds == {"observation": 2, "relation": 1}
    assert plan.records[0].tier == "archival"


# -- mem0 / OpenMemory ------------------------------------------------------------------------

def test_mem0_get_all(tmp_path):
    path = tmp_path / "mem0.json"
    path.write_text(json.dumps(MEM0_GET_ALL))
    plan = load(path)
    assert plan.formats == {"mem0": 1}
    first = plan.records[0]
    assert first.text == "Is allergic to peanuts" and first.meta["user"] == "sam"
    assert {"health", "food", "mem0"} <= set(first.tags)
    assert first.created_at == "2025-07-26T17:29:36Z" and first.updated_at == "2025-08-01T16:00:00Z"
    assert first.source == "mem0:sam"
    # a bare list (mem0's older get_all) reads the same
    path.write_text(json.dumps(MEM0_GET_ALL["results"]))
    assert texts(load(path)) == texts(plan)


def test_openmemory_backup_zip(tmp_path):
    plan = load(openmemory_zip(tmp_path / "memories_export_sam.zip"))
    assert texts(plan) == ["Plays the cello on Sundays"]  # the deleted one is not imported
    m = plan.records[0]
    assert "hobbies" in m.tags and m.meta["user"] == "sam" and m.created_at == "2025-05-01T12:00:00Z"
    assert plan.duplicates == 1  # the .jsonl.gz repeats memories.json, same ids


# -- Markdown ---------------------------------------------------------------------------------

def test_front_matter_reader():
    fm, body = front_matter(OBSIDIAN_NOTE)
    assert fm["tags"] == ["garden", "home"] and fm["aliases"] == ["Allotment"] and fm["created"] == "2026-04-02"
    assert body.startswith("# Garden plans")
    assert front_matter("no front matter") == ({}, "no front matter")


def test_markdown_vault(tmp_path):
    vault = tmp_path / "vault"
    (vault / "home").mkdir(parents=True)
    (vault / ".obsidian").mkdir()
    (vault / ".obsidian" / "workspace.md").write_text("# not a note\n\nhidden")
    (vault / "home" / "garden.md").write_text(OBSIDIAN_NOTE)
    (vault / "coffee.md").write_text(BASIC_MEMORY_NOTE)
    plan = load(vault)
    assert plan.formats == {"markdown": 2}
    garden = [m for m in plan.records if m.meta["path"] == "home/garden.md"]
    assert [m.text for m in garden] == ["Garden plans\n\nThe tomatoes go along the south fence this year.",
                                        ("Watering\n\nWater early in the morning, before eight.\n\n"
                                         "Drip lines on the raised beds need new filters.")]
    assert all("title:" not in m.text for m in plan.records)  # front matter is not a memory
    assert {"garden", "home", "vegetables", "markdown"} <= set(garden[0].tags)
    assert garden[0].created_at == "2026-04-02T00:00:00Z"
    assert garden[0].source == str((vault / "home" / "garden.md").resolve())
    coffee = [m for m in plan.records if m.meta["path"] == "coffee.md"]
    obs = [m for m in coffee if m.meta["kind"] == "observation"]
    assert [m.text for m in obs] == ["Pour over gives more clarity than French press", "Water at 96 C extracts best"]
    assert {"method", "coffee", "brewing"} <= set(obs[0].tags) and obs[1].meta["context"] == "tested at home"
    rel = [m for m in coffee if m.meta["kind"] == "relation"]
    assert [m.text for m in rel] == ["Coffee Brewing Methods relates to Coffee Bean Origins"]
    assert coffee[0].meta["permalink"] == "coffee-brewing-methods"
    assert any("a task, not an observation" in m.text for m in coffee)
    assert not any("hidden" in m.text for m in plan.records)


def test_markdown_long_section_splits_by_paragraph(tmp_path):
    paras = [f"Paragraph {i} " + "text " * 80 for i in range(6)]
    path = tmp_path / "long.md"
    path.write_text("## Notes\n\n" + "\n\n".join(paras))
    plan = load(path, "markdown")
    assert len(plan.records) == 6 and plan.records[0].text.startswith("Paragraph 0")
    assert plan.records[0].meta["heading"] == "Notes"


def test_pmem_markdown_export_still_reads_as_pmem(tmp_path):
    path = tmp_path / "export.md"
    path.write_text('# pmem export\n\n## archival\n\n- Likes rye bread #food <!-- pmem {"id": "ab12cd34"} -->\n')
    plan = load(path)
    assert plan.formats == {"md": 1} and plan.records[0].id == "ab12cd34" and plan.records[0].tags == ["food"]


def test_one_plain_markdown_file_is_read_item_by_item_a_note_by_sections(tmp_path):
    plain = tmp_path / "todo.md"
    plain.write_text("## Travel\n\n- Lisbon trip in May\n- Pack the adapter\n")
    plan = load(plain)
    assert plan.formats == {"md": 1} and texts(plan) == ["Lisbon trip in May", "Pack the adapter"]
    note = tmp_path / "note.md"
    note.write_text("---\ntags: [trip]\n---\n## Travel\n\n- Lisbon trip in May\n- Pack the adapter\n")
    plan = load(note)
    assert plan.formats == {"markdown": 1} and texts(plan) == ["Travel\n\n- Lisbon trip in May\n- Pack the adapter"]
    assert "trip" in plan.records[0].tags


def test_pmem_jsonl_still_reads(tmp_path):
    path = write_jsonl(tmp_path / "x.jsonl", [{"text": "hello", "tags": ["a"]}])
    plan = load(path)
    assert plan.formats == {"jsonl": 1} and texts(plan) == ["hello"]


# -- detection --------------------------------------------------------------------------------

def test_unknown_shape_names_the_known_formats(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(UsageError) as err:
        load(path)
    msg = str(err.value)
    assert "not a format pmem knows" in msg and "chatgpt" in msg and "mcp-memory" in msg and "\n" not in msg


def test_forced_format_and_unknown_format(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("---\ntags: [x]\n---\nA plain note.\n")
    assert texts(load(path, "markdown")) == ["A plain note."]
    with pytest.raises(UsageError, match="unknown format 'word'"):
        load(path, "word")


def test_stdin_bytes(tmp_path):
    data = json.dumps([chatgpt_conversation("c9", TURNS)]).encode()
    assert load_bytes("", data).formats == {"chatgpt": 1}
    assert texts(load_bytes("", b'{"text": "one"}\n')) == ["one"]
    assert load_bytes("", b"- an item\n").formats == {"md": 1}
    zipped = chatgpt_zip(tmp_path / "x.zip", [chatgpt_conversation("c9", TURNS)]).read_bytes()
    assert load_bytes("", zipped).formats == {"chatgpt": 1}


def test_when_reads_epochs_and_iso():
    assert when(1_767_225_600) == "2026-01-01T00:00:00Z"
    assert when(1_767_225_600_000) == "2026-01-01T00:00:00Z"
    assert when("2025-07-26T10:29:36.630547-07:00") == "2025-07-26T17:29:36Z"
    assert when("garbage") is None and when(None) is None and when(True) is None


def test_broken_json_is_a_usage_error(tmp_path):
    path = tmp_path / "conversations.json"
    path.write_text('[{"title": "t", "mapping": {"n1": {"message": {"author": {"role": "user"')
    with pytest.raises(UsageError, match="not valid JSON"):
        load(path)


def test_zip_member_of_a_folder(tmp_path):
    folder = tmp_path / "exports"
    folder.mkdir()
    chatgpt_zip(folder / "chatgpt.zip", [chatgpt_conversation("z1", TURNS)])
    (folder / "memory.jsonl").write_text("".join(json.dumps(r) + "\n" for r in MCP_MEMORY))
    plan = load(folder)
    assert plan.formats == {"chatgpt": 1, "mcp-memory": 1}
    assert zipfile.is_zipfile(folder / "chatgpt.zip")


# -- --extract --------------------------------------------------------------------------------

def test_extract_from_imported_conversations_resolves_relative_dates(store, tmp_path):
    from test_extract import FakeGenerator

    from pmem.integrations.importers.facts import extract_conversations

    said = 1_794_499_200  # 2026-11-12T16:00:00Z
    turns = [("user", "I started a new job at the bakery last month."), ("assistant", "Congratulations on the job!"),
             ("user", "My sister visits us next year.")]
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([chatgpt_conversation("x1", turns, start=said, extras=False, branch=False)]))
    records = load(path).records
    run_import(store, records)
    summary = extract_conversations(store, records, generator=FakeGenerator())
    facts = [m for m in store.list_memories(Filter(), limit=None)
             if (m.meta.get("extract") or {}).get("role") != "source"]
    texts_ = sorted(m.text for m in facts)
    assert "I started a new job at the bakery in October 2026." in texts_
    assert any("in 2027" in t for t in texts_)
    assert not any("Congratulations" in t for t in texts_)  # the assistant's words are not the person's facts
    assert summary["dates_resolved"] == 2 and summary["counts"]["conversations"] == 1
    assert {r["resolved"] for r in summary["resolved"]} == {"in October 2026", "in 2027"}
    job = next(m for m in facts if "bakery" in m.text)
    assert job.source == "chatgpt:x1" and job.created_at.startswith("2026-11-12")
    assert job.derived_from  # linked to its source, so `pmem why` can walk back
    # a second run finds the conversation extracted and does nothing
    again = extract_conversations(store, records, generator=FakeGenerator())
    assert again["counts"] == {"conversations_skipped": 1} and again["dates_resolved"] == 0


# -- the command ------------------------------------------------------------------------------

def _cli(*args, input=None):
    from typer.testing import CliRunner

    from pmem.cli.app import app

    return CliRunner().invoke(app, list(args), input=input)


@pytest.fixture
def fake_embedder(monkeypatch, pmem_home):
    monkeypatch.setenv("PMEM_EMBED_MODEL", "fake-64")


def test_cli_import_reimport_undo(fake_embedder, tmp_path):
    path = chatgpt_zip(tmp_path / "export.zip", [chatgpt_conversation(f"c{i}", TURNS) for i in range(3)])
    r = _cli("import", str(path), "--json")
    assert r.exit_code == 0, r.output
    first = json.loads(r.stdout)
    assert first["imported"] == 12 and first["formats"] == {"chatgpt": 1} and first["kinds"] == {"turn": 12}
    again = json.loads(_cli("import", str(path), "--json").stdout)
    assert again["imported"] == 0 and again["skipped_existing"] == 12
    listed = json.loads(_cli("list", "--tier", "episodic", "--json", "--limit", "100").stdout)
    assert len(listed) == 12 and {m["source"] for m in listed} == {"chatgpt:c0", "chatgpt:c1", "chatgpt:c2"}
    assert _cli("undo").exit_code == 0
    assert json.loads(_cli("list", "--tier", "episodic", "--json").stdout) == []


def test_ctrl_c_in_the_closing_merge_keeps_the_import_and_its_summary(fake_embedder, tmp_path, monkeypatch):
    from pmem.integrations.importers import registry
    from pmem.service import MemoryStore

    monkeypatch.setattr(registry, "MERGE_AFTER", 5)
    merges: list[int] = []

    def interrupted(self, *a, progress=None, **k):
        merges.append(1)
        assert progress is not None  # the CLI shows the merge as its own step
        raise KeyboardInterrupt

    monkeypatch.setattr(MemoryStore, "merge_keyword_index", interrupted)
    path = chatgpt_zip(tmp_path / "export.zip", [chatgpt_conversation(f"c{i}", TURNS) for i in range(3)])
    r = _cli("import", str(path))
    assert r.exit_code == 130 and merges == [1]
    assert "imported 12 memories" in r.stderr and "interrupted while merging the keyword index" in r.stderr
    assert len(json.loads(_cli("list", "--tier", "episodic", "--json", "--limit", "100").stdout)) == 12
    assert _cli("undo").exit_code == 0  # one operation, committed whole
    r = _cli("import", str(path), "--json")
    assert r.exit_code == 130 and json.loads(r.stdout)["imported"] == 12
    assert _cli("import", str(path), "--json").exit_code == 0  # nothing new: no merge due
    assert merges == [1, 1]


def test_cli_dry_run_counts_and_samples_without_storing(fake_embedder, tmp_path):
    path = write_jsonl(tmp_path / "memory.jsonl", MCP_MEMORY)
    r = _cli("import", str(path), "--dry-run", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["would_import"] == 3 and data["kinds"] == {"observation": 2, "relation": 1}
    assert data["sample"][0]["text"] == "Ada_Lovelace: Prefers tea to coffee"
    human = _cli("import", str(path), "--dry-run")
    assert human.exit_code == 0 and "would import 3 memories from mcp-memory" in human.stderr
    assert "Ada_Lovelace works at Analytical_Engines_Ltd" in human.stdout
    assert json.loads(_cli("list", "--json").stdout) == []


def test_cli_unknown_shape_is_a_usage_error(fake_embedder, tmp_path):
    path = tmp_path / "table.csv"
    path.write_text("a,b\n1,2\n")
    r = _cli("import", str(path))
    assert r.exit_code == 2
    assert r.stderr.startswith("pmem: error:") and "chatgpt" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = _cli("import", str(tmp_path / "missing.json"))
    assert r.exit_code == 2 and "no such file or folder" in r.stderr


def test_cli_folder_with_format_and_dates(fake_embedder, tmp_path):
    projects = tmp_path / "projects"
    write_jsonl(projects / "-home-sam-parser" / "s-1.jsonl", claude_code_session("s-1", "/home/sam/parser"))
    r = _cli("import", str(projects), "--format", "claude-code", "--since", "2026-03-01", "--until", "2026-03-01",
             "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["imported"] == 4
    r = _cli("import", str(projects), "--until", "2026-02-28", "--json")
    assert json.loads(r.stdout)["imported"] == 0 and json.loads(r.stdout)["outside_dates"] == 4


def test_cli_import_extract(fake_embedder, tmp_path, monkeypatch):
    from test_extract import FakeGenerator

    import pmem.models.generate

    monkeypatch.setattr(pmem.models.generate, "load_generator", lambda *a, **kw: FakeGenerator())
    turns = [("user", "I started a new job at the bakery last month."), ("assistant", "Congratulations!")]
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([chatgpt_conversation("x1", turns, start=1_794_499_200, extras=False, branch=False)]))
    r = _cli("import", str(path), "--extract", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["imported"] == 2 and data["extract"]["add"] == 1 and data["extract"]["dates_resolved"] == 1
    facts = json.loads(_cli("list", "--json").stdout)
    assert [m["text"] for m in facts] == ["I started a new job at the bakery in October 2026."]
    human = _cli("import", str(path), "--extract")
    assert human.exit_code == 0 and "already present" in human.stderr


def test_claude_ai_zip_skips_users_and_reads_projects(tmp_path):
    path = tmp_path / "data-2026-01-01.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("conversations.json", json.dumps([claude_ai_conversation("k1", [("human", "Hello there")])]))
        zf.writestr("users.json", json.dumps([{"uuid": "u1", "full_name": "Sam",
                                               "email_address": "s@example.invalid"}]))
        zf.writestr("projects.json", json.dumps([{"uuid": "p1", "name": "Notes", "created_at": "2026-01-01T00:00:00Z",
                                                  "docs": [{"uuid": "d1", "filename": "a.md", "content": "DOC"}]}]))
    plan = load(path)
    assert plan.formats == {"claude-ai": 2} and texts(plan) == ["User: Hello there", "Project Notes, a.md: DOC"]
    assert plan.skipped_files == ["users.json"]


def test_a_folder_of_one_note_is_a_folder_and_an_empty_one_is_an_error(tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    with pytest.raises(UsageError, match="no files to import"):
        load(notes)
    (notes / "plain.md").write_text("## Travel\n\n- Lisbon trip in May\n")
    assert load(notes).formats == {"markdown": 1}  # a folder's notes, even without front matter
    assert load(notes / "plain.md").formats == {"md": 1}


def test_claude_code_single_transcript_names_its_project(tmp_path):
    path = write_jsonl(tmp_path / "-home-sam-parser" / "s-1.jsonl", claude_code_session("s-1", "/home/sam/parser"))
    plan = load(path)
    assert plan.formats == {"claude-code": 1} and plan.records[0].meta["project"] == "-home-sam-parser"


# -- secrets ----------------------------------------------------------------------------------

SECRET = "deploy with ghp_1234567890abcdefghijklmnopqrstuvwxyzAB"


def test_a_pasted_secret_leaves_only_its_message_out_of_a_chat_import(fake_embedder, tmp_path):
    turns = [("user", "My token is here: " + SECRET), ("assistant", "Please revoke it."), ("user", "Done, thanks.")]
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([chatgpt_conversation("s1", turns, extras=False, branch=False)]))
    dry = json.loads(_cli("import", str(path), "--dry-run", "--json").stdout)
    assert dry["secrets"] == 1 and all("ghp_" not in m["text"] for m in dry["sample"])
    r = _cli("import", str(path), "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["imported"] == 2 and data["skipped_secrets"] == 1
    stored = json.loads(_cli("list", "--tier", "episodic", "--json").stdout)
    assert not any("ghp_" in m["text"] for m in stored)
    human = _cli("import", str(path))
    assert "left out 1 messages" in human.stderr and SECRET.split()[-1] not in human.stderr
    kept = json.loads(_cli("import", str(path), "--allow-secret", "--json").stdout)
    assert kept["imported"] == 1


def test_a_secret_in_pmem_jsonl_refuses_the_whole_file(fake_embedder, tmp_path):
    path = write_jsonl(tmp_path / "x.jsonl", [{"text": "fine"}, {"text": SECRET}])
    r = _cli("import", str(path))
    assert r.exit_code == 2 and "--allow-secret" in r.stderr and "record 2 of 2" in r.stderr
    assert SECRET.split()[-1] not in r.stderr
    assert json.loads(_cli("list", "--json").stdout) == []


def test_run_import_secret_policies(store, tmp_path):
    path = write_jsonl(tmp_path / "x.jsonl", [{"text": "fine", "id": "aa01"}, {"text": SECRET, "id": "aa02"}])
    records = load(path).records
    with pytest.raises(UsageError):
        run_import(store, records, secrets="refuse")
    assert store.count(Filter.everything()) == 0
    assert run_import(store, records, secrets="skip").skipped_secrets == 1
    assert run_import(store, records, secrets="allow").imported == 1
    with pytest.raises(ValueError):
        run_import(store, records, secrets="maybe")


def test_empty_file_imports_nothing_and_a_huge_folder_is_refused(tmp_path, monkeypatch):
    from pmem.integrations.importers import registry

    empty = tmp_path / "in.jsonl"
    empty.write_text("\n")
    plan = load(empty)
    assert plan.records == [] and plan.formats == {"jsonl": 1}
    assert load(empty, "chatgpt").records == []
    big = tmp_path / "big"
    big.mkdir()
    for i in range(4):
        (big / f"{i}.txt").write_text("x")
    monkeypatch.setattr(registry, "MAX_FILES", 3)
    with pytest.raises(UsageError, match="more than 3 files"):
        load(big)


def test_unreadable_and_vanishing_files_in_a_folder_are_skipped(tmp_path, monkeypatch):
    folder = tmp_path / "f"
    folder.mkdir()
    write_jsonl(folder / "memory.jsonl", MCP_MEMORY)
    (folder / "broken.zip").write_bytes(b"PK\x03\x04 not really a zip")
    (folder / "link").symlink_to(folder / "gone")
    plan = load(folder)
    assert plan.formats == {"mcp-memory": 1} and len(plan.records) == 3


# -- pmem extract FILE: a chat export told by its shape -----------------------------------------

def test_chat_export_tells_chat_exports_from_text(tmp_path):
    from pmem.integrations.importers.facts import chat_export

    zipped = chatgpt_zip(tmp_path / "export.zip", [chatgpt_conversation("z1", TURNS)])
    (tmp_path / "claude.json").write_text(json.dumps([claude_ai_conversation("k1", TURNS)]))
    projects = tmp_path / "projects"
    write_jsonl(projects / "-home-sam-parser" / "s-1.jsonl", claude_code_session("s-1", "/home/sam/parser"))
    assert {m.thread for m in chat_export(zipped)} == {"chatgpt:z1"}
    assert {m.thread for m in chat_export(tmp_path / "claude.json")} == {"claude-ai:k1"}
    assert {m.meta["format"] for m in chat_export(projects)} == {"claude-code"}
    # not chat exports: text, JSON messages, pmem JSONL, a memory.jsonl, a missing file
    (tmp_path / "notes.txt").write_text("I moved to Lisbon last month.")
    (tmp_path / "messages.json").write_text(json.dumps([{"role": "user", "content": "I like tea."}]))
    (tmp_path / "mine.jsonl").write_text(json.dumps({"text": "a memory"}) + "\n")
    (tmp_path / "memory.jsonl").write_text("".join(json.dumps(r) + "\n" for r in MCP_MEMORY))
    for name in ("notes.txt", "messages.json", "mine.jsonl", "memory.jsonl", "missing.json"):
        assert chat_export(tmp_path / name) is None, name


# -- bad input: what pmem cannot store, wrong types, archives it cannot open ---------------------

@pytest.mark.parametrize("bad", ["NUL \u0000 in the middle", "a lone surrogate \udc80 escape"])
def test_a_message_pmem_cannot_store_is_left_out_not_fatal_to_the_rest(fake_embedder, tmp_path, bad):
    """A 700-message export whose 600th message holds a NUL or a lone surrogate: every other
    message is stored, that one is counted, and a rerun stores nothing more (it used to stop after
    the first batch of 512, at the same message every time)."""
    turns = [("user" if i % 2 == 0 else "assistant", f"message number {i}") for i in range(700)]
    turns[599] = (turns[599][0], bad)
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([chatgpt_conversation("big", turns, extras=False, branch=False)]))
    r = _cli("import", str(path), "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["imported"] == 699 and data["skipped_unstorable"] == 1
    assert "record 600 of 700" in data["unstorable_named"][0]
    again = json.loads(_cli("import", str(path), "--json").stdout)
    assert again["imported"] == 0 and again["skipped_existing"] == 699 and again["skipped_unstorable"] == 1
    human = _cli("import", str(path))
    assert human.exit_code == 0 and "left out 1 records pmem cannot store" in human.stderr


@pytest.mark.parametrize("cwd", [["/home/sam"], {"path": "/home/sam"}, 7])
def test_a_claude_code_line_whose_cwd_is_no_path_is_left_out(fake_embedder, tmp_path, cwd):
    lines = claude_code_session("s-1", "/home/sam/parser")
    lines[2]["cwd"] = cwd  # the first prompt's line
    path = write_jsonl(tmp_path / "-home-sam-parser" / "s-1.jsonl", lines)
    r = _cli("import", str(path), "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["skipped_records"] == 1 and "line 3: 'cwd' is" in data["skipped_named"][0]
    stored = json.loads(_cli("list", "--tier", "episodic", "--json").stdout)
    assert len(stored) == 3 and {m["scope"] for m in stored} == {"/home/sam/parser"}


def _zip_with_flags(path, members: dict[str, bytes], *, encrypt: str = "", method: dict[str, int] | None = None):
    """A zip whose member `encrypt` is marked encrypted, and whose members in `method` name that
    compression method (9: Deflate64, what Windows Explorer writes for large files), as in both the
    local and the central headers; zipfile can write neither."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
    central = raw.index(b"PK\x01\x02")
    for info in infos:  # the local header: flags at +6, method at +8
        local = info.header_offset
        if info.filename == encrypt:
            raw[local + 6] |= 0x1
        if method and info.filename in method:
            raw[local + 8:local + 10] = method[info.filename].to_bytes(2, "little")
    pos = central
    while raw[pos:pos + 4] == b"PK\x01\x02":
        name_len = int.from_bytes(raw[pos + 28:pos + 30], "little")
        extra_len = int.from_bytes(raw[pos + 30:pos + 32], "little")
        comment_len = int.from_bytes(raw[pos + 32:pos + 34], "little")
        name = raw[pos + 46:pos + 46 + name_len].decode()
        if name == encrypt:
            raw[pos + 8] |= 0x1
        if method and name in method:
            raw[pos + 10:pos + 12] = method[name].to_bytes(2, "little")
        pos += 46 + name_len + extra_len + comment_len
    path.write_bytes(bytes(raw))
    return path


@pytest.mark.parametrize("how", ["encrypted", "deflate64"])
def test_a_zip_member_pmem_cannot_open_is_refused_by_name_or_skipped(fake_embedder, tmp_path, how):
    conversations = json.dumps([chatgpt_conversation("z1", TURNS)]).encode()
    flags = {"encrypt": "conversations.json"} if how == "encrypted" else {"method": {"conversations.json": 9}}
    path = _zip_with_flags(tmp_path / "export.zip", {"conversations.json": conversations, "chat.html": b"<html>"},
                           **flags)
    r = _cli("import", str(path))
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("pmem: error: export.zip: conversations.json is ") and "unzip it" in line
    assert ("encrypted" if how == "encrypted" else "Deflate64") in line
    assert json.loads(_cli("list", "--all", "--json").stdout) == []
    r = _cli("extract", str(path), "--dry-run")  # told by its shape, which cannot be read
    assert r.exit_code == 2 and "unzip it" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.output
    # an image the archive cannot give up is skipped, as files of no known format are
    flags = {"encrypt": "file-1.png"} if how == "encrypted" else {"method": {"file-1.png": 9}}
    path = _zip_with_flags(tmp_path / "export2.zip", {"conversations.json": conversations, "file-1.png": b"\x89PNG"},
                           **flags)
    r = _cli("import", str(path), "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["imported"] == 4 and json.loads(r.stdout)["skipped_files"] == 1


def test_llm_logs_without_an_id_column_and_with_a_blob_model(fake_embedder, tmp_path):
    import sqlite3

    path = llm_db_new(tmp_path / "logs.db")
    db = sqlite3.connect(path)
    db.executescript("CREATE TABLE r2 AS SELECT model, prompt, response, conversation_id, datetime_utc FROM responses;"
                     "DROP TABLE responses; ALTER TABLE r2 RENAME TO responses;")
    db.execute("UPDATE responses SET model = ? WHERE prompt LIKE 'A haiku%'", (b"\xff\x00",))
    db.commit()
    db.close()
    r = _cli("import", str(path), "--format", "llm", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["imported"] == 6
    again = json.loads(_cli("import", str(path), "--format", "llm", "--json").stdout)
    assert again["imported"] == 0  # the row's place stands in for its id, the same each time
    texts = [m["text"] for m in json.loads(_cli("list", "--tier", "episodic", "--json", "-n", "0").stdout)]
    assert "assistant: Steam curls from the cup" in texts


def test_extract_from_a_chat_export_leaves_a_secret_message_out_and_goes_on(fake_embedder, tmp_path, monkeypatch):
    """`pmem extract conversations.json`: the message holding a key is left out and counted, as
    `import --extract` does; the conversations before and after it are extracted (it used to stop
    with exit 2 after storing the facts of the ones before)."""
    import pmem.models.generate

    from fakes import FakeGenerator

    monkeypatch.setattr(pmem.models.generate, "load_generator", lambda *a, **kw: FakeGenerator())
    convs = [chatgpt_conversation("e1", [("user", "I started a new job at the bakery."), ("assistant", "Nice!")],
                                  extras=False, branch=False),
             chatgpt_conversation("e2", [("user", "My deploy token is " + SECRET.split()[-1]),
                                         ("user", "I adopted a cat named Miso.")], extras=False, branch=False),
             chatgpt_conversation("e3", [("user", "I moved to Porto in June."), ("assistant", "Lovely.")],
                                  extras=False, branch=False)]
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(convs))
    r = _cli("extract", str(path), "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["counts"]["conversations"] == 3 and data["counts"]["messages_skipped_secrets"] == 1
    stored = [m["text"] for m in json.loads(_cli("list", "--all", "--json", "-n", "0").stdout)]
    assert not any("ghp_" in t for t in stored)
    assert any("Miso" in t for t in stored) and any("Porto" in t for t in stored)
    human = _cli("extract", str(path))
    assert human.exit_code == 0 and "left out 1 messages holding what looks like a machine secret" in human.stderr


def test_a_gzip_bomb_is_refused_before_it_is_read_whole(tmp_path, monkeypatch):
    import gzip

    from pmem.errors import UsageError

    line = json.dumps({"id": "m-1", "content": "Plays the cello", "state": "active", "app": "cursor"}).encode()
    path = tmp_path / "memories.jsonl.gz"
    path.write_bytes(gzip.compress(line + b"\n" + b" " * (4 * 1024 * 1024), compresslevel=9))
    assert path.stat().st_size < 16 * 1024
    assert texts(load(path)) == ["Plays the cello"]  # within the limit: read
    monkeypatch.setattr("pmem.integrations.importers.base.MAX_UNZSTD", 1024 * 1024)
    with pytest.raises(UsageError, match="decompresses to more than 1,048,576 bytes"):
        load(path)
    path.write_bytes(b"\x1f\x8b\x08\x00" + b"\xff" * 64)
    with pytest.raises(UsageError, match="not a gzip file"):
        load(path)

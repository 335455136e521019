"""The Claude.ai importer on what its export holds today: conversations whose messages form a
tree with no `current_leaf_message_uuid`, memories.json (Claude's memory of the person),
projects (knowledge documents, instructions), and an export split over several zips.

No description of the export by Anthropic was found; the shapes follow what public tools that
read real exports parse (memories.json's `conversations_memory`, `project_memories` and
`account_uuid`; a project's `uuid`, `name`, `description`, `prompt_template`, `docs`)."""

from __future__ import annotations

import json
import zipfile

from export_fixtures import claude_ai_conversation

from pmem.integrations.importers import load

ROOT = "00000000-0000-4000-8000-000000000000"  # the parent of a conversation's first message


def _tree(cid: str) -> dict:
    """Q, a first answer regenerated (the second is later), then a follow-up on the second."""
    conv = claude_ai_conversation(cid, [("human", "Which train to Sintra?"), ("assistant", "ABANDONED: the bus"),
                                        ("assistant", "From Rossio station."), ("human", "How long is it?"),
                                        ("assistant", "About forty minutes.")])
    m = conv["chat_messages"]
    m[0]["parent_message_uuid"] = ROOT
    m[1]["parent_message_uuid"] = m[2]["parent_message_uuid"] = m[0]["uuid"]
    m[3]["parent_message_uuid"], m[4]["parent_message_uuid"] = m[2]["uuid"], m[3]["uuid"]
    return conv


def test_without_a_current_leaf_the_newest_branch_is_kept(tmp_path):
    conv = _tree("t1")
    assert "current_leaf_message_uuid" not in conv
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([conv]))
    assert [m.text for m in load(path).records] == ["User: Which train to Sintra?", "Claude: From Rossio station.",
                                                   "User: How long is it?", "Claude: About forty minutes."]


def test_the_newest_leaf_wins_even_when_it_is_earlier_in_the_list(tmp_path):
    """An edited question: the newer branch is the app's, wherever the export lists it."""
    conv = claude_ai_conversation("t2", [("human", "Edited: a day in Porto?"), ("assistant", "Ribeira, then Foz."),
                                         ("human", "OLD: a day in Braga?"), ("assistant", "OLD ANSWER")])
    m = conv["chat_messages"]
    for msg in m:
        msg["parent_message_uuid"] = ROOT
    m[1]["parent_message_uuid"], m[3]["parent_message_uuid"] = m[0]["uuid"], m[2]["uuid"]
    m[0]["created_at"], m[1]["created_at"] = "2026-02-01T10:00:00Z", "2026-02-01T10:00:05Z"
    m[2]["created_at"], m[3]["created_at"] = "2026-02-01T09:00:00Z", "2026-02-01T09:00:05Z"
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([conv]))
    assert [m.text for m in load(path).records] == ["User: Edited: a day in Porto?", "Claude: Ribeira, then Foz."]


def test_a_tie_in_time_goes_to_the_later_message(tmp_path):
    conv = _tree("t3")
    for msg in conv["chat_messages"]:
        msg["created_at"] = "2026-02-01T09:00:00Z"
    conv["chat_messages"] = conv["chat_messages"][:3]  # the regenerated answer is the last leaf listed
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([conv]))
    assert [m.text for m in load(path).records] == ["User: Which train to Sintra?", "Claude: From Rossio station."]


MEMORY = ("**Work context**\n\nSam is a nurse in Lisbon, on night shifts this winter.\n\n"
          "**Personal context**\n\nSam is learning Portuguese.\n\nSam keeps a sourdough starter called Bruno.")


def test_memories_json_is_claudes_memory_a_paragraph_each(tmp_path):
    path = tmp_path / "memories.json"
    path.write_text(json.dumps([{"conversations_memory": MEMORY, "account_uuid": "acct-1",
                                 "project_memories": {"p-1": "The thesis is on sleep and shift work.", "p-2": ""}}]))
    plan = load(path)
    assert plan.formats == {"claude-ai": 1}
    got = [(m.text, m.tier, sorted(m.tags), m.meta.get("section"), m.meta.get("project_uuid")) for m in plan.records]
    assert got == [
        ("Sam is a nurse in Lisbon, on night shifts this winter.", "archival",
         ["claude-ai", "claude-memory", "work-context"], "Work context", None),
        ("Sam is learning Portuguese.", "archival", ["claude-ai", "claude-memory", "personal-context"],
         "Personal context", None),
        ("Sam keeps a sourdough starter called Bruno.", "archival", ["claude-ai", "claude-memory", "personal-context"],
         "Personal context", None),
        ("The thesis is on sleep and shift work.", "archival", ["claude-ai", "claude-memory", "claude-project-memory"],
         None, "p-1"),
    ]
    assert all(m.created_at for m in plan.records)  # the export's date: the memory carries none
    again = load(path)
    assert [m.id for m in again.records] == [m.id for m in plan.records]


def test_a_project_gives_its_documents_and_instructions_and_the_starter_project_nothing(tmp_path):
    folder = tmp_path / "export" / "projects"
    folder.mkdir(parents=True)
    (folder / "p-1.json").write_text(json.dumps({
        "uuid": "p-1", "name": "Thesis", "description": "My MSc thesis", "is_private": True,
        "is_starter_project": False, "prompt_template": "Answer as a strict supervisor.",
        "created_at": "2026-01-05T10:00:00Z", "updated_at": "2026-01-06T10:00:00Z",
        "docs": [{"uuid": "d-1", "filename": "outline.md", "content": "1. Sleep debt\n2. Shift rotas",
                  "created_at": "2026-01-05T11:00:00Z"}]}))
    (folder / "p-0.json").write_text(json.dumps({
        "uuid": "p-0", "name": "How to use Claude", "description": "An example project", "is_starter_project": True,
        "prompt_template": "", "docs": [{"uuid": "d-0", "filename": "intro.md", "content": "STARTER"}]}))
    plan = load(tmp_path / "export")
    got = [(m.text, m.meta["kind"], m.created_at, sorted(m.tags)) for m in plan.records]
    assert got == [("Project Thesis, instructions: Answer as a strict supervisor.", "project-instructions",
                    "2026-01-05T10:00:00Z", ["claude-ai", "claude-project", "thesis"]),
                   ("Project Thesis, description: My MSc thesis", "project-description", "2026-01-05T10:00:00Z",
                    ["claude-ai", "claude-project", "thesis"]),
                   ("Project Thesis, outline.md: 1. Sleep debt\n2. Shift rotas", "project-document",
                    "2026-01-05T11:00:00Z", ["claude-ai", "claude-project", "project-knowledge", "thesis"])]
    assert plan.records[2].meta["project_uuid"] == "p-1" and plan.records[2].meta["filename"] == "outline.md"
    assert plan.formats == {"claude-ai": 2} and plan.empty == [
        "projects/p-0.json: 1 projects read, 1 of them Anthropic's starter project (left out), the rest with no "
        "documents, instructions or description"]


def test_an_export_split_over_several_zips_in_one_folder_is_read_as_one(tmp_path):
    folder = tmp_path / "claude-export"
    folder.mkdir()
    with zipfile.ZipFile(folder / "data-batch-0000.zip", "w") as zf:
        zf.writestr("conversations.json", json.dumps([_tree("z1")]))
        zf.writestr("users.json", json.dumps([{"uuid": "acct-1", "full_name": "Sam"}]))
    with zipfile.ZipFile(folder / "data-batch-0001.zip", "w") as zf:
        zf.writestr("conversations.json", json.dumps([claude_ai_conversation("z2", [("human", "Second zip")])]))
        zf.writestr("memories.json", json.dumps([{"conversations_memory": "Sam lives in Lisbon.",
                                                  "project_memories": {}, "account_uuid": "acct-1"}]))
        zf.writestr("projects/p-1.json", json.dumps({"uuid": "p-1", "name": "Thesis", "docs": [],
                                                     "prompt_template": "Be strict."}))
    plan = load(folder)
    assert plan.formats == {"claude-ai": 4} and plan.skipped_files == ["users.json"]
    assert {m.thread for m in plan.records if m.thread} == {"claude-ai:z1", "claude-ai:z2"}
    assert [m.text for m in plan.records if not m.thread] == ["Sam lives in Lisbon.",
                                                              "Project Thesis, instructions: Be strict."]


def test_conversations_without_a_word_in_text_say_how_many_were_read(tmp_path):
    conv = claude_ai_conversation("e1", [("human", "x")])
    conv["chat_messages"][0].update(text="", content=[{"type": "image", "file_uuid": "f1"}])
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([conv, claude_ai_conversation("e2", [])]))
    plan = load(path)
    assert plan.records == [] and plan.empty == [
        "conversations.json: 2 conversations read, none with a message in text on its kept branch"]

"""Gemini CLI chats, read from files Gemini CLI itself wrote (tests/data/gemini/README.md)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pmem.errors import UsageError
from pmem.integrations.importers import load, run_import
from pmem.integrations.importers.registry import detect, file_entry

DATA = Path(__file__).resolve().parents[2] / "data" / "gemini"
RESUMED = DATA / "session-0.61.0-resumed.jsonl"
LEGACY = DATA / "session-0.20.2.json"
SESSION = "812fa7f6-57bd-4370-988b-7f0ffc11d793"
TURNS = ["User: What is in this folder?", "Gemini: The folder holds one file, todo.txt.",
         "User: Which milk do I drink?", "Gemini: Oat milk is on your list."]


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _write(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _project(tmp_path: Path, name: str = "notes", root: str = "/home/sam/notes") -> Path:
    """A copy of the real session where Gemini keeps it: ~/.gemini/tmp/<project>/chats/."""
    folder = tmp_path / ".gemini" / "tmp" / name
    (folder / "chats").mkdir(parents=True)
    (folder / ".project_root").write_text(root)
    return Path(shutil.copy(RESUMED, folder / "chats" / RESUMED.name))


def test_a_resumed_session_gives_each_turn_once_and_no_block(tmp_path):
    plan = load(_project(tmp_path))
    assert plan.formats == {"gemini": 1}
    assert [m.text for m in plan.records] == TURNS
    first = plan.records[0]
    assert first.thread == f"gemini:{SESSION}" and [m.thread_pos for m in plan.records] == [0, 1, 2, 3]
    assert first.tier == "episodic" and first.created_at.startswith("2026-12-06T13:28:50")
    assert first.scope == "/home/sam/notes" and first.meta["project"] == "notes"
    assert plan.records[1].meta["model"] == "gemini-2.5-flash" and "model" not in first.meta
    assert not any("pmem" in m.text or "hook_context" in m.text or "session_context" in m.text
                   for m in plan.records)


def test_importing_again_adds_nothing(store, tmp_path):
    path = _project(tmp_path)
    assert run_import(store, load(path).records).imported == 4
    again = run_import(store, load(path).records)
    assert again.imported == 0 and again.skipped_existing == 4


def test_a_rewind_drops_the_turns_it_undid(tmp_path):
    records = _lines(RESUMED)
    second_prompt = next(r for r in records if r.get("id") == "35883476-a87b-45cd-873e-7154b54a78cc")
    again = {**second_prompt, "id": "9f0e1d2c-0000-4000-8000-000000000001", "content": [{"text": "Which tea?"}]}
    path = _write(tmp_path / "session-rewound.jsonl", [*records, {"$rewindTo": second_prompt["id"]}, again])
    assert [m.text for m in load(path).records] == [*TURNS[:2], "User: Which tea?"]
    # An id the session does not hold drops everything before it, as Gemini CLI does.
    path = _write(tmp_path / "session-lost.jsonl", [*records, {"$rewindTo": "no-such-id"}, again])
    assert [m.text for m in load(path).records] == ["User: Which tea?"]


def test_a_message_written_again_counts_once_in_its_place(tmp_path):
    records = _lines(RESUMED)
    answer = next(r for r in records if r.get("id") == "f56847b0-1575-43e4-bd15-304ffe84bc5c")
    path = _write(tmp_path / "session-x.jsonl", [*records, {**answer, "content": "The folder holds todo.txt."}])
    assert [m.text for m in load(path).records] == [TURNS[0], "Gemini: The folder holds todo.txt.", *TURNS[2:]]


def test_a_compression_summary_is_no_turn(tmp_path):
    """Gemini CLI 0.61's compression: the history becomes its summary as a user message and a
    fixed reply, recorded as messages of their own (recordSyntheticMessage)."""
    records = _lines(RESUMED)
    synthetic = [{"id": "c1", "timestamp": "2026-12-06T14:00:00.000Z", "type": "user",
                  "content": [{"text": "<state_snapshot>\n<goal>list files</goal>\n</state_snapshot>"}]},
                 {"id": "c2", "timestamp": "2026-12-06T14:00:00.000Z", "type": "gemini",
                  "content": [{"text": "Got it. Thanks for the additional context!"}]}]
    path = _write(tmp_path / "session-c.jsonl", [*records, *synthetic, {"$set": {"messages": synthetic}}])
    assert [m.text for m in load(path).records] == TURNS


def test_the_older_json_format(tmp_path):
    plan = load(LEGACY)
    assert plan.formats == {"gemini": 1}
    assert [m.text for m in plan.records] == ["User: Which milk do I drink?", "Gemini: Oat milk is on your list."]
    assert plan.records[0].thread == "gemini:1030d13e-1134-4880-bfa4-76587600f6c1"


def test_an_older_pmem_block_gemini_put_in_front_is_left_out(tmp_path):
    """Before pmem marked its blocks: the whole <hook_context> in front of the prompt is Gemini's."""
    records = _lines(RESUMED)
    old = ("<hook_context># From the user's memory (pmem; quote it, do not invent more)\n"
           "- [2026-12-01 · ab] x</hook_context>")
    for r in records:
        if r.get("id") == "35883476-a87b-45cd-873e-7154b54a78cc":
            r["content"] = [{"text": old + "\n\nWhich milk do I drink?"}, {"text": old}]
    assert [m.text for m in load(_write(tmp_path / "session-old.jsonl", records)).records] == TURNS


def test_a_subagents_chat_is_not_the_users(tmp_path):
    records = [{**r, "kind": "subagent"} if "projectHash" in r else r for r in _lines(RESUMED)]
    path = _write(tmp_path / "chats" / SESSION / "other.jsonl", records)
    assert load(path).records == []


def test_neither_gemini_nor_claude_code_is_taken_for_the_other(tmp_path):
    from pmem.integrations.importers import claude_code, gemini

    assert detect(file_entry(RESUMED)) is gemini and detect(file_entry(LEGACY)) is gemini
    transcript = _write(tmp_path / "s-1.jsonl", [
        {"parentUuid": None, "isSidechain": False, "type": "user", "sessionId": "s-1", "cwd": "/home/sam",
         "uuid": "u1", "timestamp": "2026-03-01T10:00:00Z", "message": {"role": "user", "content": "hello"}}])
    assert detect(file_entry(transcript)) is claude_code
    assert not claude_code.sniff(RESUMED.name, RESUMED.read_bytes())


def test_a_file_no_importer_reads_is_refused_naming_the_formats(tmp_path):
    path = _write(tmp_path / "session-1.jsonl", [{"sessionId": "x", "type": "user", "content": "hi"}])
    with pytest.raises(UsageError, match="not a format pmem knows; known formats: .*gemini"):
        load(path)


def test_bad_records_are_counted_not_fatal(tmp_path):
    records = _lines(RESUMED)
    path = tmp_path / "session-bad.jsonl"
    bad = [json.dumps(r) for r in records] + ["[1, 2]", json.dumps({"id": "b1", "type": 5, "content": "x"}),
                                              json.dumps({"id": "b2", "type": "user", "content": 7}), '{"id": "half']
    path.write_text("\n".join(bad))
    plan = load(path)
    assert [m.text for m in plan.records] == TURNS and plan.skipped_records == 4


def test_a_project_root_that_is_a_link_is_not_followed(tmp_path):
    chat = _project(tmp_path)
    root = chat.parent.parent / ".project_root"
    root.unlink()
    (tmp_path / "elsewhere").write_text("/etc")
    root.symlink_to(tmp_path / "elsewhere")
    assert {m.scope for m in load(chat).records} == {None}


@pytest.mark.parametrize("value", [None, 0, 1.5, True, "", "x", [], [1, {"text": 2}], {}, {"text": "t"}])
def test_every_field_of_every_line_may_be_anything(tmp_path, value):
    """Someone else's chat file (a shared one, an attachment): whatever a field holds, the import
    reads the rest, or refuses in one line; never a traceback."""
    records = _lines(RESUMED)
    for n, record in enumerate(records):
        for key in list(record):
            bent = [dict(r) for r in records]
            bent[n][key] = value
            path = _write(tmp_path / f"session-{n}-{key.strip('$')}.jsonl", bent)
            try:
                plan = load(path)
            except UsageError:
                continue
            assert all(isinstance(m.text, str) and m.text for m in plan.records)


@pytest.mark.parametrize("value", [None, 0, "", "x", [], [1, "s", {"text": None}], {}, {"id": 1}])
def test_every_field_of_the_older_format_may_be_anything(tmp_path, value):
    data = json.loads(LEGACY.read_text())
    places = [(data, k) for k in data] + [(m, k) for m in data["messages"] for k in m]
    for n, (obj, key) in enumerate(places):
        old = obj[key]
        obj[key] = value
        path = tmp_path / f"session-{n}.json"
        path.write_text(json.dumps(data, indent=2))
        obj[key] = old
        try:
            plan = load(path)
        except UsageError:
            continue
        assert all(isinstance(m.text, str) and m.text for m in plan.records)

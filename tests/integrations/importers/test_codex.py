"""Codex CLI rollouts, against tests/data/codex (Codex's own serde shapes; see its README)."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
import zstandard

from pmem.errors import UsageError
from pmem.integrations.importers import codex as codex_reader
from pmem.integrations.importers import load, run_import
from pmem.integrations.importers.base import unzstd
from pmem.integrations.importers.registry import IMPORTERS
from pmem.store import Filter

DATA = Path(__file__).resolve().parents[2] / "data" / "codex"
ROLLOUT = next(DATA.glob("rollout-*.jsonl"))
SID = "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
WORDS = ["User: The parser drops the last line when the file has no trailing newline. Fix it?",
         "Codex: The loop drops the final element of `split('\\n')`, which is the last line when there is no "
         "trailing newline. I changed it to `splitlines()`.",
         "User: Good. Now add a test for a file of one line without a newline.",
         "Codex: Added `test_one_line_without_newline`; 13 tests pass."]


def codex_home(tmp_path: Path, *files: tuple[str, bytes]) -> Path:
    home = tmp_path / "codex-home"
    day = home / "sessions" / "2025" / "12" / "02"
    day.mkdir(parents=True)
    for name, data in files:
        (day / name).write_bytes(data)
    return home


def lines(path: Path = ROLLOUT) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(codex_reader.rollout_line(r["timestamp"], r["type"], r["payload"]) + "\n" for r in rows))
    return path


def test_each_message_once_without_codex_context(tmp_path):
    plan = load(ROLLOUT)
    assert plan.formats == {"codex": 1}
    assert [m.text for m in plan.records] == WORDS
    joined = "\n".join(m.text for m in plan.records)
    for context in ("AGENTS.md", "make test", "British English", "environment_context", "Reading the loop",
                    "sed -n", "Summary:", "12 passed"):
        assert context not in joined
    first = plan.records[0]
    assert first.thread == f"codex:{SID}" and [m.thread_pos for m in plan.records] == [0, 1, 2, 3]
    assert {m.scope for m in plan.records} == {"/home/sam/parser"}
    assert first.created_at == "2025-12-02T09:14:20Z" and plan.records[3].created_at == "2025-12-02T09:20:19Z"
    assert first.meta["model"] == "gpt-5-codex" and first.meta["git_branch"] == "fix-last-line"
    assert first.meta["cli_version"] == "0.65.0" and "codex" in first.tags and first.tier == "episodic"


def test_a_rollout_without_events_reads_its_message_items(tmp_path):
    rows = [r for r in lines() if r["type"] != "event_msg"]
    plan = load(write(tmp_path / ROLLOUT.name, rows))
    assert [m.text for m in plan.records] == WORDS


def test_the_first_releases_bare_lines(tmp_path):
    """Codex's first rollouts: a bare SessionMeta, then bare ResponseItems and state records."""
    rows = [{"id": SID, "timestamp": "2025-05-01T10:00:00.000Z", "instructions": "Be terse."},
            {"record_type": "state"},
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "<user_instructions>\nBe terse.\n</user_instructions>"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "List the files."}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a.py, b.py"}]}]
    path = tmp_path / f"rollout-2025-05-01T10-00-00-{SID}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    plan = load(path)
    assert plan.formats == {"codex": 1}
    assert [m.text for m in plan.records] == ["User: List the files.", "Codex: a.py, b.py"]
    assert plan.records[0].thread == f"codex:{SID}"


def test_compressed_rollouts_read_as_the_plain_ones(tmp_path):
    packed = zstandard.ZstdCompressor().compress(ROLLOUT.read_bytes())
    single = tmp_path / (ROLLOUT.name + ".zst")
    single.write_bytes(packed)
    plain, zst = load(ROLLOUT), load(single)
    assert zst.formats == {"codex": 1}
    assert [(m.id, m.text) for m in zst.records] == [(m.id, m.text) for m in plain.records]
    # both forms of one session in a folder (Codex keeps the plain one): each message once
    both = load(codex_home(tmp_path, (ROLLOUT.name, ROLLOUT.read_bytes()), (ROLLOUT.name + ".zst", packed)))
    assert len(both.records) == 4 and both.duplicates == 4


def test_a_zstd_bomb_is_refused_in_one_line(tmp_path, monkeypatch):
    bomb = zstandard.ZstdCompressor(level=19).compress(b" " * (4 * 1024 * 1024))
    assert len(bomb) < 4096
    monkeypatch.setattr("pmem.integrations.importers.base.MAX_UNZSTD", 1024 * 1024)
    path = tmp_path / (ROLLOUT.name + ".zst")
    path.write_bytes(zstandard.ZstdCompressor().compress(ROLLOUT.read_bytes().splitlines(True)[0]) + bomb)
    with pytest.raises(UsageError, match="decompresses to more than 1,048,576 bytes"):
        load(path)
    with pytest.raises(UsageError, match="not a readable zstd file"):
        unzstd(io.BytesIO(b"\x28\xb5\x2f\xfd" + b"\xff" * 64), "broken.zst")


def test_the_cli_refuses_a_bomb_with_exit_2_and_no_traceback(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from pmem.cli.app import app

    monkeypatch.setenv("PMEM_EMBED_MODEL", "fake-64")
    monkeypatch.setattr("pmem.integrations.importers.base.MAX_UNZSTD", 64 * 1024)
    path = tmp_path / (ROLLOUT.name + ".zst")
    path.write_bytes(zstandard.ZstdCompressor().compress(ROLLOUT.read_bytes() + b" " * (1024 * 1024)))
    r = CliRunner().invoke(app, ["import", str(path)])
    assert r.exit_code == 2 and "decompresses to more than" in r.output and "Traceback" not in r.output


def test_a_sub_agents_session_and_the_prompt_history_keep_nothing_and_say_why(tmp_path):
    rows = lines()
    rows[0]["payload"]["source"] = {"subagent": "review"}
    sub = write(tmp_path / f"rollout-2025-12-02T10-00-00-{SID[:-1]}c.jsonl", rows)
    history = json.dumps({"session_id": SID, "ts": 1764666860, "text": "Fix the parser"}, separators=(",", ":"))
    home = codex_home(tmp_path, (sub.name, sub.read_bytes()), (ROLLOUT.name, ROLLOUT.read_bytes()))
    (home / "history.jsonl").write_text(history + "\n")
    (home / "config.toml").write_text('model = "gpt-5-codex"\n')
    plan = load(home)
    assert plan.formats == {"codex": 3}
    assert [m.text for m in plan.records] == WORDS
    assert plan.skipped_files == ["config.toml"]
    notes = "\n".join(plan.empty)
    assert "history.jsonl (codex): read 1 records, kept none: it is Codex's prompt history" in notes
    assert f"read {len(rows)} records, kept none: it is a Codex sub-agent's session (review)" in notes


def test_a_session_of_only_context_says_how_much_it_read(tmp_path):
    rows = lines()[:5]  # the session's start: instructions and environment, no message yet
    plan = load(write(tmp_path / ROLLOUT.name, rows))
    assert plan.records == [] and plan.formats == {"codex": 1}
    assert plan.empty == [f"{ROLLOUT.name} (codex): read 5 records, kept none: no line holds a message you "
                          "wrote or Codex answered (only Codex's context, tool calls or other events)"]


def test_user_words_leave_codex_blocks_out_and_keep_what_was_typed():
    words = codex_reader.user_words
    assert words("<environment_context>\n<cwd>/w</cwd>\n</environment_context>") == ""
    assert words("# AGENTS.md instructions for /w\n\n<INSTRUCTIONS>\nx\n</INSTRUCTIONS>") == ""
    assert words("<environment_context><cwd>/w</cwd></environment_context>\nreal request") == "real request"
    assert words("<SUBAGENT_NOTIFICATION>{}</subagent_notification>") == ""
    assert words("<user_instructions>\nhi\n</user_instructions>\n\n## My request for Codex:\nrename it") == "rename it"
    assert words("<div>keep this markup</div> please") == "<div>keep this markup</div> please"
    assert words("<environment_context> never closed") == ""


def test_lines_of_the_wrong_shape_are_counted_not_fatal(tmp_path):
    rows = lines()
    text = ROLLOUT.read_text().splitlines()
    text[5] = json.dumps({"timestamp": rows[5]["timestamp"], "type": "response_item", "payload": "text"})
    text[6] = json.dumps({"timestamp": rows[6]["timestamp"], "type": "event_msg",
                          "payload": {"type": "user_message", "message": ["not", "text"]}})
    text.insert(7, "[1, 2]")
    text.append('{"timestamp":"2025-12-02T09:40:00.000Z","type":"event_msg","payload":{"type":"agent_mes')
    path = tmp_path / ROLLOUT.name
    path.write_text("\n".join(text) + "\n")
    plan = load(path)
    assert [m.text for m in plan.records] == WORDS[1:]
    assert plan.skipped_records == 4
    assert any("'message' is a list, not a string" in x for x in plan.skipped_named)


def test_no_other_reader_takes_a_rollout_nor_codex_another_tools_file():
    head = ROLLOUT.read_bytes()[:65536]
    assert [i.NAME for i in IMPORTERS if i.accepts(ROLLOUT.name) and i.sniff(ROLLOUT.name, head)] == ["codex"]
    claude = b'{"parentUuid":null,"sessionId":"s","type":"user","message":{"role":"user","content":"hi"}}\n'
    assert not codex_reader.sniff("s.jsonl", claude)
    assert not codex_reader.sniff("notes.jsonl", b'{"text": "a pmem memory", "type": "session_meta"}\n')


def test_import_into_the_store_twice_stores_once(store, tmp_path):
    home = codex_home(tmp_path, (ROLLOUT.name, ROLLOUT.read_bytes()))
    first = run_import(store, load(home).records)
    again = run_import(store, load(home).records)
    assert (first.imported, again.imported, again.skipped_existing) == (4, 0, 4)
    stored = store.list_memories(Filter.everything(), limit=None, sort="id")
    assert sorted(m.text for m in stored) == sorted(WORDS)
    assert {m.scope for m in stored} == {"/home/sam/parser"}


def test_the_cli_names_what_it_read_when_it_kept_nothing(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from pmem.cli.app import app

    monkeypatch.setenv("PMEM_EMBED_MODEL", "fake-64")
    path = write(tmp_path / ROLLOUT.name, lines()[:5])
    r = CliRunner().invoke(app, ["import", str(path)])
    assert r.exit_code == 0, r.output
    assert "imported 0 memories from codex" in r.output and "read 5 records, kept none" in r.output
    shutil.copy(ROLLOUT, path)
    r = CliRunner().invoke(app, ["import", str(path), "--json"])
    assert json.loads(r.stdout)["imported"] == 4


def test_a_file_no_reader_is_sure_of_is_refused_naming_the_formats(tmp_path):
    odd = tmp_path / "odd.jsonl"
    odd.write_text('{"timestamp":"2025-12-02T09:14:03.120Z","type":"session_start","payload":{}}\n')
    with pytest.raises(UsageError, match="not a format pmem knows; known formats: .*codex.*cursor.*aider"):
        load(odd)


def test_events_of_the_2025_releases_that_carried_their_kind(tmp_path):
    """Codex 0.2x-0.3x marked its own user messages by `kind` (`user_instructions`,
    `environment_context`); only `plain` ones are the person's."""
    rows = lines()
    for kind, text in (("environment_context", "<environment_context>x</environment_context>"),
                       ("user_instructions", "Always answer in British English.")):
        rows.insert(4, {"timestamp": "2025-12-02T09:14:03.200Z", "type": "event_msg",
                        "payload": {"type": "user_message", "message": text, "kind": kind}})
    plan = load(write(tmp_path / ROLLOUT.name, rows))
    assert [m.text for m in plan.records] == WORDS


def test_a_zst_that_is_not_zstd_is_no_rollout(tmp_path):
    path = tmp_path / (ROLLOUT.name + ".zst")
    path.write_bytes(b"\x28\xb5\x2f\xfd" + b"\x00" * 100)
    with pytest.raises(UsageError, match="not a format pmem knows"):
        load(path)

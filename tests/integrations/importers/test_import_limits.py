"""Huge input is refused at read time, before any model work, and stdin is read as a stream: a
record past the text limit ends the import where it is met, without reading what follows it. A
long message pasted into a chat export is imported up to MESSAGE_LIMIT, with a note of the rest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from export_fixtures import chatgpt_conversation

from pmem.store import MAX_TEXT

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def cli(monkeypatch, pmem_home):
    from typer.testing import CliRunner

    from pmem.cli.app import app

    monkeypatch.setenv("PMEM_EMBED_MODEL", "fake-64")
    runner = CliRunner()
    return lambda *args, input=None: runner.invoke(app, [str(a) for a in args], input=input)


@pytest.fixture
def embedded(monkeypatch):
    """The texts the store embeds, in order (the model work a refusal must come before)."""
    from pmem.service import MemoryStore

    seen: list[str] = []
    real = MemoryStore.embed

    def spy(self, texts, *a, **k):
        seen.extend(texts)
        return real(self, texts, *a, **k)

    monkeypatch.setattr(MemoryStore, "embed", spy)
    return seen


def one_error(r, fragment: str) -> None:
    assert r.exit_code == 2, (r.exit_code, r.output)
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("pmem: error:") and fragment in line, line


@pytest.mark.parametrize("how", ["file", "stdin"])
def test_a_jsonl_record_past_the_text_limit_is_refused_before_anything_is_embedded(cli, embedded, tmp_path, how):
    path = tmp_path / "big.jsonl"
    path.write_text(json.dumps({"text": "fine"}) + "\n" + json.dumps({"text": "x" * 200_000}) + "\n")
    r = cli("import", path) if how == "file" else cli("import", "-", input=path.read_bytes())
    assert embedded == []
    one_error(r, f"line 2: the text is 200,000 characters; the limit is {MAX_TEXT:,}")
    assert json.loads(cli("list", "--all", "--json").stdout) == []


@pytest.mark.parametrize("record,fragment", [
    ('{"text": "a \\u0000 b"}', "line 1: the text contains a NUL character"),
    (json.dumps({"text": "x", "thread": "t" * 501}), "'thread' must be text of at most 500 characters"),
])
def test_what_the_store_would_refuse_is_refused_while_reading(cli, embedded, tmp_path, record, fragment):
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps({"text": "fine"}) + "\n" + record + "\n")
    r = cli("import", path)
    assert embedded == []
    one_error(r, fragment.replace("line 1", "line 2"))


def test_a_markdown_paragraph_past_the_limit_is_refused_as_it_grows(cli, embedded, tmp_path):
    path = tmp_path / "notes.md"
    path.write_text("- one item\n\n" + ("word " * 20 + "\n") * 1200)  # 121,200 characters, no blank line
    r = cli("import", path)
    assert embedded == []
    one_error(r, "line 3: a paragraph of more than 100,000 characters")


def _pmem(*args: str, home: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PMEM_")}
    env.update(PMEM_HOME=str(home), PMEM_EMBED_MODEL="fake-64", PMEM_SERVER="off", NO_COLOR="1",
               PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, "-m", "pmem", *args], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.parametrize("first", ["record", "garbage"])
def test_stdin_is_refused_at_the_bad_record_while_the_pipe_is_still_open(tmp_path, first):
    """The writer keeps stdin open after the bad part: an import that read to the end first
    would wait for ever; one that streams answers at once."""
    data = (json.dumps({"text": "y" * 200_000}) + "\n" if first == "record"  # a record past the limit
            else "z" * 6_000_000)  # 6 MB of garbage without a line end
    p = _pmem("import", "-", home=tmp_path / "home")
    try:
        assert p.stdin is not None
        started = time.monotonic()
        try:
            p.stdin.write(data.encode())
            p.stdin.flush()
        except BrokenPipeError:
            pass  # pmem has answered before all of it was written
        code = p.wait(timeout=60)
        elapsed = time.monotonic() - started
    finally:
        if p.poll() is None:
            p.kill()
        try:
            p.stdin.close()
        except BrokenPipeError:
            pass
    err = p.stderr.read().decode()
    assert code == 2 and "Traceback" not in err and err.startswith("pmem: error:"), err
    assert elapsed < 30, elapsed


def test_a_long_pasted_log_in_a_chat_export_is_imported_up_to_the_limit(cli, embedded, tmp_path):
    from pmem.integrations.importers import load
    from pmem.integrations.importers.base import MESSAGE_LIMIT, PART_LIMIT

    log = "\n".join(f"2026-01-01 12:00:{i % 60:02d} INFO worker {i} finished its step" for i in range(120_000))
    assert len(log) > 5_000_000
    turns = [("user", "Here is the log:\n" + log), ("assistant", "The worker finished every step.")]
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([chatgpt_conversation("log", turns, extras=False, branch=False)]))
    plan = load(path)
    parts = [m for m in plan.records if m.meta["role"] == "user"]
    assert len(parts) == MESSAGE_LIMIT // PART_LIMIT == 3 and plan.cut == 1
    assert all(len(m.text) <= MAX_TEXT for m in parts)
    assert parts[-1].text.endswith("more characters were left out]")
    kept = sum(len(m.text) - len("User: ") for m in parts)
    left = int(parts[-1].text.rsplit("[pmem import: ", 1)[1].split()[0].replace(",", ""))
    assert MESSAGE_LIMIT - 200 < kept <= MESSAGE_LIMIT and abs(kept + left - len(turns[0][1])) < 200
    r = cli("import", path, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["imported"] == 4 and json.loads(r.stdout)["cut_messages"] == 1
    assert len(embedded) == 4  # the 5 MB message cost three memories, not 56
    human = cli("import", path, "--dry-run")
    assert "1 messages longer than 270,000 characters would be imported up to that" in human.stderr


def test_add_and_extract_refuse_oversized_stdin_before_any_model_work(cli, embedded):
    big = b"w" * 10_000_000
    one_error(cli("add", input=big), "larger than 100,000 characters")
    one_error(cli("extract", "--dry-run", input=big), "larger than 2,000,000 characters")
    assert embedded == []

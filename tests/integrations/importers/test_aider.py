"""aider's chat history, against tests/data/aider/chat.history.md (written by aider's own
InputOutput; see its README) and, where aider is installed, against aider itself."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pmem.integrations.importers import aider as aider_reader
from pmem.integrations.importers import load
from pmem.integrations.importers.registry import IMPORTERS

DATA = Path(__file__).resolve().parents[2] / "data" / "aider"
HISTORY = DATA / "chat.history.md"
WORDS = [["User: The parser drops the last line when the file has no trailing newline.\n"
          "Please fix it and keep the tests green.",
          "aider: The loop stops at the last `\\n`, so a final line without one is lost.\n\nparser.py\n"
          "```python\nfor line in text.splitlines():\n    yield line\n```",
          "User: why splitlines and not split('\\n')?",
          "aider: `splitlines` also splits on `\\r\\n` and leaves no empty string after a final newline."],
         ["User: Rename the module to reader.py",
          "aider: Done: parser.py is now reader.py and the imports follow it."]]


def project(tmp_path: Path, text: str | None = None) -> Path:
    folder = tmp_path / "parser"
    folder.mkdir()
    target = folder / aider_reader.FILE_NAME
    if text is None:
        shutil.copy(HISTORY, target)
    else:
        target.write_text(text)
    return folder


def sessions(plan) -> list[list[str]]:
    threads: dict[str, list[str]] = {}
    for m in plan.records:
        threads.setdefault(m.thread, []).append(m.text)
    return list(threads.values())


def test_sessions_user_lines_and_answers_without_tool_output(tmp_path):
    folder = project(tmp_path)
    plan = load(folder / aider_reader.FILE_NAME)
    assert plan.formats == {"aider": 1}
    assert sessions(plan) == WORDS
    joined = "\n".join(m.text for m in plan.records)
    for tool in ("Added parser.py", "Applied edit", "Tokens:", "(Y)es/(N)o", "/add", "Aider v0.86.2",
                 "1 import updated"):
        assert tool not in joined
    assert {m.scope for m in plan.records} == {str(folder.resolve())}
    assert all(m.created_at and m.thread.startswith("aider:") and "aider" in m.tags for m in plan.records)
    assert len({m.thread for m in plan.records}) == 2


def test_a_folder_import_reads_the_hidden_history_and_no_other_hidden_file(tmp_path):
    folder = project(tmp_path)
    (folder / "NOTES.md").write_text("# Parser\n\n- keep the reader small\n")
    (folder / ".env.md").write_text("# secret notes\n\n- hidden\n")
    (folder / ".aider.tags.cache.v4").mkdir()
    (folder / ".aider.tags.cache.v4" / "cache.md").write_text("# cache\n")
    plan = load(folder)
    assert plan.formats == {"aider": 1, "markdown": 1}
    assert sum(1 for m in plan.records if m.meta.get("format") == "aider") == 6
    assert not any("hidden" in m.text or "cache" in m.text for m in plan.records)


def test_a_history_is_aiders_not_markdown_and_a_note_about_aider_is_markdown(tmp_path):
    head = HISTORY.read_bytes()
    name = aider_reader.FILE_NAME
    assert [i.NAME for i in IMPORTERS if i.accepts(name) and i.sniff(name, head)][0] == "aider"
    note = tmp_path / "aider.md"
    note.write_text("# Using aider\n\n# aider chat started at 2025-01-01 10:00:00\n\n#### not a history  \n")
    assert load(note).formats == {"md": 1}


def test_lines_together_are_one_message_a_blank_line_parts_them_and_headings_stay_in_answers(tmp_path):
    text = ("\n# aider chat started at 2025-03-04 10:00:00\n\n"
            "#### first line  \n#### second line  \n\n"
            "#### another message  \n\n"
            "Here is the plan.\n\n#### Step 1\n\nDo it.\n\n"
            "> Tokens: 1k sent  \n"
            "> multi-line tool output\nits second line  \n\n"
            "#### /run make test  \n\n"
            "#### /code make it so  \n\n"
            "Made it so.\n\n")
    plan = load(project(tmp_path, text) / aider_reader.FILE_NAME)
    assert [m.text for m in plan.records] == [
        "User: first line\nsecond line", "User: another message",
        "aider: Here is the plan.\n\n#### Step 1\n\nDo it.", "User: make it so", "aider: Made it so."]


def test_a_history_of_commands_only_says_why_nothing_was_kept(tmp_path):
    text = "\n# aider chat started at 2025-03-04 10:00:00\n\n#### /add a.py  \n> Added a.py to the chat  \n"
    plan = load(project(tmp_path, text) / aider_reader.FILE_NAME)
    assert plan.records == []
    assert plan.empty == [".aider.chat.history.md (aider): read 1 records, kept none: its 1 session(s) hold no "
                          "message but aider's commands and output"]


def test_importing_a_grown_history_adds_only_the_new_messages(tmp_path):
    folder = project(tmp_path)
    before = {m.id for m in load(folder / aider_reader.FILE_NAME).records}
    with (folder / aider_reader.FILE_NAME).open("a") as f:
        f.write("\n#### And the docs?  \n\nUpdated README.md.\n\n")
    after = load(folder / aider_reader.FILE_NAME).records
    assert before < {m.id for m in after} and len(after) == len(before) + 2


def _aider_python() -> str | None:
    """A Python that can import aider: this one, or the one behind an `aider` on PATH (pipx, or
    the virtual environment .ci/run installs aider-chat into, in ~/.cache/pmem-ci)."""
    import importlib.util
    import shutil

    if importlib.util.find_spec("aider") is not None:
        return sys.executable
    exe = shutil.which("aider")
    if exe is None:  # where .ci/run installs it, beside the project's environment
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        installed = cache / "pmem-ci" / "aider-0.86.2" / "bin" / "aider"
        exe = str(installed) if installed.is_file() else None
    if exe is None:
        return None
    first = Path(exe).read_bytes()[:300].split(b"\n", 1)[0]
    python = first[2:].decode(errors="replace").strip() if first.startswith(b"#!") else ""
    return python if python and Path(python).is_file() else None


def test_the_installed_aider_writes_what_the_fixture_holds(tmp_path):
    python = _aider_python()
    if python is None:
        pytest.skip("aider-chat is not installed (.ci/run installs it: pip install aider-chat==0.86.2)")
    folder = tmp_path / "p"
    folder.mkdir()
    out = folder / aider_reader.FILE_NAME
    r = subprocess.run([python, str(DATA / "make_history.py"), str(out)], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr[-2000:]
    assert sessions(load(out)) == WORDS

"""A plain `pmem hook CLIENT EVENT` runs without typer or the other commands; anything else (options,
--help, `--db`) goes through the command line as before, to the same hook."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pmem.cli.hook_run import direct

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("argv, expected", [
    (["hook", "claude-code", "user-prompt"], True),
    (["hook", "gemini", "compact"], True),
    (["hook", "claude-code", "compact"], False),  # Claude Code has no compact hook: typer says so
    (["hook", "install", "claude-code"], False),
    (["hook", "codex", "user-prompt", "--help"], False),
    (["--db", "x.db", "hook", "codex", "user-prompt"], False),
    (["search", "hook", "codex"], False),
])
def test_which_calls_run_directly(argv, expected):
    assert direct(argv) is expected


def _hook(env: dict, *argv: str) -> subprocess.CompletedProcess:
    prompt = json.dumps({"prompt": "where is the cabin wifi password", "session_id": "s1"})
    return subprocess.run([sys.executable, "-X", "importtime", "-m", "pmem", *argv], input=prompt, env=env,
                          capture_output=True, text=True, timeout=120)


def _imported(stderr: str) -> set[str]:
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines() if line.startswith("import time:")}


def test_a_plain_hook_imports_no_typer_and_gives_the_memories(fake_config, pmem_home, tmp_path):
    from pmem.service import MemoryStore

    with MemoryStore(config=fake_config) as store:
        store.add("The cabin wifi password is hunter2")
    other = tmp_path / "other.db"
    with MemoryStore(other, config=fake_config) as store:
        store.add("The cabin wifi password is swordfish")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = _hook(env, "hook", "claude-code", "user-prompt")
    assert r.returncode == 0 and "hunter2" in r.stdout
    assert "typer" not in _imported(r.stderr) and "pmem.cli.app" not in _imported(r.stderr)
    r = _hook(env, "--db", str(other), "hook", "claude-code", "user-prompt")  # options: the command line
    assert r.returncode == 0 and "swordfish" in r.stdout and "hunter2" not in r.stdout
    assert "typer" in _imported(r.stderr)
    r = subprocess.run([sys.executable, "-m", "pmem", "hook", "claude-code", "--help"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "Example" in r.stdout

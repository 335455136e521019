"""pmem and the real Gemini CLI, offline: its hooks as Gemini runs them, and its chat file imported.

Gemini CLI (npm `@google/gemini-cli`, installed by .ci/run) answers from `--fake-responses`, its
own test double; GEMINI_CLI_HOME (and HOME, for `pmem hook install`) is a scratch folder. A
`pmem` first on PATH records what each hook received and printed, then runs this tree's pmem.
Gemini's local telemetry (`logPrompts`) records the request the model would have been sent.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from pmem.integrations.importers import load, run_import

ROOT = Path(__file__).resolve().parents[2]
GEMINI = shutil.which("gemini")
pytestmark = pytest.mark.skipif(GEMINI is None, reason="Gemini CLI is not installed (.ci/run installs it: "
                                "npm install @google/gemini-cli@0.61.0)")

PROMPTS = ["What is my cat called?", "And what does she like to eat?"]
ANSWERS = ["Your cat is called Miso.", "Miso likes tuna."]
WRAPPER = """#!/bin/sh
if [ "$1" = hook ] && [ "$2" = gemini ]; then
    n=$(ls "$HOOK_LOG" | wc -l)
    cat > "$HOOK_LOG/$n-$3.in"
    "$PMEM_PYTHON" -m pmem "$@" < "$HOOK_LOG/$n-$3.in" > "$HOOK_LOG/$n-$3.out"
    rc=$?
    cat "$HOOK_LOG/$n-$3.out"
    exit $rc
fi
exec "$PMEM_PYTHON" -m pmem "$@"
"""


def _fake_answer(text: str) -> str:
    """One line of Gemini CLI's --fake-responses file: a streamed answer of one chunk."""
    chunk = {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP",
                             "index": 0}],
             "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15}}
    return json.dumps({"method": "generateContentStream", "response": [chunk]}) + "\n"


def _hooks(log: Path, event: str) -> list[tuple[dict, str]]:
    """(input, output) of each run of `event`, in order."""
    runs = sorted(log.glob(f"*-{event}.in"), key=lambda p: int(p.name.split("-", 1)[0]))
    return [(json.loads(p.read_text()), p.with_suffix(".out").read_text()) for p in runs]


def test_gemini_cli_runs_pmems_hooks_and_its_chat_imports_once(fake_config, store, tmp_path):
    from pmem import paths
    from pmem.service import MemoryStore

    home, project, log, bin_dir = (tmp_path / n for n in ("home", "cabin", "hook-log", "bin"))
    for d in (home, project, log, bin_dir):
        d.mkdir()
    wrapper = bin_dir / "pmem"
    wrapper.write_text(WRAPPER)
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    env = {**os.environ, "HOME": str(home), "GEMINI_CLI_HOME": str(home), "GEMINI_API_KEY": "offline",
           "GEMINI_CLI_TRUST_WORKSPACE": "true", "HOOK_LOG": str(log), "PMEM_PYTHON": sys.executable,
           "PYTHONPATH": str(ROOT), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "NO_COLOR": "1"}

    hooked = MemoryStore(paths.db_path(), config=fake_config)  # the database the hooks open
    for i in range(40):  # a session-start block longer than the 2,000 characters a prompt hook searches with
        hooked.add(f"Standing preference {i}: tidy commit messages and short functions", pinned=True)
    hooked.add("My cat is called Miso and she likes tuna")
    for i in range(6):  # newer: the session start's recent ones, so the cat is left to the prompt hook
        hooked.add(f"Weather note {i}: rain in Porto on day {i}")
    hooked.close()

    subprocess.run(["pmem", "hook", "install", "gemini"], env=env, check=True, capture_output=True,
                   stdin=subprocess.DEVNULL, timeout=60)
    settings_file = home / ".gemini" / "settings.json"
    settings = json.loads(settings_file.read_text())
    assert {"SessionStart", "BeforeAgent", "PreCompress"} <= set(settings["hooks"])
    telemetry = tmp_path / "telemetry.log"
    settings["telemetry"] = {"enabled": True, "target": "local", "outfile": str(telemetry), "logPrompts": True}
    settings_file.write_text(json.dumps(settings))

    for n, (prompt, answer) in enumerate(zip(PROMPTS, ANSWERS)):
        fake = tmp_path / f"fake-{n}.jsonl"
        fake.write_text(_fake_answer(answer))
        resume = ["--resume", "latest"] if n else []
        run = subprocess.run([GEMINI, "-m", "gemini-2.5-flash", *resume, "-p", prompt, "--fake-responses", str(fake)],
                             cwd=project, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                             timeout=120)
        assert run.returncode == 0, run.stderr[-2000:]
        assert run.stdout.strip() == answer

    # What the hooks received and printed.
    (start_in, start_out), *_ = _hooks(log, "session-start")
    start = json.loads(start_out)["hookSpecificOutput"]["additionalContext"]
    assert start.startswith("<!-- pmem:block ") and "Standing preference 0:" in start
    (prompt_in, prompt_out), *_ = _hooks(log, "user-prompt")
    assert prompt_in["prompt"].startswith("<hook_context>")  # -p put pmem's block in front of the question
    assert prompt_in["prompt"].endswith(PROMPTS[0]) and len(prompt_in["prompt"]) > 2000
    relevant = json.loads(prompt_out)["hookSpecificOutput"]["additionalContext"]
    assert "My cat is called Miso" in relevant and "Standing preference" not in relevant  # searched the question

    # The block reached the model: Gemini's own record of the request it sent.
    sent = telemetry.read_text()
    assert "My cat is called Miso and she likes tuna" in sent and "pmem:block" in sent

    # The chat Gemini wrote: each turn once, none of pmem's blocks, and nothing new a second time.
    # A resume in a later minute than the session's start makes Gemini CLI (0.61) open a second
    # file of the same session (named by that minute) holding its header and set-up context only,
    # while the turns go on in the first: the import must read each turn once from them all.
    chats = sorted((home / ".gemini" / "tmp" / "cabin" / "chats").glob("session-*.jsonl"))
    assert chats and len({c.name.rsplit("-", 1)[-1] for c in chats}) == 1  # one session
    assert "pmem:block" in "".join(c.read_text() for c in chats)  # Gemini stored the blocks in the user's messages
    plans = [load(c) for c in chats]
    records = [m for plan in plans for m in plan.records]
    assert all(plan.formats == {"gemini": 1} for plan in plans)
    assert [m.text for m in records] == [f"{who}: {text}" for pair in zip(PROMPTS, ANSWERS)
                                         for who, text in zip(("User", "Gemini"), pair)]
    assert not any(w in m.text for m in records for w in ("pmem", "hook_context", "Standing preference"))
    assert {m.scope for m in records} == {str(project.resolve())}
    assert run_import(store, records).imported == 4
    assert run_import(store, [m for c in chats for m in load(c).records]).imported == 0

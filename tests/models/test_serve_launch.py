"""The server a command launches for the commands after it (`server = auto`) starts once that
command is done: as it exits, or START_AFTER seconds later if it is still running. Beside a cold
command it loaded its own models on the cores that command was loading its models with
(docs/decisions/0059-first-search.md)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pmem.models import serve as srv

pytestmark = pytest.mark.skipif(not srv.SUPPORTED, reason="needs Unix sockets")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def launched(monkeypatch, pmem_home):
    """What spawn() was asked to start: (argv, log, env) each; nothing is really started."""
    seen: list[tuple[list[str], Path, dict | None]] = []
    monkeypatch.setattr(srv, "spawn", lambda argv, log, env=None: seen.append((argv, log, env)))
    srv.drop_deferred()  # nothing put off before this test
    yield seen
    srv.launch_deferred()  # a timer left waiting: cancelled, with spawn still the recorder


def test_the_launch_waits_until_the_command_says_it_is_done(launched, pmem_home, monkeypatch, tmp_path):
    assert srv.start_in_background(15.0, by="pmem search") is True
    assert launched == []  # nothing beside the command while it loads its own models
    monkeypatch.setenv("PMEM_HOME", str(tmp_path / "elsewhere"))  # changed after the command asked
    assert srv.launch_deferred() is True
    assert len(launched) == 1
    argv, log, env = launched[0]
    assert argv[:2] == ["serve", "--started-by"] and argv[2] == f"pmem search (pid {os.getpid()})"
    assert argv[3:] == ["--idle", "900.0s"]
    assert env is not None and env["PMEM_HOME"] == str(pmem_home)  # the command's own home
    assert log == pmem_home / "serve.log"
    assert srv.launch_deferred() is False and len(launched) == 1  # once


def test_two_loads_asking_give_one_launch(launched):
    assert srv.start_in_background(15.0, by="pmem search")
    assert srv.start_in_background(15.0, by="pmem search")
    srv.launch_deferred()
    assert len(launched) == 1


def test_a_command_still_running_launches_it_after_start_after(launched, monkeypatch):
    monkeypatch.setattr(srv, "START_AFTER", 0.05)
    assert srv.start_in_background(None, by="pmem mcp")
    deadline = time.monotonic() + 10
    while not launched and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(launched) == 1 and "--idle" not in launched[0][0]  # server = always: no idle limit
    assert srv.launch_deferred() is False


def test_at_once_launches_now(launched):
    assert srv.start_in_background(15.0, by="pmem serve", at_once=True)
    assert len(launched) == 1 and launched[0][2] is None  # this process's environment, as before


LAUNCH_AT_EXIT = """
import sys
from pmem.models import serve
serve.START_AFTER = 120.0
serve.spawn = lambda argv, log, env=None: print("launched", argv[0], env["PMEM_HOME"] == sys.argv[1], flush=True)
print(serve.start_in_background(15.0, by="pmem search"), flush=True)
print("the command's output", flush=True)
"""


def test_a_command_that_exits_launches_it_as_it_exits(pmem_home):
    p = subprocess.run([sys.executable, "-c", LAUNCH_AT_EXIT, str(pmem_home)], cwd=ROOT, capture_output=True,
                       text=True, timeout=60, env={**os.environ, "PMEM_HOME": str(pmem_home)})
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["True", "the command's output", "launched serve True"]


def test_a_launch_dropped_never_starts(launched, monkeypatch):
    monkeypatch.setattr(srv, "START_AFTER", 0.05)
    assert srv.start_in_background(15.0, by="pmem search")
    assert srv.drop_deferred() is True
    time.sleep(0.3)  # past START_AFTER: the timer was cancelled
    assert launched == [] and srv.launch_deferred() is False and srv.drop_deferred() is False



@pytest.fixture
def at_work(monkeypatch):
    """Another thread of this command at work (an import's pass: running, never waiting) until
    the test sets the event; START_AFTER and RECHECK short."""
    import threading

    def spin() -> None:
        while not stop.is_set():
            pass

    monkeypatch.setattr(srv, "START_AFTER", 0.05)
    monkeypatch.setattr(srv, "RECHECK", 0.05)
    stop = threading.Event()
    worker = threading.Thread(target=spin, daemon=True)
    worker.start()
    yield stop
    stop.set()
    worker.join()


def _wait_for(launched: list) -> None:
    deadline = time.monotonic() + 10
    while not launched and time.monotonic() < deadline:
        time.sleep(0.02)


def test_a_command_at_work_gets_its_cores_until_it_rests(launched, at_work):
    """START_AFTER comes while another thread of the command runs: the launch waits for it to
    rest (a server loading its models beside an import's passes took the cores they ran on)."""
    assert srv.start_in_background(15.0, by="pmem import")
    time.sleep(0.6)  # many rechecks: the worker still running
    assert launched == []
    at_work.set()
    _wait_for(launched)
    assert len(launched) == 1 and srv.launch_deferred() is False


def test_a_command_at_work_still_gets_one_after_start_latest(launched, at_work, monkeypatch):
    monkeypatch.setattr(srv, "START_LATEST", 0.4)
    assert srv.start_in_background(15.0, by="pmem import")
    _wait_for(launched)
    assert len(launched) == 1 and not at_work.is_set()  # while the worker still runs: a long import gets one

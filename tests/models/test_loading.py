"""How many threads the models take when the `threads` setting is 0: the cores idle now."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
import time

import pytest

from pmem.models import loading


def test_threads_are_the_idle_cores_at_least_half_at_most_eight(monkeypatch):
    busy = {"now": 0.0}
    monkeypatch.setattr(loading, "busy_now", lambda samples=loading.BUSY_SAMPLES: busy["now"])
    monkeypatch.setattr(loading.os, "cpu_count", lambda: 2)
    assert loading.default_threads() == 2
    busy["now"] = 0.25  # one reading in four saw something: not a busy core
    assert loading.default_threads() == 2
    busy["now"] = 1.0  # a core kept busy: llama.cpp's spinning threads stay off it
    assert loading.default_threads() == 1
    busy["now"] = 5.0
    assert loading.default_threads() == 1
    monkeypatch.setattr(loading.os, "cpu_count", lambda: 32)
    busy["now"] = 0.0
    assert loading.default_threads() == 8
    busy["now"] = 30.0
    assert loading.default_threads() == 8  # half of them, but never past eight


def test_without_a_running_count_the_load_average_decides(monkeypatch, tmp_path):
    monkeypatch.setattr(loading, "LOADAVG", str(tmp_path / "absent"))
    assert loading.busy_now() is None
    monkeypatch.setattr(loading.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(loading.os, "getloadavg", lambda: (0.1, 0.1, 0.1))
    assert loading.default_threads() == 2
    monkeypatch.setattr(loading.os, "getloadavg", lambda: (1.6, 1.0, 1.0))
    assert loading.default_threads() == 1
    for bad in (b"", b"0.1 0.2 0.3", b"0.1 0.2 0.3 x/12 99", b"\xff" * 300):
        (tmp_path / "bad").write_bytes(bad)
        monkeypatch.setattr(loading, "LOADAVG", str(tmp_path / "bad"))
        assert loading.busy_now() is None


def test_the_running_count_is_read_and_this_processs_threads_left_out(monkeypatch, tmp_path):
    fake = tmp_path / "loadavg"
    fake.write_bytes(b"3.10 2.00 1.50 3/129 31808\n")
    monkeypatch.setattr(loading, "LOADAVG", str(fake))
    monkeypatch.setattr(loading, "own_running", lambda: 1)
    assert loading.busy_now() == 2.0
    assert loading.busy_now(samples=1) == 2.0
    monkeypatch.setattr(loading, "own_running", lambda: 2)  # a MiniLM loading beside
    assert loading.busy_now() == 1.0


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs /proc (Linux)")
def test_a_thread_of_this_process_at_work_is_its_own_not_another_processs():
    """A thread hashing outside the GIL is in state R: counted as this process's own, so a model
    loading beside another (e5 beside MiniLM) does not see its own process as the busy one."""
    assert loading.own_running() >= 1
    data = bytes(32 << 20)
    stop = threading.Event()

    def work() -> None:
        while not stop.is_set():
            hashlib.sha256(data).digest()  # lets go of the GIL past 2 KB

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    try:
        time.sleep(0.05)
        seen = []
        for _ in range(20):
            seen.append(loading.own_running())
            time.sleep(0.002)
    finally:
        stop.set()
        worker.join()
    assert max(seen) >= 2


@pytest.mark.skipif(not os.path.exists("/proc/loadavg"), reason="needs /proc/loadavg (Linux)")
def test_processes_spinning_now_take_cores_the_load_average_has_not_seen_yet():
    """Real busy processes, seen within a fraction of a second of their start (the 1-minute load
    average moves every 5 s, by a fraction of the change), and no more once they are gone."""
    cores = os.cpu_count() or 2
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]
    try:
        time.sleep(0.3)
        during = loading.busy_now()
        assert during is not None and during >= cores  # every spinner runs or waits for a core
        assert loading.default_threads() == max(1, min(8, cores // 2))  # the fewest it gives
    finally:
        for p in spin:
            p.kill()
        for p in spin:
            p.wait()
    after = loading.busy_now()
    assert after is not None and after <= during - cores / 2  # the cores they held are counted free

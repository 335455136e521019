"""A real `pmem serve` under a flood of idle connections, and stopped with SIGSTOP (issue 10,
defects 6 and 7): its threads and descriptors stay bounded, `pmem search` is answered during the
flood, gives the stopped server up within seconds (loading the model itself), and the server
answers again after SIGCONT.

It was benchmarks/serve_flood.py; its figures are in docs/decisions/0012-serve-flood.md. The
defects' unit tests (a fake loader, small limits) are in tests/models/test_serve.py; this one runs the
real server and models, as a user starts them. Linux only (/proc)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from pmem.models import serve as srv

pytestmark = [pytest.mark.stress, pytest.mark.model, pytest.mark.slow,
              pytest.mark.skipif(not Path("/proc/self/status").exists() or not srv.SUPPORTED,
                                 reason="reads the server's threads from /proc; needs Unix sockets")]

CONNECTIONS = 1500


def server_counts(pid: int) -> tuple[int, int]:
    """The server's threads and open descriptors."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    threads = next(int(line.split()[1]) for line in status if line.startswith("Threads:"))
    return threads, len(os.listdir(f"/proc/{pid}/fd"))


def test_a_flood_of_idle_connections_and_a_stopped_server(pmem_home):
    home = tempfile.mkdtemp(prefix="pf-", dir="/tmp")  # a socket path must stay short
    env = {**os.environ, "PMEM_HOME": home, "PMEM_THREADS": "1"}

    def pmem(*argv: str, server: str = "auto") -> tuple[subprocess.CompletedProcess, float]:
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "pmem", *argv], env={**env, "PMEM_SERVER": server},
                              capture_output=True, text=True, timeout=300)
        return proc, time.monotonic() - t0

    added, _ = pmem("add", "The wifi password at the cabin is hunter2", server="never")  # the server comes next
    assert added.returncode == 0, added.stderr
    started, _ = pmem("serve", "--detach")
    assert started.returncode == 0, started.stderr
    try:
        pid = json.loads(pmem("serve", "--status", "--json")[0].stdout)["pid"]
        threads_at_start, fds_at_start = server_counts(pid)
        idle = []
        try:
            for _ in range(CONNECTIONS):
                c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                for _ in range(500):
                    try:
                        c.connect(os.path.join(home, "pmem.sock"))
                        break
                    except BlockingIOError:  # the listen backlog is full until the server accepts
                        time.sleep(0.01)
                idle.append(c)
            time.sleep(1)
            threads, fds = server_counts(pid)
            # before the fix: a thread a connection (1,502), and EMFILE from accept ended the server
            assert threads <= threads_at_start + srv.WORKERS, (threads_at_start, threads)
            assert fds <= fds_at_start + srv.MAX_CONNECTIONS + 8, (fds_at_start, fds)
            search, _ = pmem("search", "cabin internet", "--json")
            assert search.returncode == 0 and len(json.loads(search.stdout)) == 1, search.stderr
        finally:
            for c in idle:
                c.close()

        os.kill(pid, signal.SIGSTOP)
        try:  # before the fix it waited up to 600 s; now it gives up and loads the model itself
            search, seconds = pmem("search", "cabin internet", "--json")
        finally:
            os.kill(pid, signal.SIGCONT)
        assert search.returncode == 0 and len(json.loads(search.stdout)) == 1, search.stderr
        assert seconds < 120, f"{seconds:.1f} s with the server stopped"
        assert pmem("serve", "--status")[0].returncode == 0  # it answers again after SIGCONT
    finally:
        pmem("serve", "--stop")
        shutil.rmtree(home, ignore_errors=True)

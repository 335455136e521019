"""`pmem serve` under a flood of idle connections, and stopped with SIGSTOP (issue 10, defects 6, 7).

    python benchmarks/serve_flood.py                 # 1,500 idle connections
    python benchmarks/serve_flood.py --connections 1500 --json

Starts a real `pmem serve --detach` (the MiniLM GGUF, in a fresh PMEM_HOME under /tmp), then:
1. opens N connections on its Unix socket that never send anything, and reads the server's
   thread and descriptor counts from /proc (before the fix: 1,500 connections gave 1,502
   threads, and EMFILE from accept ended the server);
2. times a whole `pmem search` process while those connections are open;
3. closes them, stops the server with SIGSTOP and times `pmem search` again (before the fix it
   waited up to 600 s; now it gives up after `serve.reply_timeout()` and loads the model itself);
4. resumes the server with SIGCONT and checks it still answers.
Linux only (/proc). Models: PMEM_MODELS_DIR, else PMEM_TEST_MODELS_DIR, else .models-cache.
The commands run as `python -m pmem`: the installed copy, or a source tree on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=1500)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    models = os.environ.get("PMEM_MODELS_DIR") or os.environ.get("PMEM_TEST_MODELS_DIR") or str(ROOT / ".models-cache")
    home = tempfile.mkdtemp(prefix="pf-", dir="/tmp")  # a socket path must stay short
    env = {**os.environ, "PMEM_HOME": home, "PMEM_MODELS_DIR": models, "PMEM_THREADS": "1"}

    def pmem(*argv: str) -> tuple[subprocess.CompletedProcess, float]:
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "pmem", *argv], env=env, capture_output=True, text=True,
                              timeout=900)
        return proc, time.monotonic() - t0

    pmem("add", "The wifi password at the cabin is hunter2")
    started, _ = pmem("serve", "--detach")
    if started.returncode != 0:
        sys.exit(started.stderr)
    pid = json.loads(pmem("serve", "--status", "--json")[0].stdout)["pid"]

    def threads() -> int:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
        raise RuntimeError("no Threads line")

    def descriptors() -> int:
        return len(os.listdir(f"/proc/{pid}/fd"))

    result: dict = {"connections": args.connections, "threads_at_start": threads(), "fds_at_start": descriptors()}
    idle = []
    sock_path = os.path.join(home, "pmem.sock")
    for _ in range(args.connections):
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        for _ in range(500):
            try:
                c.connect(sock_path)
                break
            except BlockingIOError:  # the listen backlog is full until the server accepts
                time.sleep(0.01)
        idle.append(c)
    time.sleep(1)
    result["threads_flooded"], result["fds_flooded"] = threads(), descriptors()
    search, seconds = pmem("search", "cabin internet", "--json")
    result["search_flooded_s"] = round(seconds, 2)
    result["search_flooded_ok"] = search.returncode == 0 and len(json.loads(search.stdout)) == 1
    for c in idle:
        c.close()

    os.kill(pid, signal.SIGSTOP)
    try:
        search, seconds = pmem("search", "cabin internet", "--json")
    finally:
        os.kill(pid, signal.SIGCONT)
    result["search_stopped_s"] = round(seconds, 2)
    result["search_stopped_ok"] = search.returncode == 0 and len(json.loads(search.stdout)) == 1
    result["search_stopped_notice"] = search.stderr.strip()
    result["answers_after_sigcont"] = pmem("serve", "--status")[0].returncode == 0
    pmem("serve", "--stop")

    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"server threads: {result['threads_at_start']} at start, {result['threads_flooded']} with "
          f"{args.connections} idle connections (descriptors {result['fds_at_start']} -> {result['fds_flooded']})")
    print(f"pmem search during the flood: {result['search_flooded_s']} s, ok={result['search_flooded_ok']}")
    print(f"pmem search with the server stopped: {result['search_stopped_s']} s, ok={result['search_stopped_ok']}"
          f" ({result['search_stopped_notice']})")
    print(f"answers after SIGCONT: {result['answers_after_sigcont']}")


if __name__ == "__main__":
    main()

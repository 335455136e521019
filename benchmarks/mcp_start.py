"""How long an MCP client waits for `pmem mcp`, two trees side by side (spawns alternating).

    python benchmarks/mcp_start.py --tree /work/main --tree . --store /work/latency-store/pmem-10000.db --runs 9

Each spawn does what a client does: `initialize`, then `notifications/initialized` and `tools/list`
as soon as the handshake is answered, then, once the tools are listed, a first `tools/call`
(`recall` with a topic, what pmem's instructions ask for at the start of a task). Timed from the
spawn: the `initialize` answer, the `tools/list` answer, the `tools/call` answer; and the CPU time
(user + system) of the whole process, to its exit. Each tree runs from its own PYTHONPATH with its
own copy of the store (--store, or an empty store) and its own `pmem serve` (the model stays
loaded, as `server = auto` leaves it), so the call embeds its topic through the server as it does
for a user. Medians, with the load (`uptime`) before and after; see
docs/decisions/0039-mcp-early-tools-list.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TOPICS = ["cabin internet password", "who approves deploys", "plans for the summer", "pottery class",
          "adoption agency", "camping with the kids", "favourite books", "running a charity race"]


def spawn(env: dict, topic: str) -> dict:
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "b", "version": "0"}}}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "pmem", "mcp"], env=env, cwd=env["PMEM_HOME"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None

    def send(*messages: dict) -> None:
        proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in messages))  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]

    def answer(mid: int) -> dict:
        while True:
            reply = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
            if reply.get("id") == mid:
                return reply

    send(hello)
    answer(1)
    initialized = time.perf_counter() - t
    send({"jsonrpc": "2.0", "method": "notifications/initialized"}, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    assert len(answer(2)["result"]["tools"]) == 6
    listed = time.perf_counter() - t
    send({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "recall", "arguments": {"topic": topic}}})
    called = answer(3)
    assert not called["result"].get("isError"), called
    first_call = time.perf_counter() - t
    proc.stdin.close()
    proc.wait(60)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"initialize": initialized, "tools_list": listed, "first_call": first_call, "cpu": cpu}


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", action="append", type=Path, required=True, help="a pmem source tree (twice)")
    ap.add_argument("--store", type=Path, help="a pmem.db to copy for each tree")
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--models", type=Path, default=Path(__file__).resolve().parents[1] / ".models-cache",
                    help="the models folder (PMEM_MODELS_DIR wins)")
    args = ap.parse_args()
    trees = [t.resolve() for t in args.tree]
    result: dict = {"trees": [str(t) for t in trees], "uptime_start": uptime()}
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        envs = []
        for i, tree in enumerate(trees):
            home = Path(tmp) / f"home{i}"
            home.mkdir()
            if args.store:
                shutil.copyfile(args.store, home / "pmem.db")
                os.chmod(home / "pmem.db", 0o600)
            env = {**os.environ, "PMEM_HOME": str(home), "PYTHONPATH": str(tree), "PMEM_SERVER": "auto",
                   "PMEM_MODELS_DIR": os.environ.get("PMEM_MODELS_DIR", str(args.models))}
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            subprocess.run([sys.executable, "-m", "pmem", "serve", "--detach", "--idle", "30m"], env=env, cwd=home,
                           check=True, capture_output=True)
            envs.append(env)
        times: list[list[dict]] = [[] for _ in trees]
        try:
            for env in envs:  # once each, untimed: bytecode, the page cache
                spawn(env, TOPICS[0])
            for r in range(args.runs):
                order = range(len(trees)) if r % 2 == 0 else reversed(range(len(trees)))
                for i in order:
                    times[i].append(spawn(envs[i], TOPICS[r % len(TOPICS)]))
        finally:
            for env in envs:
                subprocess.run([sys.executable, "-m", "pmem", "serve", "--stop"], env=env, cwd=env["PMEM_HOME"],
                               capture_output=True)
    result["uptime_end"] = uptime()
    result["medians_s"] = {str(tree): {k: round(statistics.median(t[k] for t in times[i]), 3) for k in times[i][0]}
                           for i, tree in enumerate(trees)}
    result["quartiles_s"] = {str(tree): {k: [round(q, 3) for q in statistics.quantiles([t[k] for t in times[i]], n=4)]
                                         for k in times[i][0]} for i, tree in enumerate(trees)}
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

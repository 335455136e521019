"""How long an MCP client waits for `pmem mcp`, two trees side by side (spawns alternating).

    python benchmarks/mcp_start.py --tree /work/main --tree . --store /work/latency-store/pmem-10000.db --runs 9

Each spawn does what a client does: `initialize`, then `notifications/initialized` and `tools/list`
as soon as the handshake is answered, then, once the tools are listed, a first `tools/call`
(`recall` with a topic, what pmem's instructions ask for at the start of a task). Timed from the
spawn: the `initialize` answer, the `tools/list` answer, the `tools/call` answer; and the CPU time
(user + system) of the whole process, to its exit. Each tree runs from its own PYTHONPATH with its
own copy of the store (--store, or an empty store) and its own `pmem serve` (the model stays
loaded, as `server = auto` leaves it), so the call embeds its topic through the server as it does
for a user. The spawns alternate between the trees (benchmarks/harness.py: A B, B A, ...), after one
untimed spawn of each. Medians and quartiles, with the load (`uptime`) before and after; see
docs/decisions/0039-mcp-early-tools-list.md. --tree takes a checkout folder or a git revision.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Bench, clock, schedule, trees_from  # noqa: E402

TOPICS = ["cabin internet password", "who approves deploys", "plans for the summer", "pottery class",
          "adoption agency", "camping with the kids", "favourite books", "running a charity race"]


def spawn(env: dict, topic: str) -> dict:
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "b", "version": "0"}}}
    with clock() as whole:  # the CPU of the whole process, to its exit
        figures = _spawn(env, topic, hello)
    return {**figures, "cpu": whole["cpu_s"]}


def _spawn(env: dict, topic: str, hello: dict) -> dict:
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
    return {"initialize": initialized, "tools_list": listed, "first_call": first_call}


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", action="append", required=True, help="a pmem source tree or a git revision (twice)")
    ap.add_argument("--store", type=Path, help="a pmem.db to copy for each tree")
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--models", type=Path, default=Path(__file__).resolve().parents[1] / ".models-cache",
                    help="the models folder (PMEM_MODELS_DIR wins)")
    args = ap.parse_args()
    with trees_from(args.tree) as trees:
        keys = {t.name: str(t.path) if t.revision is None else t.name for t in trees}
        result: dict = {"trees": list(keys.values()), "uptime_start": uptime()}
        envs = {}
        for tree in trees:
            if args.store:
                shutil.copyfile(args.store, tree.home / "pmem.db")
                os.chmod(tree.home / "pmem.db", 0o600)
            env = tree.env(PMEM_SERVER="auto", PMEM_MODELS_DIR=os.environ.get("PMEM_MODELS_DIR", str(args.models)))
            tree.run(["pmem", "serve", "--detach", "--idle", "30m"], env=env)
            envs[tree.name] = env
        bench = Bench(trees, (25, 50, 75))
        try:  # once each first, untimed: bytecode, the page cache
            for r, name, counted in schedule(list(envs), args.runs, warmup=1):
                figures = spawn(envs[name], TOPICS[max(r, 0) % len(TOPICS)])
                for k, v in figures.items():
                    if counted:
                        bench.add(name, "spawn", k, v)
        finally:
            for tree in trees:
                tree.run(["pmem", "serve", "--stop"], env=envs.get(tree.name), check=False)
        rep = bench.report()
    result["uptime_end"] = uptime()
    spawns = {keys[n]: rep["results"][n]["spawn"] for n in keys}
    result["medians_s"] = {k: {m: round(s["median"], 3) for m, s in ms.items()} for k, ms in spawns.items()}
    result["quartiles_s"] = {k: {m: [round(s[p], 3) for p in ("p25", "p50", "p75")] for m, s in ms.items()}
                             for k, ms in spawns.items()}
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

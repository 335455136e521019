"""`pmem mcp` on a database another process holds the write lock of: seconds to each tool's answer.

    python benchmarks/mcp_locked.py                          # this tree, 3 runs of each tool
    python benchmarks/mcp_locked.py --tree /path/to/old/pmem --tree . --runs 3
    python benchmarks/mcp_locked.py --free --tool search --runs 5   # no lock: first and warm calls

For each run: a fresh PMEM_HOME with one memory (the test embedder, fake-64: no model is loaded),
a second process that holds `BEGIN IMMEDIATE` on the file, then a real MCP session (the SDK's
stdio_client + ClientSession) whose first call, after initialize, is the tool measured. Prints
JSON: per tree and tool, the median seconds to the answer and whether it was a tool error. Each
`--tree` (a checkout or a git revision) is put on PYTHONPATH in turn, run by run, the order
alternating (benchmarks/harness.py), so trees are compared side by side. With
`--free` nobody holds the lock, the store has 300 memories, and each session also times 10 more
calls of the tool (`warm_s`: the median of their medians).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Tree, schedule  # noqa: E402

HOLD = ("import sys, time; from pmem import db; c = db.connect(sys.argv[1]); c.execute('BEGIN IMMEDIATE');"
        "print('held', flush=True); time.sleep(60)")


def one(tree: str, tool: str, free: bool = False) -> tuple[float, bool, str, float | None]:
    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    home = Path(tempfile.mkdtemp(prefix="pmem-locked-"))
    env = {**os.environ, "PMEM_HOME": str(home), "PMEM_EMBED_MODEL": "fake-64", "PYTHONPATH": tree}
    mid = subprocess.run([sys.executable, "-m", "pmem", "add", "a memory about locked files"], env=env,
                         capture_output=True, text=True, check=True).stdout.strip()
    if free:
        subprocess.run([sys.executable, "-c", "from pmem import MemoryStore\nwith MemoryStore() as s:\n"
                        " s.insert([s.new_memory(f'note {i} about locked files and trips') for i in range(299)])"],
                       env=env, check=True)
    args = {"remember": {"text": "written while locked"}, "pin": {"id": mid}, "forget": {"id": mid},
            "update": {"id": mid, "text": "a memory about open files"},
            "recall": {"topic": "locked files"}, "search": {"query": "locked files"}}[tool]
    holder = None if free else subprocess.Popen([sys.executable, "-c", HOLD, str(home / "pmem.db")], env=env,
                                                stdout=subprocess.PIPE, text=True)
    try:
        assert holder is None or holder.stdout is not None and holder.stdout.readline().strip() == "held"
        params = StdioServerParameters(command=sys.executable, args=["-m", "pmem", "mcp"], cwd=str(home), env=env)

        async def main() -> tuple[float, bool, str, float | None]:
            async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                started = time.perf_counter()
                result = await session.call_tool(tool, args)
                first = time.perf_counter() - started
                text = result.content[0].text if result.content else ""
                warm = []
                for _ in range(10 if free else 0):
                    started = time.perf_counter()
                    await session.call_tool(tool, args)
                    warm.append(time.perf_counter() - started)
                return first, bool(result.is_error), text[:100], statistics.median(warm) if warm else None

        return anyio.run(main)
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", help="a pmem source tree (repeatable; default: this one)")
    ap.add_argument("--tool", action="append", help="remember, pin, update, forget, recall, search (repeatable)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--free", action="store_true", help="nobody holds the lock: first and warm calls")
    a = ap.parse_args()
    tools = a.tool or ["remember", "pin", "update", "recall", "search"]
    seen: dict[tuple[str, str], list[tuple[float, bool, str, float | None]]] = {}
    with tempfile.TemporaryDirectory() as work:
        trees = [str(Tree.resolve(t, Path(work)).path) for t in (a.tree or [str(Path(__file__).resolve().parents[1])])]
        for tool in tools:
            for _, tree, _ in schedule(list(dict.fromkeys(trees)), a.runs):
                seen.setdefault((tree, tool), []).append(one(tree, tool, a.free))
    out = [{"tree": tree, "tool": tool, "median_s": round(statistics.median(r[0] for r in runs), 2),
            "all_s": [round(r[0], 2) for r in runs], "is_error": sorted({r[1] for r in runs}),
            "answer": runs[-1][2],
            **({"warm_s": round(statistics.median(r[3] or 0.0 for r in runs), 4)} if a.free else {})}
           for (tree, tool), runs in seen.items()]
    print(json.dumps({"load": os.getloadavg()[0], "runs": out}, indent=2))


if __name__ == "__main__":
    main()

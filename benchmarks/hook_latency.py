"""Agent hook latency: whole processes of `pmem hook claude-code user-prompt|session-start`.

    python benchmarks/hook_latency.py                         # this tree, 20 runs each
    python benchmarks/hook_latency.py --tree ../main --tree . # two trees side by side, one run

Builds one store of N LoCoMo turns (embedded with the default model, as a user's is) in a
temporary PMEM_HOME, then times each tree's hook processes, interleaved run by run so that load
falls on both alike: a prompt and a session start, each first with the database free and then
while another process holds its write lock (BEGIN IMMEDIATE, as an import or a dream does). Every
run is a new session, so nothing is held back as already given. Reports medians and quartiles in
milliseconds, and how many runs printed memories.
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
import locomo  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ["when did Caroline go to the support group", "painting a sunrise", "adoption agency",
           "camping with the kids", "pottery class", "running a charity race"]
HOLD = ("import sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
        "c.execute('BEGIN IMMEDIATE'); print('held', flush=True); sys.stdin.read()")


def build(home: Path, n: int, tree: Path) -> None:
    data = locomo.DATA if locomo.DATA.exists() else ROOT.parents[1] / "shared" / "data" / "locomo_dev.json"
    turns = [r for conv in locomo.load(data) for r in locomo.turn_records(conv)][:n]
    home.mkdir(parents=True, exist_ok=True)
    path = home.parent / "turns.jsonl"
    path.write_text("".join(json.dumps({"text": r["text"]}) + "\n" for r in turns))
    env = {**os.environ, "PMEM_HOME": str(home), "PYTHONPATH": str(tree)}
    for args in (["import", str(path)], ["add", "--pin", "I am vegetarian"]):
        subprocess.run([sys.executable, "-m", "pmem", *args], env=env, check=True, capture_output=True, cwd=home)


def run_hook(tree: Path, home: Path, event: str, payload: dict) -> tuple[float, bool]:
    env = {**os.environ, "PMEM_HOME": str(home), "PYTHONPATH": str(tree)}
    started = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "pmem", "hook", "claude-code", event], input=json.dumps(payload),
                       env=env, capture_output=True, text=True, timeout=60, cwd=home)  # never the cwd's pmem
    return (time.perf_counter() - started) * 1000, bool(r.stdout.strip())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", action="append", type=Path, help="a pmem checkout (repeat to compare)")
    ap.add_argument("--n", type=int, default=1000, help="memories in the store")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    trees = [t.resolve() for t in (args.tree or [ROOT])]
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        build(home, args.n, trees[-1])
        db = home / "pmem.db"
        results: dict[str, dict[str, list]] = {}
        for locked in (False, True):
            holder = None
            if locked:
                holder = subprocess.Popen([sys.executable, "-c", HOLD, str(db)], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, text=True)
                assert holder.stdout.readline().strip() == "held"
            try:
                for i in range(args.runs):
                    for tree in trees:
                        for event in ("user-prompt", "session-start"):
                            payload = {"session_id": f"{tree.name}-{locked}-{event}-{i}", "cwd": tmp,
                                       "prompt": PROMPTS[i % len(PROMPTS)], "source": "startup"}
                            ms, printed = run_hook(tree, home, event, payload)
                            key = f"{tree.name} {event}" + (" (write lock held)" if locked else "")
                            results.setdefault(key, {"ms": [], "printed": []})
                            results[key]["ms"].append(ms)
                            results[key]["printed"].append(printed)
            finally:
                if holder is not None:
                    holder.stdin.close()
                    holder.wait()
    report = {}
    for key, r in results.items():
        q = statistics.quantiles(r["ms"], n=4)
        report[key] = {"median_ms": round(statistics.median(r["ms"])), "q1_ms": round(q[0]), "q3_ms": round(q[2]),
                       "printed": f"{sum(r['printed'])}/{len(r['printed'])}"}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"load: {os.getloadavg()[0]:.2f}  memories: {args.n}  runs: {args.runs}")
    for key, r in report.items():
        print(f"{key:55} median {r['median_ms']:5d} ms  (q1 {r['q1_ms']}, q3 {r['q3_ms']})  printed {r['printed']}")


if __name__ == "__main__":
    main()

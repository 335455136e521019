"""End-to-end CLI latency and bulk import throughput, with the real embedding model.

    python benchmarks/latency.py                    # 10,000 memories, 15 runs per command
    python benchmarks/latency.py --n 10000 --runs 15 --json

Builds a database of N LoCoMo-style memories (the dev conversations' turns, repeated with a
suffix to reach N) by `pmem import` (timed: memories per second), then times whole processes
(start to exit) of `pmem search`, `pmem add`, `pmem list` and `pmem recall`, reporting medians and
quartiles: first with every command loading the model itself, then again with `pmem serve`
running (the commands find it by themselves). `--no-serve` skips the second round.

It measures the installed pmem, as a user runs it: the processes start in the temporary
directory, so `python -m pmem` imports the copy that `pip install .` put in site-packages (with
its bytecode compiled), not this source tree. Reinstall after changing the code. The JSON says
which copy ran.
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

QUERIES = ["cabin internet password", "who approves deploys", "when did Caroline go to the support group",
           "painting a sunrise", "plans for the summer", "adoption agency", "camping with the kids",
           "favourite books", "pottery class", "running a charity race"]


def records(n: int) -> list[dict]:
    base = [r for conv in locomo.load() for r in locomo.turn_records(conv)]
    out = []
    i = 0
    while len(out) < n:
        r = dict(base[i % len(base)])
        if i >= len(base):
            r["text"] = f"{r['text']} (copy {i // len(base)})"
        out.append(r)
        i += 1
    return out


def timed(cmd: list[str], env: dict, stdin: str | None = None) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, env=env, input=stdin, text=True, capture_output=True, check=True, cwd=env["PMEM_HOME"])
    return time.perf_counter() - t


def summary(xs: list[float]) -> dict:
    q = statistics.quantiles(xs, n=4)
    return {"median_s": round(statistics.median(xs), 3), "q1_s": round(q[0], 3), "q3_s": round(q[2], 3),
            "runs": len(xs)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-serve", action="store_true", help="skip the round with `pmem serve` running")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PMEM_HOME": tmp}
        # Some sandboxes set this; users do not, and without cached bytecode every process
        # would compile pmem's modules again.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        if "PMEM_MODELS_DIR" not in env:
            env["PMEM_MODELS_DIR"] = str(Path(__file__).resolve().parents[1] / ".models-cache")
        pmem = [sys.executable, "-m", "pmem"]
        subprocess.run([*pmem, "models", "pull"], env=env, check=True, capture_output=True, cwd=tmp)
        where = subprocess.run([sys.executable, "-c", "import pmem; print(pmem.__file__)"], env=env, cwd=tmp,
                               capture_output=True, text=True, check=True).stdout.strip()
        data = "".join(json.dumps(r) + "\n" for r in records(args.n))
        t_import = timed([*pmem, "import", "-"], env, data)
        result = {"pmem": where, "memories": args.n, "import_s": round(t_import, 2),
                  "import_per_s": round(args.n / t_import, 1)}
        commands = [
            ("search", lambda i: [*pmem, "search", QUERIES[i % len(QUERIES)], "--json"]),
            ("add", lambda i: [*pmem, "add", f"benchmark note number {i} about the garden"]),
            ("list", lambda i: [*pmem, "list"]),
            ("recall", lambda i: [*pmem, "recall", QUERIES[i % len(QUERIES)]]),
        ]
        for name, make in commands:
            timed(make(-1), env)  # warm the page cache
            result[name] = summary([timed(make(i), env) for i in range(args.runs)])
        if not args.no_serve:
            subprocess.run([*pmem, "serve", "--detach"], env=env, check=True, capture_output=True, cwd=tmp)
            try:
                result["with_serve"] = {}
                for name, make in commands:
                    if name == "list":
                        continue  # needs no model
                    timed(make(-1), env)
                    result["with_serve"][name] = summary([timed(make(i + 1000), env) for i in range(args.runs)])
            finally:
                subprocess.run([*pmem, "serve", "--stop"], env=env, capture_output=True, cwd=tmp)
        result["python_startup"] = summary([timed([sys.executable, "-c", "pass"], env) for _ in range(args.runs)])
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

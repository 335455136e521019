"""The e5 engine's cold start, before and after: one fresh process per measurement, alternating.

    python benchmarks/cold_start.py --before 0cb4109 --rounds 6

Each process imports numpy, loads multilingual-e5-small (`E5Embedder(path)`) and embeds one query;
the engine "before" is pmem/models/e5.py at git revision --before, loaded from a temporary copy.
Prints the medians of each step and every round.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import sys, time, importlib.util
t0 = time.perf_counter()
import numpy
t1 = time.perf_counter()
import pmem
if sys.argv[1] != "-":
    spec = importlib.util.spec_from_file_location("pmem._before_e5", sys.argv[1])
    m = importlib.util.module_from_spec(spec); m.__package__ = "pmem"; spec.loader.exec_module(m)
else:
    from pmem.models import e5 as m
e = m.E5Embedder(sys.argv[2], threads=1)
t2 = time.perf_counter()
e.embed(["where did I park the car"], query=True)
t3 = time.perf_counter()
print(t1 - t0, t2 - t1, t3 - t2, t3 - t0)
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="git revision of the engine to compare with")
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    from pmem.models import provision

    model = str(provision.ensure_model("multilingual-e5-small", progress=False))
    old = subprocess.run(["git", "show", f"{args.before}:pmem/models/e5.py"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    steps = ("numpy_s", "load_s", "first_query_s", "whole_s")
    runs: dict[str, list[list[float]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as tmp:
        before = Path(tmp) / "embed_e5_before.py"
        before.write_text(old, encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
        for _ in range(args.rounds):
            for name, engine in (("before", str(before)), ("after", "-")):
                out = subprocess.run([sys.executable, "-c", CHILD, engine, model], env=env, check=True,
                                     capture_output=True, text=True).stdout
                runs[name].append([float(x) for x in out.split()])
    result = {"uptime_start": uptime,
              "uptime_end": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()}
    for name, rows in runs.items():
        result[name] = {step: round(statistics.median(r[i] for r in rows), 3) for i, step in enumerate(steps)}
        result[name]["rounds"] = [[round(x, 3) for x in r] for r in rows]
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

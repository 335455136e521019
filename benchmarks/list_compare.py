"""`pmem list` as whole processes, two source trees side by side in one run (issue 9: no slower).

    git worktree add --detach /tmp/pmem-before 129c366
    python benchmarks/list_compare.py --before /tmp/pmem-before [--n 10000 --runs 21]

Each tree gets its own PMEM_HOME with the same N memories (imported with the `fake-64` embedder, so
no model is loaded), then `python -m pmem list` runs alternately from each tree. Prints JSON:
medians and quartiles in seconds, the after/before ratio and the load average.
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

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="a checkout of the older tree")
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=21)
    args = ap.parse_args()
    trees = {"before": Path(args.before).resolve(), "after": ROOT}
    tmp = Path(tempfile.mkdtemp(prefix="pmem-list-"))
    records = "".join(json.dumps({"text": f"memory number {i} about topic {i % 97} and place {i % 13}",
                                  "tags": [f"t{i % 5}"]}) + "\n" for i in range(args.n))
    envs = {}
    for name, tree in trees.items():
        home = tmp / name
        home.mkdir()
        env = dict(os.environ, PYTHONPATH=str(tree), PMEM_HOME=str(home), PMEM_EMBED_MODEL="fake-64")
        subprocess.run([sys.executable, "-m", "pmem", "import", "-"], input=records, text=True, env=env,
                       check=True, capture_output=True, cwd=tmp)
        envs[name] = env
    times: dict[str, list[float]] = {name: [] for name in trees}
    load_start = os.getloadavg()
    for _ in range(args.runs):
        for name, env in envs.items():
            t = time.perf_counter()
            subprocess.run([sys.executable, "-m", "pmem", "list"], env=env, check=True, capture_output=True, cwd=tmp)
            times[name].append(time.perf_counter() - t)
    out: dict[str, object] = {}
    for name, values in times.items():
        q = statistics.quantiles(values, n=4)
        out[name] = {"median_s": round(statistics.median(values), 3), "q1": round(q[0], 3), "q3": round(q[2], 3)}
    out["ratio_after_before"] = round(statistics.median(times["after"]) / statistics.median(times["before"]), 3)
    out["load"] = {"start": load_start, "end": os.getloadavg()}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

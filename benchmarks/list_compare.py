"""`pmem list` as whole processes, two source trees side by side in one run (issue 9: no slower).

    python benchmarks/list_compare.py --before 129c366 [--n 10000 --runs 21]
    python benchmarks/list_compare.py --before /tmp/pmem-before          # a checkout works too

Each tree gets its own PMEM_HOME with the same N memories (imported with the `fake-64` embedder, so
no model is loaded), then `python -m pmem list` runs from each tree in turn, the order alternating
round by round (benchmarks/harness.py). Prints JSON: medians and quartiles in seconds, the
after/before ratio and the load average.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import ROOT, Bench, run_rounds, trees_from  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="a checkout of the older tree, or a git revision")
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=21)
    args = ap.parse_args()
    records = "".join(json.dumps({"text": f"memory number {i} about topic {i % 97} and place {i % 13}",
                                  "tags": [f"t{i % 5}"]}) + "\n" for i in range(args.n))
    with trees_from([f"before={args.before}", f"after={ROOT}"], prefix="pmem-list-") as trees:
        for tree in trees:
            tree.env_extra = {"PMEM_EMBED_MODEL": "fake-64"}
            tree.run(["pmem", "import", "-"], input=records)
        bench = run_rounds(trees, args.runs, 0, lambda t, _: {"list": t.run(["pmem", "list"])},
                           Bench(trees, (25, 75)))
    rep = bench.report()
    out: dict[str, object] = {}
    for name in ("before", "after"):
        s = rep["results"][name]["list"]["wall_s"]
        out[name] = {"median_s": round(s["median"], 3), "q1": round(s["p25"], 3), "q3": round(s["p75"], 3)}
    out["ratio_after_before"] = rep["ratios"]["after"]["list"]["wall_s"]
    out["load"] = rep["load"]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

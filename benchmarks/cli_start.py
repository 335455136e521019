"""Every command's start-up, two trees side by side: whole processes, alternating, medians.

    python benchmarks/cli_start.py --store /tmp/pmem-latency --tree before=/work/main --tree after=.

Each tree runs with its own home (a copy of latency.py's store of --n memories, built there by
`python benchmarks/latency.py --store DIR` first) and its own `pmem serve`, since a server of
another build is replaced, not used. In each round, for each tree in turn: the first `pmem search`
after its server was stopped (cold: it loads the model itself and starts a server in the
background), then `python -c pass`, `pmem --version`, `pmem list`, `pmem search` and `pmem add`
with the server it started (`server = auto`), and `pmem search` with `server = never`; which tree
goes first alternates (benchmarks/harness.py: A B, B A, ...). The figures are medians of wall and of CPU time (user + system of the
process); `python -c pass` is the machine's speed. A tree is a checkout folder or a git revision.

--anchor LLM also times `llm similar` once per round (latency.py's anchor: the llm executable of
its own environment, over the collection of the same --n turns that `latency.py --store DIR
--anchor LLM` built in DIR/llm-N) and gives each command's ratio to it: per round, then the median.

    python benchmarks/cli_start.py --store /tmp/pmem-latency --tree before=/work/main --tree after=. \
        --anchor /work/anchor-venv/bin/llm
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Bench, median, schedule, trees_from  # noqa: E402
from latency import COLLECTION, QUERIES, server_status, uptime, wait_for_server  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", type=Path, required=True, help="latency.py's --store folder (pmem-N.db in it)")
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--tree", action="append", required=True, metavar="NAME=PATH_OR_REV",
                    help="a pmem source tree (or git revision) to put on PYTHONPATH (twice or more)")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--anchor", help="the `llm` executable to time `llm similar` with, once per round")
    args = ap.parse_args()
    built = args.store / f"pmem-{args.n}.db"
    if not built.exists():
        raise SystemExit(f"no {built}: run benchmarks/latency.py --store {args.store} --n {args.n} first")
    llm_home = args.store / f"llm-{args.n}"
    if args.anchor and not (llm_home / "built.json").exists():
        raise SystemExit(f"no {llm_home}: run benchmarks/latency.py --store {args.store} --n {args.n} "
                         f"--anchor {args.anchor} first")
    pmem = [sys.executable, "-m", "pmem"]
    with trees_from(args.tree) as trees:
        envs = {}
        for tree in trees:
            shutil.copyfile(built, tree.home / "pmem.db")
            os.chmod(tree.home / "pmem.db", 0o600)
            env = tree.env(PMEM_SERVER="auto")
            env.setdefault("PMEM_MODELS_DIR", str(ROOT / ".models-cache"))
            envs[tree.name] = env
            tree.run(["pmem", "search", "warm the page cache", "--json"], env={**env, "PMEM_SERVER": "never"})
        steps = {  # the cold search first: the commands after it give its server time to settle
            "search_cold": lambda i: [*pmem, "search", QUERIES[i % len(QUERIES)], "--json"],
            "python_pass": lambda i: [sys.executable, "-c", "pass"],
            "version": lambda i: [*pmem, "--version"],
            "list": lambda i: [*pmem, "list"],
            "search_served": lambda i: [*pmem, "search", QUERIES[(i + 3) % len(QUERIES)], "--json"],
            "add_served": lambda i: [*pmem, "add", f"benchmark note number {i} about the garden"],
            "search_never": lambda i: [*pmem, "search", QUERIES[(i + 5) % len(QUERIES)], "--json"],
        }
        by_name = {t.name: t for t in trees}
        bench = Bench(trees)
        result: dict = {"trees": {t.name: str(t.path) for t in trees}, "memories": args.n, "uptime_start": uptime()}
        anchor_env = {**os.environ, "LLM_USER_PATH": str(llm_home)}
        similar: dict[int, float] = {}  # round -> wall of `llm similar`
        similar_cpu: dict[int, float] = {}
        runs: dict[tuple[str, str, int], tuple[float, float]] = {}  # (tree, step, round) -> (wall, CPU)
        if args.anchor:
            trees[0].run([args.anchor, "similar", COLLECTION, "-c", "warm the page cache"], env=anchor_env)
        try:
            for i, name, _ in schedule(list(by_name), args.runs):  # the order alternating
                if args.anchor and i not in similar:
                    sample = trees[0].run([args.anchor, "similar", COLLECTION, "-c", QUERIES[i % len(QUERIES)]],
                                          env=anchor_env)
                    similar[i], similar_cpu[i] = sample.wall_s, sample.cpu_s
                env = envs[name]
                subprocess.run([*pmem, "serve", "--stop"], env=env, capture_output=True, cwd=env["PMEM_HOME"])
                wait_for_server(pmem, env, up=False)
                for step, make in steps.items():
                    e = {**env, "PMEM_SERVER": "never"} if step == "search_never" else env
                    sample = by_name[name].run(make(i), env=e)
                    bench.add_sample(name, step, sample)
                    runs[name, step, i] = sample.wall_s, sample.cpu_s
                    if step == "search_cold":
                        wait_for_server(pmem, env)  # the one it started
        finally:
            for env in envs.values():
                if server_status(pmem, env):
                    subprocess.run([*pmem, "serve", "--stop"], env=env, capture_output=True, cwd=env["PMEM_HOME"])
        result["uptime_end"] = uptime()
        for name in by_name:
            result[name] = {step: {"wall_ms": round(1000 * bench.median(name, step, "wall_s")),
                                   "cpu_ms": round(1000 * bench.median(name, step, "cpu_s"))} for step in steps}
            if args.anchor:
                for step in steps:
                    result[name][step]["to_llm_similar"] = {
                        "wall": round(median([runs[name, step, i][0] / similar[i] for i in similar]), 3),
                        "cpu": round(median([runs[name, step, i][1] / similar_cpu[i] for i in similar]), 3)}
        if args.anchor:
            result["llm_similar"] = {"wall_ms": round(1000 * median(list(similar.values()))),
                                     "cpu_ms": round(1000 * median(list(similar_cpu.values())))}
    names = list(by_name)
    print(json.dumps(result, indent=2))
    print("\n| command | " + " | ".join(f"{n} wall / CPU" for n in names) + " |")
    print("| --- | " + " | ".join("---" for _ in names) + " |")
    for step in steps:
        cells = [f"{result[n][step]['wall_ms']} / {result[n][step]['cpu_ms']} ms" for n in names]
        if args.anchor:
            cells = [f"{c} ({result[n][step]['to_llm_similar']['wall']:.3f}x / "
                     f"{result[n][step]['to_llm_similar']['cpu']:.3f}x)" for c, n in zip(cells, names)]
        print(f"| {step} | " + " | ".join(cells) + " |")
    if args.anchor:
        print(f"| llm similar | {result['llm_similar']['wall_ms']} / {result['llm_similar']['cpu_ms']} ms |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Cold and served `pmem search` / `pmem add` / `pmem import`, two trees side by side (alternating):
what English memories' second vector costs a command (pmem/store/english.py).

    python benchmarks/english_cli.py --tree main=/path/to/main/checkout --tree this=.
    python benchmarks/english_cli.py --tree off=/path/to/main --off off --tree main=/path/to/main --tree this=.

Each tree gets its own PMEM_HOME, imports the same 302 short memories (the issue's Dana and Tokyo
memories among 300 others), then runs 5 x (search, add) alternating between the trees with
`server = never` (cold: the command loads its models) and with a `pmem serve` per home; medians.
A tree named with `--off` runs with `embed_english = none` (e5 alone: the cost before the second
vectors, on the same tree). Wall time, and the CPU time (user + system) of each command. The trees
alternate (benchmarks/harness.py: A B, B A, ...); a tree is a checkout folder or a git revision.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Bench, schedule, trees_from  # noqa: E402

DANA = "Deploys to production need approval from Dana"
TOKYO = "My flight to Tokyo leaves on October 12 from Berlin"
PEOPLE = ["Anna", "Ben", "Chloe", "Dmitri", "Elif", "Farid", "Greta", "Hiro", "Ines", "Jonas"]
THINGS = ["bought new running shoes", "made a lentil soup", "watched a film about whales", "repainted the fence",
          "planted tomatoes", "baked sourdough bread", "fixed the bike's chain", "read a novel set in Lisbon",
          "visited the science museum", "went swimming at the lake", "started learning the cello",
          "ordered a blue armchair", "cleaned the gutters", "tried a Georgian restaurant", "lost an umbrella"]
WHEN = ["on Monday", "last weekend", "in the spring"]
OTHERS = [f"{p} {t} {w}." for p in PEOPLE for t in THINGS for w in WHEN][:300]


def measure(trees: dict, runs: int, off: list[str], bench: Bench) -> dict:
    data = next(iter(trees.values())).home.parent / "memories.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in [DANA, TOKYO, *OTHERS]))

    def env(tree: str, server: str) -> dict:
        base = {k: v for k, v in os.environ.items() if not k.startswith("PMEM_") or k == "PMEM_MODELS_DIR"}
        # Users keep bytecode; a sandbox that sets PYTHONDONTWRITEBYTECODE makes a tree with no
        # __pycache__ of its own compile every module in every command (+0.12 s of CPU a served
        # search here): the harness's environment drops it
        e = trees[tree].env(base, PMEM_SERVER=server, NO_COLOR="1")
        if tree in off:
            e["PMEM_EMBED_ENGLISH"] = "none"
        return e

    def run(tree: str, server: str, *cmd: str) -> tuple[float, str]:
        # cwd: the tree's home, since `python -m` puts the working directory first on sys.path
        sample = trees[tree].run(["pmem", *cmd], env=env(tree, server))
        if cmd[0] in ("search", "add") and cmd[1] != "warm up":
            bench.add(tree, f"{'cold' if server == 'never' else 'served'} {cmd[0]}", "cpu_s", sample.cpu_s)
        return sample.wall_s, sample.stdout

    out: dict = {"load before": round(os.getloadavg()[0], 2)}
    for tree in trees:  # each tree's own code runs
        out[f"{tree}: pmem from"] = trees[tree].python("import pmem; print(pmem.__file__)",
                                                       env=env(tree, "never")).stdout.strip()
    for tree in trees:
        out[f"{tree}: import of {len(OTHERS) + 2}, s"] = round(run(tree, "never", "import", str(data), "--format",
                                                                  "jsonl")[0], 2)
    for phase, server in (("cold", "never"), ("served", "auto")):
        if phase == "served":
            for tree in trees:
                run(tree, "auto", "serve", "--detach")
                run(tree, "auto", "search", "warm up")
        for i, tree, _ in schedule(list(trees), runs):
            dt, found = run(tree, server, "search", "who signs off on releases", "--json", "--limit", "1")
            bench.add(tree, f"{phase} search", "wall_s", dt)
            if i == 0:  # the store as imported (the adds below change its words' weights)
                out[f"{tree}: {phase} top hit"] = json.loads(found)[0]["text"]
            bench.add(tree, f"{phase} add", "wall_s", run(tree, server, "add", f"a {phase} note number {i} about the garden")[0])
    for tree in trees:
        run(tree, "auto", "serve", "--stop")
    for measure, unit in (("wall_s", "s"), ("cpu_s", "CPU s")):
        for tree in trees:
            for step in ("cold search", "cold add", "served search", "served add"):
                out[f"{tree}: {step}, {unit}"] = round(bench.median(tree, step, measure), 3)
    out["load after"] = round(os.getloadavg()[0], 2)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", action="append", required=True, help="NAME=PATH of a pmem checkout (twice or more)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--off", action="append", default=[], help="NAME of a tree run with embed_english = none")
    args = ap.parse_args()
    with trees_from(args.tree, prefix="pmem-cli-") as listed:  # under /tmp, short: the socket's path
        trees = {t.name: t for t in listed}
        out = measure(trees, args.runs, args.off, Bench(listed))
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

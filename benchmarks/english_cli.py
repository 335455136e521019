"""Cold and served `pmem search` / `pmem add` / `pmem import`, two trees side by side (alternating):
what English memories' second vector costs a command (pmem/store/english.py).

    python benchmarks/english_cli.py --tree main=/path/to/main/checkout --tree this=.
    python benchmarks/english_cli.py --tree off=/path/to/main --off off --tree main=/path/to/main --tree this=.

Each tree gets its own PMEM_HOME, imports the same 302 short memories (the issue's Dana and Tokyo
memories among 300 others), then runs 5 x (search, add) alternating between the trees with
`server = never` (cold: the command loads its models) and with a `pmem serve` per home; medians.
A tree named with `--off` runs with `embed_english = none` (e5 alone: the cost before the second
vectors, on the same tree). Wall time, and the CPU time (user + system) of each command.
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

DANA = "Deploys to production need approval from Dana"
TOKYO = "My flight to Tokyo leaves on October 12 from Berlin"
PEOPLE = ["Anna", "Ben", "Chloe", "Dmitri", "Elif", "Farid", "Greta", "Hiro", "Ines", "Jonas"]
THINGS = ["bought new running shoes", "made a lentil soup", "watched a film about whales", "repainted the fence",
          "planted tomatoes", "baked sourdough bread", "fixed the bike's chain", "read a novel set in Lisbon",
          "visited the science museum", "went swimming at the lake", "started learning the cello",
          "ordered a blue armchair", "cleaned the gutters", "tried a Georgian restaurant", "lost an umbrella"]
WHEN = ["on Monday", "last weekend", "in the spring"]
OTHERS = [f"{p} {t} {w}." for p in PEOPLE for t in THINGS for w in WHEN][:300]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", action="append", required=True, help="NAME=PATH of a pmem checkout (twice or more)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--off", action="append", default=[], help="NAME of a tree run with embed_english = none")
    args = ap.parse_args()
    trees = dict(t.split("=", 1) for t in args.tree)
    root = Path(tempfile.mkdtemp(prefix="pmem-cli-", dir="/tmp"))  # short: the socket's path
    data = root / "memories.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in [DANA, TOKYO, *OTHERS]))

    def env(tree: str, server: str) -> dict:
        e = {k: v for k, v in os.environ.items() if not k.startswith("PMEM_") or k == "PMEM_MODELS_DIR"}
        e.update(PYTHONPATH=str(Path(trees[tree]).resolve()), PMEM_HOME=str(root / tree), PMEM_SERVER=server,
                 NO_COLOR="1")
        if tree in args.off:
            e["PMEM_EMBED_ENGLISH"] = "none"
        # Users keep bytecode; a sandbox that sets this makes a tree with no __pycache__ of its own
        # compile every module in every command (+0.12 s of CPU a served search here)
        e.pop("PYTHONDONTWRITEBYTECODE", None)
        return e

    cpu: dict[str, list[float]] = {}

    def run(tree: str, server: str, *cmd: str) -> tuple[float, str]:
        before = os.times()
        t = time.perf_counter()
        # cwd: `python -m` puts the working directory first on sys.path, before PYTHONPATH's tree
        p = subprocess.run([sys.executable, "-m", "pmem", *cmd], env=env(tree, server), capture_output=True, text=True,
                           cwd=root)
        if p.returncode:
            raise SystemExit(p.stderr)
        after = os.times()
        if cmd[0] in ("search", "add") and cmd[1] != "warm up":
            cpu.setdefault(f"{tree}: {'cold' if server == 'never' else 'served'} {cmd[0]}, CPU s", []).append(
                after.children_user - before.children_user + after.children_system - before.children_system)
        return time.perf_counter() - t, p.stdout

    out: dict = {"load before": round(os.getloadavg()[0], 2)}
    for tree in trees:  # each tree's own code runs
        out[f"{tree}: pmem from"] = subprocess.run([sys.executable, "-c", "import pmem; print(pmem.__file__)"],
                                                   env=env(tree, "never"), cwd=root, capture_output=True,
                                                   text=True).stdout.strip()
    for tree in trees:
        (root / tree).mkdir()
        out[f"{tree}: import of {len(OTHERS) + 2}, s"] = round(run(tree, "never", "import", str(data), "--format",
                                                                  "jsonl")[0], 2)
    times: dict[str, list[float]] = {}
    for phase, server in (("cold", "never"), ("served", "auto")):
        if phase == "served":
            for tree in trees:
                run(tree, "auto", "serve", "--detach")
                run(tree, "auto", "search", "warm up")
        for i in range(args.runs):
            for tree in trees:
                dt, found = run(tree, server, "search", "who signs off on releases", "--json", "--limit", "1")
                times.setdefault(f"{tree}: {phase} search, s", []).append(dt)
                if i == 0:  # the store as imported (the adds below change its words' weights)
                    out[f"{tree}: {phase} top hit"] = json.loads(found)[0]["text"]
                times.setdefault(f"{tree}: {phase} add, s", []).append(
                    run(tree, server, "add", f"a {phase} note number {i} about the garden")[0])
    for tree in trees:
        run(tree, "auto", "serve", "--stop")
    out.update({k: round(statistics.median(v), 3) for k, v in times.items()})
    out.update({k: round(statistics.median(v), 3) for k, v in cpu.items()})
    out["load after"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

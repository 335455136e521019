"""Two (or more) pmem source trees side by side: the one way the benchmarks time them.

    python benchmarks/harness.py --tree ../main --tree . --rounds 5 -- pmem search "x"
    python benchmarks/harness.py --tree before=HEAD~3 --tree after=. --warmup 1 --seed memories.jsonl \\
        --json -- pmem list

A tree is a checkout folder, or a git revision of this repository (copied out with `git archive`
into a temporary folder, removed at the end). Each command runs in a fresh process with that tree
first on PYTHONPATH; `pmem ...` runs as `python -m pmem ...` with the same Python, in the tree's own
fresh PMEM_HOME (seeded by `pmem import SEED`, untimed, when --seed is given) and with the home as
the working directory (`python -m` puts the working directory first on sys.path).

Rounds are interleaved across the trees, the order alternating (A B, B A, A B, ...) so neither tree
always runs first; --fixed-order keeps A B every round. Warm-up rounds run first and are not
counted. For each run: the wall time and the CPU time (user + system, from the children's rusage)
of the process. Printed: the load average at the start and the end, and for each tree the median
with the 10th and 90th percentiles (or --percentile P, repeated) and the ratio of its median to the
first tree's; --json prints the same figures with stable keys (see `report`).

Scripts use it as a library: `Tree.resolve(spec)`, `tree.env()`, `tree.run(argv)` / `tree.python(code)`
(a `Sample` of wall and CPU), `schedule(names, rounds, warmup)` for the order, and `Bench` to collect
figures and report them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FORMAT = 1  # the version of the JSON report's keys


# -- statistics -----------------------------------------------------------------------------------

def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (0..100), linear between the closest ranks (numpy's default "linear")."""
    if not values:
        raise ValueError("no values")
    if not 0 <= p <= 100:
        raise ValueError(f"percentile {p} is not within 0..100")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * p / 100
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def median(values: Sequence[float]) -> float:
    return percentile(values, 50)


def summary(values: Sequence[float], percentiles: Sequence[float] = (10, 90), digits: int = 4) -> dict:
    """{"n", "median", "p<P>" for each P, "min", "max", "values"} of the values, rounded."""
    out: dict = {"n": len(values), "median": round(median(values), digits)}
    for p in percentiles:
        out[f"p{p:g}"] = round(percentile(values, p), digits)
    out["min"] = round(min(values), digits)
    out["max"] = round(max(values), digits)
    out["values"] = [round(v, digits) for v in values]
    return out


def ratio(value: float, base: float) -> float | None:
    return round(value / base, 3) if base else None


# -- interleaving ---------------------------------------------------------------------------------

def schedule(names: Sequence[str], rounds: int, warmup: int = 0,
             alternate: bool = True) -> Iterator[tuple[int, str, bool]]:
    """(round, tree name, counted) in the order to run: the warm-up rounds first (round < 0, not
    counted), then `rounds` rounds, every tree once a round. With `alternate` the order reverses
    every other round (A B, B A, ...), counted rounds starting with the trees' own order."""
    for w in range(warmup):
        for name in names:
            yield w - warmup, name, False
    for r in range(rounds):
        order = list(names) if (r % 2 == 0 or not alternate) else list(names)[::-1]
        for name in order:
            yield r, name, True


# -- one run --------------------------------------------------------------------------------------

@dataclass
class Sample:
    wall_s: float
    cpu_s: float
    returncode: int
    stdout: str = ""
    stderr: str = ""


@contextlib.contextmanager
def clock() -> Iterator[dict]:
    """Times the block: after it, the dict holds wall_s and cpu_s (user + system of the children
    waited for in the block: run one child at a time)."""
    out: dict = {}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    try:
        yield out
    finally:
        out["wall_s"] = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        out["cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _git(repo: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, check=False, **kw)


@dataclass
class Tree:
    """A pmem source tree: `path` goes first on PYTHONPATH; `home` is its own PMEM_HOME when set."""

    name: str
    path: Path
    revision: str | None = None
    home: Path | None = None
    env_extra: dict = field(default_factory=dict)

    @classmethod
    def resolve(cls, spec: str, workdir: Path, repo: Path = ROOT) -> Tree:
        """NAME=WHERE or WHERE; WHERE is a folder (a checkout) or a git revision of `repo`,
        materialised in `workdir` with `git archive` (the files as committed)."""
        name, _, where = spec.rpartition("=")
        if Path(where).is_dir():
            path = Path(where).resolve()
            return cls(name or path.name, path)
        sha = _git(repo, "rev-parse", "--verify", "--quiet", f"{where}^{{commit}}", text=True).stdout.strip()
        if not sha:
            raise SystemExit(f"harness: {where!r} is neither a folder nor a git revision of {repo}")
        target = workdir / f"tree-{sha[:12]}"
        if not target.exists():
            target.mkdir(parents=True)
            archive = _git(repo, "archive", "--format=tar", sha)
            if archive.returncode:
                raise SystemExit(f"harness: git archive {where} failed: {archive.stderr.decode(errors='replace')[-300:]}")
            subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
        return cls(name or where, target, revision=sha)

    def env(self, base: dict | None = None, **extra: str) -> dict:
        """The environment of a child: `base` (os.environ), this tree first on PYTHONPATH, PMEM_HOME
        when the tree has a home, bytecode caching on (as a user runs), and `extra`."""
        env = dict(os.environ if base is None else base)
        env["PYTHONPATH"] = str(self.path)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        if self.home is not None:
            env["PMEM_HOME"] = str(self.home)
        env.update(self.env_extra)
        env.update(extra)
        return env

    def argv(self, command: Sequence[str]) -> list[str]:
        """`pmem ...` becomes `python -m pmem ...` so this tree's pmem runs, not an installed one."""
        if command and command[0] == "pmem":
            return [sys.executable, "-m", "pmem", *command[1:]]
        if command and command[0] == "python":
            return [sys.executable, *command[1:]]
        return list(command)

    def run(self, command: Sequence[str], env: dict | None = None, cwd: Path | None = None,
            input: str | None = None, timeout: float | None = None, check: bool = True) -> Sample:
        """One fresh process of `command` (see argv) with this tree's environment (or `env`), timed."""
        cwd = cwd or self.home or Path(tempfile.gettempdir())
        with clock() as t:
            proc = subprocess.run(self.argv(command), env=self.env() if env is None else env, cwd=cwd, input=input,
                                  capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode:
            last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise SystemExit(f"harness: {self.name}: {' '.join(command)} exited {proc.returncode}: {last}")
        return Sample(t["wall_s"], t["cpu_s"], proc.returncode, proc.stdout, proc.stderr)

    def python(self, code: str, *args: str, **kw) -> Sample:
        """A Python snippet in a fresh process of this tree (`python -c code args...`)."""
        return self.run([sys.executable, "-c", code, *args], **kw)


# -- collecting and reporting ---------------------------------------------------------------------

class Bench:
    """Figures per tree, per step, per measure ("wall_s", "cpu_s" or any other), and their report."""

    def __init__(self, trees: Sequence[Tree], percentiles: Sequence[float] = (10, 90)):
        self.trees = list(trees)
        self.percentiles = list(percentiles)
        self.values: dict[str, dict[str, dict[str, list[float]]]] = {t.name: {} for t in self.trees}
        self.load_start = load()
        self.load_end: list[float] | None = None
        self.meta: dict = {}

    def add(self, tree: str, step: str, measure: str, value: float) -> None:
        self.values[tree].setdefault(step, {}).setdefault(measure, []).append(value)

    def add_sample(self, tree: str, step: str, sample: Sample) -> None:
        self.add(tree, step, "wall_s", sample.wall_s)
        self.add(tree, step, "cpu_s", sample.cpu_s)

    def median(self, tree: str, step: str, measure: str = "wall_s") -> float:
        return median(self.values[tree][step][measure])

    def report(self) -> dict:
        """{"format", "trees": {name: {"path", "revision"}}, "percentiles", "load": {"start", "end"},
        "results": {tree: {step: {measure: summary}}}, "ratios": {tree: {step: {measure: median / first
        tree's median}}}, plus whatever a script put in `meta`}."""
        if self.load_end is None:
            self.load_end = load()
        first = self.trees[0].name
        results = {t: {s: {m: summary(v, self.percentiles) for m, v in ms.items()} for s, ms in steps.items()}
                   for t, steps in self.values.items()}
        ratios = {t: {s: {m: ratio(median(v), median(self.values[first][s][m]))
                          for m, v in ms.items() if self.values[first].get(s, {}).get(m)}
                      for s, ms in steps.items()} for t, steps in self.values.items() if t != first}
        return {"format": FORMAT,
                "trees": {t.name: {"path": str(t.path), "revision": t.revision} for t in self.trees},
                "percentiles": self.percentiles, "load": {"start": self.load_start, "end": self.load_end},
                **self.meta, "results": results, "ratios": ratios}

    def table(self, unit: float = 1000, suffix: str = "ms") -> str:
        """A plain-text table: a row per step and measure, a column per tree (median and the
        percentiles), the ratio to the first tree last."""
        rep = self.report()
        lo, hi = (f"p{self.percentiles[0]:g}", f"p{self.percentiles[-1]:g}") if self.percentiles else ("", "")
        header = ["step", "measure", *(t.name for t in self.trees), *(f"{t.name}/{self.trees[0].name}"
                                                                      for t in self.trees[1:])]
        rows = [header]
        steps = list(dict.fromkeys(s for t in self.values.values() for s in t))
        for step in steps:
            measures = list(dict.fromkeys(m for t in self.values.values() for m in t.get(step, {})))
            for m in measures:
                cells = [step, m]
                for t in self.trees:
                    s = rep["results"][t.name].get(step, {}).get(m)
                    if s is None:
                        cells.append("-")
                        continue
                    scale, unit_s = (unit, f" {suffix}") if m.endswith("_s") else (1, "")
                    cell = f"{s['median'] * scale:.1f}{unit_s}"
                    if lo:
                        cell += f" ({s[lo] * scale:.1f}-{s[hi] * scale:.1f})"
                    cells.append(cell)
                for t in self.trees[1:]:
                    r = rep["ratios"][t.name].get(step, {}).get(m)
                    cells.append("-" if r is None else f"{r:.3f}")
                rows.append(cells)
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        pct = f"median ({lo}-{hi})" if lo else "median"
        lines.insert(0, f"load {rep['load']['start']} -> {rep['load']['end']}; cells: {pct}")
        return "\n".join(lines)


def run_rounds(trees: Sequence[Tree], rounds: int, warmup: int, step: Callable[[Tree, int], dict[str, Sample]],
               bench: Bench, alternate: bool = True) -> Bench:
    """Runs `step(tree, round)` in the interleaved order; the Samples it returns (by step name) of
    the counted rounds go into `bench`."""
    by_name = {t.name: t for t in trees}
    for r, name, counted in schedule(list(by_name), rounds, warmup, alternate):
        samples = step(by_name[name], r)
        if counted:
            for key, sample in samples.items():
                bench.add_sample(name, key, sample)
    bench.load_end = load()
    return bench


@contextlib.contextmanager
def trees_from(specs: Sequence[str], prefix: str = "pmem-bench-", homes: bool = True) -> Iterator[list[Tree]]:
    """The trees of --tree specs, each with its own empty PMEM_HOME (`homes`), in a temporary folder
    under /tmp (short: a server's socket lives in the home) removed afterwards."""
    work = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    trees: list[Tree] = []
    try:
        trees.extend(Tree.resolve(s, work / "trees") for s in specs)
        names = [t.name for t in trees]
        if len(set(names)) != len(names):
            raise SystemExit(f"harness: two trees are named alike ({', '.join(names)}): name them NAME=WHERE")
        if homes:
            for i, t in enumerate(trees):
                t.home = work / f"home{i}"
                t.home.mkdir(mode=0o700)
        yield trees
    finally:
        for t in trees:  # a server a command started (`server = auto`) goes too
            if t.home is not None and any(t.home.glob("*.sock")):
                t.run(["pmem", "serve", "--stop"], timeout=60, check=False)
        shutil.rmtree(work, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", action="append", required=True, metavar="[NAME=]PATH_OR_REV",
                    help="a checkout folder or a git revision (twice or more; the first is the base of the ratios)")
    ap.add_argument("--rounds", type=int, default=5, help="counted rounds (each tree once a round)")
    ap.add_argument("--warmup", type=int, default=0, help="uncounted rounds first")
    ap.add_argument("--percentile", type=float, action="append", help="percentiles shown (default 10 and 90)")
    ap.add_argument("--fixed-order", action="store_true", help="the trees in the same order every round")
    ap.add_argument("--seed", type=Path, help="a file `pmem import` reads into each tree's home first (untimed)")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="set for every run")
    ap.add_argument("--json", action="store_true", help="the figures as JSON (stable keys)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command line (`pmem ...` runs the tree's)")
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("no command: give it after --")
    if args.rounds < 1 or args.warmup < 0:
        ap.error("--rounds must be 1 or more, --warmup 0 or more")
    extra = {}
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            ap.error(f"--env {item!r}: KEY=VALUE")
        extra[key] = value
    with trees_from(args.tree) as trees:
        for t in trees:
            t.env_extra = extra
            if args.seed:
                t.run(["pmem", "import", str(args.seed.resolve())], timeout=3600)
        bench = Bench(trees, args.percentile or (10, 90))
        bench.meta = {"command": command, "rounds": args.rounds, "warmup": args.warmup,
                      "order": "fixed" if args.fixed_order else "alternating"}
        run_rounds(trees, args.rounds, args.warmup, lambda t, r: {"command": t.run(command)}, bench,
                   alternate=not args.fixed_order)
    print(json.dumps(bench.report(), indent=1) if args.json else bench.table())
    return 0


if __name__ == "__main__":
    sys.exit(main())

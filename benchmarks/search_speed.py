"""In-process search on stores scale.py built, two (or more) source trees side by side.

    python benchmarks/search_speed.py --tree main=../main --tree . \\
        --db /tmp/pmem-scale/scale-10000.db --db /tmp/pmem-scale/scale-100000.db --rounds 5

Each round runs every tree once (benchmarks/harness.py: fresh processes, the order alternating),
on every store: a child process opens a copy of the store (made once, shared by the trees; the
fake-384 embedder, as scale.py built it), searches the 32 questions of search_stages.py once
untimed, then --passes times more, timed one by one: the whole hybrid search() (limit 10), and,
with --sides, each side alone (keyword_ranks, semantic_ranks with the query vector given) at the
profile's candidates. Per round the median of the searches goes into the table (wall and CPU of
the process's threads together, milliseconds; and the CPU of the busier of search's two threads,
the keyword side's and this one: on a machine with two idle cores a search takes about that
long); the tree's figure is the median of its rounds, and the ratio is to the first tree's.

The children also print what they found: the ids and rank scores of every search's hits, and each
side's (seq, score) lists. "identical" says whether every tree found bit-for-bit the same on each
store: a change to the read path that should not move a ranking must keep it "yes".
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def questions() -> list[str]:
    """search_stages.py's 32: 16 LoCoMo dev questions spread over the conversations, 16 paraphrase ones."""
    import fusion_sets

    from scale_corpus import questions as locomo_questions

    return locomo_questions(16) + [q.text for q in fusion_sets.paraphrase_records()[1]][:16]


def child(db: Path, passes: int, sides: bool) -> dict:
    """One tree's figures on one store (runs in the child, with that tree's pmem)."""
    import importlib

    from scale_corpus import NOW

    S = importlib.import_module("pmem.search")
    from pmem import Filter, MemoryStore

    qs = questions()
    side: list[float] = []  # CPU seconds of each run of search's keyword-side thread
    real_run = threading.Thread.run

    def run(self: threading.Thread) -> None:
        start = time.thread_time()
        try:
            real_run(self)
        finally:
            if self.name == "pmem-keyword-side":
                side.append(time.thread_time() - start)

    threading.Thread.run = run  # type: ignore[method-assign]
    store = MemoryStore(db, clock=lambda: NOW)
    flt = Filter()
    digest = hashlib.sha256()
    wall: list[float] = []
    cpu: list[float] = []
    busiest: list[float] = []
    kw_ms: list[float] = []
    sem_ms: list[float] = []
    vectors = {q: store.query_vector(q) for q in qs}
    candidates = getattr(S, "DEFAULT_TUNING", None)
    n = getattr(candidates, "candidates", 100)
    for p in range(1 + passes):
        for q in qs:
            t, c, runs = time.perf_counter(), time.process_time(), len(side)
            hits = S.search(store, q, flt, limit=10)
            if p:
                wall.append(time.perf_counter() - t)
                cpu.append(time.process_time() - c)
                other = side[-1] if len(side) > runs else 0.0
                busiest.append(max(other, cpu[-1] - other))
            else:
                digest.update(json.dumps([(h.memory.id, repr(h.rank_score)) for h in hits]).encode())
            if sides:
                t = time.perf_counter()
                kw = S.keyword_ranks(store, q, flt, n)
                if p:
                    kw_ms.append(time.perf_counter() - t)
                t = time.perf_counter()
                sem = S.semantic_ranks(store, q, flt, n, vector=vectors[q])
                if p:
                    sem_ms.append(time.perf_counter() - t)
                if not p:
                    digest.update(json.dumps([kw, sem]).encode())
    memories = store.db.memory_count() if hasattr(store, "db") else None
    store.close()
    out = {"memories": memories, "found": digest.hexdigest()[:16], "wall_s": statistics.median(wall),
           "cpu_s": statistics.median(cpu), "busiest_thread_cpu_s": statistics.median(busiest),
           "searches": len(wall)}
    if sides:
        out.update(keyword_s=statistics.median(kw_ms), semantic_s=statistics.median(sem_ms))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", action="append", metavar="[NAME=]PATH_OR_REV",
                    help="a checkout folder or a git revision (twice or more; the first is the base of the ratios)")
    ap.add_argument("--db", action="append", type=Path, help="a store scale.py built (repeatable)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds (each tree once a round, on every store)")
    ap.add_argument("--passes", type=int, default=2, help="timed passes over the questions in each child")
    ap.add_argument("--sides", action="store_true", help="also time each side alone")
    ap.add_argument("--no-copy", action="store_true", help="search the stores where they are (not a copy)")
    ap.add_argument("--json", action="store_true", help="the harness's JSON report")
    ap.add_argument("--child", nargs=3, metavar=("DB", "PASSES", "SIDES"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        db, passes, sides = args.child
        print(json.dumps(child(Path(db), int(passes), sides == "1")))
        return
    if not args.tree or not args.db:
        ap.error("give --tree (twice or more) and --db")
    import harness

    work = Path(tempfile.mkdtemp(prefix="pmem-search-speed-", dir="/tmp"))
    try:
        stores = []
        for db in args.db:
            if not db.exists():
                raise SystemExit(f"no store {db}: build it with `python benchmarks/scale.py build --n N`")
            if args.no_copy:
                stores.append(db)
                continue
            copy = work / db.name
            shutil.copyfile(db, copy)
            stores.append(copy)
        with harness.trees_from(args.tree) as trees:
            bench = harness.Bench(trees)
            found: dict[str, dict[str, str]] = {}
            memories: dict[str, int] = {}
            env_extra = {"PMEM_EMBED_MODEL": "fake-384", "PMEM_SERVER": "off"}

            def step(tree: harness.Tree, round_: int) -> dict:
                for db in stores:
                    sample = tree.run(["python", str(Path(__file__).resolve()), "--child", str(db),
                                       str(args.passes), "1" if args.sides else "0"],
                                      env=tree.env(**env_extra), timeout=3600)
                    got = json.loads(sample.stdout.strip().splitlines()[-1])
                    label = f"{db.stem} ({got['memories']:,})" if got.get("memories") else db.stem
                    memories[db.name] = got.get("memories")
                    found.setdefault(label, {})[tree.name] = got["found"]
                    for measure in ("wall_s", "cpu_s", "busiest_thread_cpu_s", "keyword_s", "semantic_s"):
                        if measure in got:
                            name = {"keyword_s": "keyword side", "semantic_s": "semantic side"}.get(measure)
                            bench.add(tree.name, f"{label} {name or 'hybrid'}",
                                      "wall_s" if name else measure, got[measure])
                    print(f"round {round_} {tree.name} {label}: {got['wall_s'] * 1e3:.2f} ms "
                          f"(cpu {got['cpu_s'] * 1e3:.2f}), load {os.getloadavg()[0]:.1f}",
                          file=sys.stderr, flush=True)
                return {}

            harness.run_rounds(trees, args.rounds, 0, step, bench)
            bench.meta = {"rounds": args.rounds, "passes": args.passes, "questions": 32,
                          "identical": {db: len(set(by.values())) == 1 for db, by in found.items()},
                          "found": found}
            if args.json:
                print(json.dumps(bench.report(), indent=1))
            else:
                print(bench.table())
                for db, by in found.items():
                    print(f"{db}: identical {'yes' if len(set(by.values())) == 1 else 'NO'} ({by})")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

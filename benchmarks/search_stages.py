"""What each stage of an in-process hybrid search costs, on a store scale.py built.

    python benchmarks/search_stages.py --db /tmp/pmem-scale/scale-100000.db --rounds 3
    python benchmarks/search_stages.py --db /tmp/pmem-scale/scale-100000.db --rounds 3 --off

search() as shipped (fake-384 vectors, as `fusion_variants.py scale` runs it) on 16 LoCoMo and 16
paraphrase questions, on a copy of the store; each stage's function is wrapped with a timer (the
keyword side's on its own thread counted too), and its milliseconds per query are printed beside
the whole search's median and mean, rounds after a first, cold one. The two sides run at once,
so their times overlap; the rest runs after both.

With --off, what each stage that came in last costs instead: search() with the shipped profile
and with each of them turned off in turn (OFF: 100 candidates a side instead of 125, no thread
lift, no question penalty, no dense-first move and so no rare-word check), one after another on
each question, medians of the wall and the CPU time (both threads) per search.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fusion_sets  # noqa: E402

from scale_corpus import NOW, questions  # noqa: E402

STAGES = {  # module or class path -> the functions timed, each a stage of search()
    "pmem.search": ("_both_sides", "keyword_ranks", "semantic_ranks", "thread_lift", "asking", "fused"),
    "pmem.store.keywords:KeywordIndex": ("ranks", "candidate_neighbours", "holds_rare"),
    "pmem.store.vectors:VectorIndex": ("ranks",),
    "pmem:MemoryStore": ("questions", "memories_by_seq", "thresholds", "query_vector"),
}


def wrap_stages(spent: dict[str, float]) -> None:
    lock = threading.Lock()
    for where, names in STAGES.items():
        module, _, cls = where.partition(":")
        owner = importlib.import_module(module)
        if cls:
            owner = getattr(owner, cls)
        for name in names:
            label = f"{cls or 'search'}.{name}"
            original = getattr(owner, name)

            def timed(*args, _original=original, _label=label, **kwargs):
                start = time.perf_counter()
                try:
                    return _original(*args, **kwargs)
                finally:
                    with lock:
                        spent[_label] += time.perf_counter() - start

            setattr(owner, name, timed)


OFF = {"candidates 100": {"candidates": 100}, "no thread lift": {"thread_lift": 0.0},
       "no question penalty": {"question_penalty": 0.0}, "no dense first": {"dense_first": False}}


def stage_costs(store, qs: list[str], rounds: int) -> dict[str, tuple[float, float]]:
    """(wall ms, CPU ms) per search, medians, of search() as shipped and with each of OFF."""
    from dataclasses import replace

    from pmem.store import Filter

    s = importlib.import_module("pmem.search")
    shipped = s.profile_for(store)
    profiles = {"shipped": shipped, **{label: replace(shipped, **change) for label, change in OFF.items()}}
    wall: dict[str, list[float]] = collections.defaultdict(list)
    cpu: dict[str, list[float]] = collections.defaultdict(list)
    for round_ in range(1 + rounds):
        for q in qs:
            for label, profile in profiles.items():
                start, used = time.perf_counter(), time.process_time()
                s.search(store, q, Filter(), limit=10, tuning=profile)
                if round_:
                    wall[label].append(time.perf_counter() - start)
                    cpu[label].append(time.process_time() - used)
    return {label: (statistics.median(wall[label]) * 1e3, statistics.median(cpu[label]) * 1e3) for label in profiles}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", type=Path, default=Path("/tmp/pmem-scale/scale-100000.db"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--off", action="store_true", help="what each of the last stages costs (OFF), not each stage's time")
    args = ap.parse_args()
    from pmem import MemoryStore
    from pmem.config import load
    from pmem.store import Filter

    if args.off:
        qs = questions(16) + [q.text for q in fusion_sets.paraphrase_records()[1]][:16]
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "store.db"
            shutil.copy(args.db, path)
            store = MemoryStore(path, config=load().with_values(embed_model="fake-384"), clock=lambda: NOW)
            costs = stage_costs(store, qs, args.rounds)
            memories = store.count()
            store.close()
        print(f"{memories:,} memories, {len(qs)} questions x {args.rounds} rounds, load {os.getloadavg()[0]:.1f}")
        base_wall, base_cpu = costs["shipped"]
        for label, (w, c) in costs.items():
            print(f"  {label:22} wall {w:7.2f} ms  CPU {c:7.2f} ms  (shipped - this: wall {base_wall - w:+.2f}, "
                  f"CPU {base_cpu - c:+.2f})")
        return
    spent: dict[str, float] = collections.defaultdict(float)
    wrap_stages(spent)
    search = importlib.import_module("pmem.search").search
    qs = questions(16) + [q.text for q in fusion_sets.paraphrase_records()[1]][:16]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "store.db"
        shutil.copy(args.db, path)
        store = MemoryStore(path, config=load().with_values(embed_model="fake-384"), clock=lambda: NOW)
        times: list[float] = []
        for round_ in range(1 + args.rounds):
            if round_ == 1:
                spent.clear()
                times.clear()
            for q in qs:
                start = time.perf_counter()
                search(store, q, Filter(), limit=10)
                times.append(time.perf_counter() - start)
        memories = store.count()
        store.close()
    n = len(times)
    print(f"{memories:,} memories, {n} searches, load {os.getloadavg()[0]:.1f}: median "
          f"{statistics.median(times) * 1e3:.2f} ms, mean {sum(times) / n * 1e3:.2f} ms")
    for label, seconds in sorted(spent.items(), key=lambda kv: -kv[1]):
        print(f"  {label:32} {seconds / n * 1e3:7.2f} ms a search")


if __name__ == "__main__":
    main()

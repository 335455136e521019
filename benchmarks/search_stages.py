"""What each stage of an in-process hybrid search costs, on a store scale.py built.

    python benchmarks/search_stages.py --db /tmp/pmem-scale/scale-100000.db --rounds 3

search() as shipped (fake-384 vectors, as `fusion_variants.py scale` runs it) on 16 LoCoMo and 16
paraphrase questions, on a copy of the store; each stage's function is wrapped with a timer (the
keyword side's on its own thread counted too), and its milliseconds per query are printed beside
the whole search's median and mean, rounds after a first, cold one. The two sides run at once,
so their times overlap; the rest runs after both.
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
    "pmem.store.keywords:KeywordIndex": ("ranks", "neighbours", "holds_rare"),
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", type=Path, default=Path("/tmp/pmem-scale/scale-100000.db"))
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    from pmem import MemoryStore
    from pmem.config import load
    from pmem.store import Filter

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

"""What English memories' second vector costs an in-process search at scale (pmem/store/english.py).

    python benchmarks/scale.py build --n 100000                       # the store, once (fake-384 vectors)
    python benchmarks/english_cost.py --db /tmp/pmem-scale/scale-100000.db

A copy of a scale.py store is relabelled as the default model's (multilingual-e5-small-symmetric)
and every English memory gets a second vector (its own 384-d vector again: what is stored does
not change what a search costs). The same questions are then searched, alternating, on the copy
with `embed_english = none`, with `minilm` as the third round shipped it (MiniLM's f16 file, the
`threads` setting's threads, `--before`), and with `minilm` as this tree loads it, all with the
real models embedding the query in this process (e5, and MiniLM on its own thread): hybrid search
and the dense side alone, and the dense side with both query vectors embedded beforehand (the
store's own cost: e5's nearest POOL, MiniLM's rescoring); medians of the rounds after the first
(cold) one, ms per query. `--cpu` adds the process's CPU time per hybrid search.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale_corpus import NOW, questions  # noqa: E402


def english_copy(db: Path, tmp: Path):
    """A copy of scale.py's store `db` in `tmp`, relabelled as the default model's, every English
    memory given a second vector (its own vector again): (path, config, e5, the store)."""
    from pmem import MemoryStore
    from pmem.config import load
    from pmem.models.embed import load_embedder
    from pmem.store import english as en

    path = tmp / "store.db"
    shutil.copy(db, path)
    cfg = load().with_values(embed_model=en.MAIN)
    e5 = load_embedder(en.MAIN, server="never")
    store = MemoryStore(path, config=cfg, embedder=e5, clock=lambda: NOW)
    with store.transaction():
        store.conn.execute("UPDATE settings SET value = ? WHERE key = 'embed_model'", (en.MAIN,))
        store.conn.execute("INSERT OR REPLACE INTO memory_vec_en (seq, embedding) SELECT v.seq, v.embedding "
                           "FROM memory_vec v JOIN memories m ON m.seq = v.seq WHERE pmem_lang(m.text) = 'en'")
    return path, cfg, e5, store


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", type=Path, required=True, help="a store scale.py built (fake-384 vectors)")
    ap.add_argument("--questions", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3, help="rounds after the first (cold) one")
    ap.add_argument("--before", action="store_true", help="also `minilm` as the third round ran it")
    ap.add_argument("--cpu", action="store_true", help="also the process's CPU time per hybrid search")
    args = ap.parse_args()
    os.environ["PMEM_SERVER"] = "never"
    import importlib

    from pmem import MemoryStore
    from pmem.models.embed import load_embedder
    from pmem.store import Filter
    from pmem.store import english as en

    S = importlib.import_module("pmem.search")
    with tempfile.TemporaryDirectory() as tmp:
        path, cfg, e5, on = english_copy(args.db, Path(tmp))
        minilm = load_embedder(en.MODEL, server="never")

        class AsBefore:
            """MiniLM as the third round ran it: its f16 file, every call at the model's threads."""

            name, dim = minilm.name, minilm.dim

            def embed(self, texts):
                return minilm.embed(texts)

        on.vectors.english.embedder = None  # this tree's own choice of file, threads and packs
        before = MemoryStore(path, config=cfg, embedder=e5, clock=lambda: NOW)
        before.vectors.english.embedder = AsBefore()
        off = MemoryStore(path, config=cfg.with_values(embed_english="none"), embedder=e5, clock=lambda: NOW)
        assert on.vectors.english.in_use() and not off.vectors.english.in_use()
        qs = questions()[: args.questions]
        times: dict[str, list[float]] = {}
        e5_vectors = {q: on.query_vector(q) for q in qs}

        class Ready:
            """MiniLM's query vectors embedded beforehand: what the store's side of a search costs."""

            name, dim = minilm.name, minilm.dim
            vectors = dict(zip(qs, minilm.embed(qs)))

            def embed(self, texts):
                return [self.vectors[t] for t in texts]

        ready = MemoryStore(path, config=cfg, embedder=e5, clock=lambda: NOW)
        ready.vectors.english.embedder = Ready()
        stores = [("none", off), ("minilm, before", before), ("minilm", on)]
        if not args.before:
            stores.pop(1)
        for round_ in range(1 + args.rounds):
            for q in qs:
                for label, store in stores:
                    c, t = time.process_time(), time.perf_counter()
                    S.search(store, q, Filter(), limit=10)
                    hybrid, cpu = time.perf_counter() - t, time.process_time() - c
                    t = time.perf_counter()
                    S.semantic_ranks(store, q, Filter(), 100)
                    dense = time.perf_counter() - t
                    t = time.perf_counter()
                    S.semantic_ranks(off if label == "none" else ready, q, Filter(), 100, vector=e5_vectors[q])
                    given = time.perf_counter() - t
                    if round_:
                        times.setdefault(f"hybrid, embed_english = {label}", []).append(hybrid)
                        if args.cpu:
                            times.setdefault(f"hybrid, CPU, embed_english = {label}", []).append(cpu)
                        times.setdefault(f"dense side, embed_english = {label}", []).append(dense)
                        if label != "minilm, before":
                            times.setdefault(f"dense side, query vectors given, embed_english = {label}",
                                             []).append(given)
        out = {"memories": on.count(), "second vectors": on.vectors.english.count(), "questions": len(qs),
               "MiniLM file": on.vectors.english.embedder.name,  # type: ignore[union-attr]
               "ms per query (median)": {k: round(statistics.median(v) * 1000, 2) for k, v in times.items()},
               "load average": round(os.getloadavg()[0], 2)}
        for store in (on, before, off, ready):
            store.close()
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Recall of the approximate vector path (bit codes, then float32 rescoring) against the exact
scan, on vectors from a real embedding model, at 20,000 / 100,000 / 1,000,000 memories.

    python benchmarks/scale_recall.py --model all-MiniLM-L6-v2 --n 100000 1000000
    python benchmarks/scale_recall.py --model multilingual-e5-small --n 100000 1000000
    python benchmarks/scale_recall.py --model all-MiniLM-L6-v2 --n 20000 --real /tmp/pmem-scale/real-20000.npy
    python benchmarks/scale_recall.py --model all-MiniLM-L6-v2 --n 100000 --dream   # and a dream plan

`scale.py recall` measures the same thing on fake-384 vectors, which have none of a model's
structure. Embedding 1,000,000 texts takes days on 2 cores, so here a memory (a pair of LoCoMo dev
turns, exactly the pairs of `scale.py build`) gets the model's vectors of its two turns, averaged
with their lengths as weights and normalised: mean pooling over the concatenation, up to the
attention between the halves. `--check K` reports how close that is to the model's own vector of
the pair text for the first K memories, and `--real FILE` (the model's vectors of the first N
pair texts, as `numpy.save` wrote them) measures recall on the real vectors too, side by side, so
the stand-in can be judged by the one figure that matters here.

The stores hold what the vector path reads (memory rows with tier and dates, float32 vectors, the
bit index) and no keyword index. Queries: 200 LoCoMo dev questions, embedded as queries. For each
n: recall@10 and @100 of `VectorIndex.ranks` with the bit path against the exact scan,
the share of approximate results at most a near-tie beyond the exact k-th (0.01 of cosine
distance on MiniLM's scale, rescaled to the model's: differences the data cannot tell apart), and the CPU time of each path (median).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import scale_corpus as corpus  # noqa: E402

CACHE = Path("/tmp/pmem-scale")


def embedder(model: str):
    from pmem.models.embed import load_embedder

    return load_embedder(model)


def pool_vectors(model: str, pool: list[str], name: str = "pool"):
    """The model's vectors of `pool`, embedded once and kept as CACHE/NAME-MODEL.npy."""
    import numpy as np

    path = CACHE / f"{name}-{model}.npy"
    if path.exists():
        return np.load(path)
    vecs = np.array(embedder(model).embed(pool), dtype="<f4")
    CACHE.mkdir(parents=True, exist_ok=True)
    np.save(path, vecs)
    return vecs


def query_vectors(model: str, questions: list[str]):
    import numpy as np

    e = embedder(model)
    kw = {"query": True} if getattr(e, "query_aware", False) else {}
    return np.array(e.embed(questions, **kw), dtype="<f4")


def stand_ins(pool_vecs, lengths, n: int):
    """The stand-in vector of memories 0..n-1: length-weighted mean of its two turns' vectors."""
    import numpy as np

    pairs = np.array([corpus.pair_of(i, len(lengths)) for i in range(n)])
    w = np.asarray(lengths, dtype="<f4")
    v = pool_vecs[pairs[:, 0]] * w[pairs[:, 0], None] + pool_vecs[pairs[:, 1]] * w[pairs[:, 1], None]
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype("<f4")


def build(path: Path, vecs, model_name: str, pool: list[str] | None = None) -> None:
    """A store of len(vecs) scale memories (rows, vectors, bit index), no keyword index; with
    `pool`, the memories hold their pair texts (for dream), else a placeholder."""
    from pmem import MemoryStore

    MemoryStore(path, embedder=embedder("fake-384")).close()  # the schema, nothing else
    from pmem import db
    from pmem.store import vectors as migrations

    conn = db.connect(path)
    conn.execute("BEGIN")
    for name in ("memories_ai", "memories_ai_thread", "memories_lang_ai"):
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")  # no keyword index: only the vector path is measured
    migrations.create_vector_tables(conn, vecs.shape[1])
    conn.execute("INSERT INTO settings (key, value) VALUES ('embed_model', ?), ('embed_dim', ?)",
                 (model_name, str(vecs.shape[1])))
    step = 50_000
    for start in range(0, len(vecs), step):
        rows = corpus.memories(start, min(start + step, len(vecs)), pool or [""] * 2)
        conn.executemany("INSERT INTO memories (seq, id, text, tier, pinned, tags, created_at, updated_at, source) "
                         "VALUES (?, ?, ?, ?, ?, '[]', ?, ?, 'scale')",
                         [(start + k + 1, m.id, m.text if pool else f"memory {start + k}", m.tier, int(m.pinned),
                           m.created_at, m.created_at) for k, m in enumerate(rows)])
        conn.executemany("INSERT INTO memory_vec (seq, embedding, live) VALUES (?, ?, 1)",
                         [(start + k + 1, vecs[start + k].tobytes()) for k in range(len(rows))])
    conn.execute("COMMIT")
    conn.execute("BEGIN")
    migrations.build_bits(conn)
    conn.execute("COMMIT")
    conn.close()


_EXACT: dict = {}


def recall(path: Path, queries, ks=(10, 100), pool: int = 0, slack: int | None = None) -> dict:
    from dataclasses import replace

    from pmem import MemoryStore
    from pmem.ranking.profile import DEFAULT
    from pmem.store import Filter
    from pmem.store import vectors as store_module  # where the bit path reads its constants

    profile = replace(DEFAULT, bit_pool=pool) if pool else DEFAULT
    if slack is not None:
        store_module.PART_SLACK = slack

    store = MemoryStore(path, embedder=embedder("fake-384"), clock=lambda: corpus.NOW)
    # A near-tie: 0.01 of cosine distance on MiniLM's scale, rescaled to the model's (e5 spreads
    # unrelated-to-identical over about a quarter of MiniLM's range: pmem.models.thresholds.score_floor).
    from pmem.models import thresholds

    def floor(name: str | None) -> float:
        return thresholds.for_model(name).score_floor

    tie = 0.01 * (1 - floor(store.vector_model()[0])) / (1 - floor("all-MiniLM-L6-v2"))
    out: dict = {"n": store.counter("vectors"), "bit_pool": profile.bit_pool,
                 "part_slack": store_module.PART_SLACK, "near_tie": round(tie, 4)}
    flt = Filter()
    for k in ks:
        got, near, fast_ms, exact_ms = [], [], [], []
        for q in queries:
            blob = q.tobytes()
            key = (str(path), blob, k)
            if key not in _EXACT:  # the exact answer does not depend on the pool: once per store
                store.exact_below = 10**12
                t = time.process_time()
                _EXACT[key] = (store.vectors.ranks(blob, flt, k), time.process_time() - t)
            exact, exact_s = _EXACT[key]
            exact_ms.append(exact_s)
            store.exact_below = 0
            t = time.process_time()
            fast = store.vectors.ranks(blob, flt, k, profile=profile)
            fast_ms.append(time.process_time() - t)
            got.append(len({s for s, _ in fast} & {s for s, _ in exact}) / len(exact))
            kth = exact[-1][1]
            near.append(sum(d <= kth + tie for _, d in fast) / len(exact))
        out[f"@{k}"] = {"recall": round(statistics.mean(got), 3), "recall_p10": round(sorted(got)[len(got) // 10], 3),
                        "near_ties": round(statistics.mean(near), 3),
                        "fast_cpu_ms": round(statistics.median(fast_ms) * 1000, 2),
                        "exact_cpu_ms": round(statistics.median(exact_ms) * 1000, 2)}
    store.close()
    return out


def dream_plan(path: Path, model: str) -> dict:
    """A whole `pmem dream` plan (no chat model), timed per kind."""
    from pmem import MemoryStore, dream
    from pmem.config import load

    store = MemoryStore(path, config=load().with_values(embed_model=model), clock=lambda: "2026-06-01T00:00:00Z")
    out: dict = {"n": store.counter("vectors")}
    for kinds in (("dedup",), ("supersede",), ("merge",), ("compress",), None):
        t, c = time.perf_counter(), time.process_time()
        plan = dream.plan(store, only=set(kinds) if kinds else None, generator=False)
        out["+".join(kinds) if kinds else "whole plan"] = {
            "wall_s": round(time.perf_counter() - t, 1), "cpu_s": round(time.process_time() - c, 1),
            "proposals": plan.counts(), "last_pair_search": dict(dream.LSH_LAST)}
        print(json.dumps(out), file=sys.stderr, flush=True)
    store.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    ap.add_argument("--n", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--questions", type=int, default=200)
    ap.add_argument("--check", type=int, default=0, help="compare the stand-ins with the model's own vectors "
                    "of the first K pair texts")
    ap.add_argument("--pools", type=int, nargs="+", default=[0],
                    help="rescoring pools (the ranking profile's bit_pool) to compare; 0: pmem's")
    ap.add_argument("--slacks", type=int, nargs="+", default=[None],
                    help="rows each bit partition gives beyond its share of the pool (pmem.store.vectors.PART_SLACK)")
    ap.add_argument("--dream", action="store_true", help="also time a whole dream plan on each store "
                    "(memories then hold their texts)")
    ap.add_argument("--real", type=Path, help="the model's vectors of the first N pair texts (.npy): "
                    "recall on them beside the stand-ins")
    args = ap.parse_args()
    os.environ.setdefault("PMEM_SERVER", "off")
    import numpy as np

    pool = corpus.turns()
    lengths = [len(t.split()) + 2 for t in pool]
    pvecs = pool_vectors(args.model, pool)
    queries = query_vectors(args.model, corpus.questions(args.questions))
    result: dict = {"model": args.model, "questions": len(queries), "load_start": os.getloadavg(), "runs": []}
    if args.check:
        texts = [m.text for m in corpus.memories(0, args.check, pool)]
        own = np.array(embedder(args.model).embed(texts), dtype="<f4")
        cos = np.sum(own * stand_ins(pvecs, lengths, args.check), axis=1)
        result["stand_in_cosine"] = {"median": round(float(np.median(cos)), 4), "p5": round(float(np.percentile(cos, 5)), 4)}
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        if args.real:
            real = np.load(args.real).astype("<f4")
            real /= np.linalg.norm(real, axis=1, keepdims=True)
            cos = np.sum(real * stand_ins(pvecs, lengths, len(real)), axis=1)
            result["real_vs_stand_in_cosine"] = {"median": round(float(np.median(cos)), 4),
                                                 "p5": round(float(np.percentile(cos, 5)), 4)}
            build(Path(tmp) / "real.db", real, args.model)
            result["runs"].append({"vectors": "real", **recall(Path(tmp) / "real.db", queries)})
            (Path(tmp) / "real.db").unlink()
        for n in args.n:
            db = Path(tmp) / f"stand-in-{n}.db"
            t = time.perf_counter()
            build(db, stand_ins(pvecs, lengths, n), args.model, pool if args.dream else None)
            built = round(time.perf_counter() - t, 1)
            for pool in args.pools:
                for slack in args.slacks:
                    result["runs"].append({"vectors": "stand-in", "build_s": built,
                                           **recall(db, queries, pool=pool, slack=slack)})
                    print(json.dumps(result["runs"][-1]), file=sys.stderr, flush=True)
            if args.dream:
                result["runs"][-1]["dream"] = dream_plan(db, args.model)
            for p in Path(tmp).glob(db.name + "*"):
                p.unlink()
    result["load_end"] = os.getloadavg()
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""pmem at 10,000 / 100,000 / 1,000,000 memories: search, list, stats, import, size, dream plan.

    python benchmarks/scale.py build --n 1000000          # builds and caches the stores (once)
    python benchmarks/scale.py measure --n 100000         # every figure of issue 13 as JSON
    python benchmarks/scale.py recall --n 100000          # approximate vs exact vector search
    python benchmarks/scale.py keywords --n 100000        # keyword hit@k vs BM25 of the whole query
    python benchmarks/scale.py merge --n 100000           # search before and after merging the keyword index
    python benchmarks/scale.py since --n 100000 --full    # a dream of a day's change against the whole plan
    python benchmarks/scale.py commands --n 1000000 --label s5   # every command, whole process, on a copy
    python benchmarks/scale.py first --n 1000000 --max-seconds 600 --rounds 3   # first dreams, applied

Stores are built once into --cache (default /tmp/pmem-scale) through `MemoryStore.insert`, the
path `pmem import` takes, 10,000 memories per operation, with the deterministic `fake-384`
embedder: its vectors cost SQLite what a real 384-d model's cost, and it keeps the build's time in
pmem and SQLite rather than in a model. A memory is a pair of LoCoMo dev turns ("A: ...\\nB: ..."),
picked by a seeded generator, so the vocabulary is real conversation; dates advance through the
store, 1 in 500 is pinned (core), 1 in 10 is episodic, 1 in 20 has a tag. One build to 1,000,000
leaves copies at 10,000 and 100,000 on the way. The import rate of each operation is logged, so the
first and last 10% of the 1,000,000 import can be compared.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import locomo  # noqa: E402
from scale_corpus import DATA, EMBED, NOW, memories, pair_of, questions, turns  # noqa: E402

CHUNK = 10_000
SIZES = (10_000, 100_000, 1_000_000)


def store_path(cache: Path, n: int) -> Path:
    return cache / f"scale-{n}.db"


def build(cache: Path, n: int) -> None:
    """Build to `n` memories, leaving a copy at every size in SIZES on the way; logs rates."""
    os.environ["PMEM_EMBED_MODEL"] = EMBED
    from pmem import MemoryStore
    from pmem.config import load

    cache.mkdir(parents=True, exist_ok=True)
    work = cache / f"building-{n}.db"
    log = cache / f"build-{n}.jsonl"
    pool = turns()
    store = MemoryStore(work, config=load(), clock=lambda: NOW)
    done = store.conn.execute("SELECT count(*) FROM memories").fetchone()[0]  # a killed build resumes
    with log.open("a" if done else "w") as out:
        for start in range(done, n, CHUNK):
            stop = min(start + CHUNK, n)
            batch = memories(start, stop, pool)
            t0 = time.perf_counter()
            store.insert(batch, summary=f"scale {start}")
            dt = time.perf_counter() - t0
            out.write(json.dumps({"start": start, "stop": stop, "s": round(dt, 3),
                                  "per_s": round((stop - start) / dt, 1), "load": os.getloadavg()[0]}) + "\n")
            out.flush()
            if stop in SIZES and stop != n:
                store.checkpoint()
                shutil.copyfile(work, store_path(cache, stop))
            print(f"built {stop:,}/{n:,} ({(stop - start) / dt:.0f}/s)", file=sys.stderr, flush=True)
    store.checkpoint()
    store.close()
    for suffix in ("-wal", "-shm"):
        Path(str(work) + suffix).unlink(missing_ok=True)
    work.rename(store_path(cache, n))


def opened(cache: Path, n: int, label: str) -> tuple[Path, float | None]:
    """The store to measure: the cached build for "before"; for any other label a copy of it made
    once (opening it with this code runs any new migration, timed)."""
    src = store_path(cache, n)
    if not src.exists():
        raise SystemExit(f"no store {src}: run `scale.py build --n {max(n, 1_000_000) if n in SIZES else n}` first")
    if label == "before":
        return src, None
    dst = cache / f"scale-{n}-{label}.db"
    if dst.exists():
        return dst, None
    tmp = dst.with_suffix(".copying")
    shutil.copyfile(src, tmp)
    from pmem import MemoryStore, db

    conn = db.connect(tmp)  # stores built on the scale branch named m005_binary_vectors m003
    conn.execute("UPDATE _pmem_migrations SET name = 'm005_binary_vectors' WHERE name = 'm003_binary_vectors'")
    conn.close()

    t0 = time.perf_counter()
    MemoryStore(tmp, clock=lambda: NOW).close()
    migrate_s = time.perf_counter() - t0
    tmp.rename(dst)
    return dst, migrate_s


def med(xs: list[float]) -> float:
    return round(statistics.median(xs) * 1000, 2)


def timed_process(cmd: list[str], env: dict, runs: int) -> dict:
    """Wall time and CPU time (user + system) of whole processes: on a shared machine the CPU time
    is the figure that does not depend on what else runs."""
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, capture_output=True)
        walls.append(time.perf_counter() - t)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return {"median_s": round(statistics.median(walls), 3), "min_s": round(min(walls), 3),
            "cpu_median_s": round(statistics.median(cpus), 3)}


def measure(cache: Path, n: int, label: str, runs: int, upkeep: bool, dream: bool) -> dict:
    os.environ["PMEM_EMBED_MODEL"] = EMBED
    os.environ["PMEM_SERVER"] = "off"
    import importlib

    import pmem

    S = importlib.import_module("pmem.search")
    from pmem import MemoryStore
    from pmem.store import Filter

    path, migrate_s = opened(cache, n, label)
    out: dict = {"n": n, "label": label, "pmem": str(Path(pmem.__file__).parent), "db": str(path),
                 "load_start": os.getloadavg()}
    if migrate_s is not None:
        out["migrate_s"] = round(migrate_s, 2)
    qs = questions()
    store = MemoryStore(path, clock=lambda: NOW)
    # The same search with its keyword side on the one connection (no side reader), alternating
    # with the default, so the two are compared side by side.
    alone = MemoryStore(path, clock=lambda: NOW)
    alone.side_reader = lambda: contextlib.nullcontext(None)  # type: ignore[method-assign]
    flt = Filter()
    vecs = {q: store.query_vector(q) for q in qs}
    parts: dict[str, list[float]] = {k: [] for k in ("hybrid", "semantic", "keyword", "hybrid_cpu",
                                                     "semantic_cpu", "keyword_cpu", "hybrid_one_connection",
                                                     "hybrid_no_sharing", "hybrid_unbounded",
                                                     "semantic_unbounded")}
    from pmem.store import PartitionScan

    try:  # the vector index of pmem/store/vectors.py; before the package, MemoryStore's own method
        from pmem.store.vectors import VectorIndex as Index
        knn_name = "bounded_knn"
    except ImportError:
        from pmem import MemoryStore as Index
        knn_name = "_bounded_knn"
    sharing = PartitionScan.help
    bounded = getattr(Index, knn_name)

    def unbounded(self, knn, jobs, lead, pool, scan):  # every partition's k nearest, no distance bound
        return scan.run(getattr(self, "db", self).conn, knn, jobs)
    for round_ in range(2):  # the first round is cold: its worst case is reported
        for q in qs:
            t, c = time.perf_counter(), time.process_time()
            S.search(store, q, flt, limit=10)
            if round_:
                parts["hybrid"].append(time.perf_counter() - t)
                parts["hybrid_cpu"].append(time.process_time() - c)
            t = time.perf_counter()
            S.search(alone, q, flt, limit=10)
            if round_:
                parts["hybrid_one_connection"].append(time.perf_counter() - t)
            # The side reader ranks the keyword side but reads no partition of the semantic one.
            PartitionScan.help = lambda self, conn: None  # type: ignore[method-assign]
            t = time.perf_counter()
            S.search(store, q, flt, limit=10)
            PartitionScan.help = sharing  # type: ignore[method-assign]
            if round_:
                parts["hybrid_no_sharing"].append(time.perf_counter() - t)
            t, c = time.perf_counter(), time.process_time()
            S.semantic_ranks(store, q, flt, 100, vector=vecs[q])
            parts["semantic"].append(time.perf_counter() - t)
            parts["semantic_cpu"].append(time.process_time() - c)
            # The same, and hybrid, with vec0's KNN not bounded by the lead partition's distance.
            setattr(Index, knn_name, unbounded)
            t = time.perf_counter()
            S.semantic_ranks(store, q, flt, 100, vector=vecs[q])
            parts["semantic_unbounded"].append(time.perf_counter() - t)
            t = time.perf_counter()
            S.search(store, q, flt, limit=10)
            if round_:
                parts["hybrid_unbounded"].append(time.perf_counter() - t)
            setattr(Index, knn_name, bounded)
            t, c = time.perf_counter(), time.process_time()
            S.keyword_ranks(store, q, flt, 100)
            parts["keyword"].append(time.perf_counter() - t)
            parts["keyword_cpu"].append(time.process_time() - c)
    out["search_ms"] = {k: med(v) for k, v in parts.items()}
    out["search_ms"].update(semantic_max=round(max(parts["semantic"]) * 1000, 1),
                            keyword_max=round(max(parts["keyword"]) * 1000, 1))
    t = time.perf_counter()
    stats = store.stats()
    out["stats_in_process_ms"] = round((time.perf_counter() - t) * 1000, 1)
    t = time.perf_counter()
    store.count(Filter())
    out["count_in_process_ms"] = round((time.perf_counter() - t) * 1000, 1)
    out["memories"] = stats["memories"]
    size = path.stat().st_size
    out["db_bytes"] = size
    out["bytes_per_memory"] = round(size / stats["memories"])
    if dream:
        from pmem import dream as D

        t = time.perf_counter()
        p = D.plan(store, generator=False, now=NOW)
        out["dream_plan_s"] = round(time.perf_counter() - t, 2)
        out["dream_proposals"] = p.counts() if hasattr(p, "counts") else len(p.proposals)
    store.close()
    alone.close()

    env = dict(os.environ, PMEM_HOME=str(cache / "home"), PMEM_EMBED_MODEL=EMBED, PMEM_SERVER="off")
    # As latency.py: users' Pythons cache bytecode; without it every timed process compiled each
    # module edited since its last .pyc again (pmem.store alone: 16 ms).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    py = [sys.executable, "-m", "pmem", "--db", str(path)]
    out["process"] = {
        "search": timed_process([*py, "search", qs[0], "--json"], env, runs),
        "list": timed_process([*py, "list"], env, runs),
        "stats": timed_process([*py, "stats"], env, runs),
        "recall": timed_process([*py, "recall", qs[0]], env, runs),  # core memories first, then search
    }
    paint = Path(__file__).with_name("tui_bench.py")
    try:
        walls: dict[str, list[float]] = {"--child-paint": [], "--child-floor": [], "keys": [], "settled": []}
        complete = []
        for _ in range(runs):  # pmem's TUI and a bare Textual app, alternating
            for child, args in (("--child-paint", [str(path)]), ("--child-floor", [])):
                r = subprocess.run([sys.executable, str(paint), child, *args], env=env, check=True,
                                   capture_output=True, text=True)
                got = json.loads(r.stdout.strip().splitlines()[-1])
                walls[child].append(got["first_paint_s"])
                if "keys_shown_s" in got:  # pmem's footer, painted after the list
                    walls["keys"].append(got["keys_shown_s"])
                    walls["settled"].append(got["settled_s"])
                    complete.append(got["first_frame_complete"])
        out["process"]["tui_first_paint"] = {"median_s": round(statistics.median(walls["--child-paint"]), 3),
                                             "min_s": round(min(walls["--child-paint"]), 3),
                                             "bare_textual_median_s": round(statistics.median(walls["--child-floor"]), 3)}
        if walls["keys"]:
            out["process"]["tui_first_paint"].update(
                footer_keys_median_s=round(statistics.median(walls["keys"]), 3),
                settled_median_s=round(statistics.median(walls["settled"]), 3),
                first_frame_complete=f"{sum(complete)} of {len(complete)}")
    except (subprocess.CalledProcessError, ValueError, KeyError) as exc:
        out["process"]["tui_first_paint"] = {"error": str(exc)[:200]}
    log = cache / "build-1000000.jsonl"
    if log.exists():
        rows = [json.loads(line) for line in log.read_text().splitlines()]
        done = rows[-1]["stop"] if rows else 0
        tenth = [r for r in rows if r["stop"] <= max(done // 10, CHUNK)]
        last = [r for r in rows if r["start"] >= done - max(done // 10, CHUNK)]
        def rate(rs: list[dict]) -> float:
            return round(sum(r["stop"] - r["start"] for r in rs) / sum(r["s"] for r in rs), 1)

        out["import"] = {"built": done, "first_10pct_per_s": rate(tenth), "last_10pct_per_s": rate(last),
                         "load_first": round(statistics.mean(r["load"] for r in tenth), 2),
                         "load_last": round(statistics.mean(r["load"] for r in last), 2)}
    if upkeep:
        out["upkeep"] = upkeep_gains(path)
    out["load_end"] = os.getloadavg()
    return out


def upkeep_gains(path: Path) -> dict:
    """Bytes FTS5 'optimize' and then VACUUM give back, on a copy."""
    from pmem import db as pdb

    tmp = path.with_suffix(".upkeep")
    shutil.copyfile(path, tmp)
    try:
        conn = pdb.connect(tmp)
        before = tmp.stat().st_size
        t = time.perf_counter()
        conn.execute("INSERT INTO memories_fts(memories_fts) VALUES ('optimize')")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        opt_s = time.perf_counter() - t
        free_after_opt = conn.execute("PRAGMA freelist_count").fetchone()[0] * \
            conn.execute("PRAGMA page_size").fetchone()[0]
        t = time.perf_counter()
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        vac_s = time.perf_counter() - t
        after = tmp.stat().st_size
        conn.close()
        return {"bytes_before": before, "fts_optimize_s": round(opt_s, 1),
                "free_bytes_after_optimize": free_after_opt, "vacuum_s": round(vac_s, 1),
                "bytes_after_vacuum": after, "gain_pct": round(100 * (before - after) / before, 1)}
    finally:
        for p in path.parent.glob(tmp.name + "*"):
            p.unlink()


def recall(cache: Path, n: int, label: str, k: int) -> dict:
    """recall@k of the bit-vector path against the exact scan, 16 LoCoMo questions (fake-384)."""
    os.environ["PMEM_EMBED_MODEL"] = EMBED
    from pmem import MemoryStore
    from pmem.store import Filter

    path, _ = opened(cache, n, label)
    store = MemoryStore(path, clock=lambda: NOW)
    out: dict = {"n": n, "k": k, "load_start": os.getloadavg()}
    got, fast_ms, exact_ms = [], [], []
    for q in questions():
        vec = store.query_vector(q)
        store.exact_below = 10**12
        t = time.process_time()
        exact = store.vectors.ranks(vec, Filter(), k)
        exact_ms.append(time.process_time() - t)
        store.exact_below = 0
        t = time.process_time()
        fast = store.vectors.ranks(vec, Filter(), k)
        fast_ms.append(time.process_time() - t)
        got.append(len({s for s, _ in fast} & {s for s, _ in exact}) / len(exact))
    store.close()
    out.update(recall_mean=round(statistics.mean(got), 3), recall_min=round(min(got), 3),
               fast_cpu_ms=med(fast_ms), exact_cpu_ms=med(exact_ms))
    return out


def distinct_texts(n: int) -> list[str]:
    """Up to `n` distinct sentences from the docstrings of the Python files this interpreter can
    import (its standard library, then site-packages; sorted paths, so the same installs give the
    same texts): natural English of varied topics, with the near-duplicates real prose has
    ("Return the ..."), unlike the pairs of LoCoMo turns, where each turn is in ~70 memories."""
    import ast
    import re
    import sysconfig

    from pmem.secretscan import first_secret  # what `pmem import` would refuse

    roots = [sysconfig.get_paths()["stdlib"], *(p for p in sys.path if p.endswith("site-packages"))]
    seen: set[str] = set()
    out: list[str] = []
    for root in roots:
        for f in sorted(Path(root).rglob("*.py")):
            try:
                tree = ast.parse(f.read_text(encoding="utf-8", errors="replace"))
            except (SyntaxError, ValueError, OSError):
                continue
            for node in ast.walk(tree):
                if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for para in re.split(r"\n\s*\n", ast.get_docstring(node) or ""):
                    for sent in re.split(r"(?<=[.!?])\s+(?=[A-Z])", " ".join(para.split())):
                        if (40 <= len(sent) <= 400 and sent not in seen and sent.isprintable()
                                and not sent.startswith((">>>", "..", ":")) and first_secret(sent) is None):
                            seen.add(sent)
                            out.append(sent)
                            if len(out) >= n:
                                return out
    return out


def distinct(cache: Path, n: int, model: str = EMBED) -> dict:
    """A store of `n` distinct texts (distinct_texts, built once and cached) with `model`'s
    vectors (a real model's are embedded once and kept beside it as .npy), then a whole
    `pmem dream` plan on it, timed per kind (no chat model)."""
    os.environ["PMEM_EMBED_MODEL"] = model
    from scale_recall import dream_plan, pool_vectors  # scale.py's folder is on sys.path

    from pmem import MemoryStore
    from pmem.records import Memory

    path = cache / f"distinct-{n}{'' if model == EMBED else '-' + model}.db"
    out: dict = {"n": n, "model": model, "load_start": os.getloadavg()}
    if not path.exists():
        texts = distinct_texts(n)
        vectors = None
        if model != EMBED:
            t = time.perf_counter()
            vectors = [row.tobytes() for row in pool_vectors(model, texts, name=f"distinct-{n}")]
            out["embed_s"] = round(time.perf_counter() - t, 1)
        work = path.with_suffix(".building")
        work.unlink(missing_ok=True)
        store = MemoryStore(work, clock=lambda: NOW)
        t = time.perf_counter()
        for start in range(0, len(texts), CHUNK):
            store.insert([Memory(id="", text=x, created_at=f"2025-{1 + (start + k) % 12:02d}-01T00:00:00Z")
                          for k, x in enumerate(texts[start:start + CHUNK])], summary=f"distinct {start}",
                         vectors=vectors[start:start + CHUNK] if vectors else None)
        out["build_s"] = round(time.perf_counter() - t, 1)
        store.checkpoint()
        store.close()
        work.rename(path)
    out["dream"] = dream_plan(path, model)
    out["load_end"] = os.getloadavg()
    return out


class _RolledBack(Exception):
    pass


def rates(cache: Path, sizes: list[int], label: str, batch: int = 1000, rounds: int = 9) -> dict:
    """Import throughput against the size of the store, side by side: `batch` new memories
    inserted (the `pmem import` path, fake embedder) into an empty store and into each cached
    store, alternating, each batch rolled back so every round meets the same store."""
    import tempfile

    os.environ["PMEM_EMBED_MODEL"] = EMBED
    from pmem import MemoryStore

    pool = turns()
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        stores = {0: MemoryStore(Path(tmp) / "empty.db", clock=lambda: NOW)}
        for n in sizes:
            stores[n] = MemoryStore(opened(cache, n, label)[0], clock=lambda: NOW)
        per_s: dict[int, list[float]] = {n: [] for n in stores}
        for r in range(rounds + 1):  # the first round warms the caches and is not counted
            fresh = memories(3_000_000 + r * batch, 3_000_000 + (r + 1) * batch, pool)
            for n, store in stores.items():
                t = time.perf_counter()
                try:
                    with store.transaction():
                        store.insert(fresh, summary="rate")
                        dt = time.perf_counter() - t
                        raise _RolledBack  # the next round meets the same store
                except _RolledBack:
                    pass
                if r:
                    per_s[n].append(batch / dt)
        for store in stores.values():
            store.close()
    return {"batch": batch, "rounds": rounds, "load": os.getloadavg(),
            "memories_per_s": {str(n): round(statistics.median(v), 1) for n, v in per_s.items()}}


def quality(pool: int | None = None) -> dict:
    """LoCoMo dev evidence R@5/R@10 of hybrid search with the real embedding model, the exact
    vector search and the bit-vector path forced on (pool DEFAULT.bit_pool of ~600 memories a
    conversation, or `pool`: 0 leaves the least the path takes, 2n = 200, a third of a store),
    in the same run and the same stores."""
    import tempfile
    from dataclasses import replace

    from pmem import Memory, MemoryStore
    from pmem.ranking.profile import DEFAULT
    from pmem.search import profile_for as chosen
    from pmem.search import search
    from pmem.store import vectors as store_module  # where the bit path reads its constants

    profile = replace(DEFAULT, bit_pool=pool) if pool is not None else DEFAULT

    hits = {"exact": {5: 0, 10: 0}, "fast": {5: 0, 10: 0}}
    total = 0
    with tempfile.TemporaryDirectory() as tmp:
        for conv in locomo.load(DATA):
            store = MemoryStore(Path(tmp) / f"{conv['sample_id']}.db")
            stored = store.insert([Memory(id="", text=r["text"], created_at=r["created_at"], meta=r["meta"])
                                   for r in locomo.turn_records(conv)])
            by_id = {m.id: m.meta["dia_id"] for m in stored}
            store.vectors.build_bits()  # below BITS_FROM no bit index is kept: build one to force its use
            for q in locomo.questions(conv):
                total += 1
                for name in ("exact", "fast"):
                    store.exact_below = 10**12 if name == "exact" else 0
                    saved = store_module.EXACT_SCAN_MAX
                    store_module.EXACT_SCAN_MAX = saved if name == "exact" else 0
                    ranked = [by_id[h.memory.id] for h in search(store, q["question"], limit=10,
                                                                 tuning=chosen(store, base=profile))]
                    store_module.EXACT_SCAN_MAX = saved
                    for k in (5, 10):
                        if set(q["evidence"]) & set(ranked[:k]):
                            hits[name][k] += 1
            store.close()
    return {"questions": total, "bit_pool": profile.bit_pool,
            **{f"{name}_R@{k}": round(v / total, 3) for name, d in hits.items() for k, v in d.items()}}


def keywords(cache: Path, n: int, label: str, count: int) -> dict:
    """Keyword search's answers at scale against BM25 over every query word, on the cached store.
    A memory is a pair of LoCoMo dev turns, so a question's evidence turns are in ~2n/turns
    memories: hit@k is the share of `count` dev questions (spread over the five conversations)
    with such a memory in the top k. "planned" is what pmem does on a large store (only rows
    holding a rare word, ranked with every word: MemoryStore.keyword_ranks), "whole" BM25 of the
    whole query (the small-store path), in the same run on the same store."""
    os.environ["PMEM_EMBED_MODEL"] = EMBED
    os.environ["PMEM_SERVER"] = "off"
    from pmem import MemoryStore
    from pmem.search import keyword_ranks
    from pmem.store import EXACT_BELOW, Filter

    path, _ = opened(cache, n, label)
    index_of = {}  # (conversation, dia_id) -> index in turns()
    for conv in locomo.load(DATA):
        for r in locomo.turn_records(conv):
            index_of[(conv["sample_id"], r["meta"]["dia_id"])] = len(index_of)
    asked = [(q, {index_of[(conv["sample_id"], d)] for d in q["evidence"]
                 if (conv["sample_id"], d) in index_of})
             for conv in locomo.load(DATA) for q in locomo.questions(conv)]
    step = max(1, len(asked) // count)
    asked = [asked[i * step] for i in range(min(count, len(asked)))]
    store = MemoryStore(path, clock=lambda: NOW)
    flt, k_max = Filter(), 10
    out: dict = {"n": n, "questions": len(asked), "load_start": os.getloadavg()}
    found = {"planned": {5: 0, 10: 0}, "whole": {5: 0, 10: 0}}
    spent: dict[str, list[float]] = {"planned": [], "whole": []}
    agree = []
    for q, evidence in asked:
        ranked = {}
        for name in ("planned", "whole"):
            store.exact_below = 10**12 if name == "whole" else EXACT_BELOW
            t = time.perf_counter()
            ranked[name] = keyword_ranks(store, q["question"], flt, 100)
            spent[name].append(time.perf_counter() - t)
            top = [seq for seq, _ in ranked[name][:k_max]]
            by_seq = store.memories_by_seq(top)
            order = [by_seq[seq].id for seq in top]
            for k in (5, 10):
                if any(set(pair_of(int(mid, 16), len(index_of))) & evidence for mid in order[:k]):
                    found[name][k] += 1
        agree.append(len({s for s, _ in ranked["planned"][:k_max]} & {s for s, _ in ranked["whole"][:k_max]}) / k_max)
    store.close()
    for name in found:
        out[name] = {**{f"hit@{k}": round(v / len(asked), 3) for k, v in found[name].items()},
                     "median_ms": med(spent[name]), "max_ms": round(max(spent[name]) * 1000, 1)}
    out["top10_overlap"] = round(statistics.mean(agree), 3)
    out["load_end"] = os.getloadavg()
    return out


def pairs(cache: Path, n: int, label: str) -> dict:
    """Time dream's pair search (LSH above dream.PAIRS_EXACT_MAX) on the store's vectors."""
    import numpy as np

    from pmem import MemoryStore, dream

    path, _ = opened(cache, n, label)
    store = MemoryStore(path, clock=lambda: NOW)
    blobs = [r[0] for r in store.conn.execute("SELECT embedding FROM memory_vec ORDER BY seq")]
    store.close()
    vecs = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), -1)
    out: dict = {"n": len(blobs), "load_start": os.getloadavg()}
    for threshold in (0.92, 0.85):
        t = time.process_time()
        found = dream.close_pairs(vecs, threshold)
        out[str(threshold)] = {"pairs": len(found), "cpu_s": round(time.process_time() - t, 1)}
    return out


def merge(cache: Path, n: int, label: str, rounds: int = 5) -> dict:
    """The keyword index merged into one segment (`MemoryStore.merge_keyword_index`, which `pmem
    dream --apply` and a large `pmem import` run), on a copy: how long it took, its longest
    transaction (what another writer may wait), and the keyword side and hybrid search on the
    store as it was and on the merged copy, alternating question by question in one process."""
    os.environ["PMEM_EMBED_MODEL"] = EMBED
    os.environ["PMEM_SERVER"] = "off"
    import importlib

    S = importlib.import_module("pmem.search")
    from pmem import MemoryStore
    from pmem.store import Filter

    path, _ = opened(cache, n, label)
    copy = path.with_suffix(".merged")
    shutil.copyfile(path, copy)
    try:
        out: dict = {"n": n, "label": label, "load_start": os.getloadavg()}
        merged = MemoryStore(copy, clock=lambda: NOW)
        steps: list[float] = []
        real = merged.transaction

        @contextlib.contextmanager
        def timed():
            t = time.perf_counter()
            with real():
                yield
            steps.append(time.perf_counter() - t)

        merged.transaction = timed  # type: ignore[method-assign]
        t = time.perf_counter()
        before, after = merged.merge_keyword_index()
        out.update(segments_before=before, segments_after=after, merge_s=round(time.perf_counter() - t, 2),
                   transactions=len(steps), longest_transaction_s=round(max(steps, default=0.0), 3))
        merged.transaction = real  # type: ignore[method-assign]
        stores = {"as_built": MemoryStore(path, clock=lambda: NOW), "merged": merged}
        qs = questions()
        spent: dict[str, dict[str, list[float]]] = {k: {"keyword": [], "hybrid": []} for k in stores}
        for round_ in range(rounds + 1):  # the first round warms both
            for q in qs:
                for name, store in stores.items():
                    t = time.perf_counter()
                    S.keyword_ranks(store, q, Filter(), 100)
                    kw = time.perf_counter() - t
                    t = time.perf_counter()
                    S.search(store, q, limit=10)
                    hy = time.perf_counter() - t
                    if round_:
                        spent[name]["keyword"].append(kw)
                        spent[name]["hybrid"].append(hy)
        for name in stores:
            out[name] = {f"{side}_ms": round(statistics.median(v) * 1000, 2) for side, v in spent[name].items()}
        for side in ("keyword", "hybrid"):  # question by question, merged over as built
            ratios = [m / b for m, b in zip(spent["merged"][side], spent["as_built"][side])]
            out[f"{side}_ratio_median"] = round(statistics.median(ratios), 3)
        for store in stores.values():
            store.close()
        out["load_end"] = os.getloadavg()
        return out
    finally:
        for p in path.parent.glob(copy.name + "*"):
            p.unlink()


def since(cache: Path, n: int, label: str, new: int, full: bool, only: str | None = None,
          model: str = EMBED) -> dict:
    """A dream after a day's memories: the store as a dream left it (with `full`, a whole plan
    applied first; its mark set to the newest event), `new` memories added (nine in ten fresh
    sentences, one in ten an existing text with "!" added: a near-duplicate), then `dream.plan`
    of what changed, and with `full` the whole plan, compared. All in one transaction, rolled
    back, so the cached store stays as it is. The distinct store is used at its size when it
    exists (scale.py distinct), else the LoCoMo-pair store. `only`: the kinds planned (the
    LoCoMo-pair stores never had a dream, so every old episode of them awaits compression).
    `model`: the distinct store of that model's own vectors (scale.py distinct --model)."""
    import resource

    os.environ["PMEM_EMBED_MODEL"] = model
    from pmem import MemoryStore, dream
    from pmem.config import load
    from pmem.records import Memory

    path = cache / f"distinct-{n}{'' if model == EMBED else '-' + model}.db"
    if not path.exists():
        path, _ = opened(cache, n, label)
    store = MemoryStore(path, config=load().with_values(embed_model=model), clock=lambda: NOW)
    kinds = set(only.split(",")) if only else None
    out: dict = {"n": n, "db": str(path), "new": new, "kinds": only or "default", "load_start": os.getloadavg()}
    fresh = distinct_texts(n + new)[n:] if path.name.startswith("distinct") else distinct_texts(new)
    old = [m.text for m in store.list_memories(limit=new // 10)]
    texts = fresh[:new - len(old)] + [t + "!" for t in old]
    try:
        with store.transaction():
            if full:  # what the last dream left: everything it proposed, applied
                t = time.perf_counter()
                first = dream.plan(store, generator=False, now=NOW, full=True)
                applied = dream.apply(store, first, backup=False)
                out["first_dream"] = {"wall_s": round(time.perf_counter() - t, 2), "proposals": first.counts(),
                                      "applied": len(applied.applied)}
                print(json.dumps(out), file=sys.stderr, flush=True)
                assert (store.dream_mark() or {}).get("event") == first.mark  # as the dream recorded it
            else:  # a dream that applied nothing (every old pair turned down) and recorded its mark
                store.set_dream_mark({"event": store.event_mark(), "basis": dream._basis(store, store.thresholds()),
                                      "revisit": []})
            store.insert([Memory(id="", text=t, created_at="2025-12-31T00:00:00Z") for t in texts], summary="a day")
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            t, c = time.perf_counter(), time.process_time()
            got = dream.plan(store, generator=False, now=NOW, only=kinds)
            out["since"] = {"wall_s": round(time.perf_counter() - t, 2), "cpu_s": round(time.process_time() - c, 2),
                            "changed": got.changed, "considered": got.considered, "proposals": got.counts(),
                            "peak_rss_mb_added": round((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) / 1024)}
            print(json.dumps(out), file=sys.stderr, flush=True)
            if full:
                t, c = time.perf_counter(), time.process_time()
                whole = dream.plan(store, generator=False, now=NOW, full=True, only=kinds)
                out["full"] = {"wall_s": round(time.perf_counter() - t, 2), "cpu_s": round(time.process_time() - c, 2),
                               "considered": whole.considered, "proposals": whole.counts()}
                changed = {m.id for m in store.changed_since(got.since or 0)}
                key = lambda p: (p.kind, tuple(sorted(p.members)))  # noqa: E731
                mine = {key(p) for p in got.proposals if p.kind in dream.PAIR_KINDS}
                theirs = {key(p) for p in whole.proposals if p.kind in dream.PAIR_KINDS and set(p.members) & changed}
                out["full"]["about_unchanged"] = sum(1 for p in whole.proposals if not set(p.members) & changed)
                out["whole_plans_equal"] = {key(p) for p in got.proposals} == {key(p) for p in whole.proposals}
                out["same_proposals_about_the_changed"] = {
                    "since": len(mine), "full": len(theirs), "both": len(mine & theirs),
                    "only_since": sorted(k for k, _ in mine - theirs), "only_full": sorted(k for k, _ in theirs - mine)}
            raise _RolledBack
    except _RolledBack:
        pass
    store.close()
    out["load_end"] = os.getloadavg()
    return out


# Every interactive command, as a person would type it at this size ({a}: an archival memory).
# The writes come last, each undone by the next, on a copy of the store.
COMMANDS = (
    "search 'When did Caroline go to the LGBTQ support group?' --json", "search 'basketball team' --tag travel",
    "search 'basketball team' --tier episodic", "search 'basketball team' --since 2025-01-01",
    "search 'basketball team' --as-of 2021-01-01",
    "search 'When did Caroline go to the LGBTQ support group?' --until 2021-01-01",
    "search 'basketball team' --mode keyword", "search 'basketball team' --mode semantic",
    "search 'basketball team' -C 2", "recall 'what does John play'",
    "list", "list --sort updated", "list --sort accessed", "list --sort expires", "list --sort id",
    "list --tag travel", "list --tier core", "list --pinned", "list --since 2024-06-01 --until 2024-06-02",
    "list -a", "list --offset 500000", "show {a}", "history {a}", "why {a}", "log", "stats", "context",
    "add 'I planted three tomato plants in the garden today'", "undo", "edit {a} 'The garden hose is in the shed'",
    "undo", "pin {a}", "undo", "expire {a} --at 2030-01-01", "undo", "forget {a}", "restore {a}",
)


def private_copy(cache: Path, n: int, label: str, name: str) -> tuple[Path, dict]:
    """A copy of the store to change (`name`-n.db, the owner's only), and the environment a
    whole `python -m pmem` process runs in: no server, the fake embedder, bytecode written."""
    src, _ = opened(cache, n, label)
    path = cache / f"{name}-{n}.db"
    shutil.copyfile(src, path)
    os.chmod(path, 0o600)
    env = dict(os.environ, PMEM_HOME=str(cache / "home"), PMEM_EMBED_MODEL=EMBED, PMEM_SERVER="off")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return path, env


def commands(cache: Path, n: int, label: str, runs: int) -> dict:
    """Every command of COMMANDS as a whole process on a copy of the store (the writes change it):
    median wall time of `runs`, and `pmem doctor` and `pmem export` once each (they read the whole
    file), with their peak anonymous memory (the file's mapped pages left out)."""
    path, env = private_copy(cache, n, label, "commands")
    py = [sys.executable, "-m", "pmem", "--db", str(path)]
    from pmem import db

    conn = db.connect(path)
    ids = {"a": conn.execute("SELECT id FROM memories WHERE tier = 'archival' ORDER BY seq LIMIT 1").fetchone()[0]}
    conn.close()
    out: dict = {"n": n, "db": str(path), "load_start": os.getloadavg(), "median_s": []}
    try:
        for cmd in COMMANDS:
            args = shlex.split(cmd.format(**ids))
            writes = args[0] in ("add", "undo", "edit", "pin", "expire", "forget", "restore")
            out["median_s"].append([cmd, timed_process([*py, *args], env, 1 if writes else runs)["median_s"]])
        for name, args in (("doctor", ["doctor", "--json"]), ("export", ["export", "-o", str(path) + ".jsonl"])):
            out[name] = watched([*py, *args], env)
    finally:
        for suffix in ("", "-wal", "-shm", ".jsonl"):
            Path(str(path) + suffix).unlink(missing_ok=True)
    out["load_end"] = os.getloadavg()
    return out


def watched(cmd: list[str], env: dict, timeout: float | None = None, stdout=subprocess.DEVNULL) -> dict:
    """One whole process: its wall time and peak anonymous memory (the file's mapped pages left
    out), polled every 0.1 s; killed after `timeout` seconds (then "killed": true)."""
    proc = subprocess.Popen(cmd, env=env, stdout=stdout, stderr=subprocess.DEVNULL)
    peak, t = 0, time.perf_counter()
    while proc.poll() is None:
        with contextlib.suppress(OSError, IndexError):
            status = Path(f"/proc/{proc.pid}/status").read_text()
            peak = max(peak, int(status.split("RssAnon:")[1].split()[0]))
        if timeout is not None and time.perf_counter() - t > timeout:
            proc.kill()
            proc.wait()
            return {"wall_s": round(time.perf_counter() - t, 2), "peak_anon_mb": round(peak / 1024, 1), "killed": True}
        time.sleep(0.1)
    return {"wall_s": round(time.perf_counter() - t, 2), "peak_anon_mb": round(peak / 1024, 1), "rc": proc.returncode}


def first(cache: Path, n: int, label: str, max_seconds: float | None, rounds: int, timeout: float | None) -> dict:
    """The first dream of a store that never had one, as a person runs it: `pmem dream --json
    --no-model --apply --yes --no-upkeep` (with --max-seconds when given) on a copy, again and
    again until every memory has been compared or `rounds` are done, each a whole process with its
    wall time and peak anonymous memory. With rounds 0: one plan only (no --apply), killed after
    `timeout` seconds (the code before slices held the whole store and ran one whole plan)."""
    path, env = private_copy(cache, n, label, "first")
    args = [sys.executable, "-m", "pmem", "--db", str(path), "dream", "--json", "--no-model"]
    if max_seconds is not None:
        args += ["--max-seconds", str(max_seconds)]
    out: dict = {"n": n, "max_seconds": max_seconds, "load_start": os.getloadavg(), "rounds": []}
    try:
        for _ in range(max(rounds, 1)):
            report = path.with_suffix(".json")
            with report.open("w") as sink:
                run = watched(args + (["--apply", "--yes", "--no-upkeep"] if rounds else []), env, timeout, sink)
            data = json.loads(report.read_text() or "null") if not run.get("killed") else None
            plan = (data or {}).get("plan", data) or {}
            run.update({k: plan.get(k) for k in ("complete", "not_compared", "changed", "considered", "counts",
                                                 "elapsed_s")})
            if data and "result" in data:
                run["applied"] = len(data["result"]["applied"])
            out["rounds"].append(run)
            print(json.dumps(run), file=sys.stderr, flush=True)
            if not rounds or run.get("killed") or not plan.get("not_compared"):
                break
    finally:
        for leftover in (path, Path(f"{path}-wal"), Path(f"{path}-shm"), path.with_suffix(".json")):
            leftover.unlink(missing_ok=True)
    out["load_end"] = os.getloadavg()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["build", "measure", "recall", "quality", "pairs", "rates", "distinct",
                                     "keywords", "merge", "since", "commands", "first"])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--cache", type=Path, default=Path("/tmp/pmem-scale"))
    ap.add_argument("--label", default="before", help="before: measure the cached build as it is; "
                    "any other label: a copy of it, opened (and migrated) by the code on PYTHONPATH")
    ap.add_argument("--runs", type=int, default=5, help="whole-process runs per command")
    ap.add_argument("--upkeep", action="store_true", help="also time FTS optimize + VACUUM on a copy")
    ap.add_argument("--dream", action="store_true", help="also time `pmem dream` planning")
    ap.add_argument("--pool", type=int, help="quality: the profile's bit_pool for the run (0: the least, 2n)")
    ap.add_argument("--model", help="distinct, since: the embedding model (default fake-384)")
    ap.add_argument("--questions", type=int, default=200, help="keywords: LoCoMo dev questions asked")
    ap.add_argument("--new", type=int, default=1000, help="since: memories added after the last dream")
    ap.add_argument("--full", action="store_true", help="since: also the whole plan, and compare")
    ap.add_argument("--only", help="since: the dream kinds planned, comma-separated (default: dream's)")
    ap.add_argument("--max-seconds", type=float, help="first: each dream's --max-seconds")
    ap.add_argument("--rounds", type=int, default=1, help="first: applied dreams at most (0: one plan, not applied)")
    ap.add_argument("--timeout", type=float, help="first: kill a dream after this many seconds")
    args = ap.parse_args()
    if args.what == "build":
        build(args.cache, args.n)
    elif args.what == "measure":
        print(json.dumps(measure(args.cache, args.n, args.label, args.runs, args.upkeep, args.dream), indent=1))
    elif args.what == "recall":
        print(json.dumps([recall(args.cache, args.n, args.label, k) for k in (10, 100)], indent=1))
    elif args.what == "distinct":
        print(json.dumps(distinct(args.cache, args.n, args.model or EMBED), indent=1))
    elif args.what == "rates":
        print(json.dumps(rates(args.cache, list(SIZES), args.label), indent=1))
    elif args.what == "keywords":
        print(json.dumps(keywords(args.cache, args.n, args.label, args.questions), indent=1))
    elif args.what == "pairs":
        print(json.dumps(pairs(args.cache, args.n, args.label), indent=1))
    elif args.what == "merge":
        print(json.dumps(merge(args.cache, args.n, args.label), indent=1))
    elif args.what == "commands":
        print(json.dumps(commands(args.cache, args.n, args.label, min(args.runs, 3)), indent=1))
    elif args.what == "first":
        print(json.dumps(first(args.cache, args.n, args.label, args.max_seconds, args.rounds, args.timeout), indent=1))
    elif args.what == "since":
        print(json.dumps(since(args.cache, args.n, args.label, args.new, args.full, args.only, args.model or EMBED),
                         indent=1))
    else:
        print(json.dumps(quality(args.pool), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

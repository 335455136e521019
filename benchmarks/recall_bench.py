"""Threads on LoCoMo: evidence in the recall block, the keyword window and weights, index cost.

    python benchmarks/recall_bench.py                  # evidence in `recall` at the default budget, by category
    python benchmarks/recall_bench.py --via cli        # the same through `pmem import` + `pmem recall --format json`
    python benchmarks/recall_bench.py --sweep          # tune: keyword window x context weight x keyword weight
                                                       # (search R@5/R@10), recall_neighbours 0-3
    python benchmarks/recall_bench.py --cost           # import time and index size, threads vs none
    python benchmarks/recall_bench.py --thread none    # before threads: turns as islands
    python benchmarks/recall_bench.py --cache DIR      # the stores of retrieval.py --suite (fusion_sets.py), vectors
                                                       # cached in DIR: evidence in the block, median tokens, by set
    python benchmarks/recall_bench.py --cache DIR --explain    # and each miss: where search ranks the
                                                       # evidence, and what the block spent its budget on

One memory per dialogue turn, each session a thread (`locomo.turn_records(conv, "session")`), one
database per conversation, real all-MiniLM-L6-v2. "Evidence in the recall block": the share of
questions (categories 1-4) with at least one evidence turn among the memories `recall` returns.
The sweep embeds every turn and question once and changes the window in place
(`MemoryStore.keywords.set_window`), so the whole grid costs one import.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import locomo  # noqa: E402

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}


class Memo:
    """An embedder that embeds each text once (questions are searched many times in a sweep)."""

    def __init__(self, inner):
        self.inner, self.name, self.dim, self.cache = inner, inner.name, inner.dim, {}

    def embed(self, texts):
        todo = [t for t in dict.fromkeys(texts) if t not in self.cache]
        if todo:
            self.cache.update(zip(todo, self.inner.embed(todo)))
        return [self.cache[t] for t in texts]


def build(tmp: Path, thread: str, embedder):
    """One store per conversation: (store, dia_id by memory id, questions)."""
    from pmem import Memory, MemoryStore

    out = []
    for conv in locomo.load():
        records = locomo.turn_records(conv, thread)
        store = MemoryStore(tmp / f"{conv['sample_id']}-{thread}.db", embedder=embedder)
        stored = store.insert([Memory(id="", text=r["text"], created_at=r["created_at"], meta=r["meta"],
                                      thread=r.get("thread"), thread_pos=r.get("thread_pos")) for r in records])
        out.append((store, {m.id: m.meta["dia_id"] for m in stored}, locomo.questions(conv)))
    return out


def search_recall(convs, tuning, ks=(5, 10), mode="hybrid") -> dict:
    from pmem import search

    hits = {k: 0 for k in ks}
    total = 0
    for store, by_id, qs in convs:
        for q in qs:
            ranked = [by_id[h.memory.id] for h in search(store, q["question"], limit=max(ks), mode=mode, tuning=tuning)]
            total += 1
            for k in ks:
                hits[k] += bool(set(q["evidence"]) & set(ranked[:k]))
    return {f"R@{k}": round(hits[k] / total, 3) for k in ks}


def recall_evidence(convs, neighbours: int | None, budget: int | None = None) -> dict:
    from pmem import recall

    per_cat: dict[int, list[int]] = {}
    tokens, shown = [], []
    for store, by_id, qs in convs:
        for q in qs:
            r = recall(store, q["question"], neighbours=neighbours, budget=budget, fmt="json")
            ids = {by_id.get(m.id) for m in r.memories()}
            per_cat.setdefault(q["category"], []).append(int(bool(set(q["evidence"]) & ids)))
            tokens.append(r.tokens)
            shown.append(len(r.relevant))
    every = [v for vs in per_cat.values() for v in vs]
    return {"evidence_in_block": round(sum(every) / len(every), 3),
            "by_category": {CATEGORIES[c]: round(sum(v) / len(v), 3) for c, v in sorted(per_cat.items())},
            "mean_tokens": round(statistics.mean(tokens)), "mean_memories": round(statistics.mean(shown), 1)}


def sweep(convs) -> dict:
    from pmem.search import Tuning

    out: dict = {"window": [], "keyword_weight": [], "recall_neighbours": []}
    for before, after in ((0, 0), (1, 0), (0, 1), (1, 1), (2, 1), (1, 2), (2, 2), (3, 1), (3, 2)):
        for store, _, _ in convs:
            store.keywords.set_window(before, after)
        for cw in ((1.0,) if (before, after) == (0, 0) else (1.0, 0.7, 0.5, 0.3)):
            row = {"before": before, "after": after, "context_weight": cw,
                   **search_recall(convs, Tuning(context_weight=cw)),
                   "keyword_R@10": search_recall(convs, Tuning(context_weight=cw), ks=(10,), mode="keyword")["R@10"]}
            out["window"].append(row)
            print(json.dumps(row), file=sys.stderr)
    best = max(out["window"], key=lambda r: (r["R@10"] + r["R@5"], r["R@10"]))
    for store, _, _ in convs:
        store.keywords.set_window(best["before"], best["after"])
    for kw in (0.5, 0.6, 0.7, 0.8):
        fixed = Tuning(keyword_weight=kw, context_weight=best["context_weight"], adaptive=False)
        row = {"keyword_weight": kw, **search_recall(convs, fixed)}
        out["keyword_weight"].append(row)
        print(json.dumps(row), file=sys.stderr)
    module = sys.modules["pmem.recall"]
    default = module.NEIGHBOUR_MATCHES
    for n, matches in ((0, default), (1, 1), (1, 3), (1, 5), (1, 10), (1, 60), (2, 3), (3, 60)):
        module.NEIGHBOUR_MATCHES = matches  # how many of the best matches bring neighbours
        row = {"neighbours": n, "for_best_matches": matches, **recall_evidence(convs, n)}
        out["recall_neighbours"].append(row)
        print(json.dumps(row), file=sys.stderr)
    module.NEIGHBOUR_MATCHES = default
    out["best_window"] = best
    return out


def fts_bytes(store) -> int:
    """Bytes of the keyword index (FTS5 shadow tables) as stored: pages x page size."""
    try:
        return store.conn.execute("SELECT sum(pgsize) FROM dbstat WHERE name LIKE 'memories_fts%'").fetchone()[0]
    except Exception:  # no dbstat in this SQLite build
        return -1


def cost(tmp: Path, embedder) -> dict:
    """Write cost of threads: the same turns and vectors stored with and without threads."""
    from pmem import Memory, MemoryStore

    out = {}
    for thread in ("none", "session"):
        seconds, size, total, n = 0.0, 0, 0, 0
        for conv in locomo.load():
            records = locomo.turn_records(conv, thread)
            texts = [r["text"] for r in records]
            vectors = embedder.embed(texts)
            from pmem.store import serialize

            blobs = [serialize(v) for v in vectors]
            fields = {"thread", "thread_pos"} & set(Memory.__dataclass_fields__)
            items = [Memory(id="", text=r["text"], created_at=r["created_at"], meta=r["meta"],
                            **{k: r[k] for k in fields if k in r}) for r in records]
            path = tmp / f"cost-{conv['sample_id']}-{thread}.db"
            store = MemoryStore(path, embedder=embedder)
            start = time.perf_counter()
            store.insert(items, vectors=blobs)
            seconds += time.perf_counter() - start
            size += fts_bytes(store)
            store.conn.execute("VACUUM")
            store.close()
            total += path.stat().st_size
            n += len(items)
        out[thread] = {"memories": n, "insert_seconds": round(seconds, 2),
                       "ms_per_memory": round(1000 * seconds / n, 3),
                       "keyword_index_bytes": size, "database_bytes": total}
    return out


def via_cli(tmp: Path, budget: int | None) -> dict:
    per_cat: dict[int, list[int]] = {}
    tokens = []
    for conv in locomo.load():
        db = tmp / f"{conv['sample_id']}-cli.db"
        records = locomo.turn_records(conv, "session")

        def pmem(*args: str, input: str | None = None, db: Path = db) -> str:
            return subprocess.run([sys.executable, "-m", "pmem", "--db", str(db), *args], input=input, text=True,
                                  capture_output=True, check=True).stdout

        pmem("import", "-", "--format", "jsonl", input="".join(json.dumps(r) + "\n" for r in records))
        by_id = {m["id"]: m["meta"]["dia_id"] for m in map(json.loads, pmem("export").splitlines())}
        for q in locomo.questions(conv):
            args = ["recall", q["question"], "--format", "json"] + (["--budget", str(budget)] if budget else [])
            r = json.loads(pmem(*args))
            ids = {by_id.get(m["id"]) for m in r["core"] + r["relevant"]}
            per_cat.setdefault(q["category"], []).append(int(bool(set(q["evidence"]) & ids)))
            tokens.append(r["tokens"])
    every = [v for vs in per_cat.values() for v in vs]
    return {"evidence_in_block": round(sum(every) / len(every), 3),
            "by_category": {CATEGORIES[c]: round(sum(v) / len(v), 3) for c, v in sorted(per_cat.items())},
            "mean_tokens": round(statistics.mean(tokens))}


def suite_blocks(cache: Path, sets: list[str], explain: bool, neighbours: int | None = None) -> dict:
    """Evidence in the recall block over fusion_sets' stores (one per LoCoMo conversation, the
    paraphrase and multilingual sets, one mixed store), their vectors cached as retrieval.py
    --suite caches them. With `explain`, each miss: the evidence's rank in the ranking recall
    reads (search, 60 candidates) and further down (300), the matches and the neighbours the block
    holds, their tokens, and the rank of the first match left out."""
    import fusion_sets

    from pmem import config, recall, search
    from pmem.config import Settings
    from pmem.ranking.profile import DEFAULT
    from pmem.recall import _cost, _line
    from pmem.store import english as en

    model = Settings().embed_model
    emb = fusion_sets.embedder(model, cache)
    second = fusion_sets.embedder(en.MODEL, cache) \
        if config.load().embed_english == "minilm" and model == en.MAIN else None
    cells: dict[str, dict[str, list]] = {}
    misses: list[dict] = []
    causes: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("PMEM_HOME", tmp)
        for name, store, _keys, qs in fusion_sets.stores(Path(tmp), emb, sets, second):
            for q in qs:
                block = recall(store, q.text, fmt="json", neighbours=neighbours)
                keys = [m.meta.get("key") for m in block.memories()]
                inside = bool(q.targets & set(keys))
                extra = [m for m in block.relevant if m.id in block.neighbour_of]
                cell = cells.setdefault(f"{name} store|{q.set}", {"in": [], "tokens": [], "memories": [], "neighbours": []})
                cell["in"].append((q.group, inside))
                cell["tokens"].append(block.tokens)
                cell["memories"].append(len(block.relevant))
                cell["neighbours"].append(len(extra))
                if inside or not explain:
                    continue
                ranked = search(store, q.text, limit=60)
                kept = [h for h in ranked if h.keyword_rank is not None or h.score >= DEFAULT.recall_min_score]
                at = [i for i, h in enumerate(ranked) if h.memory.meta.get("key") in q.targets]
                best = ranked[at[0]] if at else None
                far = [i for i, h in enumerate(search(store, q.text, limit=300)) if h.memory.meta.get("key") in q.targets]
                shown = set(keys)
                first_out = next((i for i, h in enumerate(kept) if h.memory.meta.get("key") not in shown), None)
                if at and not any(h.memory.meta.get("key") in q.targets for h in kept):
                    cause = "below the score cut-off"
                elif at:
                    cause = "ranked in the 60, past the budget"
                elif far:
                    cause = "ranked past 60"
                else:
                    cause = "not in the first 300"
                by = causes.setdefault(f"{name} store|{q.set}", {})
                by[cause] = by.get(cause, 0) + 1
                misses.append({"store": name, "set": q.set, "group": q.group, "question": q.text, "cause": cause,
                               "rank": at[:3], "rank_of_300": far[:3], "first_match_left_out": first_out,
                               "score": None if best is None else round(best.score, 4),
                               "cosine": None if best is None or best.distance is None else round(1 - best.distance, 4),
                               "keyword_rank": None if best is None else best.keyword_rank,
                               "matches": len(block.relevant) - len(extra), "neighbours": len(extra),
                               "neighbour_tokens": sum(_cost(_line(m, "md")) for m in extra),
                               "tokens": block.tokens})
            for saver in (emb, getattr(emb, "inner", None), second):
                if hasattr(saver, "save"):
                    saver.save()
    out: dict = {"model": model, "english": en.MODEL if second is not None else "none",
                 "load average": os.getloadavg()[0], "sets": {}}
    for key, c in sorted(cells.items()):
        groups: dict[str, list[bool]] = {}
        for group, inside in c["in"]:
            groups.setdefault(group, []).append(inside)
        every = [inside for _, inside in c["in"]]
        out["sets"][key] = {"n": len(every), "in block": sum(every), "evidence_in_block": round(sum(every) / len(every), 3),
                            "by_group": {g: round(sum(v) / len(v), 3) for g, v in sorted(groups.items())},
                            "median_tokens": statistics.median(c["tokens"]),
                            "mean_memories": round(statistics.mean(c["memories"]), 1),
                            "blocks_with_neighbours": sum(1 for n in c["neighbours"] if n),
                            "neighbours": sum(c["neighbours"])}
        if explain:
            out["sets"][key]["misses_by_cause"] = causes.get(key, {})
    if explain:
        out["misses"] = misses
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--via", choices=["cli", "lib"], default="lib")
    ap.add_argument("--sweep", action="store_true", help="tune the window, weights and recall_neighbours")
    ap.add_argument("--cost", action="store_true", help="import time and keyword index size, threads vs none")
    ap.add_argument("--thread", default="session", choices=locomo.THREADS,
                    help="what a thread is: a session (default), the whole conversation, or none (before threads)")
    ap.add_argument("--neighbours", type=int, default=None, help="recall_neighbours (default: the setting)")
    ap.add_argument("--budget", type=int, default=None, help="recall budget (default: the setting, 1500)")
    ap.add_argument("--neighbour-matches", type=int, default=None,
                    help="how many of recall's best matches bring neighbours (default: pmem.recall.NEIGHBOUR_MATCHES)")
    ap.add_argument("--cache", default="", help="the stores of retrieval.py --suite, vectors cached in this folder")
    ap.add_argument("--sets", nargs="+", default=["locomo"], help="--cache: which sets (fusion_sets.SETS)")
    ap.add_argument("--explain", action="store_true", help="--cache: each miss, its evidence's rank and the block")
    args = ap.parse_args()
    if args.neighbour_matches is not None:
        import pmem.recall  # noqa: F401

        sys.modules["pmem.recall"].NEIGHBOUR_MATCHES = args.neighbour_matches
    if args.cache:
        print(json.dumps(suite_blocks(Path(args.cache), args.sets, args.explain, args.neighbours), indent=1, ensure_ascii=False))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("PMEM_HOME", tmp)
        if args.via == "cli":
            result = {"via": "cli", **via_cli(Path(tmp), args.budget)}
        else:
            from pmem import load_config
            from pmem.models.embed import load_embedder

            cfg = load_config()
            embedder = Memo(load_embedder(cfg.embed_model, threads=cfg.threads, server="off"))
            if args.cost:
                result = cost(Path(tmp), embedder)
            else:
                convs = build(Path(tmp), args.thread, embedder)
                if args.sweep:
                    result = sweep(convs)
                else:
                    result = {"via": "lib", "thread": args.thread, "neighbours": args.neighbours,
                              **recall_evidence(convs, args.neighbours, args.budget)}
                for store, _, _ in convs:
                    store.close()
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Evidence recall@k on LoCoMo through pmem itself.

    python benchmarks/retrieval.py                 # via the CLI: `pmem import`, then `pmem search --json`
    python benchmarks/retrieval.py --via lib       # same code paths through the library (fast, for tuning)
    python benchmarks/retrieval.py --mode keyword  # one retriever alone
    python benchmarks/retrieval.py --thread none   # turns without threads (no neighbour context)
    python benchmarks/retrieval.py --via lib --model multilingual-e5-small --weights 0.4 0.5 0.6 0.7
                                                   # another embedding model; a fusion sweep in one run
    python benchmarks/retrieval.py --suite         # every set of benchmarks/fusion_sets.py, each mode, in-process:
                                                   # paraphrase and multilingual top-1/top-3, LoCoMo R@5/R@10 and
                                                   # evidence in the recall block, and the mixed store of all of them
    python benchmarks/retrieval.py --suite --questions A.jsonl   # ... and each question's outcome
    python benchmarks/retrieval.py --paired A.jsonl B.jsonl      # two of those, question by question

One memory per dialogue turn ("Speaker: text", dated by its session), one database per conversation;
each session's turns are a thread (`thread`, `thread_pos` in the imported JSONL), so each turn's
keyword entry also holds its neighbours' words. A question (categories 1-4) is a hit at k when any of
its evidence turns is itself among the top k results.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import locomo  # noqa: E402


def pmem_cli(db: Path, *args: str, input: str | None = None) -> str:
    r = subprocess.run([sys.executable, "-m", "pmem", "--db", str(db), *args], input=input, text=True,
                       capture_output=True, check=True)
    return r.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--via", choices=["cli", "lib"], default="cli")
    ap.add_argument("--mode", default="hybrid", choices=["hybrid", "keyword", "semantic"])
    ap.add_argument("--k", type=int, nargs="+", default=[5, 10])
    ap.add_argument("--thread", default="session", choices=locomo.THREADS,
                    help="what a thread is: a session (default), the whole conversation, or none")
    ap.add_argument("--limit-questions", type=int, default=0, help="only the first N questions per conversation")
    ap.add_argument("--model", default="", help="embedding model (default: the configured one)")
    ap.add_argument("--weights", type=float, nargs="+", default=[],
                    help="--via lib: fixed keyword shares of the fusion to compare over the same stores")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--suite", action="store_true", help="every set, every mode, in-process (see above)")
    ap.add_argument("--sets", nargs="+", default=["paraphrase", "multilingual", "locomo", "mixed"],
                    help="--suite: which sets")
    ap.add_argument("--cache", default="", help="--suite: keep vectors in this folder between runs")
    ap.add_argument("--questions", default="", help="--suite: also write each question's outcome to this file")
    ap.add_argument("--paired", nargs=2, metavar=("BEFORE", "AFTER"), default=[],
                    help="compare two --questions files question by question (see paired())")
    args = ap.parse_args()
    if args.paired:
        return paired(*args.paired)
    if args.suite:
        return suite(args)
    if args.model:
        os.environ["PMEM_EMBED_MODEL"] = args.model
    if args.weights and args.via != "lib":
        ap.error("--weights needs --via lib")
    if args.weights:
        return sweep(args)
    kmax = max(args.k)
    hits = {k: 0 for k in args.k}
    total = 0
    per_cat: dict[int, list[int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("PMEM_HOME", tmp)
        for conv in locomo.load():
            db = Path(tmp) / f"{conv['sample_id']}.db"
            records = locomo.turn_records(conv, args.thread)
            qs = locomo.questions(conv)
            if args.limit_questions:
                qs = qs[: args.limit_questions]
            if args.via == "cli":
                pmem_cli(db, "import", "-", "--format", "jsonl",
                         input="".join(json.dumps(r) + "\n" for r in records))
                pmem_cli(db, "reindex", "--missing")  # after the import's background fill of the English vectors
                by_id = {}
                for line in pmem_cli(db, "export").splitlines():
                    m = json.loads(line)
                    by_id[m["id"]] = m["meta"]["dia_id"]
            else:
                from pmem import Memory, MemoryStore
                from pmem import search as lib_search

                store = MemoryStore(db)
                stored = store.insert([Memory(id="", text=r["text"], created_at=r["created_at"], meta=r["meta"],
                                              thread=r.get("thread"), thread_pos=r.get("thread_pos"))
                                       for r in records])
                by_id = {m.id: m.meta["dia_id"] for m in stored}
            for q in qs:
                if args.via == "cli":
                    out = json.loads(pmem_cli(db, "search", q["question"], "--json", "--limit", str(kmax),
                                              "--mode", args.mode))
                    ranked = [by_id[h["id"]] for h in out]
                else:
                    ranked = [by_id[h.memory.id] for h in lib_search(store, q["question"], limit=kmax, mode=args.mode)]
                evidence = set(q["evidence"])
                total += 1
                for k in args.k:
                    if evidence & set(ranked[:k]):
                        hits[k] += 1
                per_cat.setdefault(q["category"], []).append(int(bool(evidence & set(ranked[:10]))))
            if args.via == "lib":
                store.close()
    result = {"questions": total, "mode": args.mode, "via": args.via, "thread": args.thread,
              **{f"R@{k}": round(hits[k] / total, 3) for k in args.k},
              "R@10_by_category": {c: round(sum(v) / len(v), 3) for c, v in sorted(per_cat.items())}}
    print(json.dumps(result, indent=2) if args.json else " ".join(f"{k}={v}" for k, v in result.items()))
    return 0


def sweep(args) -> int:
    """R@k of hybrid search for each keyword weight, the same stores and query vectors."""
    from dataclasses import replace

    from pmem import Memory, MemoryStore
    from pmem import search as lib_search
    from pmem.search import DEFAULT_TUNING

    kmax = max(args.k)
    hits = {w: {k: 0 for k in args.k} for w in args.weights}
    total = 0
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("PMEM_HOME", tmp)
        for conv in locomo.load():
            store = MemoryStore(Path(tmp) / f"{conv['sample_id']}.db")
            stored = store.insert([Memory(id="", text=r["text"], created_at=r["created_at"], meta=r["meta"],
                                          thread=r.get("thread"), thread_pos=r.get("thread_pos"))
                                   for r in locomo.turn_records(conv, args.thread)])
            by_id = {m.id: m.meta["dia_id"] for m in stored}
            qs = locomo.questions(conv)[: args.limit_questions or None]
            store.query_vector = functools.lru_cache(maxsize=None)(store.query_vector)  # once a question
            for q in qs:
                total += 1
                evidence = set(q["evidence"])
                for w in args.weights:
                    tuning = replace(DEFAULT_TUNING, keyword_weight=w, adaptive=False)
                    ranked = [by_id[h.memory.id] for h in lib_search(store, q["question"], limit=kmax, tuning=tuning)]
                    for k in args.k:
                        hits[w][k] += bool(evidence & set(ranked[:k]))
            store.close()
    result = {"questions": total, "model": os.environ.get("PMEM_EMBED_MODEL", "(configured)"),
              "thread": args.thread,
              "by_weight": {str(w): {f"R@{k}": round(hits[w][k] / total, 3) for k in args.k} for w in args.weights}}
    print(json.dumps(result, indent=2))
    return 0


MODES = ("hybrid", "semantic", "keyword")


def suite(args) -> int:
    """Each set's figures per mode through pmem.search.search (and pmem.recall for LoCoMo's block)."""
    from pmem.config import Settings

    model = args.model or Settings().embed_model
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("PMEM_HOME", tmp)
        rows: list[dict] | None = [] if args.questions else None
        out = measure(Path(tmp), model, args.sets, Path(args.cache) if args.cache else None, questions=rows)
    if args.questions:
        Path(args.questions).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows or []),
                                        encoding="utf-8")
    print(json.dumps(out, indent=1, ensure_ascii=False))
    return 0


def measure(tmp: Path, model: str, sets, cache: Path | None, conversations=None, modes=MODES,
            questions: list[dict] | None = None) -> dict:
    """The suite's figures: {"<set> store": {set: {mode: {group: figures}}}} with top1/top3 for the
    paraphrase and multilingual sets, R@5/R@10 for LoCoMo, and "evidence in block" under the mode
    "recall block"; each group's "n" is its questions. Stores are built in `tmp`; vectors are kept
    in `cache` when given; `questions`, when a list, gets each question's outcome in each mode
    (paired()). Used by --suite and by tests/retrieval/test_quality_gate.py."""
    import fusion_sets

    from pmem import config, recall
    from pmem import search as lib_search
    from pmem.store import english as en

    emb = fusion_sets.embedder(model, cache)
    # English memories' second vectors, cached too (PMEM_EMBED_ENGLISH=none: a store without them)
    second = fusion_sets.embedder(en.MODEL, cache) \
        if config.load().embed_english == "minilm" and model == en.MAIN else None
    acc: dict = {}

    def count(cell: str, ranked: list[str], targets) -> None:
        a = acc.setdefault(cell, [0, 0, 0, 0, 0])
        a[0] += 1
        for i, k in enumerate((1, 3, 5, 10), start=1):
            a[i] += bool(targets & set(ranked[:k]))

    for name, store, _keys, qs in fusion_sets.stores(tmp, emb, sets, second, conversations):
        key_of = {}
        for q in qs:
            for mode in modes:
                hits = lib_search(store, q.text, limit=10, mode=mode)
                ranked = [key_of.setdefault(h.memory.id, h.memory.meta["key"]) for h in hits]
                count(f"{name}|{q.set}|{mode}|{q.split}", ranked, q.targets)
                count(f"{name}|{q.set}|{mode}|{q.group}", ranked, q.targets)
                if questions is not None:
                    first = next((i for i, key in enumerate(ranked, start=1) if key in q.targets), None)
                    questions.append({"store": name, "set": q.set, "mode": mode, "split": q.split,
                                      "group": q.group, "question": q.text, "first": first,
                                      "scores": [h.rank_score for h in hits[:(first or 10) + 1]]})
            if name == "locomo":
                block = recall(store, q.text, fmt="json")
                inside = bool(q.targets & {m.meta["key"] for m in block.memories()})
                a = acc.setdefault(f"{name}|{q.set}|recall block|all", [0, 0, 0, 0, 0])
                a[0] += 1
                a[4] += inside
                if questions is not None:  # "first" 1: every target in the block
                    questions.append({"store": name, "set": q.set, "mode": "recall block", "split": "all",
                                      "group": "all", "question": q.text, "first": 1 if inside else None,
                                      "scores": []})
        for saver in (emb, getattr(emb, "inner", None), second):
            if hasattr(saver, "save"):
                saver.save()
    out: dict = {"model": model, "english": en.MODEL if second is not None else "none",
                 "load average": os.getloadavg()[0]}
    for cell, (n, h1, h3, h5, h10) in sorted(acc.items()):
        store, qset, mode, group = cell.split("|")
        if mode == "recall block":
            fig = {"n": n, "evidence in block": round(h10 / n, 3)}
        elif qset == "locomo":
            fig = {"n": n, "R@5": round(h5 / n, 3), "R@10": round(h10 / n, 3)}
        else:
            fig = {"n": n, "top1": round(h1 / n, 3), "top3": round(h3 / n, 3)}
        out.setdefault(f"{store} store", {}).setdefault(qset, {}).setdefault(mode, {})[group] = fig
    return out


def paired(before: str, after: str) -> int:
    """Two --questions files of the same suite, question by question: for each store, set, mode and
    split, how many questions a figure (top1, top3, R@5, R@10) gained and lost, the two-sided sign
    test's p for that split (exact binomial on the changed questions), and for each question lost
    at top 1, how far its target led the next memory before. A figure's move of one question is
    then seen for what it is: 1/n, with the questions that moved the other way beside it."""
    from math import comb

    def load(path: str) -> dict:
        rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line]
        return {(r["store"], r["set"], r["mode"], r["split"], r["question"]): r for r in rows}

    a, b = load(before), load(after)
    cells: dict = {}
    for key, ra in a.items():
        rb = b.get(key)
        if rb is None:
            continue
        cell = cells.setdefault(key[:4], {"n": 0, "figures": {}, "lost at top1": []})
        cell["n"] += 1
        for k in (1, 3, 5, 10):
            hit_a, hit_b = (r["first"] is not None and r["first"] <= k for r in (ra, rb))
            fig = cell["figures"].setdefault(f"top{k}", [0, 0])
            fig[0] += hit_b and not hit_a
            fig[1] += hit_a and not hit_b
        if ra["first"] == 1 and rb["first"] != 1 and len(ra["scores"]) > 1:
            cell["lost at top1"].append(round(ra["scores"][0] - ra["scores"][1], 6))
    out = []
    for (store, qset, mode, split), cell in sorted(cells.items()):
        figs = {}
        for name, (gained, lost) in cell["figures"].items():
            m = gained + lost
            p = min(1.0, 2 * sum(comb(m, i) for i in range(min(gained, lost) + 1)) / 2 ** m) if m else 1.0
            figs[name] = {"gained": gained, "lost": lost, "net": round((gained - lost) / cell["n"], 4),
                          "p": round(p, 3)}
        out.append({"cell": f"{store} store / {qset} / {mode} / {split}", "n": cell["n"], **figs,
                    "lost at top1, lead before": sorted(cell["lost at top1"])})
    print(json.dumps(out, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Dedup alone on a LoCoMo store dream_bench.py built: the planted duplicates found, the reviews
asked, and evidence R@10 after applying the dedups, without embedding the memories again.

    python benchmarks/dream_dedup_locomo.py /tmp/pmem-dream-bench-XXXX/conv-26.db --embed multilingual-e5-small
    python benchmarks/dream_dedup_locomo.py /tmp/pmem-dream-bench-XXXX/*.db --embed multilingual-e5-small --whole

The store is copied, the dream dream_bench applied is undone (its last operation), and dedup is
planned and applied with the code of the checkout this file is in: run each version's copy to
compare. --whole: the whole dream (every default kind, no chat model) instead of dedup alone, with
what dream_bench reports of it (memories after, shrink, R@10, R@1500 tokens, a second dream's new
proposals), summed over the stores given."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from dream_bench import NOW, active, cache_query_vectors, recall_at  # noqa: E402

import locomo  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("db", nargs="+")
    ap.add_argument("--embed", default="multilingual-e5-small")
    ap.add_argument("--whole", action="store_true", help="the whole dream, not dedup alone")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="pmem-dedup-locomo-"))
    os.environ["PMEM_HOME"] = str(tmp)
    os.environ["PMEM_EMBED_MODEL"] = args.embed
    runs = [one(Path(db), tmp, args) for db in args.db]
    if len(runs) == 1:
        print(json.dumps(runs[0], indent=1, ensure_ascii=False))
        return 0
    t = {k: sum(r[k] for r in runs) for k in ("memories", "memories_after", "questions", "hits_before",
                                               "hits_after", "budget_before", "budget_after", "planted_pairs",
                                               "found_planted", "predicted_pairs", "second_dream_new")}
    kinds: dict = {}
    for r in runs:
        for k, n in r["proposals"].items():
            kinds[k] = kinds.get(k, 0) + n
    print(json.dumps({
        "conversations": [r["conversation"] for r in runs], "embed_model": args.embed, "whole": args.whole,
        "memories": t["memories"], "memories_after": t["memories_after"],
        "shrink": round(1 - t["memories_after"] / t["memories"], 3), "proposals": kinds,
        "planted_pairs": t["planted_pairs"],
        "dedup_precision": round(t["found_planted"] / t["predicted_pairs"], 3) if t["predicted_pairs"] else None,
        "dedup_recall": round(t["found_planted"] / t["planted_pairs"], 3) if t["planted_pairs"] else None,
        "r10_before": round(t["hits_before"] / t["questions"], 3), "r10_after": round(t["hits_after"] / t["questions"], 3),
        "r_at_1500_tokens_before": round(t["budget_before"] / t["questions"], 3),
        "r_at_1500_tokens_after": round(t["budget_after"] / t["questions"], 3),
        "second_dream_new": t["second_dream_new"],
        "wrong_examples": [w for r in runs for w in r["wrong_examples"]][:6],
    }, indent=1, ensure_ascii=False))
    return 0


def one(db: Path, tmp: Path, args) -> dict:
    """One store's figures (see the module's docstring)."""
    from pmem import MemoryStore, dream
    from pmem.config import load as load_config

    path = tmp / db.name
    shutil.copy(db, path)
    store = MemoryStore(path, config=load_config())
    store.undo()  # dream_bench's dream
    rows = store.conn.execute("SELECT id, meta FROM memories ORDER BY rowid").fetchall()
    evidence, facts, planted = {}, [], []
    for mid, meta in rows:
        meta = json.loads(meta or "{}")
        if "dia_id" in meta:
            evidence[mid] = [meta["dia_id"]]
        elif "evidence" in meta:
            evidence[mid] = meta["evidence"]
            if "planted_of" in meta:
                planted.append((facts[meta["planted_of"]], mid))
            else:
                facts.append(mid)
    conv = next(c for c in locomo.load() if c["sample_id"] == path.stem)
    cache_query_vectors(store, {})
    live_before = active(store)[0]
    before = recall_at(store, conv, evidence)
    # full: the dream mark dream_bench's dream left (the reviews it left unanswered) is not undone
    plan = dream.plan(store, only=None if args.whole else {"dedup"}, now=NOW, generator=False, full=True)
    dedups = [p for p in plan.proposals if p.kind == "dedup"]
    reviews = [p for p in plan.proposals if p.kind == "review"]
    predicted = {frozenset((a, b)) for p in dedups for i, a in enumerate(p.members) for b in p.members[i + 1:]}
    truth = {frozenset(p) for p in planted}
    kinds: dict = {}
    for p in plan.proposals:
        kinds[p.kind] = kinds.get(p.kind, 0) + 1
    dream.apply(store, plan, backup=False)
    after = recall_at(store, conv, evidence)
    again = dream.plan(store, only=None if args.whole else {"dedup"}, now=NOW, generator=False)
    asked = {p.id for p in plan.proposals if p.kind in dream.ASKED}
    out = {
        "conversation": path.stem, "embed_model": args.embed, "memories": live_before,
        "memories_after": active(store)[0], "proposals": kinds, "planted_pairs": len(truth),
        "found_planted": len(truth & predicted), "predicted_pairs": len(predicted),
        "dedup_proposals": len(dedups), "merged_away": sum(len(p.members) - 1 for p in dedups),
        "reviews": len(reviews), "dedup_precision": round(len(truth & predicted) / len(predicted), 3) if predicted else None,
        "dedup_recall": round(len(truth & predicted) / len(truth), 3) if truth else None,
        "questions": before[2], "hits_before": before[0], "hits_after": after[0],
        "budget_before": before[4], "budget_after": after[4],
        "r10_before": round(before[0] / before[2], 3), "r10_after_dedup": round(after[0] / after[2], 3),
        "r_at_1500_tokens_after_dedup": round(after[4] / after[2], 3),
        "second_dream_new": sum(1 for p in again.proposals if p.id not in asked),
        "review_examples": [[store.get(i).text for i in p.members] for p in reviews[:4]],
        "wrong_examples": [[store.get(i).text for i in pair] for pair in list(predicted - truth)[:4]],
    }
    store.close()
    return out


if __name__ == "__main__":
    raise SystemExit(main())

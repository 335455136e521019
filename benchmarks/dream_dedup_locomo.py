"""Dedup alone on a LoCoMo store dream_bench.py built: the planted duplicates found, the reviews
asked, and evidence R@10 after applying the dedups, without embedding anything again.

    python benchmarks/dream_dedup_locomo.py /tmp/pmem-dream-bench-XXXX/conv-26.db --embed multilingual-e5-small

The store is copied, the dream dream_bench applied is undone (its last operation), and dedup is
planned and applied with the code on PYTHONPATH: run it once with each version to compare."""

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

from dream_bench import NOW, cache_query_vectors, recall_at  # noqa: E402

import locomo  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("db")
    ap.add_argument("--embed", default="multilingual-e5-small")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="pmem-dedup-locomo-"))
    os.environ["PMEM_HOME"] = str(tmp)
    os.environ["PMEM_EMBED_MODEL"] = args.embed
    from pmem import dream
    from pmem.config import load as load_config
    from pmem.store import MemoryStore

    path = tmp / Path(args.db).name
    shutil.copy(args.db, path)
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
    before = recall_at(store, conv, evidence)
    plan = dream.plan(store, only={"dedup"}, now=NOW, generator=False)
    dedups = [p for p in plan.proposals if p.kind == "dedup"]
    reviews = [p for p in plan.proposals if p.kind != "dedup"]
    predicted = {frozenset((a, b)) for p in dedups for i, a in enumerate(p.members) for b in p.members[i + 1:]}
    truth = {frozenset(p) for p in planted}
    dream.apply(store, plan, backup=False)
    after = recall_at(store, conv, evidence)
    print(json.dumps({
        "conversation": path.stem, "embed_model": args.embed, "memories": len(rows), "planted_pairs": len(truth),
        "dedup_proposals": len(dedups), "merged_away": sum(len(p.members) - 1 for p in dedups),
        "reviews": len(reviews), "dedup_precision": round(len(truth & predicted) / len(predicted), 3) if predicted else None,
        "dedup_recall": round(len(truth & predicted) / len(truth), 3) if truth else None,
        "r10_before": round(before[0] / before[2], 3), "r10_after_dedup": round(after[0] / after[2], 3),
        "r_at_1500_tokens_after_dedup": round(after[4] / after[2], 3),
        "review_examples": [[store.get(i).text for i in p.members] for p in reviews[:4]],
        "wrong_examples": [[store.get(i).text for i in pair] for pair in list(predicted - truth)[:4]],
    }, indent=1, ensure_ascii=False))
    store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

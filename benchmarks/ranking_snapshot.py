"""The ranked ids and scores of a fixed set of queries, for checking that a change to the ranking's
code (not its constants) leaves every ranking bit-identical.

    python benchmarks/ranking_snapshot.py --out before.json            # fake embedder + real models
    python benchmarks/ranking_snapshot.py --fake-only --out before.json
    python benchmarks/ranking_snapshot.py --compare before.json after.json

Two stores: one on the fake embedder (fake-64: hashing, no model) and one on the shipped models
(multilingual-e5-small-symmetric with MiniLM's second vectors for English memories), each holding
pmem's own paraphrase and multilingual sets (benchmarks/data/), threads and questions included.
Every query of both sets is searched in each mode, with collapse and without; each result is kept
as (id, score, rank_score, keyword_rank, semantic_rank, distance), floats as their repr.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"


def _texts() -> tuple[list[str], list[str]]:
    para = json.loads((DATA / "paraphrase.json").read_text())
    multi = json.loads((DATA / "multilingual.json").read_text())
    memories = [m["text"] for m in para["memories"]] + [m["text"] for m in multi["memories"]]
    queries = [q["text"] for q in para["queries"]] + [q["text"] for q in multi["queries"]]
    return memories, queries


def _fill(store, memories: list[str]) -> None:
    batch = []
    for i, text in enumerate(memories):
        # every fourth memory a question about itself, every memory in a thread of five
        t = text.rstrip(".") + "?" if i % 4 == 3 else text
        batch.append(store.new_memory(t, thread=f"t{i // 5}", thread_pos=i % 5))
    store.insert(batch)


def snapshot(store, queries: list[str]) -> dict:
    from pmem.search import search

    out = {}
    for q in queries:
        for mode in ("hybrid", "semantic", "keyword"):
            for collapse in (True, False):
                hits = search(store, q, limit=10, mode=mode, collapse=collapse)
                out[f"{mode}|{collapse}|{q}"] = [
                    [h.memory.text, repr(h.score), repr(h.rank_score), h.keyword_rank, h.semantic_rank,
                     repr(h.distance)] for h in hits]
    return out


def build(fake: bool, folder: Path):
    import os

    from pmem import MemoryStore
    from pmem.config import load

    if fake:
        os.environ["PMEM_EMBED_MODEL"] = "fake-64"
    else:
        os.environ.pop("PMEM_EMBED_MODEL", None)
    store = MemoryStore(folder / ("fake.db" if fake else "real.db"), config=load())
    return store


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out")
    ap.add_argument("--fake-only", action="store_true")
    ap.add_argument("--compare", nargs=2)
    args = ap.parse_args()
    if args.compare:
        a, b = (json.loads(Path(p).read_text()) for p in args.compare)
        differ = [k for k in set(a) | set(b) if a.get(k) != b.get(k)]
        print(f"{len(a)} and {len(b)} rankings; {len(differ)} differ")
        for k in sorted(differ)[:10]:
            print("  ", k)
        return 1 if differ else 0
    memories, queries = _texts()
    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        for fake in (True,) if args.fake_only else (True, False):
            store = build(fake, Path(tmp))
            try:
                _fill(store, memories)
                part = snapshot(store, queries)
                result.update({("fake|" if fake else "real|") + k: v for k, v in part.items()})
                print(f"{'fake' if fake else 'real'}: {len(part)} rankings; English side in use: "
                      f"{store.vectors.english.in_use()}", file=sys.stderr)
            finally:
                store.close()
    Path(args.out).write_text(json.dumps(result, ensure_ascii=False, indent=0, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

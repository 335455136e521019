"""e5's forward pass with a few rows: the weight on the left of the product or on the right.

    python benchmarks/e5_linear.py                      # queries of the retrieval sets, and sequence lengths
    python benchmarks/e5_linear.py --rounds 5 --lengths 16 64 128 256 512
    python benchmarks/e5_linear.py --db /tmp/pmem-scale/scale-100000.db --rounds 3   # whole searches at scale

pmem.models.e5.linear multiplies a pass of up to `FEW_ROWS` tokens as (W @ x.T).T and a longer
one as x @ W.T. This times e5's forward pass (CPU time of this process, one BLAS thread as a query
runs) both ways in one process: blocks of every question (`FEW_ROWS` = 0, then the shipped value,
alternating, --rounds times each), and passes of --lengths tokens, so the threshold can be read
off where the two orders cross. Medians; the vectors of both orders are compared too.

With --db (a scale.py store, relabelled and given second vectors as benchmarks/english_cost.py
does), whole in-process hybrid searches instead, at the threads pmem picks: each question with
`embed_english = none` and `minilm`, each under both orders, interleaved question by question, so
"x @ W.T, none" is the search as it was before second vectors and this change.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def questions(n: int) -> list[str]:
    """n questions: half the paraphrase set's, half LoCoMo dev's first conversation's."""
    import fusion_sets

    import locomo

    _, para = fusion_sets.paraphrase_records()
    qs = [q.text for q in para][: n // 2]
    return qs + [q["question"] for q in locomo.questions(locomo.load()[0])][: n - len(qs)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=3, help="blocks of each order, alternating")
    ap.add_argument("--lengths", type=int, nargs="*", default=[16, 32, 64, 128, 256, 512])
    ap.add_argument("--db", type=Path, help="a store scale.py built: whole searches instead")
    args = ap.parse_args()
    os.environ["PMEM_SERVER"] = "never"
    if args.db:
        return searches(args)
    import numpy as np

    from pmem.models import e5 as E
    from pmem.models.embed import load_embedder
    from pmem.store import english as en

    e5 = load_embedder(en.MAIN, server="never").inner
    e5.use_threads(1)
    shipped = E.FEW_ROWS
    qs = questions(args.questions)
    seqs = [e5.windows(e5.tokenize(q, True)) for q in qs]
    out: dict = {"questions": len(qs), "tokens (median)": statistics.median(len(s[0]) for s in seqs),
                 "FEW_ROWS": shipped}
    vectors = {}
    for rows in (0, shipped):
        E.FEW_ROWS = rows
        vectors[rows] = e5.embed_array(qs, query=True)
    out["cosine of the two orders' vectors, min"] = round(float(np.min(np.sum(vectors[0] * vectors[shipped], 1))), 7)
    times: dict[int, list[list[float]]] = {0: [[] for _ in qs], shipped: [[] for _ in qs]}
    for _ in range(args.rounds):
        for rows in (0, shipped):
            E.FEW_ROWS = rows
            for i, s in enumerate(seqs):
                c = time.process_time()
                e5._forward(s)
                times[rows][i].append(time.process_time() - c)
    before = [statistics.median(t) for t in times[0]]
    after = [statistics.median(t) for t in times[shipped]]
    out["query forward, ms (median over questions)"] = {"x @ W.T": round(statistics.median(before) * 1000, 2),
                                                          "W @ x.T (shipped)": round(statistics.median(after) * 1000, 2)}
    out["ratio, median over questions"] = round(statistics.median(a / b for a, b in zip(after, before)), 3)
    rng = np.random.default_rng(1)
    lengths = {}
    for n in args.lengths:
        seq = [[e5.tokenizer.bos, *rng.integers(1000, 100000, n - 2).tolist(), e5.tokenizer.eos]]
        cell = {}
        for rows in (0, n):  # x @ W.T, then W @ x.T for this length
            E.FEW_ROWS = rows
            e5._forward(seq)
            ts = []
            for _ in range(max(3, 2 * args.rounds)):
                c = time.process_time()
                e5._forward(seq)
                ts.append(time.process_time() - c)
            cell["W @ x.T" if rows else "x @ W.T"] = round(statistics.median(ts) * 1000, 1)
        lengths[n] = cell
    out["one pass of N tokens, ms"] = lengths
    E.FEW_ROWS = shipped
    out["load average"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out, indent=1))
    return 0


def searches(args) -> int:
    import importlib
    import tempfile

    from english_cost import english_copy

    from pmem import MemoryStore
    from pmem.models import e5 as E
    from pmem.store import Filter

    from scale_corpus import NOW
    from scale_corpus import questions as scale_questions

    S = importlib.import_module("pmem.search")  # the module (pmem.search is also a function's name)
    shipped = E.FEW_ROWS
    with tempfile.TemporaryDirectory() as tmp:
        path, cfg, e5, on = english_copy(args.db, Path(tmp))
        off = MemoryStore(path, config=cfg.with_values(embed_english="none"), embedder=e5, clock=lambda: NOW)
        qs = scale_questions(args.questions)
        cells = [(rows, label, store) for label, store in (("none", off), ("minilm", on)) for rows in (0, shipped)]
        times: dict[str, list[float]] = {}
        for round_ in range(1 + args.rounds):
            for q in qs:
                for rows, label, store in cells:
                    E.FEW_ROWS = rows
                    t = time.perf_counter()
                    S.search(store, q, Filter(), limit=10)
                    if round_:
                        name = f"{'W @ x.T' if rows else 'x @ W.T'}, embed_english = {label}"
                        times.setdefault(name, []).append(time.perf_counter() - t)
        E.FEW_ROWS = shipped
        out = {"memories": on.count(), "questions": len(qs), "e5 threads": e5.inner.threads,
               "hybrid search, ms (median)": {k: round(statistics.median(v) * 1000, 2) for k, v in times.items()},
               "load average": [round(x, 2) for x in os.getloadavg()]}
        on.close()
        off.close()
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

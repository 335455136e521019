"""Fit the hybrid search's per-query keyword share (pmem.search.Tuning) on the retrieval sets.

    python benchmarks/fit_fusion.py collect             # candidate lists of every question, pickled
    python benchmarks/fit_fusion.py fit                 # the constants of pmem.search.keyword_share, dev part only
    python benchmarks/fit_fusion.py report              # the shipped fusion, semantic and keyword, every part

`collect` builds the stores of benchmarks/fusion_sets.py (paraphrase among LoCoMo turns,
multilingual, LoCoMo, and the mixed store of all of them) and keeps, for every question, what
pmem.search's fusion sees: the keyword side's (memory, bm25) and the dense side's (memory, cosine)
candidates, the model's score floor, and the evidence features (pmem.search.evidence). `fit`
ranks every question at each fixed keyword share 0, 0.05, ..., 1 once, then searches the bias
and coefficients of pmem.search.keyword_share (a random local search, for share_max 0.6, 0.7,
0.8) for the best objective on the dev part: paraphrase dev top-1, multilingual top-1, LoCoMo
R@10 (twice) and R@5, and the paraphrase set's questions decided by a rare name, averaged over
the own stores and the mixed one. Held-out paraphrase questions are only reported.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pickle
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import fusion_sets  # noqa: E402

CACHE = Path(os.environ.get("PMEM_BENCH_CACHE", Path(tempfile.gettempdir()) / "pmem-bench-cache"))


def collect(model: str, sets) -> list[dict]:
    import numpy as np

    from pmem.search import DEFAULT_TUNING, keyword_ranks, semantic_ranks
    from pmem.store import Filter

    emb = fusion_sets.embedder(model, CACHE)
    out = []
    n = DEFAULT_TUNING.candidates
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("PMEM_HOME", tmp)
        for name, store, keys, qs in fusion_sets.stores(Path(tmp), emb, sets):
            floor = store.thresholds().score_floor
            for q in qs:
                kw = keyword_ranks(store, q.text, Filter(), n, DEFAULT_TUNING.context_weight)
                sem = semantic_ranks(store, q.text, Filter(), n)
                # the cosine of every keyword candidate too (most are not among the dense ones)
                by_seq = store.memories_by_seq(s for s, _ in kw)
                vecs = store.vectors(m.id for m in by_seq.values())
                qv = np.frombuffer(store.query_vector(q.text), dtype="<f4")
                kwcos = {keys[s]: float(np.frombuffer(vecs[m.id], dtype="<f4") @ qv)
                         for s, m in by_seq.items() if m.id in vecs}
                out.append({"store": name, "set": q.set, "group": q.group, "split": q.split, "text": q.text,
                            "targets": q.targets, "floor": floor, "kwcos": kwcos,
                            "kw": [(keys[s], b) for s, b in kw], "sem": [(keys[s], 1.0 - d) for s, d in sem]})
            if hasattr(emb, "save"):
                emb.save()
    return out


def rank(q: dict, fuse) -> list[str]:
    scores = fuse(q)
    return [k for k, _ in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))]


def hit(q: dict, ranked: list[str], k: int) -> bool:
    return bool(q["targets"] & set(ranked[:k]))


def figures(qs: list[dict], fuse) -> dict:
    """top-1 / top-3 (paraphrase, multilingual) and R@5 / R@10 (LoCoMo) by store, set, split, group."""
    acc: dict = {}
    for q in qs:
        r = rank(q, fuse)
        cells = [f"{q['store']}/{q['set']}/{q['split']}", f"{q['store']}/{q['set']}/{q['group']}"]
        for c in cells:
            a = acc.setdefault(c, [0, 0, 0, 0, 0])
            a[0] += 1
            a[1] += hit(q, r, 1)
            a[2] += hit(q, r, 3)
            a[3] += hit(q, r, 5)
            a[4] += hit(q, r, 10)
    out = {}
    for c, (n, h1, h3, h5, h10) in sorted(acc.items()):
        if "/locomo/" in c:
            out[c] = {"n": n, "R@5": round(h5 / n, 3), "R@10": round(h10 / n, 3)}
        else:
            out[c] = {"n": n, "top1": round(h1 / n, 3), "top3": round(h3 / n, 3)}
    return out


def fuser(params=None, mode: str = "hybrid"):
    """The fusion of pmem.search for one question's lists, with `params` replacing FUSION's fields."""
    s = importlib.import_module("pmem.search")

    tuning = replace(s.DEFAULT_TUNING, **params) if params else s.DEFAULT_TUNING

    def fuse(q):
        sem = [(k, 1.0 - c) for k, c in q["sem"]]
        return s.fuse(q["kw"], sem, q["floor"], q["text"], mode, tuning)

    return fuse




STEP = 0.05
WEIGHTS = [round(STEP * i, 2) for i in range(int(1 / STEP) + 1)]


def tables(qs: list[dict]):
    """Per question: the rank of its best target under the min-max fusion at each fixed keyword
    share in WEIGHTS (questions x shares), and its Evidence fields (questions x fields)."""
    import numpy as np

    s = importlib.import_module("pmem.search")
    names = [name for name, _ in s.SHARE_COEF]
    ranks, feats = [], []
    for q in qs:
        sem = [(k, 1.0 - c) for k, c in q["sem"]]
        keys = list(dict.fromkeys([k for k, _ in q["kw"]] + [k for k, _ in sem]))
        idx = {k: i for i, k in enumerate(keys)}
        mk, ms = np.zeros(len(keys)), np.zeros(len(keys))
        for arr, pairs in ((mk, [(k, -b) for k, b in q["kw"]]), (ms, [(k, 1.0 - d) for k, d in sem])):
            for k, v in s._minmax(pairs):
                arr[idx[k]] = v
        order = np.argsort(np.array(keys, dtype=object))  # ties: by key, as search breaks them by seq
        tie = np.empty(len(keys), int)
        tie[order] = np.arange(len(keys))
        targets = [idx[t] for t in q["targets"] if t in idx]
        row = []
        for w in WEIGHTS:
            score = w * mk + (1 - w) * ms
            row.append(min((1 + int(np.sum(score > score[t]) + np.sum((score == score[t]) & (tie < tie[t])))
                            for t in targets), default=999))
        ranks.append(row)
        ev = s.evidence(q["kw"], sem, q["floor"])
        feats.append([getattr(ev, n) for n in names])
    return np.array(ranks), np.array(feats), names


def parts(qs: list[dict], split: str) -> dict:
    """Boolean masks of the questions each objective term counts, own stores and the mixed one."""
    import numpy as np

    store = np.array([q["store"] for q in qs])
    kind = np.array([q["set"] for q in qs])
    group = np.array([q["group"] for q in qs])
    part = np.array([q["split"] for q in qs])
    out = {}
    for where, m in (("own", store != "mixed"), ("mixed", store == "mixed")):
        para = m & (kind == "paraphrase") & (part == split)
        out[where] = {"paraphrase": para & (group == "paraphrase"), "name": para & (group == "name"),
                      "multilingual": m & (kind == "multilingual"), "locomo": m & (kind == "locomo")}
    return out


def objective(ranks, picks, masks, locomo: float = 1.0) -> float:
    """Mean over the own stores and the mixed one of (paraphrase top-1 + name top-1 +
    multilingual top-1 + `locomo` x (2 x LoCoMo R@10 + LoCoMo R@5)) / (3 + 3 x `locomo`)."""
    import numpy as np

    r = ranks[np.arange(len(ranks)), picks]
    total = 0.0
    for m in masks.values():
        total += ((r[m["paraphrase"]] == 1).mean() + (r[m["name"]] == 1).mean() + (r[m["multilingual"]] == 1).mean()
                  + locomo * (2 * (r[m["locomo"]] <= 10).mean() + (r[m["locomo"]] <= 5).mean())) / (3 + 3 * locomo)
    return total / len(masks)


def picks_of(feats, bias: float, coef, share_max: float):
    """The index in WEIGHTS nearest each question's keyword share (pmem.search.keyword_share)."""
    import numpy as np

    share = share_max / (1 + np.exp(-np.clip(bias + feats @ coef, -60, 60)))
    return np.clip(np.round(share / STEP).astype(int), 0, len(WEIGHTS) - 1)


def fit(qs: list[dict], rounds: int, seed: int, locomo: float = 1.0, maxima=(0.6, 0.7, 0.8)) -> dict:
    """A random local search over the bias and coefficients, for each share_max; dev part only."""
    import numpy as np

    ranks, feats, names = tables(qs)
    dev, held = parts(qs, "dev"), parts(qs, "held-out")
    rng = np.random.default_rng(seed)
    best: dict = {}
    for share_max in maxima:
        theta = np.zeros(1 + len(names))
        theta[0] = 2.0  # start near the fixed share: every question close to share_max
        cur = objective(ranks, picks_of(feats, theta[0], theta[1:], share_max), dev, locomo)
        for i in range(rounds):
            step = rng.normal(0, 1.5 if i < rounds // 2 else 0.4, len(theta)) * (rng.random(len(theta)) < 0.5)
            cand = theta + step
            o = objective(ranks, picks_of(feats, cand[0], cand[1:], share_max), dev, locomo)
            if o >= cur:
                theta, cur = cand, o
        row = {"share_max": share_max, "bias": round(float(theta[0]), 2),
               "coef": {n: round(float(c), 2) for n, c in zip(names, theta[1:])}, "dev objective": round(cur, 4)}
        print(json.dumps(row), file=sys.stderr, flush=True)
        if not best or cur > best["dev objective"]:
            best = row
    coef = np.array([best["coef"][n] for n in names])
    r = ranks[np.arange(len(ranks)), picks_of(feats, best["bias"], coef, best["share_max"])]
    for kind in ("paraphrase", "name"):
        best[f"held-out {kind} top-1 (own store, mixed)"] = [round(float((r[m[kind]] == 1).mean()), 3)
                                                            for m in held.values()]
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["collect", "fit", "report"])
    ap.add_argument("--model", default="multilingual-e5-small")
    ap.add_argument("--sets", nargs="+", default=list(fusion_sets.SETS), choices=fusion_sets.SETS)
    ap.add_argument("--lists", default="", help="the pickle of `collect` (default: in the cache folder)")
    ap.add_argument("--rounds", type=int, default=2500, help="fit: steps of the local search per share_max")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--locomo", type=float, default=1.0, help="fit: LoCoMo's weight in the objective")
    ap.add_argument("--share-max", type=float, nargs="+", default=[0.6, 0.7, 0.8])
    args = ap.parse_args()
    lists = Path(args.lists) if args.lists else CACHE / f"lists-{args.model}.pickle"
    if args.what == "collect":
        CACHE.mkdir(parents=True, exist_ok=True)
        qs = collect(args.model, args.sets)
        lists.write_bytes(pickle.dumps(qs))
        print(json.dumps({"questions": len(qs), "lists": str(lists)}))
        return 0
    qs = pickle.loads(lists.read_bytes())
    if args.what == "report":
        print(json.dumps({"model": args.model, "fused": figures(qs, fuser()),
                          "semantic": figures(qs, fuser(mode="semantic")),
                          "keyword": figures(qs, fuser(mode="keyword"))}, indent=1))
        return 0
    print(json.dumps(fit(qs, args.rounds, args.seed, args.locomo, args.share_max), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

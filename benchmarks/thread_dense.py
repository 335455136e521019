"""The dense side of a thread: a turn's score from its neighbours' cosines to the question.

    python benchmarks/thread_dense.py lists            # every memory's cosines (cached vectors), the variants' lists
    python benchmarks/thread_dense.py report           # each variant's figures next to the shipped dense side
    python benchmarks/thread_dense.py scale --db /tmp/pmem-scale/scale-100000.db   # search() with the lift and without

The keyword side indexes each threaded turn with its neighbours' words
(docs/decisions/0002-threads-keyword-window.md); the dense side scores each turn alone, so "Yes, last Tuesday!" is far
in meaning from
the question its neighbour's words are about. `lists` scores every memory of every store of
benchmarks/fusion_sets.py by the shipped dense side (fusion_sets.ENGLISH: e5 "query: " on both
sides, English pairs with MiniLM, e5's nearest POOL rescored) with no store built (the vectors come
from the cache of `fit_fusion.py collect`; the keyword lists from its pickle, which a dense score
cannot change), then folds each turn's neighbours into its score by each variant (VARIANTS), and
pickles lists in `fit_fusion.py collect`'s shape, so `fit_fusion.py report --dense` reads them too.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pickle
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import fit_fusion  # noqa: E402
import fusion_sets  # noqa: E402

import locomo  # noqa: E402

CACHE = Path(os.environ.get("PMEM_BENCH_CACHE", Path(tempfile.gettempdir()) / "pmem-bench-cache"))
BASE = fusion_sets.ENGLISH


def store_records():
    """(store name, records in seq order, questions), in fusion_sets.stores' order, no store built."""
    para, para_q = fusion_sets.paraphrase_records()
    multi, multi_q = fusion_sets.multilingual_records()
    convs = [fusion_sets.locomo_records(c) for c in locomo.load()]
    yield "paraphrase", para + fusion_sets.distractors(), para_q
    yield "multilingual", multi, multi_q
    for records, qs in convs:
        yield "locomo", records, qs
    yield "mixed", para + multi + [r for rs, _ in convs for r in rs], \
        para_q + multi_q + [q for _, qs in convs for q in qs]


def neighbours(records, before: int, after: int):
    """(memories x (before + after)) indices of each memory's thread neighbours, nearest first on
    each side (thread order: thread_pos, then seq), -1 where there is none."""
    import numpy as np

    by_thread: dict = {}
    for i, r in enumerate(records):
        if r.get("thread") is not None:
            by_thread.setdefault(r["thread"], []).append((r["thread_pos"], i))
    out = np.full((len(records), before + after), -1, dtype=np.int64)
    for members in by_thread.values():
        order = [i for _, i in sorted(members)]
        for j, i in enumerate(order):
            for k in range(before):
                if j - 1 - k >= 0:
                    out[i, k] = order[j - 1 - k]
            for k in range(after):
                if j + 1 + k < len(order):
                    out[i, before + k] = order[j + 1 + k]
    return out


def scores(records, qs, context=None):
    """The shipped dense side's score of every (question, memory), as fit_fusion.dense_lists
    computes it: rescaled from each model's floor, e5 alone unless both are English. Returns
    (full, pooled): `pooled` leaves every memory past e5's nearest POOL at -9 (what search ranks).
    `context` (b, neighbour indices): each memory's vector of each model replaced by its context
    vector, the unit mean of its own and b times each neighbour's."""
    import numpy as np

    from pmem.ranking.profile import ENGLISH_KNOTS as KNOTS
    from pmem.stemming import index_language

    texts = [r["text"] for r in records]
    mats = []
    for model, symmetric in fusion_sets.DENSE[BASE]:
        emb = fit_fusion._embedder(model)
        m = np.asarray(emb.embed(texts, query=symmetric), np.float32)
        if context is not None:
            b, idx = context
            m = m + b * np.where((idx >= 0)[..., None], m[np.clip(idx, 0, None)], 0.0).sum(axis=1)
            m /= np.linalg.norm(m, axis=1, keepdims=True)
        q = np.asarray(emb.embed([x.text for x in qs], query=True), np.float32)
        mats.append((q @ m.T, fusion_sets.floor(model, symmetric)))
        if hasattr(emb, "save"):
            emb.save()
    weight, _gate, _cal, pool = fusion_sets.GATED[BASE]
    (first, _f1), (second, f2) = mats
    first = np.interp(first, [x for x, _ in KNOTS], [y for _, y in KNOTS])
    r1, r2 = (first - f2) / (1.0 - f2), (second - f2) / (1.0 - f2)
    english = np.array([index_language(x.text) == "en" for x in qs])[:, None] \
        & np.array([index_language(t) == "en" for t in texts])[None, :]
    full = np.where(english, weight * r1 + (1.0 - weight) * r2, r2).astype(np.float32)
    pooled = full.copy()
    far = np.argsort(-r2, axis=1, kind="stable")[:, pool:]
    np.put_along_axis(pooled, far, -9.0, axis=1)
    return full, pooled


# A variant: (rule, b, (before, after), where). Rules, on the shipped score s of a turn and n_i of
# its live neighbours within the window:
#   lift: s + b * max(0, max n_i - s)      (a turn only gains, towards the nearest neighbour)
#   add:  (s + b * max n_i) / (1 + b)      (a turn with no neighbour keeps s)
#   mean: (1 - b) * s + b * mean n_i
# where "all": every memory scored so (an upper bound); "near": only the dense side's candidates
# and their neighbours, what search can read by key (a neighbour's own neighbours outside that set
# are not read); "cand": the candidates alone, reordered, their neighbours only lending scores;
# "list": the same, a neighbour lending only where it is a candidate too (no vector read: a
# neighbour nearer than a candidate is a candidate itself, but for e5's pool and the filters).
VARIANTS = {}
for _w in ((1, 0), (0, 1), (1, 1), (2, 1), (2, 2)):
    for _b in (0.1, 0.2, 0.3, 0.4, 0.5, 0.7):
        VARIANTS[f"lift{_b}-w{_w[0]}{_w[1]}"] = ("lift", _b, _w, "all")
for _b in (0.1, 0.2, 0.3, 0.5):
    VARIANTS[f"add{_b}-w11"] = ("add", _b, (1, 1), "all")
    VARIANTS[f"mean{_b}-w11"] = ("mean", _b, (1, 1), "all")
    VARIANTS[f"mean{_b}-w22"] = ("mean", _b, (2, 2), "all")
for _b in (0.1, 0.15, 0.2, 0.25, 0.3):
    for _w in ((2, 1), (2, 2)):
        for _where in ("near", "cand"):
            VARIANTS[f"lift{_b}-w{_w[0]}{_w[1]}-{_where}"] = ("lift", _b, _w, _where)
for _where in ("near", "cand"):
    VARIANTS[f"mean0.5-w22-{_where}"] = ("mean", 0.5, (2, 2), _where)
for _b in (0.1, 0.15, 0.2, 0.25, 0.3):
    VARIANTS[f"lift{_b}-w22-list"] = ("lift", _b, (2, 2), "list")


# Context vectors: the memory's vector (each model's) replaced by the unit mean of its own and b
# times each live neighbour's in the window ("ctx"), or the better of that and its own ("ctxmax").
for _b in (0.25, 0.5, 1.0):
    for _w in ((1, 1), (2, 2)):
        VARIANTS[f"ctx{_b}-w{_w[0]}{_w[1]}"] = ("ctx", _b, _w, "all")
        VARIANTS[f"ctxmax{_b}-w{_w[0]}{_w[1]}"] = ("ctxmax", _b, _w, "all")


def fold(rule: str, b: float, s, nb):
    """The variant's score of memories with shipped scores `s` (questions x k) and neighbour
    scores `nb` (questions x k x window, nan where there is none)."""
    import numpy as np

    has = ~np.isnan(nb).all(axis=2)
    top = np.where(has, np.nanmax(np.where(np.isnan(nb), -np.inf, nb), axis=2), s)
    if rule == "lift":
        return s + b * np.maximum(0.0, top - s)
    if rule == "add":
        return np.where(has, (s + b * top) / (1 + b), s)
    if rule == "mean":
        with np.errstate(invalid="ignore"):
            mean = np.where(has, np.nanmean(np.where(has[..., None], nb, 0.0), axis=2), s)
        return (1 - b) * s + b * mean
    raise ValueError(rule)


def variant_lists(full, pooled, nbrs, rule: str, b: float, window, where: str, n: int):
    """Each question's top `n` (index, score) under the variant."""
    import numpy as np

    before, after = window
    cols = list(range(before)) + [nbrs.shape[1] // 2 + k for k in range(after)]
    idx = nbrs[:, cols]  # memories x window
    out = []
    if where == "all":
        nb = np.where(idx[None, :, :] >= 0, full[:, np.clip(idx, 0, None)], np.nan)
        # a turn whose own pooled score is -9 is outside e5's pool: search never saw it, and the
        # variant scores it from its own full score (it can only enter through a neighbour)
        t = fold(rule, b, full, nb)
        for row in t:
            top = np.argsort(-row, kind="stable")[:n]
            out.append([(int(i), float(row[i])) for i in top])
        return out
    for qi in range(len(full)):
        cand = np.argsort(-pooled[qi], kind="stable")[:n]
        seen = set(cand.tolist())
        ext = list(cand)
        for j in idx[cand].ravel():
            if j >= 0 and int(j) not in seen:
                seen.add(int(j))
                ext.append(int(j))
        known = np.full(len(full[qi]), np.nan, np.float32)
        known[np.array(ext)] = full[qi, np.array(ext)]
        if where == "list":  # only the candidates' own scores are known: nothing is read
            known[:] = np.nan
            known[cand] = pooled[qi, cand]
        ext_arr = np.array(ext if where == "near" else list(cand))  # the memories that may be listed
        nb = np.where(idx[ext_arr] >= 0, known[np.clip(idx[ext_arr], 0, None)], np.nan)
        t = fold(rule, b, full[qi, ext_arr][None, :], nb[None, :, :])[0]
        top = np.argsort(-t, kind="stable")[:n]
        out.append([(int(ext_arr[i]), float(t[i])) for i in top])
    return out


def make_lists(names: list[str], folder: Path) -> dict[str, list[dict]]:
    """The shipped lists with the dense side of each variant in `names` (plus BASE recomputed,
    which must equal `fit_fusion.py collect`'s)."""
    import numpy as np

    shipped = pickle.loads((folder / f"lists-{BASE}.pickle").read_bytes())
    out: dict[str, list[dict]] = {name: [] for name in ["recomputed", *names]}
    at = 0
    for store, records, qs in store_records():
        keys = [r["key"] for r in records]
        full, pooled = scores(records, qs)
        nbrs = neighbours(records, 2, 2)
        base = shipped[at:at + len(qs)]
        at += len(qs)
        assert [q["text"] for q in base] == [q.text for q in qs] and all(q["store"] == store for q in base)
        n = 100  # pmem.search.DEFAULT_TUNING.candidates
        variants = {"recomputed": None, **{name: VARIANTS[name] for name in names}}
        for name, spec in variants.items():
            if spec is None:
                lists = [[(int(i), float(row[i])) for i in np.argsort(-row, kind="stable")[:n]] for row in pooled]
            elif spec[0].startswith("ctx"):
                rule, b, (before, after), _ = spec
                idx = nbrs[:, list(range(before)) + [nbrs.shape[1] // 2 + k for k in range(after)]]
                ctx, _ = scores(records, qs, (b, idx))
                score = ctx if rule == "ctx" else np.maximum(full, ctx)
                lists = [[(int(i), float(row[i])) for i in np.argsort(-row, kind="stable")[:n]] for row in score]
            else:
                lists = variant_lists(full, pooled, nbrs, *spec, n)
            for q, lst in zip(base, lists):
                out[name].append({**q, "sem": [(keys[i], v) for i, v in lst]})
        print(json.dumps({"store": store, "questions": len(qs), "memories": len(records)}), file=sys.stderr, flush=True)
    return out


ROWS = [("LoCoMo R@5 / R@10", "own", "locomo/dev"), ("LoCoMo R@5 / R@10", "mixed", "locomo/dev"),
        ("paraphrase, in other words", "own", "paraphrase/paraphrase"),
        ("paraphrase, in other words", "mixed", "paraphrase/paraphrase"),
        ("paraphrase, held out", "own", "paraphrase/held-out"), ("paraphrase, held out", "mixed", "paraphrase/held-out"),
        ("paraphrase, by a rare name", "mixed", "paraphrase/name"),
        ("multilingual, all", "own", "multilingual/dev"), ("multilingual, all", "mixed", "multilingual/dev"),
        ("multilingual cross", "mixed", "multilingual/cross")]


def cell(figs: dict, where: str, part: str) -> str:
    for k, f in figs.items():
        if (k.startswith("mixed/") == (where == "mixed")) and k.split("/", 1)[1] == part:
            return f"{f['R@5']:.3f} / {f['R@10']:.3f}" if "R@5" in f else f"{f['top1']:.3f}"
    return "-"


def report(lists: dict[str, list[dict]]) -> str:
    head = "| variant | " + " | ".join(f"{label}, {where} (hybrid; semantic)" for label, where, _ in ROWS) + " |"
    lines = [head, "| --- " * (len(ROWS) + 1) + "|"]
    for name, qs in lists.items():
        hybrid = fit_fusion.figures(qs, fit_fusion.fuser(dense=BASE))
        semantic = fit_fusion.figures(qs, fit_fusion.fuser(mode="semantic"))
        lines.append(f"| {name} | " + " | ".join(f"{cell(hybrid, w, p)}; {cell(semantic, w, p)}" for _, w, p in ROWS)
                     + " |")
    return "\n".join(lines)


def scale(db: Path, count: int, rounds: int, thread_size: int) -> dict:
    """search() on a copy of a scale.py store (fake-384 vectors), its memories put in threads of
    `thread_size` in storage order (scale.py's stores have none; 0: left so), with
    pmem.search.thread_lift and without, alternating, hybrid and semantic, ms per query (medians
    of the rounds after the first); and KeywordIndex.neighbours alone on each question's dense
    candidates (the lift's one read)."""
    import shutil
    import sqlite3
    from dataclasses import replace

    from pmem import MemoryStore
    from pmem.config import load

    from scale_corpus import NOW, questions, with_and_without

    s = importlib.import_module("pmem.search")
    off = replace(s.DEFAULT_TUNING, thread_lift=0.0)
    qs = questions(count) + [q.text for q in fusion_sets.paraphrase_records()[1]][:count]
    threaded = 0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "store.db"
        shutil.copy(db, path)
        if thread_size:
            conn = sqlite3.connect(path)  # the keyword entries keep no neighbours' words: only the dense side is timed
            conn.execute("DROP TRIGGER IF EXISTS memories_au")
            conn.execute("UPDATE memories SET thread = 'scale:' || (seq / ?), thread_pos = seq % ?",
                         (thread_size, thread_size))
            conn.commit()
            conn.close()
        store = MemoryStore(path, config=load().with_values(embed_model="fake-384"), clock=lambda: NOW)
        threaded = store.conn.execute("SELECT count(*) FROM memories WHERE thread IS NOT NULL").fetchone()[0]

        times = with_and_without(store, "thread lift", s.DEFAULT_TUNING, off,
                                 ("KeywordIndex.neighbours of the dense candidates, alone", store.keywords.neighbours),
                                 qs, rounds)
        memories = store.count()
        store.close()
    return {"memories": memories, "threaded": threaded, "questions": len(qs), "rounds": rounds,
            "ms per query (median)": times, "load average": round(os.getloadavg()[0], 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["lists", "report", "scale"])
    ap.add_argument("--db", type=Path, default=None, help="scale: a store scale.py built")
    ap.add_argument("--questions", type=int, default=16, help="scale: LoCoMo questions, and as many paraphrase ones")
    ap.add_argument("--rounds", type=int, default=3, help="scale: rounds after the first (cold) one")
    ap.add_argument("--thread-size", type=int, default=20, help="scale: memories a thread (0: none)")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), help="of VARIANTS")
    ap.add_argument("--lists", default="", help="the folder of fit_fusion.py collect's pickles (default: the cache)")
    args = ap.parse_args()
    folder = Path(args.lists) if args.lists else CACHE
    out = folder / "thread-dense.pickle"
    if args.what == "scale":
        if args.db is None:
            ap.error("scale needs --db")
        print(json.dumps(scale(args.db, args.questions, args.rounds, args.thread_size), indent=1))
        return 0
    if args.what == "lists":
        lists = make_lists(args.variants, folder)
        out.write_bytes(pickle.dumps(lists))
        print(json.dumps({"variants": list(lists), "lists": str(out)}))
        return 0
    lists = pickle.loads(out.read_bytes())
    terms = folder / "terms.pickle"
    records = pickle.loads(terms.read_bytes()) if terms.exists() else None
    shipped = pickle.loads((folder / f"lists-{BASE}.pickle").read_bytes())
    lists = {"shipped (collect)": shipped, **{k: v for k, v in lists.items() if k in ["recomputed", *args.variants]}}
    for qs in lists.values():
        if records is not None:
            for q, r in zip(qs, records):
                q["terms"] = r
    print(report(lists))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Fit the hybrid search's per-query keyword share (pmem.search.Tuning) on the retrieval sets.

    python benchmarks/fit_fusion.py collect             # candidate lists of every question, pickled
    python benchmarks/fit_fusion.py fit                 # the constants of pmem.search.keyword_share, dev part only
    python benchmarks/fit_fusion.py report              # the shipped fusion, semantic and keyword, every part
    python benchmarks/fit_fusion.py time                # pmem.search.fuse on every question's lists, ms per query
    python benchmarks/fit_fusion.py terms               # each question's words in its store (dense_first's evidence)
    python benchmarks/fit_fusion.py scale --db /tmp/pmem-scale/scale-100000.db   # search() with and without dense_first
    python benchmarks/fit_fusion.py collect --dense e5 e5-symmetric minilm minilm+e5   # dense sides compared
    python benchmarks/fit_fusion.py collect --dense searched     # the lists as search() itself fuses them

`collect` builds the stores of benchmarks/fusion_sets.py (paraphrase among LoCoMo turns,
multilingual, LoCoMo, and the mixed store of all of them) and keeps, for every question, what
pmem.search's fusion sees: the keyword side's (memory, bm25) and the dense side's (memory, cosine)
candidates and the side's score floor, for each dense side asked for (fusion_sets.DENSE: e5 with
"passage: " memories, e5 with "query: " on both sides, MiniLM, and the two models' cosines
averaged). `--dense searched` records instead what pmem.search.fuse is handed inside search()
itself (`searched`: the English second vector's pool, thread_lift and asking applied, ties by seq),
which `report` turns into retrieval.py --suite's figures to the question (`--candidates N`: each
side's count, kept in each record). `fit` ranks every question at each fixed keyword share 0,
0.05, ..., 1 once, then searches the bias and coefficients of pmem.search.keyword_share (a
coordinate search, `fit`) for the best objective on the dev part: paraphrase dev top-1,
multilingual top-1, LoCoMo R@10 (twice) and R@5 (weighted --locomo), and the paraphrase set's
questions decided by a rare name, less --below for each point an own store's part falls under
semantic-only, averaged over the own stores and the mixed one. Held-out paraphrase questions are only reported.

`terms` keeps, for every question, what pmem.search.dense_first asks the store: each keyword term's
count of memories holding it, which keyword candidates hold it, and the store's size (the keyword
side only: no vectors); `report` and `time` use it where the file is there.
"""

from __future__ import annotations

import argparse
import functools
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


@functools.lru_cache(maxsize=None)
def _embedder(model: str):
    return fusion_sets.embedder(model, CACHE)


def dense_lists(store, keys: dict, qs, dense: str, n: int) -> tuple[list[list], list[dict], float]:
    """Each question's dense candidates (key, cosine) under the dense side `dense`
    (fusion_sets.DENSE), by exact cosine over every memory of `store` (below BITS_FROM vectors
    the store ranks exactly too), each keyword candidate's cosine, and the side's score floor.
    A side of two models scores a memory by the mean of their cosines rescaled from each model's
    floor; its floor is then 0."""
    import numpy as np

    rows = store.conn.execute("SELECT seq, text FROM memories ORDER BY seq").fetchall()
    seqs = [s for s, _ in rows]
    parts = []
    for model, symmetric in fusion_sets.DENSE[dense]:
        emb = _embedder(model)
        m = np.asarray(emb.embed([t for _, t in rows], query=symmetric), np.float32)
        q = np.asarray(emb.embed([x.text for x in qs], query=True), np.float32)
        floor = fusion_sets.floor(model, symmetric)
        parts.append(((q @ m.T), floor))
        if hasattr(emb, "save"):
            emb.save()
    if len(parts) == 1:
        cos, floor = parts[0]
    elif dense in fusion_sets.GATED:
        from pmem.stemming import index_language

        weight, gate, calibrate, pool = fusion_sets.GATED[dense]
        (first, f1), (second, f2) = parts
        (m1, s1), (m2, s2) = fusion_sets.DENSE[dense]
        if calibrate == "quantile":
            p1, p2 = np.sort(fusion_sets.turn_pairs(m1, s1)), np.sort(fusion_sets.turn_pairs(m2, s2))
            first, f1 = np.interp(first, p1, p2), f2
        elif calibrate == "shipped":  # pmem.store.english.on_e5_scale, vectorised
            from pmem.ranking.profile import ENGLISH_KNOTS as KNOTS

            first, f1 = np.interp(first, [x for x, _ in KNOTS], [y for _, y in KNOTS]), f2
        r1, r2 = (first - f1) / (1.0 - f1), (second - f2) / (1.0 - f2)
        both = weight * r1 + (1.0 - weight) * r2
        if calibrate == "affine":
            c1, c2 = fusion_sets.turn_pairs(m1, s1), fusion_sets.turn_pairs(m2, s2)
            mix = weight * (c1 - f1) / (1.0 - f1) + (1.0 - weight) * (c2 - f2) / (1.0 - f2)
            lo, hi = np.percentile(mix, [50, 99])
            lo2, hi2 = np.percentile((c2 - f2) / (1.0 - f2), [50, 99])
            both = lo2 + (both - lo) * (hi2 - lo2) / (hi - lo)
        english = np.array([index_language(x.text) == "en" for x in qs])[:, None]
        if gate == "pair":
            english = english & np.array([index_language(t) == "en" for _, t in rows])[None, :]
        cos = np.where(english, both, r2)
        if pool:
            far = np.argsort(-r2, axis=1, kind="stable")[:, pool:]
            np.put_along_axis(cos, far, -9.0, axis=1)
        floor = 0.0
    else:
        cos = sum((c - f) / (1.0 - f) for c, f in parts) / len(parts)
        floor = 0.0
    lists, kwcos = [], []
    for row in cos:
        top = np.argsort(-row, kind="stable")[:n]
        lists.append([(keys[seqs[i]], float(row[i])) for i in top])
        kwcos.append({keys[s]: float(row[i]) for i, s in enumerate(seqs)})
    return lists, kwcos, floor


def collect(sets, dense: list[str]) -> dict[str, list[dict]]:
    """The candidate lists of every question of `sets`, for each dense side of `dense`: the
    keyword side from pmem.search's own ranks, the dense side by exact cosine (dense_lists)."""
    from pmem.search import DEFAULT_TUNING, keyword_ranks
    from pmem.store import Filter

    emb = _embedder("multilingual-e5-small")  # the stores' own vectors: not used here
    out: dict[str, list[dict]] = {d: [] for d in dense}
    n = DEFAULT_TUNING.candidates
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("PMEM_HOME", tmp)
        for name, store, keys, qs in fusion_sets.stores(Path(tmp), emb, sets):
            kws = [keyword_ranks(store, q.text, Filter(), n, DEFAULT_TUNING.context_weight) for q in qs]
            for d in dense:
                lists, kwcos, floor = dense_lists(store, keys, qs, d, n)
                for q, kw, sem, cos in zip(qs, kws, lists, kwcos):
                    out[d].append({"store": name, "set": q.set, "group": q.group, "split": q.split, "text": q.text,
                                   "targets": q.targets, "floor": floor,
                                   "kwcos": {keys[s]: cos[keys[s]] for s, _ in kw if keys[s] in cos},
                                   "kw": [(keys[s], b) for s, b in kw], "sem": sem})
            if hasattr(emb, "save"):
                emb.save()
    return out


def searched(sets, candidates: int | None = None) -> list[dict]:
    """Every question's lists as pmem.search.search hands them to its fusion (each side's
    `candidates`, default pmem.search.DEFAULT_TUNING.candidates; kept in each record): the store's own
    candidates (and its English memories' second vectors where the config keeps them, as
    retrieval.py's suite), after thread_lift and asking, with the Tuning search chose and, of
    each keyword candidate, whether it holds a rare query word (dense_first's `rare`)."""
    from pmem import config
    from pmem.config import Settings
    from pmem.store import english as en

    s = importlib.import_module("pmem.search")
    model = Settings().embed_model
    emb = _embedder(model)
    second = _embedder(en.MODEL) if config.load().embed_english == "minilm" and model == en.MAIN else None
    seen: dict = {}
    fused = s.fused

    def recording(kw, sem, floor, query, mode="hybrid", tuning=s.DEFAULT_TUNING, rare=None):
        seen.update(kw=kw, sem=sem, floor=floor, tuning=tuning, rare=rare)
        return fused(kw, sem, floor, query, mode, tuning, rare)

    out = []
    s.fused = recording
    try:
        with tempfile.TemporaryDirectory() as tmp:
            os.environ.setdefault("PMEM_HOME", tmp)
            for name, store, keys, qs in fusion_sets.stores(Path(tmp), emb, sets, second):
                chosen = "ENGLISH_TUNING" if store.vectors.english.in_use() else "DEFAULT_TUNING"  # as search() chooses
                tuning = getattr(s, chosen)
                tuning = replace(tuning, candidates=candidates) if candidates else tuning
                for q in qs:
                    seen.clear()
                    s.search(store, q.text, limit=10, tuning=tuning)
                    rare = seen["rare"]
                    out.append({"store": name, "set": q.set, "group": q.group, "split": q.split, "text": q.text,
                                "targets": q.targets, "floor": seen["floor"], "tuning": chosen,
                                "kw": [(keys[k], b) for k, b in seen["kw"]],
                                "sem": [(keys[k], 1.0 - d) for k, d in seen["sem"]],
                                "rare": {keys[k] for k, _ in seen["kw"] if rare is not None and rare(k)},
                                "seq": {keys[k]: k for k, _ in [*seen["kw"], *seen["sem"]]},
                                "candidates": seen["tuning"].candidates})
                for saver in (emb, second):
                    if hasattr(saver, "save"):
                        saver.save()
    finally:
        s.fused = fused
    return out


def terms(sets) -> list[dict]:
    """Per question of `sets` (in collect's order): the store's memories, and for each term of its
    keyword query, how many entries hold it and which of its keyword candidates do."""
    from pmem.search import DEFAULT_TUNING, fts_query, keyword_ranks
    from pmem.store import Filter

    emb = _embedder("multilingual-e5-small")  # the stores need vectors; only their words are read
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("PMEM_HOME", tmp)
        for name, store, keys, qs in fusion_sets.stores(Path(tmp), emb, sets):
            docs = store.conn.execute("SELECT count(*) FROM memories").fetchone()[0]
            languages = store.keywords.languages()
            for q in qs:
                match = fts_query(q.text, languages)
                kw = {seq for seq, _ in keyword_ranks(store, q.text, Filter(), DEFAULT_TUNING.candidates,
                                                      DEFAULT_TUNING.context_weight)}
                held = {}
                for term in (match.split(" OR ") if match else []):
                    rows = [r[0] for r in store.conn.execute("SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?",
                                                             (term,))]
                    held[term] = (len(rows), sorted(keys[r] for r in rows if r in kw))
                out.append({"store": name, "text": q.text, "docs": docs, "terms": held})
            if hasattr(emb, "save"):
                emb.save()
    return out


def rare_of(q: dict, tuning):
    """pmem.search.dense_first's `rare` for one question: what search itself said where `searched`
    collected it, else from `terms`' record (None without one)."""
    if "rare" in q:
        return q["rare"].__contains__
    if "terms" not in q:
        return None
    s = importlib.import_module("pmem.search")
    most = s.rare_most(q["terms"]["docs"], tuning)
    rare = {k for n, holding in q["terms"]["terms"].values() if n <= most for k in holding}
    return rare.__contains__


def tie_of(q: dict):
    """What breaks a tie between two of `q`'s candidates: their seq, as search breaks them, where
    `searched` kept it (a paraphrase memory and the same text in the multilingual set), else the key."""
    order = q.get("seq")
    return order.__getitem__ if order else (lambda key: key)


def rank(q: dict, fuse) -> list[str]:
    scores = fuse(q)
    by = tie_of(q)
    return [k for k, _ in sorted(scores.items(), key=lambda kv: (-kv[1], by(kv[0])))]


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


SEARCHED = "searched"  # collect's lists as search() fused them (`searched`), not by exact cosine


def base_tuning(dense: str) -> str:
    """The name of the Tuning of pmem.search that `dense`'s lists are fused with."""
    return "ENGLISH_TUNING" if dense == SEARCHED else fusion_sets.TUNING.get(dense, "DEFAULT_TUNING")


def of_lists(q: dict, tuning):
    """`tuning` with the candidate count `q`'s lists were collected with, where `searched` kept it
    (Evidence.kw_many asks whether the keyword list is full)."""
    n = q.get("candidates")
    return replace(tuning, candidates=n) if n and n != tuning.candidates else tuning


def fuser(params=None, mode: str = "hybrid", dense: str = ""):
    """The fusion of pmem.search for one question's lists, with `params` replacing the fields of
    the Tuning that search uses with the dense side `dense` (fusion_sets.TUNING)."""
    s = importlib.import_module("pmem.search")

    base = getattr(s, base_tuning(dense))
    shipped = replace(base, **params) if params else base

    def fuse(q):
        tuning = of_lists(q, shipped)
        sem = [(k, 1.0 - c) for k, c in q["sem"]]
        rare = rare_of(q, tuning)
        seq = q.get("seq")
        if not seq:
            return s.fuse(q["kw"], sem, q["floor"], q["text"], mode, tuning, rare)
        key = {v: k for k, v in seq.items()}  # by seq, so that ties break as search's do
        scores = s.fuse([(seq[k], b) for k, b in q["kw"]], [(seq[k], d) for k, d in sem], q["floor"], q["text"],
                        mode, tuning, rare and (lambda n: rare(key[n])))
        return {key[n]: v for n, v in scores.items()}

    return fuse


def fitted(path: str) -> dict | None:
    """Tuning fields from a file `fit --out` wrote (None: the shipped constants)."""
    if not path:
        return None
    best = json.loads(Path(path).read_text())
    return {"share_max": best["share_max"], "share_bias": best["bias"],
            "share_coef": tuple(best["coef"].items())}


STEP = 0.05
WEIGHTS = [round(STEP * i, 2) for i in range(int(1 / STEP) + 1)]


def tables(qs: list[dict], tuning=None):
    """Per question: the rank of its best target under the min-max fusion at each fixed keyword
    share in WEIGHTS, the dense side's best moved first where pmem.search.dense_first would
    (`tuning`'s, default pmem.search.DEFAULT_TUNING; with `terms`' records where they are there),
    (questions x shares), and its Evidence fields (questions x fields)."""
    import numpy as np

    s = importlib.import_module("pmem.search")
    tuning = tuning or s.DEFAULT_TUNING
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
        order = np.argsort(np.array([tie_of(q)(k) for k in keys], dtype=object))  # ties: as rank breaks them
        tie = np.empty(len(keys), int)
        tie[order] = np.arange(len(keys))
        targets = [idx[t] for t in q["targets"] if t in idx]
        best = idx[min(sem, key=lambda p: (p[1], tie_of(q)(p[0])))[0]] if sem and tuning.dense_first else None
        rare = rare_of(q, tuning)
        ev = s.evidence(q["kw"], sem, q["floor"], of_lists(q, tuning))
        row = []
        for w in WEIGHTS:
            score = w * mk + (1 - w) * ms

            def place(t, score=score, tie=tie):
                return 1 + int(np.sum(score > score[t]) + np.sum((score == score[t]) & (tie < tie[t])))

            at = [place(t) for t in targets]
            if best is not None and (mine := place(best)) > 1:
                top = keys[int(np.lexsort((tie, -score))[0])]
                if (mine <= tuning.dense_first_within or ev.sem_gap >= tuning.dense_margin
                        or (rare is not None and not rare(top))):
                    at = [1 if t == best else p + (p < mine) for t, p in zip(targets, at)]
            row.append(min(at, default=999))
        ranks.append(row)
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


def objective(ranks, picks, masks, locomo: float = 1.0, below: float = 10.0) -> float:
    """Mean over the own stores and the mixed one of (paraphrase top-1 + name top-1 +
    multilingual top-1 + `locomo` x (2 x LoCoMo R@10 + LoCoMo R@5)) / (3 + 3 x `locomo`), less
    `below` times every point by which a part falls below the dense side alone (share 0): the
    issue's first rule, hybrid never worse than semantic-only."""
    import numpy as np

    r = ranks[np.arange(len(ranks)), picks]
    sem = ranks[:, 0]
    total = 0.0
    for m in masks.values():
        parts = [((r[m[k]] == 1).mean(), (sem[m[k]] == 1).mean()) for k in ("paraphrase", "name", "multilingual")]
        r10 = ((r[m["locomo"]] <= 10).mean(), (sem[m["locomo"]] <= 10).mean())
        r5 = ((r[m["locomo"]] <= 5).mean(), (sem[m["locomo"]] <= 5).mean())
        total += (sum(h for h, _ in parts) + locomo * (2 * r10[0] + r5[0])) / (3 + 3 * locomo)
        total -= below * sum(max(0.0, s - h) for h, s in [*parts, r10, r5])
    return total / len(masks)


def picks_of(feats, bias: float, coef, share_max: float):
    """The index in WEIGHTS nearest each question's keyword share (pmem.search.keyword_share)."""
    import numpy as np

    share = share_max / (1 + np.exp(-np.clip(bias + feats @ coef, -60, 60)))
    return np.clip(np.round(share / STEP).astype(int), 0, len(WEIGHTS) - 1)


def coordinate_search(score, start, sweeps: int, grid):
    """From `start`, each constant in turn moved by every step of `grid` and the best `score`
    kept, `sweeps` times: (constants, their score)."""
    theta, cur = start.copy(), score(start)
    for _ in range(sweeps):
        for i in range(len(theta)):
            for d in grid:
                cand = theta.copy()
                cand[i] += d
                o = score(cand)
                if o > cur + 1e-12:
                    theta, cur = cand, o
    return theta, cur


def fit(qs: list[dict], sweeps: int, locomo: float = 1.0, maxima=(0.6, 0.7, 0.8), below: float = 3.0,
        dense: str = "", first: bool = True) -> dict:
    """A coordinate search over the bias and coefficients (each in turn moved by -6..6 in steps
    of 0.25, the best kept), `sweeps` times, for each share_max, from two starts: every question
    near share_max, and the constants `dense` is searched with (fusion_sets.TUNING); dev part
    only; ranks with dense_first unless not `first` (tables). The objective is the mean of the
    own stores' (with the cost `below` of falling under semantic-only) and the mixed store's
    (without it: no constants of these features keep the mixed store's paraphrase and
    multilingual questions at semantic-only without giving up a tenth of LoCoMo;
    docs/decisions/0016-one-prefix-both-sides.md)."""
    import numpy as np

    s = importlib.import_module("pmem.search")
    base = getattr(s, base_tuning(dense))  # the constants dense is searched with
    ranks, feats, names = tables(qs, replace(base, dense_first=first))
    dev, held = parts(qs, "dev"), parts(qs, "held-out")
    shipped = np.array([base.share_bias, *[dict(base.share_coef)[n] for n in names]])
    grid = np.arange(-6.0, 6.01, 0.25)
    best: dict = {}
    for share_max in maxima:
        def score(t, share_max=share_max):
            picks = picks_of(feats, t[0], t[1:], share_max)
            return (objective(ranks, picks, {"own": dev["own"]}, locomo, below)
                    + objective(ranks, picks, {"mixed": dev["mixed"]}, locomo, 0.0)) / 2

        for start in (np.array([2.0] + [0.0] * len(names)), shipped):
            theta, cur = coordinate_search(score, start, sweeps, grid)
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


BRIEF = [("paraphrase, in other words", "paraphrase/paraphrase"), ("paraphrase, by a rare name", "paraphrase/name"),
         ("paraphrase, dev part", "paraphrase/dev"), ("paraphrase, held out", "paraphrase/held-out"),
         *[(f"multilingual {g}", f"multilingual/{g}") for g in ("ru", "de", "es", "fr", "en", "cross")],
         ("multilingual, all", "multilingual/dev"), ("LoCoMo R@5 / R@10", "locomo/dev")]


def brief(dense: str, modes: dict) -> str:
    """A markdown table of `report`'s figures: each part's top-1 / top-3 (LoCoMo R@5 / R@10) per mode."""
    lines = [f"dense side {dense}", "| part | store | hybrid | semantic | keyword |", "| --- | --- | --- | --- | --- |"]
    for where in ("own", "mixed"):
        for label, cell in BRIEF:
            row = []
            for figs in modes.values():
                hits = [v for k, v in figs.items() if (k.startswith("mixed/") == (where == "mixed"))
                        and k.split("/", 1)[1] == cell]
                if not hits:
                    break
                f = hits[0]
                row.append(f"{f['R@5']:.3f} / {f['R@10']:.3f}" if "R@5" in f else f"{f['top1']:.3f} / {f['top3']:.3f}")
            if len(row) == 3:
                lines.append(f"| {label} ({hits[0]['n']}) | {where} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def timing(qs: list[dict], rounds: int = 5) -> dict:
    """pmem.search.fuse on every question's real lists: ms per query, median of `rounds`, for
    the shipped fusion and for the fixed share (what search adds to the two sides' own work)."""
    import statistics
    import time

    s = importlib.import_module("pmem.search")
    lists = [(q["kw"], [(k, 1.0 - c) for k, c in q["sem"]], q["floor"], q["text"], rare_of(q, s.DEFAULT_TUNING))
             for q in qs]
    out = {}
    for label, tuning in (("per-query share, dense first", s.DEFAULT_TUNING),
                          ("per-query share", replace(s.DEFAULT_TUNING, dense_first=False)),
                          ("fixed 0.6", replace(s.DEFAULT_TUNING, adaptive=False, dense_first=False))):
        times = []
        for _ in range(rounds):
            t = time.perf_counter()
            for kw, sem, floor, text, rare in lists:
                s.fuse(kw, sem, floor, text, "hybrid", tuning, rare)
            times.append((time.perf_counter() - t) * 1000 / len(lists))
        out[label] = round(statistics.median(times), 4)
    return {"questions": len(lists), "ms per query (median of %d rounds)" % rounds: out,
            "load average": round(os.getloadavg()[0], 2)}


def scale(db: Path, count: int, rounds: int) -> dict:
    """search() on a copy of a scale.py store (its own fake-384 vectors, embedded here), with
    dense_first and without, alternating, ms per query (medians of the rounds after the first);
    and KeywordIndex.holds_rare alone, asked of every question's best keyword match (the most
    a search can pay for it: search asks only where the dense side's best is past the fused five)."""
    import shutil
    import statistics
    import time

    from pmem import MemoryStore
    from pmem.config import load
    from pmem.store import Filter

    from scale_corpus import NOW, questions

    s = importlib.import_module("pmem.search")
    off = replace(s.DEFAULT_TUNING, dense_first=False)
    qs = questions(count) + [q.text for q in fusion_sets.paraphrase_records()[1]][:count]
    times: dict[str, list[float]] = {}
    asked = 0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "store.db"
        shutil.copy(db, path)
        store = MemoryStore(path, config=load().with_values(embed_model="fake-384"), clock=lambda: NOW)
        holds = store.keywords.holds_rare

        def counted(*a):
            nonlocal asked
            asked += 1
            return holds(*a)

        store.keywords.holds_rare = counted  # type: ignore[method-assign]
        for round_ in range(1 + rounds):
            for q in qs:
                for label, tuning in (("dense first", s.DEFAULT_TUNING), ("without", off)):
                    t = time.perf_counter()
                    s.search(store, q, Filter(), limit=10, tuning=tuning)
                    if round_:
                        times.setdefault(f"hybrid search, {label}", []).append(time.perf_counter() - t)
                kw = s.keyword_ranks(store, q, Filter(), 100)
                match = s.fts_query(q, store.keywords.languages())
                if kw and match and round_:
                    t = time.perf_counter()
                    holds(match, kw[0][0], lambda n: s.rare_most(n))
                    times.setdefault("holds_rare of the best keyword match, alone", []).append(time.perf_counter() - t)
        memories = store.count()
        store.close()
    return {"memories": memories, "questions": len(qs), "rounds": rounds,
            "holds_rare asked by search (per query)": round(asked / ((1 + rounds) * len(qs)), 3),
            "ms per query (median)": {k: round(statistics.median(v) * 1000, 3) for k, v in times.items()},
            "load average": round(os.getloadavg()[0], 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["collect", "fit", "report", "time", "terms", "scale"])
    ap.add_argument("--db", type=Path, default=None, help="scale: a store scale.py built")
    ap.add_argument("--questions", type=int, default=16, help="scale: LoCoMo questions, and as many paraphrase ones")
    ap.add_argument("--rounds", type=int, default=3, help="scale: rounds after the first (cold) one")
    ap.add_argument("--dense", nargs="+", default=[fusion_sets.SHIPPED], choices=[*fusion_sets.DENSE, SEARCHED],
                    help="the dense side(s): collect every one given in one pass; report each; fit the first")
    ap.add_argument("--sets", nargs="+", default=list(fusion_sets.SETS), choices=fusion_sets.SETS)
    ap.add_argument("--lists", default="", help="the pickles of `collect` (default: the cache folder)")
    ap.add_argument("--sweeps", type=int, default=6, help="fit: passes of the coordinate search per start")
    ap.add_argument("--locomo", type=float, default=2.0, help="fit: LoCoMo's weight in the objective")
    ap.add_argument("--below", type=float, default=3.0,
                    help="fit: the objective's cost of each point a part falls below semantic-only")
    ap.add_argument("--brief", action="store_true", help="report: one table row per part, modes side by side")
    ap.add_argument("--share-max", type=float, nargs="+", default=[0.7])
    ap.add_argument("--fitted", default="",
                    help="report: the fusion constants of this file (what `fit` prints) instead of the shipped ones")
    ap.add_argument("--candidates", type=int, default=None,
                    help="collect --dense searched: each side's candidates (default pmem.search.DEFAULT_TUNING.candidates)")
    ap.add_argument("--out", default="", help="fit: also write the fitted constants to this file")
    ap.add_argument("--no-terms", action="store_true",
                    help="leave `terms`' records out: dense_first moves the dense side's best only from the first five")
    ap.add_argument("--no-dense-first", action="store_true", help="report, fit: the fusion without dense_first")
    args = ap.parse_args()
    folder = Path(args.lists) if args.lists else CACHE

    def pickled(dense: str) -> Path:
        return folder / f"lists-{dense}.pickle"

    def load(dense: str) -> list[dict]:
        """collect's lists of `dense`, each question with its record of `terms` where there is one."""
        qs = pickle.loads(pickled(dense).read_bytes())
        words = folder / "terms.pickle"
        if words.exists() and not args.no_terms:
            records = pickle.loads(words.read_bytes())
            if [(r["store"], r["text"]) for r in records] != [(q["store"], q["text"]) for q in qs]:
                raise SystemExit(f"{words} is of other questions than {pickled(dense)}: run `terms` again")
            for q, r in zip(qs, records):
                q["terms"] = r
        return qs

    if args.what == "collect" and args.dense == [SEARCHED]:
        folder.mkdir(parents=True, exist_ok=True)
        qs = searched(args.sets, args.candidates)
        chosen = {q["tuning"] for q in qs}
        if chosen != {base_tuning(SEARCHED)}:
            raise SystemExit(f"search fused with {sorted(chosen)}, not {base_tuning(SEARCHED)} alone: fit them apart")
        pickled(SEARCHED).write_bytes(pickle.dumps(qs))
        print(json.dumps({"dense": SEARCHED, "questions": len(qs), "lists": str(pickled(SEARCHED))}))
        return 0
    if args.what == "collect":
        folder.mkdir(parents=True, exist_ok=True)
        for dense, qs in collect(args.sets, args.dense).items():
            pickled(dense).write_bytes(pickle.dumps(qs))
            print(json.dumps({"dense": dense, "questions": len(qs), "lists": str(pickled(dense))}))
        return 0
    if args.what == "scale":
        if args.db is None:
            ap.error("scale needs --db")
        print(json.dumps(scale(args.db, args.questions, args.rounds), indent=1))
        return 0
    if args.what == "terms":
        folder.mkdir(parents=True, exist_ok=True)
        records = terms(args.sets)
        (folder / "terms.pickle").write_bytes(pickle.dumps(records))
        print(json.dumps({"questions": len(records), "terms": str(folder / "terms.pickle")}))
        return 0
    if args.what == "report":
        for dense in args.dense:
            qs = load(dense)
            params = {**(fitted(args.fitted) or {}), **({"dense_first": False} if args.no_dense_first else {})}
            modes = {"fused": figures(qs, fuser(params or None, dense=dense)),
                     "semantic": figures(qs, fuser(mode="semantic")), "keyword": figures(qs, fuser(mode="keyword"))}
            if args.brief:
                print(brief(dense, modes))
            else:
                print(json.dumps({"dense": dense, **modes}, indent=1))
        return 0
    qs = load(args.dense[0])
    if args.what == "time":
        print(json.dumps(timing(qs), indent=1))
        return 0
    best = fit(qs, args.sweeps, args.locomo, args.share_max, args.below, args.dense[0], not args.no_dense_first)
    print(json.dumps(best, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(best, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What else the fusion could do, measured on the lists search() itself fuses (issue 31, seventh round).

    python benchmarks/fit_fusion.py collect --dense searched     # first: every question's lists as search() fused them
    python benchmarks/fusion_variants.py refit                   # the shipped share against one refitted on those lists
    python benchmarks/fusion_variants.py normalise               # other scalings of each side than min-max, refitted each
    python benchmarks/fusion_variants.py language --penalty 0 0.02 0.05 0.1   # a memory in another language than the question put farther
    python benchmarks/fusion_variants.py words                   # words of the question itself (when, yes/no, names, length) as features of the share
    python benchmarks/fusion_variants.py scale --db /tmp/pmem-scale/scale-100000.db   # search() at the profile's candidates and at 100, interleaved

Each prints one markdown row per variant: top-1 hybrid | semantic of the paraphrase questions in
other words (own store, its held-out part, the mixed store), French, cross-lingual and all
multilingual, and
LoCoMo R@5 / R@10 (own, mixed). `refit`, `normalise` and `words` search the share's constants as
`fit_fusion.py fit` does (dev part, its objective), so a variant is compared at its own best.
`scale` times search() on a copy of a scale.py store (fake-384 vectors) with the shipped
candidate count (pmem.search.DEFAULT_TUNING.candidates), with 100, and with 100 and no question penalty (search
as the last within-5-ms measurement of issue 31 had it), the cells interleaved question by question.
(`PMEM_LOCOMO_DEV`, `PMEM_BENCH_CACHE` as for fit_fusion.py.)
"""

from __future__ import annotations

import argparse
import importlib
import pickle
import re
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import fit_fusion as ff  # noqa: E402
import fusion_sets  # noqa: E402

import locomo  # noqa: E402

CELLS = [("para", "paraphrase/paraphrase/paraphrase"), ("para held out", "paraphrase/paraphrase/held-out"),
         ("fr", "multilingual/multilingual/fr"), ("cross-lingual", "multilingual/multilingual/cross"),
         ("multi", "multilingual/multilingual/dev"),
         ("LoCoMo", "locomo/locomo/dev"), ("mixed para", "mixed/paraphrase/paraphrase"),
         ("mixed cross-lingual", "mixed/multilingual/cross"), ("mixed multi", "mixed/multilingual/dev"),
         ("mixed LoCoMo", "mixed/locomo/dev")]


def header() -> str:
    return "| variant | " + " | ".join(label for label, _ in CELLS) + " |\n|" + " --- |" * (len(CELLS) + 1)


def row(label: str, qs: list[dict], params=None) -> str:
    """`label`'s figures: hybrid | semantic top-1, LoCoMo R@5 / R@10 (hybrid)."""
    hybrid = ff.figures(qs, ff.fuser(params, dense=ff.SEARCHED))
    semantic = ff.figures(qs, ff.fuser(mode="semantic"))
    cells = []
    for _, c in CELLS:
        h, s = hybrid[c], semantic[c]
        cells.append(f"{h['R@5']:.3f} / {h['R@10']:.3f}" if "R@5" in h else f"{h['top1']:.3f} \\| {s['top1']:.3f}")
    return f"| {label} | " + " | ".join(cells) + " |"


def refitted(qs: list[dict]) -> dict:
    """The Tuning fields of the share fitted on `qs` (fit_fusion.fit's defaults)."""
    best = ff.fit(qs, 6, 2.0, (0.7,), 3.0, ff.SEARCHED)
    return {"share_max": best["share_max"], "share_bias": best["bias"], "share_coef": tuple(best["coef"].items())}


def top_k(k: int):
    """Min-max over the best `k` of a list, those below them 0."""
    def scale(pairs):
        if not pairs:
            return []
        values = sorted((v for _, v in pairs), reverse=True)
        hi, lo = values[0], values[min(k, len(values)) - 1]
        return [(key, max(0.0, (v - lo) / (hi - lo)) if hi > lo else 1.0) for key, v in pairs]
    return scale


def min_std(pairs):
    """(v - min) / standard deviation: the range measured in the list's own spread."""
    if not pairs:
        return []
    values = [v for _, v in pairs]
    spread = statistics.pstdev(values) if len(values) > 1 else 0.0
    return [(key, (v - min(values)) / spread if spread > 0 else 1.0) for key, v in pairs]


def normalise(qs: list[dict]) -> None:
    """Each side's scaling replaced in pmem.search (fuse and fit_fusion.tables both scale the
    keyword list first, then the dense one), shipped constants and refitted."""
    s = importlib.import_module("pmem.search")
    minmax = s._minmax
    variants = {"min-max both (shipped)": (minmax, minmax), "min-std both": (min_std, min_std),
                "best 10 both": (top_k(10), top_k(10)), "best 30 both": (top_k(30), top_k(30)),
                "dense best 5": (minmax, top_k(5)), "dense best 10": (minmax, top_k(10)),
                "dense best 20": (minmax, top_k(20)), "dense min-std": (minmax, min_std),
                "keyword best 10": (top_k(10), minmax), "keyword best 30": (top_k(30), minmax)}
    print(header())
    for label, (keyword, dense) in variants.items():
        calls = [0]

        def scale(pairs, keyword=keyword, dense=dense, calls=calls):
            calls[0] += 1
            return (keyword if calls[0] % 2 else dense)(pairs)

        s._minmax = scale
        try:
            print(row(f"{label}, shipped share", qs))
            print(row(f"{label}, refitted", qs, refitted(qs)), flush=True)
        finally:
            s._minmax = minmax


def language(qs: list[dict], penalties: list[float]) -> None:
    """Each dense candidate whose guessed language (pmem.stemming.index_language) is another than
    the question's put `penalty` of the rescaled scale farther, before the fusion."""
    from pmem.stemming import index_language

    records = fusion_sets.paraphrase_records()[0] + fusion_sets.multilingual_records()[0]
    records += [r for c in locomo.load() for r in fusion_sets.locomo_records(c)[0]]
    guess = {r["key"]: index_language(r["text"]) for r in records}
    print(header())
    for penalty in penalties:
        moved = []
        for q in qs:
            mine = index_language(q["text"])
            sem = q["sem"]
            if penalty and mine:
                step = penalty * (1.0 - q["floor"])
                sem = sorted(((k, c - step if guess.get(k) not in (None, mine) else c) for k, c in sem),
                             key=lambda kc: (-kc[1], q["seq"][kc[0]]))
            moved.append({**q, "sem": sem})
        print(row(f"another language {penalty}", moved), flush=True)


WORDS = ("when", "yes/no", "names", "length")


def words_of(text: str) -> list[float]:
    """The question's own words: starts with "when"; asks yes or no; capitalised words past the
    first (names, at most 2); words (at most 15), each scaled to 0..1."""
    ws = re.findall(r"\w+", text)
    first = ws[0].lower() if ws else ""
    names = sum(1 for w in ws[1:] if w[:1].isupper())
    return [float(first == "when"), float(first in ("would", "is", "does", "did", "do", "can", "could")),
            min(1.0, names / 2), min(1.0, len(ws) / 15)]


def words(qs: list[dict]) -> None:
    """The share's coordinate search (fit_fusion.fit's grid, objective and dev part) with the
    question's own words as further features, from the shipped constants (their weights 0)."""
    import numpy as np

    s = importlib.import_module("pmem.search")
    ranks, feats, names = ff.tables(qs, s.ENGLISH_TUNING)
    feats = np.hstack([feats, np.array([words_of(q["text"]) for q in qs])])
    dev = ff.parts(qs, "dev")
    base = s.ENGLISH_TUNING
    start = np.array([base.share_bias, *[dict(base.share_coef)[n] for n in names], *[0.0] * len(WORDS)])

    def score(theta):
        picks = ff.picks_of(feats, theta[0], theta[1:], base.share_max)
        return (ff.objective(ranks, picks, {"own": dev["own"]}, 2.0, 3.0)
                + ff.objective(ranks, picks, {"mixed": dev["mixed"]}, 2.0, 0.0)) / 2

    theta, best = ff.coordinate_search(score, start, 5, np.arange(-6.0, 6.01, 0.25))
    print("constants:", {n: round(float(c), 2) for n, c in zip(["bias", *names, *WORDS], theta)},
          f"dev objective {score(start):.4f} -> {best:.4f}")
    store = np.array([q["store"] for q in qs])
    kind = np.array([q["set"] for q in qs])
    group = np.array([q["group"] for q in qs])
    split = np.array([q["split"] for q in qs])
    print("| part | shipped | with the words | semantic |\n| --- | --- | --- | --- |")
    for label, mask, k in [("para", (store == "paraphrase") & (group == "paraphrase"), 1),
                           ("para held out", (store == "paraphrase") & (split == "held-out") & (group == "paraphrase"), 1),
                           ("multi", store == "multilingual", 1), ("LoCoMo R@5", store == "locomo", 5),
                           ("LoCoMo R@10", store == "locomo", 10), ("mixed para", (store == "mixed") & (group == "paraphrase"), 1),
                           ("mixed multi", (store == "mixed") & (kind == "multilingual"), 1),
                           ("mixed LoCoMo R@10", (store == "mixed") & (kind == "locomo"), 10)]:
        figs = [(ranks[np.arange(len(ranks)), ff.picks_of(feats, t[0], t[1:], base.share_max)][mask] <= k).mean()
                for t in (start, theta)]
        print(f"| {label} | {figs[0]:.3f} | {figs[1]:.3f} | {(ranks[mask, 0] <= k).mean():.3f} |")


def scale(db: Path, count: int, rounds: int, before: int) -> dict:
    """search() in hybrid and semantic mode with the shipped Tuning and with `before` candidates,
    ms per query (medians of the rounds after the first), on a copy of `db`."""
    import os
    import shutil
    import tempfile
    from dataclasses import replace

    from pmem import MemoryStore
    from pmem.config import load
    from pmem.search import DEFAULT_TUNING, search
    from pmem.store import Filter

    from scale_corpus import NOW, interleaved, questions

    qs = questions(count) + [q.text for q in fusion_sets.paraphrase_records()[1]][:count]
    tunings = {f"{DEFAULT_TUNING.candidates} candidates": DEFAULT_TUNING,
               f"{before} candidates": replace(DEFAULT_TUNING, candidates=before),
               f"{before} candidates, no question penalty (the search of stop 39)":
                   replace(DEFAULT_TUNING, candidates=before, question_penalty=0.0)}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "store.db"
        shutil.copy(db, path)
        store = MemoryStore(path, config=load().with_values(embed_model="fake-384"), clock=lambda: NOW)

        def cell(mode, tuning):
            def run(q) -> None:
                search(store, q, Filter(), limit=10, mode=mode, tuning=tuning)
            return run

        cells = {f"{mode} search, {label}": cell(mode, tuning) for mode in ("hybrid", "semantic")
                 for label, tuning in tunings.items()}
        times = interleaved(qs, cells, rounds)
        memories = store.count()
        store.close()
    return {"memories": memories, "questions": len(qs), "rounds": rounds, "ms per query (median)": times,
            "load average": round(os.getloadavg()[0], 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["refit", "normalise", "language", "words", "scale"])
    ap.add_argument("--penalty", type=float, nargs="+", default=[0.0, 0.02, 0.05, 0.1], help="language: the steps")
    ap.add_argument("--db", type=Path, default=None, help="scale: a store scale.py built")
    ap.add_argument("--questions", type=int, default=16, help="scale: LoCoMo questions, and as many paraphrase ones")
    ap.add_argument("--rounds", type=int, default=3, help="scale: rounds after the first (cold) one")
    ap.add_argument("--before", type=int, default=100, help="scale: the candidate count compared with")
    ap.add_argument("--lists", type=Path, default=None, help="the folder of `collect --dense searched`'s lists (default: the cache)")
    args = ap.parse_args()
    if args.what == "scale":
        if args.db is None:
            ap.error("scale needs --db")
        import json

        print(json.dumps(scale(args.db, args.questions, args.rounds, args.before), indent=1))
        return 0
    path = (args.lists or ff.CACHE) / f"lists-{ff.SEARCHED}.pickle"
    if not path.exists():
        raise SystemExit(f"{path} is missing: run `python benchmarks/fit_fusion.py collect --dense searched` first")
    qs = pickle.loads(path.read_bytes())
    if args.what == "refit":
        print(header())
        print(row("shipped (ENGLISH_TUNING)", qs))
        print(row("refitted on search()'s own lists", qs, refitted(qs)))
    elif args.what == "normalise":
        normalise(qs)
    elif args.what == "language":
        language(qs, args.penalty)
    else:
        words(qs)
    return 0


if __name__ == "__main__":
    sys.exit(main())

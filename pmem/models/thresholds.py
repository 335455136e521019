"""Cosine thresholds, per embedding model: what "close" means depends on the model's scale.

Every threshold pmem compares a cosine with was tuned on all-MiniLM-L6-v2. Another model puts
texts elsewhere on the scale: multilingual-e5-small puts unrelated texts near 0.86 (MiniLM near
0.43), so MiniLM's 0.2 recall cut-off would keep everything and its 0.92 dedup threshold would pair
unrelated facts. Each model therefore carries its own set, looked up by the name of the model the
vectors come from (`for_model`); a model pmem does not know gets MiniLM's, as before.

Where a setting exists (dedup_threshold, merge_threshold), a value the user set wins over the
model's (`effective`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

# The rescaled cosine (0..1 from score_floor) at which recall_cutoff sits (Thresholds.score_floor).
SCORE_CUT = 0.05


@dataclass(frozen=True)
class Thresholds:
    """The cosine thresholds of one embedding model."""

    dedup: float           # dream: near-duplicates (setting dedup_threshold)
    merge: float           # dream: related memories merged (setting merge_threshold)
    supersede: float       # dream: pairs its supersede rule checks
    compress_topic: float  # dream: adjacent episodes below this start a new topic
    grounding: float       # extraction and dream: a written text against its closest source sentence
    noop: float            # reconciliation: near-identical to a stored memory
    contained: float       # reconciliation: one fact's words a subset of the other's
    change: float          # reconciliation: a changed fact this close supersedes
    judge: float           # reconciliation: pairs a strong model judges
    recall_cutoff: float   # recall: meaning-only matches below this are noise
    hook: float            # agent hooks: a memory this close to the prompt is relevant
    hook_words: float      # agent hooks: one of the best keyword matches is relevant from this cosine
    # dream: two words a near-duplicate pair does not share are one word said otherwise from this
    # cosine ("bought" / "purchased"); above 1, never (docs/decisions/0048-dedup-by-meaning.md)
    synonym: float = 2.0
    dedup_close: float = 2.0  # dream: from here the older word test (half the stems shared) also dedups
    # dream: a pair in two languages with the same names, numbers and dates is one fact from this
    # cosine of the two texts embedded alike (e5: "query: " on both), and is compared from
    # dedup_bilingual_floor on the stored vectors' scale; above 1, never
    # (docs/decisions/0050-dedup-two-languages.md)
    dedup_bilingual: float = 2.0
    dedup_bilingual_floor: float = 2.0

    @property
    def score_floor(self) -> float:
        """search: the cosine from which a hit's `score` counts its meaning part (0 at or below).
        Derived from recall_cutoff so that recall's default `recall_min_score` (0.02: with the
        meaning part weighted 0.4, a rescaled cosine of 0.05) keeps meaning-only matches from
        the cosine recall_cutoff kept them before: 0.4 * (cut - floor) / (1 - floor) = 0.02,
        floor = (cut - 0.05) / 0.95 (MiniLM 0.2 -> 0.158, e5 0.806 -> 0.796). The e5 cut-off was
        mapped from MiniLM's by the share of LoCoMo turn pairs reaching it, so a score means about
        the same under either model."""
        return (self.recall_cutoff - SCORE_CUT) / (1.0 - SCORE_CUT)


# The values every cosine rule was tuned with (dream_bench.py, extract_bench.py on LoCoMo).
# dedup and synonym: dream's dedup by meaning (pmem.dream.sameness), set on the paraphrase set
# benchmarks/data/dedup_pairs.json (docs/decisions/0048-dedup-by-meaning.md; it was 0.92 when
# the lexical test was a Jaccard of all content words).
MINILM = Thresholds(dedup=0.86, merge=0.80, supersede=0.85, compress_topic=0.35, grounding=0.5,
                    noop=0.95, contained=0.85, change=0.6, judge=0.75, recall_cutoff=0.2,
                    hook=0.3, hook_words=0.15, synonym=0.75, dedup_close=0.92)

# Each MiniLM value moved to the e5 cosine that the same share of LoCoMo turn pairs reaches
# (benchmarks/multilingual.py `map_thresholds`, 300 turns of the dev conversations); noop: no MiniLM
# turn pair reaches 0.95, so it sits at the highest e5 pair (0.975). dedup and compress_topic were
# then set with dream_bench.py (2 conversations, docs/decisions/0013-multilingual-e5-default.md): dedup 0.95 paired
# chatter
# ("Thanks, Melanie!" twice: planted-pair precision 0.62), 0.96 gave 0.75, 0.97 gives 0.888 (MiniLM
# at 0.92: 0.894) with recall 0.978 (MiniLM 0.944); compress_topic 0.87 against the mapped 0.841:
# evidence R@10 after the dream 0.892 against 0.879. dedup then moved to 0.94 with dedup by meaning,
# and synonym set, on the paraphrase set (as MiniLM's).
E5_SMALL = Thresholds(dedup=0.94, merge=0.946, supersede=0.955, compress_topic=0.87, grounding=0.876,
                      noop=0.975, contained=0.955, change=0.9, judge=0.933, recall_cutoff=0.806,
                      hook=0.829, hook_words=0.794, synonym=0.95, dedup_close=0.97,
                      dedup_bilingual=0.925, dedup_bilingual_floor=0.88)

# multilingual-e5-small with memories embedded as queries too ("query: " on both sides: the
# identity multilingual-e5-small-symmetric). Its cosines sit elsewhere: each E5_SMALL value moved to
# the cosine the same share of LoCoMo turn pairs reaches under it (benchmarks/multilingual.py
# --map-symmetric, `map_symmetric`; docs/decisions/0016-one-prefix-both-sides.md); noop and
# compress_topic are those mapped values. dedup, synonym, dedup_close and the two-language pair were
# measured on this scale (dream_bench.py --pairs --stored-as-queries: recall 0.863, precision 1.0,
# held out 0.850; docs/decisions/0050-dedup-two-languages.md): the mapped dedup 0.926 paired
# hard negatives.
E5_SYMMETRIC = Thresholds(dedup=0.96, merge=0.932, supersede=0.943, compress_topic=0.863, grounding=0.868,
                          noop=0.964, contained=0.943, change=0.888, judge=0.919, recall_cutoff=0.809,
                          hook=0.829, hook_words=0.799, synonym=0.93, dedup_close=0.98,
                          dedup_bilingual=0.925, dedup_bilingual_floor=0.92)

# By model name, lower case. A stored model name is the embedder's: a known model's name, or the
# stem of its file ("all-MiniLM-L6-v2.f16", "multilingual-e5-small.q4"), matched up to the first dot.
BY_MODEL: dict[str, Thresholds] = {
    "all-minilm-l6-v2": MINILM,
    "multilingual-e5-small": E5_SMALL,
    "multilingual-e5-small-symmetric": E5_SYMMETRIC,
}

# Settings that override a model's threshold when the user set them.
SETTINGS = {"dedup_threshold": "dedup", "merge_threshold": "merge"}


def for_model(name: str | None) -> Thresholds:
    """The thresholds of the model called `name` (a known name or a file stem); MiniLM's for
    any other model, or none."""
    if not name:
        return MINILM
    key = name.strip().lower().replace("\\", "/").rsplit("/", 1)[-1]  # a path: its file name
    for candidate in (key, key.split(".", 1)[0]):
        if candidate in BY_MODEL:
            return BY_MODEL[candidate]
    return MINILM


def effective(model: str | None, settings: Any = None) -> Thresholds:
    """`for_model(model)`, with the dedup and merge settings where the user set them: a value
    whose origin is not "default", or one that differs from the setting's built-in default."""
    base = for_model(model)
    if settings is None:
        return base
    from ..config import is_set

    changes = {}
    for key, name in SETTINGS.items():
        value = getattr(settings, key, None)
        if value is None:
            continue
        if is_set(settings, key):
            changes[name] = float(value)
    return replace(base, **changes) if changes else base


def as_dict(t: Thresholds) -> dict[str, float]:
    return {f.name: getattr(t, f.name) for f in fields(t)}

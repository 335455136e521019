"""Every constant the ranking uses, in one frozen, versioned profile per embedding model.

A Profile (search's `Tuning`) is what search() and the store's indexes rank by: each field has a
one-line reason and the decision record in docs/decisions/ it comes from (`why`, `record`;
`pmem.cli.docs` prints them into docs/reference/ranking.md). Change a value only with a new record
and a new `version`: benchmarks and `pmem search --explain` name the profile they ranked with.

Every model searches with the values fitted on the default one (multilingual-e5-small-symmetric)
until it has a profile of its own in PROFILES; what differs per model on the cosine scale (the
score floor) is the model's threshold set (pmem.models.thresholds), not a ranking constant.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

DEFAULT_MODEL = "multilingual-e5-small-symmetric"


def _c(default: Any, why: str, record: str) -> Any:
    """A profile field: its value, why it is that value and its decision record."""
    return field(default=default, metadata={"why": why, "record": record})


# The per-query keyword share's coefficients, fitted by benchmarks/fit_fusion.py on the dev parts
# of the paraphrase, multilingual and LoCoMo sets with the default model's vectors.
SHARE_COEF = (("sem_gap", -7.74), ("kw_gap", -3.23), ("kw_many", 2.72), ("agree", 0.97), ("kw_best", 5.6),
              ("sem_best", 1.49))
# The same fitted on a store whose English memories have their second vector (store/english.py).
ENGLISH_SHARE_COEF = (("sem_gap", -13.74), ("kw_gap", -5.98), ("kw_many", 3.72), ("agree", 0.22),
                      ("kw_best", 5.85), ("sem_best", 3.24))
# MiniLM cosine -> the e5 cosine the same share of LoCoMo turn pairs reaches (44,850 pairs of the
# first 60 turns of each dev conversation; percentiles 0, 0.1, 1, 5, 10, 20, ..., 90, 95, 98, 99,
# 99.5, 99.8, 99.9, 99.95, 100), ends added; linear between knots.
ENGLISH_KNOTS = (
    (-1.0, 0.700), (-0.112, 0.717), (-0.023, 0.750), (0.037, 0.769), (0.104, 0.787), (0.142, 0.796),
    (0.189, 0.806), (0.225, 0.814), (0.255, 0.821), (0.285, 0.828), (0.314, 0.835), (0.348, 0.842),
    (0.391, 0.851), (0.457, 0.865), (0.521, 0.876), (0.599, 0.891), (0.650, 0.901), (0.700, 0.910),
    (0.747, 0.921), (0.774, 0.929), (0.802, 0.935), (0.911, 0.968), (1.0, 1.0))


@dataclass(frozen=True)
class Profile:
    """The ranking constants of one embedding model (see the module). rank_score = share *
    minmax(-bm25) + (1 - share) * minmax(cosine), each over its own top `candidates`; the share
    follows each query's Evidence (pmem.ranking.stages.keyword_share) unless `adaptive` is off.
    Equal profiles rank alike: search() never tells two apart by identity."""

    model: str = _c(DEFAULT_MODEL, "the embedding model these values were fitted with",
                    "0016-one-prefix-both-sides.md")
    version: int = _c(1, "bumped whenever a value changes, so a benchmark record names what it ranked with",
                      "0053-candidates-a-side.md")
    # -- candidates: how many each side brings, and how they are found ------------------------------
    # 125 measured against 100, 150, 175, 200 and 250 on the lists search() itself fuses: at 125 no
    # part is lower than at 100 but the mixed store's LoCoMo R@5 (one question), and LoCoMo gains
    # (R@5 0.754 -> 0.762, R@10 0.845 -> 0.851, mixed R@10 0.829 -> 0.836): a memory both sides find
    # past their first 100 now counts on both, and each side's min-max scale spans more of it. 150
    # and 175 within 0.006 of it on LoCoMo; 175-250 lose LoCoMo R@10 (0.838-0.845). The share's
    # constants are those fitted at 100: a refit at 150-250 gained nothing that held across the parts.
    candidates: int = _c(125, "candidates a side brings to the fusion (100-250 measured; 125 best on LoCoMo)",
                         "0053-candidates-a-side.md")
    context_weight: float = _c(0.7, "BM25 weight of a threaded memory's neighbours' words (its own: 1)",
                               "0002-threads-keyword-window.md")
    common_share: int = _c(5, "% of the memories above which a query word is common and chooses no rows",
                           "0026-scale-sixth-round.md")
    common_min: int = _c(1000, "a common word is in more than this many memories (small stores keep every word)",
                         "0026-scale-sixth-round.md")
    common_max: int = _c(10_000, "a word in more than this many memories is always common (5% at 1M cost 120 ms)",
                         "0026-scale-sixth-round.md")
    common_recent: int = _c(5000, "rows ranked for a query of common words only (the newest holding them)",
                            "0026-scale-sixth-round.md")
    bit_pool: int = _c(512, "nearest by the bit index rescored with float32 (at least 2n; 256 lost e5 recall)",
                       "0022-scale-bit-index.md")
    english_weight: float = _c(0.5, "MiniLM's share of an English pair's cosine (0.3-0.7 measured; 0.5 best)",
                               "0017-two-models-english.md")
    english_pool: int = _c(200, "e5's nearest memories MiniLM rescores (400: as every memory; 100: 1 point less)",
                           "0017-two-models-english.md")
    english_knots: tuple[tuple[float, float], ...] = _c(
        ENGLISH_KNOTS, "MiniLM's cosine mapped to the e5 cosine of the same rank among LoCoMo turn pairs",
        "0017-two-models-english.md")
    # -- the dense side before the fusion --------------------------------------------------------
    # Before the fusion a threaded memory among the dense candidates moves thread_lift of the way
    # towards the nearest of its live neighbours in the keyword window that is a candidate too and
    # nearer ("Yes, last Tuesday!" after the turn that asks about the support group). It only ever
    # gains; what a Hit reports is its own distance. 0.15-0.3 measured alike on LoCoMo (0.2: dense
    # R@10 0.597 -> 0.633).
    thread_lift: float = _c(0.2, "how far a threaded memory's distance moves towards a nearer neighbour's; 0: off",
                            "0021-thread-lift.md")
    # A memory that only asks ("What pet do you have?") states nothing that answers a question, yet
    # the dense side finds questions nearest to questions (e5's "query: " on both sides). After the
    # lift its distance grows by question_penalty of the rescaled scale (1 - score_floor: about 0.03
    # of e5's distance): still a candidate, but it yields to a statement about as near. 0.05-0.25
    # measured, 0.10-0.25 alike; a quarter of LoCoMo's turns are questions, 13% of its evidence turns.
    question_penalty: float = _c(0.15, "a memory that asks moves this much of the rescaled scale farther; 0: off",
                                 "0052-question-penalty.md")
    question_marks: tuple[str, ...] = _c(("?", "\uff1f", "\u061f"),
                                         "what ends a question: ?, the full-width one and the Arabic one",
                                         "0052-question-penalty.md")
    # -- the fusion ------------------------------------------------------------------------------
    keyword_weight: float = _c(0.6, "the words' part of the absolute score, and the share when not adaptive",
                               "0001-hybrid-fusion-convex.md")
    # About the -bm25 of the median best keyword match of a LoCoMo question (6.25 on conv-26: 150
    # questions; quartiles 4.7 and 9.3), so a typical best word match gives half the keyword part.
    bm25_half: float = _c(6.0, "the -bm25 giving half the keyword part: LoCoMo's median best match (6.25)",
                          "0015-fusion-follows-evidence.md")
    adaptive: bool = _c(True, "the keyword share follows each query's evidence; False: keyword_weight",
                        "0015-fusion-follows-evidence.md")
    # The per-query keyword share, fitted by benchmarks/fit_fusion.py (`fit`, defaults) on the dev part
    # of the paraphrase, multilingual and LoCoMo sets, in their own stores and in one mixed store,
    # with the default model's vectors: share_max * logistic(share_bias + sum of each Evidence field
    # times its coefficient). The English pair: the same fitted where the store's English side is in
    # use (store/english.py: the dense side scores English pairs by both models).
    share_max: float = _c(0.7, "the most the keyword side's share can be", "0015-fusion-follows-evidence.md")
    share_bias: float = _c(-4.58, "the share's fitted bias (benchmarks/fit_fusion.py)",
                           "0016-one-prefix-both-sides.md")
    share_coef: tuple[tuple[str, float], ...] = _c(SHARE_COEF, "the share's fitted coefficient of each Evidence field",
                                                   "0016-one-prefix-both-sides.md")
    english_share_bias: float = _c(-5.33, "the bias refitted for a store whose English side is in use",
                                   "0017-two-models-english.md")
    english_share_coef: tuple[tuple[str, float], ...] = _c(
        ENGLISH_SHARE_COEF, "the coefficients refitted for a store whose English side is in use",
        "0017-two-models-english.md")
    # -- after the fusion ------------------------------------------------------------------------
    # After the fusion the dense side's best goes first where the fused order has it among its first
    # dense_first_within (the first five stay the same five: LoCoMo's R@5 and R@10 cannot change);
    # from anywhere among the candidates where the fused best holds no rare query word (each word it
    # holds is in more than (N + 1) ** common_exponent - 0.5 of the store's N memories: an IDF below
    # 0.45 of the store's highest), or where the dense side's margin over its second
    # (Evidence.sem_gap) is at least dense_margin (LoCoMo's median margin is 0.02, a question in
    # other words' 0.10). In a mixed store the keyword side's best was a LoCoMo turn sharing "team",
    # "pet" or "book" with a question in other words, and the share could not tell that from LoCoMo's.
    dense_first: bool = _c(True, "the dense side's best goes first where the words cannot overrule it",
                           "0018-dense-first.md")
    dense_first_within: int = _c(5, "it goes first from among the fused first five (R@5, R@10 unchanged)",
                                 "0018-dense-first.md")
    common_exponent: float = _c(0.55, "a word in more than (N+1)**this - 0.5 memories is not rare (0.40 lost 3)",
                                "0018-dense-first.md")
    dense_margin: float = _c(0.08, "a dense margin this clear puts its best first (0.05-0.06 cost LoCoMo R@5)",
                             "0018-dense-first.md")
    # -- recall ----------------------------------------------------------------------------------
    recall_min_score: float = _c(0.02, "default recall_min_score: meaning-only matches scoring less are noise",
                                 "0020-recall-block-budget.md")

    def english(self) -> "Profile":
        """This profile with its English coefficients as the share's: what search() ranks a
        hybrid query by where the store's English side is in use."""
        return replace(self, share_bias=self.english_share_bias, share_coef=self.english_share_coef)

    @classmethod
    def documented(cls) -> list[tuple[str, Any, str, str]]:
        """(name, default, why, record) of every field, in order."""
        return [(f.name, f.default, f.metadata["why"], f.metadata["record"]) for f in fields(cls)]


DEFAULT = Profile()
PROFILES: dict[str, Profile] = {DEFAULT_MODEL: DEFAULT}


def for_model(name: str | None) -> Profile:
    """The profile of embedding model `name`; the default model's for one without its own."""
    return PROFILES.get(name or DEFAULT_MODEL, DEFAULT)

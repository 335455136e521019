"""The stages of a search that need no store, in the order search() runs them (pmem.search runs
the two that read one: keyword_ranks and semantic_ranks, the candidates):

1. keyword candidates: `fts_query` turns the query into a safe FTS5 expression (`query_words`);
   KeywordIndex.ranks returns (seq, bm25).
2. dense candidates: VectorIndex.ranks returns (seq, cosine distance), English pairs rescored
   by both models (EnglishVectors.rescore).
3. thread lift (`thread_lift`): a threaded memory's distance moves towards a nearer neighbour's.
4. question penalty (`asking`): a memory that is a question moves farther.
5. fusion share (`evidence`, `keyword_share`): the keyword list's share of this query's fusion.
6. fusion (`fuse`): each list min-max scaled (`_minmax`) and mixed at that share.
7. dense first (`dense_first`): the dense side's best moved first where the words cannot overrule it.
8. relevance (`relevance`): the absolute score a Hit reports (it ranks nothing).

Every constant comes from the Profile passed in (pmem.ranking.profile).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from .. import stemming
from ..text import STOP_WORDS
from .profile import DEFAULT, Profile


def query_words(text: str) -> list[str]:
    words = re.findall(r"\w+", text.lower())
    content = [w for w in words if w not in STOP_WORDS and len(w) > 1]
    return list(dict.fromkeys(content or words))


def fts_query(text: str, languages: Collection[str] = ()) -> str | None:
    """Plain text to a safe FTS5 query: every word quoted, OR-ed; None when there are no words.
    A non-English query also drops its own language's function words ("где", "welche", "qué"
    matched any memory holding them). `languages`: those the store holds memories in, for
    queries whose language is unclear."""
    words = query_words(text)
    function_words = stemming.function_words(text)
    if function_words:
        words = [w for w in words if w not in function_words] or words
    if not words:
        return None
    terms = ['"' + w.replace('"', '""') + '"' for w in words]
    # Beyond English: the query's Snowball stems against the index's `stems` column (m006).
    terms += ['stems:"' + t.replace('"', '""') + '"' for t in stemming.query_stems(text, languages)]
    return " OR ".join(terms)



def _minmax(pairs: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """Scale scores to [0, 1] within one result list (a single result scores 1)."""
    if not pairs:
        return []
    lo, hi = min(v for _, v in pairs), max(v for _, v in pairs)
    return [(seq, (v - lo) / (hi - lo) if hi > lo else 1.0) for seq, v in pairs]


@dataclass(frozen=True)
class Evidence:
    """What one query's two candidate lists say about how far to trust each (all about 0..1).

    kw_best: the best keyword match's -bm25, saturating (x / (x + bm25_half));
    kw_gap: how far that best match stands above the second ((x1 - x2) / x1);
    kw_many: the keyword list is full (its words are held by at least `candidates` memories);
    sem_best: the best cosine, rescaled from the model's floor;
    sem_gap: the best cosine's margin over the second, on the same scale;
    agree: the best keyword match's own cosine on that scale, as a share of sem_best (0 when it
        is not among the dense candidates): whether the words found what the meaning found."""

    kw_best: float
    kw_gap: float
    kw_many: float
    sem_best: float
    sem_gap: float
    agree: float


def evidence(kw: list[tuple[int, float]], sem: list[tuple[int, float]], floor: float,
             tuning: Profile = DEFAULT) -> Evidence:
    """The Evidence of keyword ranks `kw` (seq, bm25) and semantic ranks `sem` (seq, distance)."""
    def rescale(cos: float) -> float:
        return min(1.0, max(0.0, (cos - floor) / (1.0 - floor))) if floor < 1.0 else 0.0

    x = [max(0.0, -b) for _, b in kw[:2]]
    kw_best = x[0] / (x[0] + tuning.bm25_half) if x and x[0] > 0 else 0.0
    kw_gap = (x[0] - x[1]) / x[0] if len(x) == 2 and x[0] > 0 else (1.0 if x else 0.0)
    cos = [1.0 - d for _, d in sem[:2]]
    sem_best = rescale(cos[0]) if cos else 0.0
    sem_gap = (cos[0] - cos[1]) / (1.0 - floor) if len(cos) == 2 and floor < 1.0 else 0.0
    agree = 0.0
    if kw and sem_best > 0:
        d = dict(sem).get(kw[0][0])
        agree = rescale(1.0 - d) / sem_best if d is not None else 0.0
    return Evidence(kw_best=kw_best, kw_gap=kw_gap, kw_many=float(len(kw) >= tuning.candidates),
                    sem_best=sem_best, sem_gap=sem_gap, agree=agree)


def keyword_share(ev: Evidence, tuning: Profile = DEFAULT) -> float:
    """The keyword list's share of one query's rank fusion: share_max * logistic(bias + coef . ev)."""
    z = tuning.share_bias + sum(c * getattr(ev, name) for name, c in tuning.share_coef)
    return tuning.share_max / (1.0 + math.exp(-max(-60.0, min(60.0, z))))


def rare_most(memories: int, tuning: Profile = DEFAULT) -> int:
    """The most memories a word may be in and still count as rare for dense_first, in a store of
    `memories`: (N + 1) ** common_exponent - 0.5, rounded down (at least 1)."""
    return max(1, int((memories + 1) ** tuning.common_exponent - 0.5))


def dense_first(scores: dict[Any, float], best: Any, tuning: Profile = DEFAULT,
                rare: Callable[[Any], bool] | None = None, margin: float = 0.0) -> str | None:
    """Move `best` (the dense side's first) to the top of the fused `scores`, in place, where it
    is among the first `tuning.dense_first_within` already, where its `margin` over the dense
    side's second (Evidence.sem_gap) is at least `tuning.dense_margin`, or where `rare` says the
    fused best holds no rare query word (`rare(key)`: whether that memory holds one; None: never).
    Its score becomes the least float above the fused best's; ties rank by key, as search's do.
    Returns why it moved ("within", "margin", "no rare word"), or None where it did not."""
    if best not in scores:
        return None
    top, high = min(scores.items(), key=lambda kv: (-kv[1], kv[0]))
    if top == best:
        return None
    mine = scores[best]
    ahead = sum(1 for key, v in scores.items() if v > mine or (v == mine and key < best))
    why = ("within" if ahead < tuning.dense_first_within else "margin" if margin >= tuning.dense_margin
           else "no rare word" if rare is not None and not rare(top) else None)
    if why is not None:
        scores[best] = math.nextafter(high, math.inf)
    return why


def thread_lift(sem: list[tuple[int, float]], neighbours: dict[int, list[int]],
                lift: float = DEFAULT.thread_lift) -> list[tuple[int, float]]:
    """The dense side's (seq, distance) with each memory's distance d moved to
    d - lift * (d - d_n), d_n its nearest neighbour's (`neighbours`: KeywordIndex.candidate_neighbours) among
    these candidates where that is nearer; best first again, equal distances by seq as the ranks
    break them. A memory with no neighbour there keeps d. No vector is read: a neighbour nearer
    than a candidate is a candidate itself (but past e5's pool, or outside the filter)."""
    if not neighbours or lift <= 0.0:
        return sem
    distance = dict(sem)
    out = []
    for seq, d in sem:
        near = min((distance[n] for n in neighbours.get(seq, ()) if n in distance), default=d)
        out.append((seq, d - lift * max(0.0, d - near)))
    out.sort(key=lambda pair: (pair[1], pair[0]))
    return out


def asking(sem: list[tuple[int, float]], questions: Collection[int], step: float) -> list[tuple[int, float]]:
    """The dense side's (seq, distance) with each memory in `questions` (MemoryStore.questions)
    put `step` farther; best first again, equal distances by seq as the ranks break them."""
    if not questions or step <= 0.0:
        return sem
    out = [(seq, d + step if seq in questions else d) for seq, d in sem]
    out.sort(key=lambda pair: (pair[1], pair[0]))
    return out


@dataclass
class Fusion:
    """What the fusion of one query did (`fused`): the ranking score of every candidate and how
    it came to be, for `pmem search --explain`. `share`: the keyword list's share (None outside
    hybrid mode), `adaptive`: whether it followed the evidence (`ev`) or was keyword_weight;
    `kw_part`, `sem_part`: each candidate's min-max scaled value on each side (before the
    share); `moved`: the memory dense_first put first and why (None: nothing moved)."""

    scores: dict[int, float]
    share: float | None = None
    adaptive: bool = False
    ev: Evidence | None = None
    kw_part: dict[int, float] | None = None
    sem_part: dict[int, float] | None = None
    moved: tuple[int, str] | None = None


def fused(kw: list[tuple[int, float]], sem: list[tuple[int, float]], floor: float, query: str,
          mode: str = "hybrid", tuning: Profile = DEFAULT,
          rare: Callable[[int], bool] | None = None) -> Fusion:
    """`fuse`, with what it did on the way (Fusion)."""
    if mode == "keyword":
        return Fusion({seq: -bm25 for seq, bm25 in kw})
    if mode == "semantic":
        return Fusion({seq: 1.0 - d for seq, d in sem})
    scores: dict[int, float] = {}
    ev = evidence(kw, sem, floor, tuning) if tuning.adaptive or tuning.dense_first else None
    adaptive = ev is not None and tuning.adaptive
    w = keyword_share(ev, tuning) if ev is not None and tuning.adaptive else tuning.keyword_weight
    parts: list[dict[int, float]] = []
    for weight, pairs in ((w, [(seq, -b) for seq, b in kw]), (1.0 - w, [(seq, 1.0 - d) for seq, d in sem])):
        part = dict(_minmax(pairs))
        parts.append(part)
        for seq, norm in part.items():
            scores[seq] = scores.get(seq, 0.0) + weight * norm
    out = Fusion(scores, share=w, adaptive=adaptive, ev=ev, kw_part=parts[0], sem_part=parts[1])
    if tuning.dense_first and sem and ev is not None:  # the nearest; equal distances by key, as ranks break ties
        best = min(sem, key=lambda pair: (pair[1], pair[0]))[0]
        why = dense_first(scores, best, tuning, rare, ev.sem_gap)
        out.moved = (best, why) if why is not None else None
    return out


def fuse(kw: list[tuple[int, float]], sem: list[tuple[int, float]], floor: float, query: str,
         mode: str = "hybrid", tuning: Profile = DEFAULT,
         rare: Callable[[int], bool] | None = None) -> dict[int, float]:
    """The ranking score of every candidate (higher first): -bm25 in keyword mode, the cosine in
    semantic mode; in hybrid mode each list min-max scaled and mixed at the query's keyword share,
    then the dense side's best moved first where `dense_first` allows (`rare`: see there)."""
    return fused(kw, sem, floor, query, mode, tuning, rare).scores


def relevance(bm25: float | None, cosine: float | None, floor: float, mode: str = "hybrid",
              tuning: Profile = DEFAULT) -> float:
    """The absolute score in [0, 1] of a memory with this BM25 (negative, None: not a keyword
    match) and cosine to the query (None: not among the semantic candidates)."""
    x = max(0.0, -bm25) if bm25 is not None else 0.0
    s = x / (x + tuning.bm25_half) if x > 0 else 0.0
    c = min(1.0, max(0.0, (cosine - floor) / (1.0 - floor))) if cosine is not None else 0.0
    if mode == "keyword":
        return s
    if mode == "semantic":
        return c
    return tuning.keyword_weight * s + (1.0 - tuning.keyword_weight) * c



"""Hybrid retrieval: FTS5 BM25 and sqlite-vec KNN, fused by a convex combination of their
min-max normalised scores (it beat reciprocal-rank fusion on LoCoMo: docs/decisions/0001-hybrid-fusion-convex.md).
The keyword list's share of it is decided per query from the evidence of both lists
(`evidence`, `keyword_share`): a fixed 0.6, tuned where names decide (LoCoMo), let a memory
sharing one common word with a question in other words outrank what its meaning found. Before the
fusion a threaded memory's dense distance borrows from a nearer neighbour's (`thread_lift`) and a
memory that is itself a question moves back (`asking`); after it the dense side's best memory goes
first where the words cannot overrule it (`dense_first`).

That fusion ranks, but it is relative to one result list: the top hit always gets 1.0. What a
Hit reports as `score` is therefore absolute, in [0, 1] and comparable across queries:
keyword_weight * s(bm25) + (1 - keyword_weight) * c(cosine), with s = x / (x + bm25_half) of
x = -bm25 (saturating: half at `bm25_half`) and c the cosine rescaled from the embedding model's
`score_floor` (pmem.models.thresholds) to 1. Fusions on such absolute scales ranked worse on LoCoMo, so
they only report; the rank fusion stays as `rank_score`.

A query is always plain text: it is split into words and each word is quoted, so FTS5 syntax
in a query (NEAR(, AND, *, quotes) is searched for, never interpreted.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import stemming
from .errors import UsageError
from .records import Hit
from .store import Filter, PartitionScan
from .text import STOP_WORDS

if TYPE_CHECKING:
    from .store import MemoryStore

MODES = ("hybrid", "semantic", "keyword")


# About the -bm25 of the median best keyword match of a LoCoMo question (6.25 on conv-26: 150
# questions; quartiles 4.7 and 9.3), so a typical best word match gives half the keyword part.
BM25_HALF = 6.0


# The per-query keyword share, fitted by benchmarks/fit_fusion.py (`fit`, defaults) on the dev
# part of the paraphrase, multilingual and LoCoMo sets, in their own stores and in one mixed store,
# with the default model's vectors (multilingual-e5-small-symmetric:
# docs/decisions/0016-one-prefix-both-sides.md): the share is SHARE_MAX times the logistic of SHARE_BIAS + the sum of
# each
# Evidence field times its coefficient here.
SHARE_MAX = 0.7
SHARE_BIAS = -4.58
SHARE_COEF = (("sem_gap", -7.74), ("kw_gap", -3.23), ("kw_many", 2.72), ("agree", 0.97), ("kw_best", 5.6),
              ("sem_best", 1.49))


# The same fitted on a store whose English memories have their second vector (store/english.py:
# the dense side scores English pairs by both models;
# docs/decisions/0017-two-models-english.md). search() uses these where the store's English side is in use and no other
# Tuning is given.
ENGLISH_SHARE_BIAS = -5.33
ENGLISH_SHARE_COEF = (("sem_gap", -13.74), ("kw_gap", -5.98), ("kw_many", 3.72), ("agree", 0.22),
                      ("kw_best", 5.85), ("sem_best", 3.24))


# Dense first (docs/decisions/0018-dense-first.md): after the fusion, the dense side's best
# memory goes first where the fused order has it among its first DENSE_FIRST_WITHIN (the first
# five stay the same five: LoCoMo's R@5 and R@10 cannot change), and from anywhere among the
# candidates where the fused best holds no rare query word: each word it holds is in more than
# (N + 1) ** COMMON_EXPONENT - 0.5 of the store's N memories (an IDF below 0.45 of the store's
# highest; 0.40 and below left the mixed store's paraphrase dev part 3 questions lower), or where
# the dense side has a clear winner: its margin over the second (Evidence.sem_gap) is at least
# DENSE_MARGIN (0.05-0.06 cost LoCoMo R@5; LoCoMo's median margin is 0.02, a question in other
# words' 0.10). In a mixed store the keyword side's best was a LoCoMo turn sharing "team", "pet"
# or "book" with a question in other words, and the share could not tell that from LoCoMo's own.
DENSE_FIRST_WITHIN = 5
COMMON_EXPONENT = 0.55
DENSE_MARGIN = 0.08


# The dense side of a thread (docs/decisions/0021-thread-lift.md): before the
# fusion, a threaded memory among the dense side's candidates moves THREAD_LIFT of the way towards
# the nearest of its live neighbours in the keyword window that is a candidate too and nearer
# than it ("Yes, last Tuesday!" after the turn that asks about the support group). It only ever
# gains, so a memory with no thread, or none nearer beside it, keeps its distance; what a Hit
# reports is its own. 0.15-0.3 measured alike on LoCoMo (0.2: dense R@10 0.597 -> 0.633).
THREAD_LIFT = 0.2


# A memory that only asks (its text ends with a question mark: "What pet do you have?", "How long
# have you been married?") states nothing that answers a question, yet the dense side finds
# questions nearest to questions: e5's "query: " on both sides embeds them alike. After the lift
# its dense distance grows by QUESTION_PENALTY of the model's rescaled scale (1 - score_floor:
# about 0.03 of e5's distance), so it stays a candidate but yields to a statement about as near
# (docs/decisions/0052-question-penalty.md). 0.05-0.25 measured, 0.10-0.25 alike; a
# quarter of LoCoMo's turns are questions, 13% of its evidence turns.
QUESTION_PENALTY = 0.15


# How many candidates each side brings to the fusion
# (docs/decisions/0053-candidates-a-side.md): 125, measured against 100, 150, 175, 200 and 250 on the lists search()
# itself fuses. At
# 125 no part is lower than at 100 but the mixed store's LoCoMo R@5 (one question), and LoCoMo gains
# (R@5 0.754 -> 0.762, R@10 0.845 -> 0.851, mixed R@10 0.829 -> 0.836): a memory both sides find
# past their first 100 now counts on both, and each side's min-max scale spans more of it. 150 and
# 175 measured within 0.006 of it on LoCoMo; 175-250 bring the own paraphrase questions to
# semantic-only but LoCoMo R@10 down to 0.838-0.845. The share's constants are those fitted at 100:
# a refit at 150-250 gained nothing that held across the parts.
CANDIDATES = 125


@dataclass(frozen=True)
class Tuning:
    """Fusion constants (see docs/decisions/0015-fusion-follows-evidence.md).

    rank_score = share * minmax(-bm25) + (1 - share) * minmax(cosine), each over its own top
    `candidates`; a memory missing from one list gets 0 from it. The share follows each query's
    Evidence (`keyword_share`): a clear winner on the dense side, or a keyword match that stands
    alone, moves it towards the meaning; a strong best BM25 and a full keyword list (the dense
    side flat, as on LoCoMo, where the speakers' names are in every turn) move it towards the words.
    `adaptive=False` fixes it at `keyword_weight` (the fusion before, whose 0.6 was tuned on
    LoCoMo: R@10 0.82-0.83 for 0.6-0.7 with threads). `keyword_weight` also splits the absolute
    `score` (relevance). `dense_first`: the dense side's best is moved first afterwards where the
    evidence allows (`dense_first`, the function). `thread_lift`: how far a threaded memory's
    dense distance moves towards a nearer neighbour's before the fusion (`thread_lift`)."""

    keyword_weight: float = 0.6
    candidates: int = CANDIDATES
    context_weight: float = 0.7  # BM25 weight of a threaded memory's neighbours (its own text: 1)
    bm25_half: float = BM25_HALF  # the -bm25 at which a score's keyword part is half its most
    adaptive: bool = True  # the keyword share per query (keyword_share); False: keyword_weight
    share_max: float = SHARE_MAX
    share_bias: float = SHARE_BIAS
    share_coef: tuple[tuple[str, float], ...] = SHARE_COEF
    dense_first: bool = True
    dense_first_within: int = DENSE_FIRST_WITHIN
    common_exponent: float = COMMON_EXPONENT
    dense_margin: float = DENSE_MARGIN
    thread_lift: float = THREAD_LIFT  # hybrid and semantic modes (thread_lift, the function); 0: off
    question_penalty: float = QUESTION_PENALTY  # hybrid and semantic modes (asking); 0: off


DEFAULT_TUNING = Tuning()
ENGLISH_TUNING = Tuning(share_bias=ENGLISH_SHARE_BIAS, share_coef=ENGLISH_SHARE_COEF)


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


def keyword_ranks(store: "MemoryStore", query: str, flt: Filter, n: int,
                  context_weight: float = DEFAULT_TUNING.context_weight) -> list[tuple[int, float]]:
    """(seq, bm25) best first; bm25 is negative, lower is better. The index holds each memory's
    text and its thread neighbours' (`context`), weighted `context_weight`. On large stores words
    held by more than 5% of the memories are left out when rarer ones remain (KeywordIndex.ranks)."""
    match = fts_query(query, store.keywords.languages())
    if match is None:
        return []
    return store.keywords.ranks(match, flt, n, context_weight)


def semantic_ranks(store: "MemoryStore", query: str, flt: Filter, n: int,
                   vector: bytes | None = None, scan: PartitionScan | None = None) -> list[tuple[int, float]]:
    """(seq, cosine distance) best first, after filters: exact below `store.exact_below` vectors,
    above through the store's bit index rescored with float32 (VectorIndex.ranks). An English
    query's English memories are then scored by both models (store/english.py: e5's nearest
    POOL rescored, the combined cosine on e5's scale)."""
    if not store.vectors.exists():
        return []
    english = store.vectors.english
    if not english.applies(query):
        blob = vector if vector is not None else store.query_vector(query)
        return store.vectors.ranks(blob, flt, n, scan)
    second = english.query_vector(query)  # MiniLM embeds the query meanwhile
    blob = vector if vector is not None else store.query_vector(query)
    return english.rescore(query, store.vectors.ranks(blob, flt, max(n, english.pool), scan), second)[:n]


def _both_sides(store: "MemoryStore", query: str, flt: Filter, n: int, context_weight: float,
                words: bool = True) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """keyword_ranks (unless not `words`: a semantic search) and semantic_ranks. On a large store
    the keyword side runs on the store's side reader in another thread while this one embeds the
    query and ranks by meaning; once done, that thread reads bit-index partitions of the
    semantic side too (PartitionScan), so both end together (docs/decisions/0026-scale-sixth-round.md). A semantic
    search has that thread read partitions from the start."""
    with store.side_reader() as side:
        if side is None:
            kw = keyword_ranks(store, query, flt, n, context_weight) if words else []
            return kw, semantic_ranks(store, query, flt, n)
        out: dict[str, Any] = {}
        scan = PartitionScan()

        def keyword() -> None:
            try:
                out["kw"] = keyword_ranks(side, query, flt, n, context_weight) if words else []
            except BaseException as exc:  # raised again on this thread below
                out["error"] = exc
                return
            side.vectors.help_scan(scan)

        worker = threading.Thread(target=keyword, name="pmem-keyword-side", daemon=True)
        worker.start()
        try:
            sem = semantic_ranks(store, query, flt, n, scan=scan)
        finally:
            try:
                scan.close()
            finally:  # even if a second Ctrl-C lands in close(): the worker reads on `side`
                _join(worker)
        if "error" in out:
            raise out["error"]
        return out["kw"], sem


def _join(worker: threading.Thread) -> None:
    """Wait for `worker` even through Ctrl-C: it reads on the side connection, which the next
    search or close() may use once this returns. The interrupt is raised again afterwards."""
    interrupted: BaseException | None = None
    while worker.is_alive():
        try:
            worker.join()
        except KeyboardInterrupt as exc:
            interrupted = exc
    if interrupted is not None:
        raise interrupted


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
             tuning: Tuning = DEFAULT_TUNING) -> Evidence:
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


def keyword_share(ev: Evidence, tuning: Tuning = DEFAULT_TUNING) -> float:
    """The keyword list's share of one query's rank fusion: share_max * logistic(bias + coef . ev)."""
    z = tuning.share_bias + sum(c * getattr(ev, name) for name, c in tuning.share_coef)
    return tuning.share_max / (1.0 + math.exp(-max(-60.0, min(60.0, z))))


def rare_most(memories: int, tuning: Tuning = DEFAULT_TUNING) -> int:
    """The most memories a word may be in and still count as rare for dense_first, in a store of
    `memories`: (N + 1) ** common_exponent - 0.5, rounded down (at least 1)."""
    return max(1, int((memories + 1) ** tuning.common_exponent - 0.5))


def dense_first(scores: dict[Any, float], best: Any, tuning: Tuning = DEFAULT_TUNING,
                rare: Callable[[Any], bool] | None = None, margin: float = 0.0) -> None:
    """Move `best` (the dense side's first) to the top of the fused `scores`, in place, where it
    is among the first `tuning.dense_first_within` already, where its `margin` over the dense
    side's second (Evidence.sem_gap) is at least `tuning.dense_margin`, or where `rare` says the
    fused best holds no rare query word (`rare(key)`: whether that memory holds one; None: never).
    Its score becomes the least float above the fused best's; ties rank by key, as search's do."""
    if best not in scores:
        return
    top, high = min(scores.items(), key=lambda kv: (-kv[1], kv[0]))
    if top == best:
        return
    mine = scores[best]
    ahead = sum(1 for key, v in scores.items() if v > mine or (v == mine and key < best))
    if (ahead < tuning.dense_first_within or margin >= tuning.dense_margin
            or (rare is not None and not rare(top))):
        scores[best] = math.nextafter(high, math.inf)


def thread_lift(sem: list[tuple[int, float]], neighbours: dict[int, list[int]],
                lift: float = THREAD_LIFT) -> list[tuple[int, float]]:
    """The dense side's (seq, distance) with each memory's distance d moved to
    d - lift * (d - d_n), d_n its nearest neighbour's (`neighbours`: KeywordIndex.neighbours) among
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


def fuse(kw: list[tuple[int, float]], sem: list[tuple[int, float]], floor: float, query: str,
         mode: str = "hybrid", tuning: Tuning = DEFAULT_TUNING,
         rare: Callable[[int], bool] | None = None) -> dict[int, float]:
    """The ranking score of every candidate (higher first): -bm25 in keyword mode, the cosine in
    semantic mode; in hybrid mode each list min-max scaled and mixed at the query's keyword share,
    then the dense side's best moved first where `dense_first` allows (`rare`: see there)."""
    if mode == "keyword":
        return {seq: -bm25 for seq, bm25 in kw}
    if mode == "semantic":
        return {seq: 1.0 - d for seq, d in sem}
    scores: dict[int, float] = {}
    ev = evidence(kw, sem, floor, tuning) if tuning.adaptive or tuning.dense_first else None
    w = keyword_share(ev, tuning) if ev is not None and tuning.adaptive else tuning.keyword_weight
    for weight, pairs in ((w, [(seq, -b) for seq, b in kw]), (1.0 - w, [(seq, 1.0 - d) for seq, d in sem])):
        for seq, norm in _minmax(pairs):
            scores[seq] = scores.get(seq, 0.0) + weight * norm
    if tuning.dense_first and sem and ev is not None:  # the nearest; equal distances by key, as ranks break ties
        dense_first(scores, min(sem, key=lambda pair: (pair[1], pair[0]))[0], tuning, rare, ev.sem_gap)
    return scores


def relevance(bm25: float | None, cosine: float | None, floor: float, mode: str = "hybrid",
              tuning: Tuning = DEFAULT_TUNING) -> float:
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


def search(store: "MemoryStore", query: str, flt: Filter | None = None, *, limit: int = 10,
           mode: str = "hybrid", tuning: Tuning = DEFAULT_TUNING, collapse: bool = True,
           min_score: float = 0.0) -> list[Hit]:
    """The best `limit` memories for `query`.

    With `collapse`, a memory and one derived from it (a fact and the turn it came from) take one
    slot: whichever ranks higher stands for both, and the slot goes to the next idea. Facts derived
    from the same source are different ideas and all stay.

    Args:
        store: the store to search.
        query: the text to look for (surrounding whitespace ignored).
        flt: which memories may match (default: active ones, as `Filter()`).
        limit: the most hits to return; at least 1.
        mode: "hybrid" (keyword and meaning, fused), "semantic" (meaning only) or "keyword" (FTS5).
        tuning: the fusion's candidate count and keyword weight (benchmarks/ tune them); by
            default DEFAULT_TUNING, or ENGLISH_TUNING where the store's English side is in use.
        collapse: let a memory and one derived from it share one slot (see above).
        min_score: leave out hits whose `score` (absolute, 0..1, see the module) is below this;
            the order of the others is unchanged.

    Returns:
        Up to `limit` Hits, best first (by `rank_score`); `distance` is set for memories the
        semantic side found. Raises UsageError for an unknown mode, a limit below 1, an empty
        query or a min_score outside 0..1; ModelError when
        the embedding model cannot be loaded and ModelMismatch when the stored vectors come from
        another model (semantic and hybrid modes only).
    """
    flt = flt or Filter()
    if mode not in MODES:
        raise UsageError(f"unknown search mode {mode!r}: use {', '.join(MODES)}")
    if limit <= 0:
        raise UsageError("--limit must be at least 1")
    if not 0.0 <= min_score <= 1.0:
        raise UsageError("--min-score must be between 0 and 1")
    query = query.strip()
    if not query:
        raise UsageError("empty query")
    if tuning is DEFAULT_TUNING and mode == "hybrid" and store.vectors.english.in_use():
        tuning = ENGLISH_TUNING
    n = max(limit, tuning.candidates)
    if mode == "hybrid":
        kw, sem = _both_sides(store, query, flt, n, tuning.context_weight)
    elif mode == "keyword":
        kw, sem = keyword_ranks(store, query, flt, n, tuning.context_weight), []
    else:
        kw, sem = _both_sides(store, query, flt, n, tuning.context_weight, words=False)

    distance = dict(sem)  # each memory's own: what a Hit reports, and its absolute score
    if sem and tuning.thread_lift > 0.0:
        sem = thread_lift(sem, store.keywords.neighbours([seq for seq, _ in sem]), tuning.thread_lift)
    floor = store.thresholds().score_floor if sem else 0.0
    if sem and tuning.question_penalty > 0.0:
        sem = asking(sem, store.questions([seq for seq, _ in sem]), tuning.question_penalty * (1.0 - floor))
    kw_rank = {seq: i for i, (seq, _) in enumerate(kw, start=1)}
    sem_rank = {seq: i for i, (seq, _) in enumerate(sem, start=1)}
    bm25 = dict(kw)
    rare = None
    if mode == "hybrid" and tuning.dense_first and kw:
        def rare(seq: int) -> bool:  # only asked where the dense side's best is far down the fused order
            match = fts_query(query, store.keywords.languages())
            return (seq in bm25 and match is not None
                    and store.keywords.holds_rare(match, seq, lambda n: rare_most(n, tuning)))
    scores = fuse(kw, sem, floor, query, mode, tuning, rare)
    ranked = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))
    hits: list[Hit] = []
    listed: set[str] = set()   # ids already in the results
    sources: set[str] = set()  # what those were derived from
    # Rows are read a page at a time: without collapsing or a min_score one page is the answer.
    page = limit if not collapse else 2 * limit
    for start in range(0, len(ranked), page):
        chunk = ranked[start:start + page]
        by_seq = store.memories_by_seq(seq for seq, _ in chunk)
        for seq, score in chunk:
            memory = by_seq.get(seq)
            if memory is None:
                continue
            if collapse and (memory.id in sources or any(d in listed for d in memory.derived_from)):
                continue
            d = distance.get(seq)
            absolute = relevance(bm25.get(seq), None if d is None else 1.0 - d, floor, mode, tuning)
            if absolute < min_score:
                continue  # it holds no slot: a memory it was derived from may still stand
            hits.append(Hit(memory=memory, score=absolute, rank_score=score, keyword_rank=kw_rank.get(seq),
                            semantic_rank=sem_rank.get(seq), distance=d))
            listed.add(memory.id)
            sources.update(memory.derived_from)
            if len(hits) == limit:
                return hits
        if not collapse and not min_score:
            break  # nothing was skipped: the first page was the answer
    return hits

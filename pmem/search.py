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

import threading
from typing import TYPE_CHECKING, Any, NamedTuple

from .errors import UsageError
from .ranking import explain as explaining
from .ranking.profile import DEFAULT, Profile, for_model
from .ranking.stages import (  # noqa: F401 - re-exported: pmem.search is where callers find them
    Evidence,
    Fusion,
    _minmax,
    asking,
    dense_first,
    evidence,
    fts_query,
    fuse,
    fused,
    keyword_share,
    query_words,
    rare_most,
    relevance,
    thread_lift,
)
from .records import Hit
from .store import Filter, PartitionScan

if TYPE_CHECKING:
    from .service import MemoryStore

MODES = ("hybrid", "semantic", "keyword")


# Every ranking constant lives in one profile per embedding model (pmem/ranking/profile.py, each
# with its reason and decision record); the stages that need no store in pmem/ranking/stages.py.
# `Tuning` is that profile: search() takes one, and benchmarks and tests pass their variants.
Tuning = Profile
DEFAULT_TUNING = DEFAULT
ENGLISH_TUNING = DEFAULT.english()  # what search() ranks a hybrid query by where the English side is in use


def keyword_ranks(store: "MemoryStore", query: str, flt: Filter, n: int,
                  context_weight: float = DEFAULT.context_weight,
                  profile: Profile = DEFAULT) -> list[tuple[int, float]]:
    """Stage 1, the keyword candidates: (seq, bm25) best first; bm25 is negative, lower is better.
    The index holds each memory's text and its thread neighbours' (`context`), weighted
    `context_weight`. On large stores words held by more than the profile's common_share % of the
    memories are left out when rarer ones remain (KeywordIndex.ranks)."""
    match = fts_query(query, store.keywords.languages())
    if match is None:
        return []
    return store.keywords.ranks(match, flt, n, context_weight, profile)


def semantic_ranks(store: "MemoryStore", query: str, flt: Filter, n: int,
                   vector: bytes | None = None, scan: PartitionScan | None = None,
                   profile: Profile = DEFAULT) -> list[tuple[int, float]]:
    """Stage 2, the dense candidates: (seq, cosine distance) best first, after filters: exact
    below `store.exact_below` vectors, above through the store's bit index rescored with float32
    (VectorIndex.ranks, the profile's bit_pool). An English query's English memories are then
    scored by both models (store/english.py: e5's nearest english_pool rescored, the combined
    cosine on e5's scale)."""
    if not store.vectors.exists():
        return []
    english = store.vectors.english
    if not english.applies(query):
        blob = vector if vector is not None else store.query_vector(query)
        return store.vectors.ranks(blob, flt, n, scan, profile)
    second = english.query_vector(query)  # MiniLM embeds the query meanwhile
    blob = vector if vector is not None else store.query_vector(query)
    near = store.vectors.ranks(blob, flt, max(n, profile.english_pool), scan, profile)
    return english.rescore(query, near, second, profile)[:n]


class Dense(NamedTuple):
    """The dense candidates after stages 3-4 (`dense_stages`), and what they did."""

    sem: list[tuple[int, float]]  # (seq, distance) after the thread lift and the question penalty
    distance: dict[int, float]  # each memory's own: what a Hit reports, and its absolute score
    lifted: dict[int, float]  # the distances after the lift (for explain; empty without it)
    floor: float  # the model's score floor (0.0 without dense candidates)
    step: float  # how far a question moved
    questions: set[int]  # the candidates that are questions


def dense_stages(store: "MemoryStore", sem: list[tuple[int, float]], profile: Profile,
                 explain: bool = False) -> Dense:
    """Stages 3-4 on the dense candidates `sem` (semantic_ranks): the thread lift and the question
    penalty. They read only those candidates, so search runs them while the keyword side may
    still be ranking (_both_sides)."""
    distance = dict(sem)
    # 3: thread lift
    if sem and profile.thread_lift > 0.0:
        sem = thread_lift(sem, store.keywords.candidate_neighbours([seq for seq, _ in sem]), profile.thread_lift)
    lifted = dict(sem) if explain else {}
    floor = store.thresholds().score_floor if sem else 0.0
    # 4: question penalty
    step = profile.question_penalty * (1.0 - floor)
    questions: set[int] = set()
    if sem and profile.question_penalty > 0.0:
        questions = store.questions([seq for seq, _ in sem], profile.question_marks)
        sem = asking(sem, questions, step)
    return Dense(sem, distance, lifted, floor, step, questions)


def _both_sides(store: "MemoryStore", query: str, flt: Filter, n: int, profile: Profile,
                words: bool = True, explain: bool = False) -> tuple[list[tuple[int, float]], Dense]:
    """keyword_ranks (unless not `words`: a semantic search) and semantic_ranks, the latter through
    `dense_stages`. On a large store the keyword side runs on the store's side reader in another
    thread while this one embeds the query and ranks by meaning; once done, that thread reads
    bit-index partitions of the semantic side too (PartitionScan), so both end together
    (docs/decisions/0026-scale-sixth-round.md). This one then runs the dense stages while the
    keyword side may still rank (docs/decisions/0058-search-at-scale.md). A semantic search has
    that thread read partitions from the start."""
    with store.side_reader() as side:
        if side is None:
            kw = keyword_ranks(store, query, flt, n, profile.context_weight, profile) if words else []
            return kw, dense_stages(store, semantic_ranks(store, query, flt, n, profile=profile), profile, explain)
        out: dict[str, Any] = {}
        scan = PartitionScan()

        def keyword() -> None:
            try:
                out["kw"] = keyword_ranks(side, query, flt, n, profile.context_weight, profile) if words else []
            except BaseException as exc:  # raised again on this thread below
                out["error"] = exc
                return
            side.vectors.help_scan(scan)

        worker = threading.Thread(target=keyword, name="pmem-keyword-side", daemon=True)
        worker.start()
        try:
            sem = semantic_ranks(store, query, flt, n, scan=scan, profile=profile)
            scan.close()
            dense = dense_stages(store, sem, profile, explain)  # on this store's connection: `side` is the worker's
        finally:
            try:
                scan.close()
            finally:  # even if a second Ctrl-C lands in close(): the worker reads on `side`
                _join(worker)
        if "error" in out:
            raise out["error"]
        return out["kw"], dense


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


def profile_for(store: "MemoryStore", mode: str = "hybrid", base: Profile | None = None) -> Profile:
    """The profile search() ranks by when given none: that of the model the store's vectors come
    from (pmem.ranking.profile.for_model; or `base`, a variant of it), with its English share
    coefficients for a hybrid search where the store's English side is in use."""
    profile = base if base is not None else for_model(store.vectors.model()[0])
    if mode == "hybrid" and store.vectors.english.in_use():
        profile = profile.english()
    return profile


def search(store: "MemoryStore", query: str, flt: Filter | None = None, *, limit: int = 10,
           mode: str = "hybrid", tuning: Profile | None = None, collapse: bool = True,
           min_score: float = 0.0, explain: bool = False) -> list[Hit]:
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
        tuning: the ranking profile (pmem.ranking.profile; benchmarks pass variants), used as
            given; None: the store's own (`profile_for`: its model's, with the English
            coefficients where the store's English side is in use).
        collapse: let a memory and one derived from it share one slot (see above).
        min_score: leave out hits whose `score` (absolute, 0..1, see the module) is below this;
            the order of the others is unchanged.
        explain: set each Hit's `explain`, its way through the stages (pmem.ranking.explain).

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
    profile = tuning if tuning is not None else profile_for(store, mode)
    n = max(limit, profile.candidates)
    # 1-4: the candidates of each side, the dense ones after the thread lift and the question penalty
    if mode == "hybrid":
        kw, dense = _both_sides(store, query, flt, n, profile, explain=explain)
    elif mode == "keyword":
        kw = keyword_ranks(store, query, flt, n, profile.context_weight, profile)
        dense = dense_stages(store, [], profile)
    else:
        kw, dense = _both_sides(store, query, flt, n, profile, words=False, explain=explain)
    sem, distance, lifted, floor, step, questions = dense
    kw_rank = {seq: i for i, (seq, _) in enumerate(kw, start=1)}
    sem_rank = {seq: i for i, (seq, _) in enumerate(sem, start=1)}
    bm25 = dict(kw)
    rare = None
    if mode == "hybrid" and profile.dense_first and kw:
        def rare(seq: int) -> bool:  # only asked where the dense side's best is far down the fused order
            match = fts_query(query, store.keywords.languages())
            return (seq in bm25 and match is not None
                    and store.keywords.holds_rare(match, seq, lambda n: rare_most(n, profile)))
    # 5-7: the share, the fusion, dense first
    fusion = fused(kw, sem, floor, query, mode, profile, rare)
    scores = fusion.scores
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
            # 8: the absolute score a Hit reports
            absolute = relevance(bm25.get(seq), None if d is None else 1.0 - d, floor, mode, profile)
            if absolute < min_score:
                continue  # it holds no slot: a memory it was derived from may still stand
            way = explaining.way(seq, mode, profile, fusion, kw_rank=kw_rank.get(seq), bm25=bm25.get(seq),
                                 sem_rank=sem_rank.get(seq), distance=d, lifted=lifted.get(seq),
                                 question=seq in questions, penalty=step, floor=floor, score=score,
                                 relevance=absolute) if explain else None
            hits.append(Hit(memory=memory, score=absolute, rank_score=score, keyword_rank=kw_rank.get(seq),
                            semantic_rank=sem_rank.get(seq), distance=d, explain=way))
            listed.add(memory.id)
            sources.update(memory.derived_from)
            if len(hits) == limit:
                return hits
        if not collapse and not min_score:
            break  # nothing was skipped: the first page was the answer
    return hits

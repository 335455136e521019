"""plan(): read the store and propose, never write; a large store a slice at a time (_compare_large)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Iterable

from .. import timeutil
from ..errors import UsageError
from ..models.thresholds import Thresholds
from ..records import Memory
from .marks import _basis
from .pairs import PAIRS_EXACT_MAX, neighbours, vectors_of
from .planners import _NEEDS_VECTORS, PLANNERS, FacetsOf, Planning, SummaryTrial, WordVectors, _Stems, subject_value
from .records import APPLY_ORDER, DEFAULT_KINDS, KINDS, PAIR_KINDS, Budget, Plan, Progress, _parse, declined_key

if TYPE_CHECKING:
    from ..service import MemoryStore


INCREMENTAL_FROM = PAIRS_EXACT_MAX  # live memories from which a dream compares a slice at a time
SLICE = PAIRS_EXACT_MAX  # memories never compared yet that one slice of a large store's dream takes
READ_MAX = 3 * SLICE  # memories a slice's planners read at a time: a part of it and what resembles that
# What the pair kinds decide on, and whether a memory takes part at all; ("valid_from",
# "created_at"): the date a fact holds from, which orders supersede. A memory whose events since
# the last dream changed none of these (its tags or meta; a newer fact's valid_from set to its own
# date by a supersede) is not compared again: its pairs stay as the last plan decided them, and a
# new memory meets it from its own side.
COMPARED_FIELDS = ("text", "tier", "pinned", "merged_into", "forgotten_at", "superseded_by", "valid_to",
                   "expires_at", ("valid_from", "created_at"))



class SlicePlanner:
    """One plan's planners over one set of memories at a time (Planning), sharing what they
    claim, the memories read, and the chat model once loaded: a small store is one set, a
    large one a slice at a time."""

    def __init__(self, store: "MemoryStore", result: Plan, kinds: list[str], now: str, budget: Budget,
                 generator: Any, thresholds: Thresholds, included: set[str]):
        self.store, self.result, self.kinds, self.now, self.budget = store, result, kinds, now, budget
        self.generator, self.thresholds, self.included = generator, thresholds, included
        self.claimed: set[str] = set()  # memories that leave the active set in this plan
        self.considered: set[str] = set()
        self.word_vectors = WordVectors(store)  # kept across slices
        self.texts = WordVectors(store, query=True)
        self.summaries = SummaryTrial()  # the chat model's summaries judged once a plan

    def usable(self, m: Memory) -> bool:
        """Not forgotten or merged, and not pinned unless `include` names it."""
        return m.forgotten_at is None and m.merged_into is None and (not m.pinned or m.id in self.included)

    def comparable(self, m: Memory) -> bool:
        """Usable, and neither expired nor superseded: one the pair kinds compare."""
        return self.usable(m) and not m.is_expired(self.now) and not m.is_superseded(self.now)

    def run(self, memories: Iterable[Memory], which: Iterable[str],
            near: tuple[dict[int, str], Any] | None = None) -> None:
        """The planners of `which` (those of this plan's kinds, in APPLY_ORDER) over `memories`;
        `near`: (row number -> id, the arrays of pairs of row numbers to compare: neighbours),
        or None to compare every pair."""
        which = [k for k in APPLY_ORDER if k in which and k in self.kinds]
        now, claimed = self.now, self.claimed
        usable = [m for m in memories if self.usable(m)]
        self.considered.update(m.id for m in usable)
        expired = sorted((m for m in usable if m.id not in claimed and m.is_expired(now)),
                         key=lambda m: (m.expires_at, m.id))
        claimed.update(m.id for m in expired)
        active = [m for m in usable if m.id not in claimed and not m.is_superseded(now)]
        needs_vectors = any(k in which for k in _NEEDS_VECTORS)
        ctx = Planning(
            store=self.store, result=self.result, kinds=self.kinds, now=now, budget=self.budget,
            expired=expired, active=active, vecs=vectors_of(self.store, active) if needs_vectors and active else None,
            index={m.id: i for i, m in enumerate(active)}, words=_Stems(active), facets=FacetsOf(active),
            word_vectors=self.word_vectors, texts=self.texts,
            claimed=claimed, generator=self.generator, thresholds=self.thresholds, summaries=self.summaries)
        if near is not None:
            import numpy as np

            ids, (a, b, cos) = near
            seqs = np.array(sorted(ids) or [-1], dtype=np.int64)  # never empty, for rows_of's lookup
            row = np.array([ctx.index.get(ids.get(q, ""), -1) for q in seqs.tolist()], dtype=np.int64)

            def rows_of(qs):  # row numbers -> rows of `active` (-1: not there)
                at = np.minimum(np.searchsorted(seqs, qs), len(seqs) - 1)
                return np.where(seqs[at] == qs, row[at], -1)

            ia, ib = rows_of(a), rows_of(b)
            both = (ia >= 0) & (ib >= 0)
            i, j, cos = np.minimum(ia, ib)[both], np.maximum(ia, ib)[both], cos[both]
            order = np.lexsort((j, i, -np.round(cos.astype(np.float64), 6)))  # best first
            ctx.near = (i[order], j[order], cos[order])
        for kind in which:
            PLANNERS[kind](ctx)
        if ctx._gen_tried:  # loaded (or found missing) once for the whole plan
            self.generator = ctx.generator if ctx.generator is not None else False


def _compare_large(planner: SlicePlanner, live: int, full: bool, progress: Progress | None) -> None:
    """The pair kinds on a large store, a slice at a time, each slice with the memories it
    resembles (within the lowest threshold of the pair kinds) and old facts of the same subject,
    so that a plan holds a slice rather than the store:

    1. once a dream has been applied (store.dream_mark, under this basis), the memories changed
       since: with those of proposals the last dream skipped or left for the next, of merges it
       dropped for want of a working chat model unless the plan uses none, and the pinned ones
       named in `include`; each with the memories compared so far (up to the mark's `through`);
    2. memories never compared yet (a first dream, --full, another basis, or a quarter of the
       store changed), SLICE at a time in storage order, each slice with the earlier memories it
       resembles, until the time limit. The plan then says where they start (Plan.through), and
       the next dream goes on from there.

    Memories a proposal of an earlier slice holds are left to the next dream (Plan.revisit)."""
    import numpy as np

    store, result, budget, kinds = planner.store, planner.result, planner.budget, planner.kinds
    pairs = [k for k in PAIR_KINDS if k in kinds]
    thresholds = planner.thresholds
    lowest = min({"dedup": thresholds.dedup, "supersede": thresholds.supersede, "merge": thresholds.merge}[k]
                 for k in pairs)
    touched: set[str] = set()
    revisit: set[str] = set()

    def compare(chunk: dict[int, Memory], upto: int | None) -> bool:
        """Plan the pairs of `chunk` (row number -> memory) with each other and with the stored
        memories of rows up to `upto`, in pieces that read at most READ_MAX memories (a piece
        of the chunk and what resembles it); False when the time limit cut it short."""
        near = neighbours(store, chunk, lowest, upto, budget)
        if near is None:
            result.complete = False
            result.notes.append("time limit reached while comparing memories")
            return False
        members, theirs = near[0], near[1]
        # a piece is a run of the chunk in row order, and its pairs a run of `near`
        piece: list[int] = []
        partners: set[int] = set()
        for q in sorted(chunk):
            lo, hi = np.searchsorted(members, [q, q + 1])
            mine = set(theirs[lo:hi].tolist())
            if piece and len(piece) + len(partners) + len(mine - partners) > READ_MAX:
                if not plan_piece(chunk, piece, partners, near, upto):
                    return False
                piece, partners = [], set()
            piece.append(q)
            partners |= mine
        return plan_piece(chunk, piece, partners, near, upto) if piece else result.complete

    def plan_piece(chunk: dict[int, Memory], piece: list[int], partners: set[int], near, upto: int | None) -> bool:
        rows = {q: chunk[q] for q in piece}
        rows.update((q, chunk[q]) for q in partners if q in chunk)
        rows.update(store.memories_by_seq(partners - rows.keys()))
        found = {m.id: m for m in rows.values()}
        if "supersede" in kinds:  # the same subject with another value: not always close in meaning
            subjects = {sv[0] for q in piece if rows[q].tier != "episodic" and (sv := subject_value(rows[q].text))}
            for subject in sorted(subjects):
                found.update((m.id, m) for m in store.facts_starting_with(re.findall(r"\w+", subject), upto))
        revisit.update(found.keys() & touched)
        first = len(result.proposals)
        lo, hi = np.searchsorted(near[0], [piece[0], piece[-1] + 1])
        planner.run(sorted((m for i, m in found.items() if i not in touched), key=lambda m: m.id), pairs,
                    near=({q: m.id for q, m in rows.items()}, tuple(column[lo:hi] for column in near)))
        touched.update(i for p in result.proposals[first:] for i in p.members)
        return result.complete

    mark = None if full else store.dream_mark()
    if mark is not None and mark.get("basis") != result.basis:
        mark = None  # recorded under another model or thresholds: every pair again
    changed: dict[str, Memory] = {}
    if mark is not None:
        changed = {m.id: m for m in store.changed_since(int(mark["event"]), COMPARED_FIELDS)
                   if planner.comparable(m)}
        # Merges dropped for want of a working chat model wait for a plan that may use one.
        waiting = list(mark.get("waiting", ()))
        if planner.generator is False:
            result.waiting, waiting = waiting, []
        for m in store.get_many([*mark.get("revisit", ()), *waiting, *planner.included]):
            if planner.comparable(m):
                changed[m.id] = m
        if 4 * len(changed) > live:
            mark = None
    through: int | None = 0
    ordered: list[tuple[int, Memory]] = []
    if mark is not None:
        result.since, result.changed = int(mark["event"]), len(changed)
        through = mark.get("through")  # absent: every memory was compared
        if through is not None and (not isinstance(through, int) or isinstance(through, bool)):
            through = 0  # not in this form: compare them all
        seq = store.storage_order(changed)
        ordered = sorted((seq[i], m) for i, m in changed.items() if i in seq)
    total = store.count_live_after(through) if through is not None else 0
    done, stopped = 0, False
    for start in range(0, len(ordered), SLICE):
        # with the memories compared so far: the others meet what changed when their slice comes
        if not compare(dict(ordered[start:start + SLICE]), through):
            revisit.update(m.id for _, m in ordered[start:])  # what changed and was not compared: next time
            stopped = True
            break
    while not stopped and through is not None and not budget.over():
        window = store.live_after(through, SLICE)
        if not window:
            through = None
            break
        if not compare({q: m for q, m in window if planner.comparable(m)}, window[-1][0]):
            break
        through, done = window[-1][0], done + len(window)
        if progress:
            progress(done, total)
    result.revisit, result.resume = sorted(revisit), True
    # a merge dropped in one slice may be met again in a later one
    result.dropped = list({(d["kind"], tuple(d.get("members", ()))): d for d in result.dropped}.values())
    if stopped or through is not None:
        result.complete, result.through, result.left = False, through, total - done
    if through is not None:
        result.notes.append(f"{total - done:,} memories not compared yet: a large store is compared a slice "
                            f"at a time, and the next dream goes on from where this one stopped")


def _still_declined(store: "MemoryStore", entries: Any) -> list[list[str]]:
    """The reviews a person left (the dream mark's "declined") whose members are as they were
    then: those a dream does not ask again (marks._declined)."""
    if not isinstance(entries, list):
        return []
    pairs = [e for e in entries if isinstance(e, list) and len(e) == 4 and all(isinstance(x, str) for x in e)]
    current = {m.id: m for m in store.get_many(sorted({e[k] for e in pairs for k in (0, 2)}))}
    return [e for e in pairs if e[0] in current and e[2] in current
            and declined_key([current[e[0]], current[e[2]]]) == e]


def plan(store: "MemoryStore", *, only: set[str] | None = None, now: str | None = None, generator=None,
         max_seconds: float | None = None, include: Iterable[str] = (), full: bool = False,
         progress: Progress | None = None) -> Plan:
    """Propose, never write.

    A store of INCREMENTAL_FROM live memories and more is compared a slice at a time
    (_compare_large): once a dream has been applied, what changed since (with everything it
    resembles), so that the cost follows the change, not the store; and memories never compared
    yet, SLICE at a time, until the time limit (the next dream goes on from there). Proposals a
    person turned down come back only when a memory like them changes; `full` compares
    everything, as a smaller store always does.

    Args:
        store: the store to read (its settings give the thresholds).
        only: the kinds to plan (default DEFAULT_KINDS; purge only when named).
        now: the time to plan at (ISO 8601; default the store's clock).
        generator: the chat model that writes merges and summaries; None loads the store's
            configured one when text must be written, False uses no model.
        max_seconds: stop planning after this long (the plan is then marked incomplete).
        include: ids of pinned memories a dream may change.
        full: compare every memory, even where only what changed would be.
        progress: called with (memories compared, memories to compare) after each slice of
            memories never compared yet.

    Returns:
        The Plan. Raises UsageError for an unknown kind, NotFound / AmbiguousId for `include`.
    """
    kinds = list(DEFAULT_KINDS) if only is None else [k for k in KINDS if k in set(only)]
    unknown = set(only or ()) - set(KINDS)
    if unknown:
        raise UsageError(f"unknown dream kind {sorted(unknown)[0]!r}: use {', '.join(KINDS)}")
    budget = Budget(max_seconds)
    cfg = store.config
    now = now or store.clock()
    included = {store.resolve(i) for i in include}
    thresholds = store.thresholds()
    result = Plan(created_at=now, kinds=kinds, settings={
        "dedup_threshold": thresholds.dedup, "dedup_lexical": float(cfg.dedup_lexical),
        "merge_threshold": thresholds.merge, "compress_after_days": int(cfg.compress_after_days),
        "purge_grace_days": int(cfg.purge_grace_days)})

    from ..store import Filter

    result.mark, result.basis, result.undone = store.event_mark(), _basis(store, thresholds), store.undone_count()
    if not full:
        result.declined = _still_declined(store, (store.dream_mark() or {}).get("declined"))
    planner = SlicePlanner(store, result, kinds, now, budget, generator, thresholds, included)
    live = store.count(Filter.live())
    try:
        if live < INCREMENTAL_FROM:
            planner.run(store.list_memories(Filter.everything(), sort="id", limit=None), kinds)
        else:
            planner.run(store.expired_live(now), ("expire", "purge"))
            if any(k in kinds for k in PAIR_KINDS):
                _compare_large(planner, live, full, progress)
            if "compress" in kinds:  # old episodes no dream wrote, read until compressed
                cutoff = timeutil.iso(_parse(now) - timedelta(days=int(cfg.compress_after_days)))
                old = store.list_memories(Filter(tiers=("episodic",), until=cutoff, pinned=False,
                                                 include_expired=True, include_superseded=True), limit=None)
                planner.run(sorted((m for m in old if not m.derived_from), key=lambda m: m.id), ("compress",))
    finally:  # the chat model's other contexts (planners._written) given back
        getattr(planner.generator, "release_lanes", lambda: None)()
    result.considered = len(planner.considered)
    result.elapsed_s = budget.elapsed()
    return result

"""Consolidation, like sleep: plan what to tidy, let a person review it, then apply it reversibly.

`plan()` reads the store and proposes; it never writes. `apply()` backs the database up, then
applies each accepted proposal in its own transaction (a kill -9 leaves every proposal either
applied with all its events or not at all), and records every event of the run under ONE
operation, so one `pmem undo` takes the whole dream back.

Proposal kinds, in the order they are planned and applied:

- expire    memories past expires_at that no dream has recorded yet: stamped meta["expired_at"]
            (they already left search at expires_at; `pmem restore` brings them back).
- purge     with `--purge` only: expired memories past purge_grace_days are deleted (after the
            automatic backup; the deletion is an event, so `pmem undo` restores them).
- dedup     near-duplicates of the same tier: cosine >= dedup_threshold, and what makes two facts
            different equal (speaker, names, numbers, dates and times however written, places,
            weekdays, kin, negation: pmem.dream.sameness), and the rest the same words, or words
            the model puts close by themselves (bought / purchased), but for one; or, from the
            model's dedup_close, half the stems shared and not one swapped. One canonical
            memory stays (most distinct content words, then longest, then newest), gaining the
            union of tags and the earliest created_at; the others get merged_into it.
- review    a pair dedup could not decide (the same keys, other words: loves / adores, tea /
            coffee): applied as a dedup only when a person accepts it by its id (the TUI's dream
            review), never by an apply of the whole plan. One with a memory a dedup keeps is
            asked against it; one a person left in an applied dream is not asked again while
            both memories stay as they were (the dream mark's "declined"; --full asks again).
- supersede two rules over non-episodic memories, the older fact getting valid_to / superseded_by
            the newer (MemoryStore.supersede): (1) the extraction's rule (pmem.extract.decide, no
            model judge) for pairs at cosine >= SUPERSEDE_COSINE, e.g. the same statement with a
            different number; (2) "<subject> is|are|was|were|= <value>" or "<subject>: <value>"
            with the same subject (>= 2 content words) and a different short value (<= 6 words).
- merge     archival memories outside a thread (turns are compress's) about the same subject
            (cosine >= merge_threshold, complete linkage, at most MERGE_MAX each, never two
            speakers) written as one memory by the chat model; the text must pass the extraction
            grounding gate against the members and hold every content word of each member it
            keeps, else the proposal is dropped. It keeps the members' speaker and, in meta
            "sources", each member's id, speaker, source, place and meta.
- compress  episodic memories older than compress_after_days, grouped by day and then by topic
            (adjacent similarity), summarised by the chat model (grounded, and keeping half the
            episode's content words) or, when the model is unavailable, its summary falls short,
            or under SUMMARY_KEPT of its summaries so far passed, extractively (members' most
            informative sentences, verbatim). Members get merged_into the summary (episodic tier).

Pinned (core) memories are never touched unless named in `include`. Memories a dream wrote
(derived_from not empty) are not merged or compressed again, which with the rules above makes
a second plan right after an applied one empty.

On a store of INCREMENTAL_FROM live memories and more, a plan after an applied dream reads only
what changed since that dream's plan (events after its mark), what the changed memories resemble,
old facts of the same subject, expired memories and old episodes (`planning._compare_large`): on 100,000
memories with 1,000 new, 1-4 s instead of ~60 s, with the same proposals (docs/decisions/0028-dream-what-changed.md).

Every cosine above is on the scale of the model the vectors come from: the thresholds are that
model's (pmem.models.thresholds, through MemoryStore.thresholds()); the dedup_threshold and
merge_threshold settings override them when the user sets them.

The parts: records (kinds, Proposal, Plan, ApplyResult), pairs (finding close pairs: all pairs,
LSH, a slice's neighbours), planners (one per kind), planning (plan(), a large store a slice at a
time), marks (what an applied dream dealt with), applying (apply()).
"""

from .applying import apply
from .marks import _basis
from .pairs import (
    LSH_LAST,
    LSH_LOW,
    PAIRS_EXACT_MAX,
    PARTNER_BLOCK,
    close_pairs,
    close_pairs_exact,
    close_pairs_lsh,
    mask_hits,
    neighbours,
    vectors_of,
)
from .planners import (
    COMPRESS_KEEP,
    COMPRESS_MAX,
    COMPRESS_TOPIC,
    MERGE_MAX,
    PLANNERS,
    SUPERSEDE_COSINE,
    Planning,
    extractive_summary,
    grounded,
    load_generator_quietly,
    subject_value,
)
from .planning import COMPARED_FIELDS, INCREMENTAL_FROM, READ_MAX, SLICE, SlicePlanner, plan
from .records import (
    APPLY_ORDER,
    ASKED,
    DEFAULT_KINDS,
    KINDS,
    PAIR_KINDS,
    PROPOSAL_KINDS,
    ApplyResult,
    Budget,
    Plan,
    Progress,
    Proposal,
)

# The library's names; the parts after them are what tests and benchmarks call (a test that
# changes a constant patches the part that reads it: pmem.dream.planning.SLICE, not this copy).
__all__ = [
    "APPLY_ORDER", "ASKED", "PROPOSAL_KINDS", "COMPARED_FIELDS", "COMPRESS_KEEP", "COMPRESS_MAX", "COMPRESS_TOPIC",
    "DEFAULT_KINDS",
    "INCREMENTAL_FROM", "KINDS", "LSH_LAST", "LSH_LOW", "MERGE_MAX", "PAIRS_EXACT_MAX", "PAIR_KINDS",
    "PARTNER_BLOCK", "PLANNERS", "READ_MAX", "SLICE", "SUPERSEDE_COSINE", "ApplyResult", "Plan",
    "Planning", "Progress", "Proposal", "apply", "extractive_summary", "grounded", "load_generator_quietly",
    "plan", "subject_value",
    "Budget", "SlicePlanner", "_basis", "close_pairs", "close_pairs_exact", "close_pairs_lsh", "mask_hits",
    "neighbours",
    "vectors_of",
]

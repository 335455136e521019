"""What a dream plans and what applying it did: kinds, proposals, plans, results; and the small
helpers every part shares (a time budget, a memory's fingerprint)."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Callable

from ..errors import UsageError
from ..records import Memory

KINDS = ("dedup", "merge", "compress", "expire", "supersede", "purge")
DEFAULT_KINDS = ("dedup", "merge", "compress", "expire", "supersede")  # purge only when asked
# A "review" is a dedup that dedup's rule could not decide: applied only when a person accepts it
# by its id (the TUI's dream review), never by an apply of the whole plan.
ASKED = ("review",)
PROPOSAL_KINDS = KINDS + ASKED
APPLY_ORDER = ("expire", "purge", "dedup", "review", "supersede", "merge", "compress")
PAIR_KINDS = ("dedup", "supersede", "merge")  # the kinds that compare memories with each other

Progress = Callable[[int, int], None]


@dataclass
class Proposal:
    """One change a dream suggests. `id` is a hash of kind and members: stable across runs."""

    kind: str
    members: list[str]
    reason: str
    result_text: str | None = None
    target: str | None = None  # dedup: the canonical memory; supersede: the newer fact
    score: float | None = None
    details: dict[str, Any] = field(default_factory=dict)
    fingerprints: dict[str, str] = field(default_factory=dict)
    id: str = ""

    def __post_init__(self) -> None:
        if self.kind not in PROPOSAL_KINDS:
            raise ValueError(f"unknown proposal kind {self.kind!r}")
        if not self.id:
            key = self.kind + "\x00" + "\x00".join(self.members)
            self.id = hashlib.sha1(key.encode("utf-8")).hexdigest()[:12]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if d["score"] is not None:
            d["score"] = round(d["score"], 4)
        return d


@dataclass
class Plan:
    proposals: list[Proposal] = field(default_factory=list)
    created_at: str = ""
    kinds: list[str] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    generator: str | None = None
    notes: list[str] = field(default_factory=list)
    dropped: list[dict[str, Any]] = field(default_factory=list)  # proposals the gate refused
    considered: int = 0
    complete: bool = True
    elapsed_s: float = 0.0
    since: int | None = None  # compared only what changed after this event (None: everything)
    changed: int | None = None  # how many memories had changed since then
    mark: int = 0  # the newest event when the plan was made (what an applied dream has dealt with)
    basis: str = ""  # the model and thresholds its pairs qualified under (_basis)
    undone: int = 0  # operations undone when the plan was made (MemoryStore.set_dream_mark)
    waiting: list[str] = field(default_factory=list)  # merges still waiting for a chat model (_compare_large)
    revisit: list[str] = field(default_factory=list)  # memories a later slice left to the next dream
    through: int | None = None  # stopped before comparing the memories stored after this row
    left: int = 0  # how many memories it had not compared then
    resume: bool = False  # the pair kinds stopped where the next dream can go on (through, revisit)
    # reviews a person left unaccepted in an applied dream, as declined_key()s: not asked again
    # while both members stay as they were (the dream mark keeps them; `full` asks them all again)
    declined: list[list[str]] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        out = {k: 0 for k in PROPOSAL_KINDS}
        for p in self.proposals:
            out[p.kind] += 1
        return out

    def get(self, proposal_id: str) -> Proposal:
        for p in self.proposals:
            if p.id == proposal_id or (len(proposal_id) >= 4 and p.id.startswith(proposal_id)):
                return p
        raise UsageError(f"no proposal {proposal_id!r} in this plan")

    def to_dict(self) -> dict[str, Any]:
        return {
            "created_at": self.created_at,
            "kinds": list(self.kinds),
            "settings": dict(self.settings),
            "generator": self.generator,
            "considered": self.considered,
            "complete": self.complete,
            "elapsed_s": round(self.elapsed_s, 3),
            "since_event": self.since,
            "changed": self.changed,
            "mark_event": self.mark,
            "not_compared": self.left,
            "counts": self.counts(),
            "proposals": [p.to_dict() for p in self.proposals],
            "dropped": list(self.dropped),
            "notes": list(self.notes),
        }


@dataclass
class ApplyResult:
    op_id: str | None = None
    applied: list[str] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    created: dict[str, str] = field(default_factory=dict)  # proposal id -> new memory id
    backup: str | None = None
    complete: bool = True
    elapsed_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["elapsed_s"] = round(self.elapsed_s, 3)
        return d


def _fingerprint(m: Memory) -> str:
    """What a proposal depends on: text and whether the memory is still active."""
    key = json.dumps([m.text, m.merged_into, m.forgotten_at, m.valid_to, m.expires_at, m.pinned],
                     ensure_ascii=False)
    return hashlib.sha1(key.encode("utf-8")).hexdigest()[:12]


def declined_key(members: list[Memory]) -> list[str]:
    """A review's pair as the dream mark remembers it: each member's id and _fingerprint, in id
    order, so that either member changing (text, merged, forgotten, pinned) asks it again."""
    return [x for m in sorted(members, key=lambda m: m.id) for x in (m.id, _fingerprint(m))]


def _parse(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


class Budget:
    """A dream's time limit (--max-seconds; None: none): over() once it has passed."""

    def __init__(self, max_seconds: float | None):
        self.start = time.monotonic()
        self.deadline = None if max_seconds is None else self.start + max_seconds

    def over(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def elapsed(self) -> float:
        return time.monotonic() - self.start


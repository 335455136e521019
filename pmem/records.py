"""Plain records the library hands out. `to_dict()` gives the stable JSON shape of each."""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

#: The memory tiers: core (pinned facts every recall starts with), archival (durable facts),
#: episodic (what happened, when: conversation turns, notes of a day; dream compresses them).
TIERS = ("core", "archival", "episodic")

# Column order of the memories table, as read by Memory.from_row.
MEMORY_COLUMNS = (
    "id", "text", "tier", "pinned", "tags", "source", "meta", "created_at", "updated_at",
    "expires_at", "valid_from", "valid_to", "superseded_by", "derived_from", "merged_into",
    "forgotten_at", "access_count", "last_accessed_at", "scope", "thread", "thread_pos",
)
_JSON_COLUMNS = {"tags": list, "meta": dict, "derived_from": list}


@dataclass
class Memory:
    """One stored memory, as the store hands it out (a copy: change it through MemoryStore).

    Times are ISO 8601 UTC strings ("2025-03-01T12:00:00Z"); None or "" means unset. A memory
    leaves search when it is forgotten, merged into another, expired (expires_at passed) or
    superseded (valid_to passed); `status(at)` names which. `to_dict()` is its stable JSON shape.
    """

    id: str
    text: str
    tier: str = "archival"
    pinned: bool = False
    tags: list[str] = field(default_factory=list)
    source: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    created_at: str = ""
    updated_at: str = ""
    expires_at: str | None = None
    valid_from: str | None = None
    valid_to: str | None = None
    superseded_by: str | None = None
    derived_from: list[str] = field(default_factory=list)
    merged_into: str | None = None
    forgotten_at: str | None = None
    access_count: int = 0
    last_accessed_at: str | None = None
    scope: str | None = None  # None: global; else a project (absolute path of its git root or directory)
    # A conversation, chat or notebook the memory belongs to, and its 0-based place in it
    # (both None when it stands alone). Neighbours in a thread share keyword context and recall.
    thread: str | None = None
    thread_pos: int | None = None

    @classmethod
    def from_row(cls, row) -> "Memory":
        values = dict(zip(MEMORY_COLUMNS, row))
        for key in _JSON_COLUMNS:
            values[key] = json.loads(values[key]) if values[key] else _JSON_COLUMNS[key]()
        values["pinned"] = bool(values["pinned"])
        return cls(**values)

    def _copied(self) -> dict[str, Any]:
        """The fields, with their lists and meta copied (as dataclasses.asdict, which deep-copied
        every value through its recursion: 70% of the time of exporting 1,000,000 memories)."""
        d = {name: getattr(self, name) for name in _FIELDS}
        d["tags"], d["derived_from"], d["meta"] = list(self.tags), list(self.derived_from), copy.deepcopy(self.meta)
        return d

    def to_row(self) -> tuple:
        d = self._copied()
        for key in _JSON_COLUMNS:
            d[key] = json.dumps(d[key], ensure_ascii=False, sort_keys=key == "meta")
        d["pinned"] = int(d["pinned"])
        return tuple(d[c] for c in MEMORY_COLUMNS)

    def to_dict(self) -> dict[str, Any]:
        d = self._copied()
        d["forgotten"] = self.forgotten_at is not None
        return d

    @property
    def forgotten(self) -> bool:
        return self.forgotten_at is not None

    def is_expired(self, at: str) -> bool:
        return self.expires_at is not None and self.expires_at <= at

    def is_superseded(self, at: str) -> bool:
        return self.valid_to is not None and self.valid_to <= at

    def status(self, at: str) -> str:
        """One word for where a memory stands: active, forgotten, merged, superseded, expired."""
        if self.forgotten_at:
            return "forgotten"
        if self.merged_into:
            return "merged"
        if self.is_superseded(at):
            return "superseded"
        if self.is_expired(at):
            return "expired"
        return "active"


_FIELDS = tuple(f.name for f in fields(Memory))


@dataclass
class Hit:
    """One search result: the memory, its relevance `score` (absolute, 0..1, comparable across
    queries: pmem.search), the fusion value it was ranked by (`rank_score`, relative to this
    result list: the top hit gets 1 in hybrid mode) and where it came from: its rank in the keyword
    (BM25) list, in the semantic (vector) list, and its cosine distance to the query (None when
    it was found by keyword only)."""

    memory: Memory
    score: float
    rank_score: float | None = None
    keyword_rank: int | None = None
    semantic_rank: int | None = None
    distance: float | None = None
    explain: dict[str, Any] | None = None  # its way through the stages, when asked (pmem.ranking.explain)

    def to_dict(self) -> dict[str, Any]:
        d = self.memory.to_dict()
        d["score"] = round(self.score, 6)
        d["rank_score"] = None if self.rank_score is None else round(self.rank_score, 6)
        d["keyword_rank"] = self.keyword_rank
        d["semantic_rank"] = self.semantic_rank
        d["distance"] = None if self.distance is None else round(self.distance, 6)
        if self.explain is not None:
            d["explain"] = self.explain
        return d


@dataclass
class Event:
    """One change to one memory, as recorded for history and undo: the memory's state `before`
    and `after` (None: did not exist / no longer exists), the `action` ("add", "edit", "pin",
    "dream", ...) and the operation `op_id` it belongs to. `changes()` lists the fields that differ."""

    seq: int
    op_id: str
    memory_id: str
    action: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    at: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def changes(self) -> dict[str, tuple[Any, Any]]:
        """Fields that differ between before and after."""
        before, after = self.before or {}, self.after or {}
        keys = [k for k in MEMORY_COLUMNS if before.get(k) != after.get(k)]
        return {k: (before.get(k), after.get(k)) for k in keys}


@dataclass
class Operation:
    """One user-level action (an add, an import, an extraction, a dream run) and the number of
    events it recorded; `pmem undo` reverts a whole operation. `undone_at` is set once it was."""

    id: str
    kind: str
    summary: str
    at: str
    undone_at: str | None = None
    events: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

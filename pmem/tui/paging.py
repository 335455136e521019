"""Reading the memory list a page at a time, cheaply at any depth.

`store.list_memories(limit, offset)` sorts by (created_at DESC, seq DESC) and makes SQLite step over every
row before `offset`: on 100,000 memories a page near the bottom takes ~0.8 s. The pager avoids deep
offsets the way keyset paging does, with the filter the store already has:

- the page after one already read starts at that page's last `created_at`
  (`Filter.until`, inclusive), skipping the rows of that timestamp already shown;
- the page before one already read is read upwards from that page's first `created_at`
  (`Filter.since`, `reverse=True`);
- any other page in the lower half of the list is read upwards from the end (`reverse=True`,
  offset counted from the bottom).

Only a page in the middle reached by a jump (a dragged scrollbar) pays the plain offset. Pages are
identified by their offset in the store's list; the anchors learnt from each read are dropped
whenever the list may have changed (`forget_anchors`).
"""

from __future__ import annotations

from dataclasses import replace

from ..records import Memory
from ..service import MemoryStore
from ..store import Filter


class StorePager:
    def __init__(self, store: MemoryStore, flt: Filter, total: int) -> None:
        self.store = store
        self.flt = flt
        self.total = total
        # offset -> (created_at, how many rows of that created_at come before offset)
        self._after: dict[int, tuple[str, int]] = {}
        # offset -> (created_at, how many rows of that created_at come at or after offset)
        self._before: dict[int, tuple[str, int]] = {}
        self.strategy: list[str] = []  # for tests: how each page was read

    def forget_anchors(self) -> None:
        self._after.clear()
        self._before.clear()

    def __call__(self, offset: int, limit: int) -> list[Memory]:
        limit = max(0, min(limit, self.total - offset))
        if limit <= 0 or offset < 0:
            return []
        if offset in self._after:
            at, seen = self._after[offset]
            rows = self.store.list_memories(replace(self.flt, until=at), limit=limit, offset=seen)
            self.strategy.append("after")
        elif offset + limit in self._before:
            at, seen = self._before[offset + limit]
            rows = self.store.list_memories(replace(self.flt, since=at), limit=limit, offset=seen, reverse=True)
            rows.reverse()
            self.strategy.append("before")
        elif offset > self.total - offset - limit:
            from_end = self.total - offset - limit
            rows = self.store.list_memories(self.flt, limit=limit, offset=from_end, reverse=True)
            rows.reverse()
            self.strategy.append("from end")
        else:
            rows = self.store.list_memories(self.flt, limit=limit, offset=offset)
            self.strategy.append("offset")
        if len(rows) == limit:
            self._learn(offset, rows)
        return rows

    def _learn(self, offset: int, rows: list[Memory]) -> None:
        end = offset + len(rows)
        last = rows[-1].created_at
        tail = _run(rows[::-1], last)
        if tail < len(rows):
            self._after[end] = (last, tail)
        elif offset in self._after and self._after[offset][0] == last:
            self._after[end] = (last, self._after[offset][1] + tail)
        else:  # the whole page has one timestamp: count the newer rows to know where the run began
            newer = self.store.count(replace(self.flt, since=last + "\x00"))
            self._after[end] = (last, end - newer)
        first = rows[0].created_at
        head = _run(rows, first)
        if head < len(rows):
            self._before[offset] = (first, head)
        elif end in self._before and self._before[end][0] == first:
            self._before[offset] = (first, self._before[end][1] + head)
        else:
            through_run = self.store.count(replace(self.flt, since=first))  # rows up to the run's end
            self._before[offset] = (first, through_run - offset)


def _run(rows: list[Memory], created_at: str) -> int:
    n = 0
    for m in rows:
        if m.created_at != created_at:
            break
        n += 1
    return n

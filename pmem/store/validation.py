"""What a memory must be before it is written: its text (not empty, no NUL, within MAX_TEXT), its
tier, its tags, its place in a thread. MemoryStore checks every memory it writes with `normalize`."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..errors import UsageError
from ..records import Memory
from .filter import check_tiers

MAX_TEXT = 100_000  # characters; longer input belongs in `pmem extract`, which chunks it
MAX_THREAD = 500  # characters of a thread name


def thread_place(thread: Any, pos: Any) -> tuple[str | None, int | None]:
    """A valid (thread, thread_pos): a thread name is stripped text; no thread, no position."""
    if thread is None or (isinstance(thread, str) and not thread.strip()):
        return None, None
    if not isinstance(thread, str) or "\x00" in thread or len(thread) > MAX_THREAD:
        raise UsageError(f"a thread name is text of at most {MAX_THREAD} characters")
    if pos is not None and (not isinstance(pos, int) or isinstance(pos, bool) or pos < 0):
        raise UsageError("a thread position is a whole number, 0 or more")
    return thread.strip(), pos


def normalize(m: Memory) -> Memory:
    """The memory as stored: text stripped, tags sorted and unique, a pinned memory in core."""
    text = m.text.strip() if isinstance(m.text, str) else m.text
    if not text:
        raise UsageError("a memory needs some text")
    if "\x00" in text:
        raise UsageError("memory text contains NUL bytes (binary input?)")
    if len(text) > MAX_TEXT:
        raise UsageError(f"memory text is {len(text):,} characters; the limit is {MAX_TEXT:,} "
                         "(use `pmem extract` for long text)")
    check_tiers([m.tier])
    tags = sorted({t.strip() for t in m.tags if t and t.strip()})
    pinned = m.pinned or m.tier == "core"
    tier = "core" if pinned else m.tier
    thread, pos = thread_place(m.thread, m.thread_pos)
    return replace(m, text=text, tags=tags, pinned=pinned, tier=tier, thread=thread, thread_pos=pos)

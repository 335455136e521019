"""The synthetic lifetime of memories that `scale.py` builds its stores from and `scale_recall.py`
builds its stand-in vectors for: a memory is a pair of LoCoMo dev turns picked by a seeded
generator, deterministic in its index alone, so both scripts agree on memory i.

`PMEM_BENCH_LOCOMO` names the LoCoMo file where the checkout does not sit beside `shared/`
(a git worktree elsewhere); by default locomo.py's."""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import locomo  # noqa: E402

NOW = "2026-06-01T00:00:00Z"
EMBED = "fake-384"
TAGS = ("work", "home", "travel", "food", "health")
DATA = Path(os.environ.get("PMEM_BENCH_LOCOMO") or locomo.DATA)


def turns() -> list[str]:
    """Every LoCoMo dev turn, the pool memories are made of."""
    out = []
    for conv in locomo.load(DATA):
        out.extend(r["text"] for r in locomo.turn_records(conv))
    return out


def pair_of(i: int, pool_size: int) -> tuple[int, int]:
    """The two pool turns memory i is made of."""
    rng = random.Random(i)
    return rng.randrange(pool_size), rng.randrange(pool_size)


def memories(start: int, stop: int, pool: list[str]):
    """Memories start..stop-1 of the synthetic lifetime: dates advance through the store, 1 in 500
    is pinned (core), 1 in 10 is episodic, 1 in 20 has a tag."""
    from pmem.records import Memory

    out = []
    for i in range(start, stop):
        a, b = pair_of(i, len(pool))
        minutes = i * 3  # ~5.7 years for 1,000,000
        day, minute = divmod(minutes, 1440)
        year, doy = divmod(day, 360)
        created = f"{2020 + year}-{1 + doy // 30:02d}-{1 + doy % 30:02d}T{minute // 60:02d}:{minute % 60:02d}:00Z"
        tier = "core" if i % 500 == 0 else ("episodic" if i % 10 == 3 else "archival")
        out.append(Memory(id=f"{i:08x}", text=f"{pool[a]}\n{pool[b]}", tier=tier, pinned=tier == "core",
                          tags=[TAGS[i % len(TAGS)]] if i % 20 == 7 else [], created_at=created,
                          source="scale"))
    return out


def questions(count: int = 16) -> list[str]:
    """`count` LoCoMo dev questions spread over the five conversations."""
    qs = [q["question"] for conv in locomo.load(DATA) for q in locomo.questions(conv)]
    step = len(qs) // count
    return [qs[i * step] for i in range(count)]

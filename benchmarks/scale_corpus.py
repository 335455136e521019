"""The synthetic lifetime of memories that `scale.py` builds its stores from and `scale_recall.py`
builds its stand-in vectors for: a memory is a pair of LoCoMo dev turns picked by a seeded
generator, deterministic in its index alone, so both scripts agree on memory i.

`PMEM_BENCH_LOCOMO` names the LoCoMo file where the checkout does not sit beside `shared/`
(a git worktree elsewhere); by default locomo.py's."""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Callable
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


def interleaved(queries: list[str], cells: dict, rounds: int) -> dict[str, float]:
    """Milliseconds per query (medians over the rounds after a first, cold one) of each of `cells`
    (label -> a call on one query), the cells run one after another on each query so that a change
    of load falls on all of them alike. A cell returns None to be timed whole, or the seconds of
    the part it timed itself (its preparation left out)."""
    import statistics
    import time

    times: dict[str, list[float]] = {}
    for round_ in range(1 + rounds):
        for q in queries:
            for label, cell in cells.items():
                t = time.perf_counter()
                part = cell(q)
                spent = time.perf_counter() - t if part is None else part
                if round_:
                    times.setdefault(label, []).append(spent)
    return {label: round(statistics.median(v) * 1000, 3) for label, v in times.items()}


def with_and_without(store, label: str, on, off, alone: tuple[str, Callable[[list[int]], object]], queries: list[str],
                     rounds: int) -> dict[str, float]:
    """interleaved() of pmem.search.search in hybrid and semantic mode with Tuning `on` (called
    `label`) and `off` ("without"), and of `alone` = (its label, a call on each query's dense
    candidates' seqs: the one read a rule adds) timed by itself."""
    import time

    from pmem.search import DEFAULT_TUNING, search, semantic_ranks
    from pmem.store import Filter

    def timed(mode, tuning):
        def cell(q):
            search(store, q, Filter(), limit=10, mode=mode, tuning=tuning)
        return cell

    name, read = alone

    def by_itself(q):
        seqs = [seq for seq, _ in semantic_ranks(store, q, Filter(), DEFAULT_TUNING.candidates)]
        t = time.perf_counter()
        read(seqs)
        return time.perf_counter() - t

    cells = {f"{mode} search, {name_}": timed(mode, tuning) for mode in ("hybrid", "semantic")
             for name_, tuning in ((label, on), ("without", off))}
    cells[name] = by_itself
    return interleaved(queries, cells, rounds)

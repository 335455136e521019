"""Stores filled with enough memories for the paths a large store takes (the bit index, the
keyword side's plans, segment merges), and what those paths are checked against.

Test modules import these (`from filled import ...`; tests/ is on sys.path under pytest), as they
do fakes.py."""

from __future__ import annotations

import math
import random

import pytest

from pmem.records import TIERS, Memory
from pmem.search import keyword_ranks
from pmem.store import Filter, deserialize, serialize


def cos_dist(a: bytes, b: bytes) -> float:
    x, y = deserialize(a), deserialize(b)
    dot = sum(p * q for p, q in zip(x, y))
    return 1.0 - dot / (math.sqrt(sum(p * p for p in x)) * math.sqrt(sum(q * q for q in y)))


def fill(store, n: int, seed: int = 3, clusters: int = 0):
    rng = random.Random(seed)
    dim = store.embedder.dim
    centres = [[rng.gauss(0, 1) for _ in range(dim)] for _ in range(clusters)]
    memories = [Memory(id=f"m{i:05d}", text=f"note {i} about topic {i % 31} word{i % 7}",
                       tags=["x"] if i % 9 == 0 else [],
                       tier=("episodic" if i % 5 == 0 else "core" if i % 50 == 1 else "archival"),
                       pinned=i % 50 == 1, created_at=f"2025-01-{1 + i % 28:02d}T00:00:00Z",
                       expires_at="2025-06-01T00:00:00Z" if i % 23 == 0 else None)
                for i in range(n)]
    if clusters:  # topics, as real embeddings have: points around a few centres
        vectors = [serialize([c + rng.gauss(0, 0.6) for c in centres[i % clusters]]) for i in range(n)]
    else:
        vectors = [serialize([rng.gauss(0, 1) for _ in range(dim)]) for _ in range(n)]
    store.insert(memories, vectors=vectors)
    assert not store.vectors.has_bits()  # below BITS_FROM: exact search only, no bit index yet
    assert store.vectors.build_bits()
    return rng


def brute(store, query: bytes, flt: Filter, k: int) -> list[tuple[float, int]]:
    where, params = flt.where(store.clock())
    rows = store.conn.execute(f"SELECT m.seq, v.embedding FROM memories m JOIN memory_vec v ON v.seq = m.seq "
                              f"WHERE {where}", params).fetchall()
    return sorted((cos_dist(blob, query), seq) for seq, blob in rows)[:k]


FILTERS = [Filter(), Filter(tiers=("episodic",)), Filter(tiers=("core",)), Filter(tiers=TIERS), Filter(tags=("x",)),
           Filter(pinned=True), Filter(include_forgotten=True), Filter.everything(),
           Filter(as_of="2025-03-01T00:00:00Z"), Filter(since="2025-01-10T00:00:00Z")]


def scan_count(store, flt: Filter) -> int:
    where, params = flt.where(store.clock())
    return store.conn.execute(f"SELECT count(*) FROM memories m WHERE {where}", params).fetchone()[0]


def exact_and_planned(store, query: str, flt: Filter, n: int):
    """The keyword side as a small store ranks it (the whole query) and as a large one plans it,
    with the statements the plan ran; the two rank alike (rows tied at the last score aside)."""
    store.exact_below = 10**9
    whole = keyword_ranks(store, query, flt, n)
    store.exact_below = 0
    statements: list[str] = []
    store.conn.set_trace_callback(statements.append)
    planned = keyword_ranks(store, query, flt, n)
    store.conn.set_trace_callback(None)
    assert [r for _, r in planned] == pytest.approx([r for _, r in whole])
    if whole:  # ties at the last score may be either row
        cut = whole[-1][1]
        assert {s for s, r in planned if r < cut - 1e-9} == {s for s, r in whole if r < cut - 1e-9}
    return whole, planned, statements


def segmented(store, batches: int = 11) -> list[str]:
    """A store whose keyword index is in several segments (one per write, merged by FTS5 only in
    fours) over a few dozen pages: each memory has words of its own."""
    words = ["orchid", "balcony", "kestrel", "harbour", "lantern", "violin", "glacier", "saffron"]
    for b in range(batches):
        store.insert([Memory(id="", text=f"{words[(b + i) % 8]} and {words[(b * 3 + i) % 8]} note {b}-{i} "
                             + " ".join(f"w{b}x{i}y{j}" for j in range(20))) for i in range(40)])
    return words


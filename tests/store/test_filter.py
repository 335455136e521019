"""Filters (pmem/store/filter.py): a date window bounds both sides of a search."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from pmem import Filter, Memory
from pmem.ranking.profile import DEFAULT
from pmem.search import keyword_ranks
from pmem.store import filter as store_filter
from pmem.store import serialize

from filled import brute, exact_and_planned


@pytest.mark.parametrize("least, share", [(20_000, 20), (10, 2)], ids=["few-rows", "a-share-of-the-store"])
def test_a_date_window_is_ranked_whole_on_both_sides_where_dates_leave_storage_order(store, monkeypatch, least, share):
    """An imported history appends old dates after new ones. A --since / --until window of fewer
    than DATE_WINDOW memories, or of less than 1 / DATE_SHARE of the store, is still ranked whole:
    the keyword side inside the storage range of the window (which holds every row of it, however
    scattered), the semantic side along the date index instead of the bit pool. Both equal the
    exact search."""
    profile = replace(DEFAULT, bit_pool=16)  # a bit pool this small is approximate here
    monkeypatch.setattr(store_filter, "DATE_WINDOW", least)
    monkeypatch.setattr(store_filter, "DATE_SHARE", share)  # (10, 2): windows under 600 of 1,200
    rng = random.Random(11)
    dim = store.embedder.dim

    def when(i: int) -> str:  # seq 1-800 this year in order, 801-1200 an old history appended
        day, minute = ("2025-02-01", i) if i < 800 else ("2024-01-01", i - 800)
        return f"{day}T{minute // 60:02d}:{minute % 60:02d}:00Z"

    memories = [Memory(id=f"h{i:05d}", text=f"common filler word{i % 7} {'rare' if i % 13 == 0 else 'plain'} {i}",
                       created_at=when(i)) for i in range(1200)]
    store.insert(memories, vectors=[serialize([rng.gauss(0, 1) for _ in range(dim)]) for _ in memories])
    assert store.vectors.build_bits()
    windows = [Filter(until="2024-12-31T00:00:00Z"),  # the history alone, seq 801-1200
               Filter(since="2025-02-01T05:00:00Z"),  # this year's newest, seq 301-800
               Filter(since="2024-01-01T03:00:00Z", until="2025-02-01T02:00:00Z")]  # both ends of storage
    query = serialize([rng.gauss(0, 1) for _ in range(dim)])
    for flt in windows:
        for words in ("common filler", "filler", "rare word3"):
            exact, fast, statements = exact_and_planned(store, words, flt, 10)
            assert len(fast) == 10
            assert [sql for sql in statements if "bm25(" in sql and "rowid BETWEEN" in sql]
        store.exact_below = 10**9
        exact_sem = store.vectors.ranks(query, flt, 10, profile=profile)
        store.exact_below = 0
        statements = []
        store.conn.set_trace_callback(statements.append)
        assert store.vectors.ranks(query, flt, 10, profile=profile) == exact_sem
        store.conn.set_trace_callback(None)
        assert not [sql for sql in statements if "vec_bit(" in sql]
        assert [s for s, _ in exact_sem] == [s for _, s in brute(store, query, flt, 10)]
    empty = Filter(since="2023-01-01T00:00:00Z", until="2023-12-31T00:00:00Z")
    assert keyword_ranks(store, "common filler", empty, 10) == []
    assert store.vectors.ranks(query, empty, 10, profile=profile) == []
    # A fact stored later that holds from an earlier date is valid --as-of that date, though no
    # memory was created by then: --as-of never makes a window whole.
    early, _ = store.add("common filler sunrise", valid_from="2023-06-01T00:00:00Z")
    found = keyword_ranks(store, "common filler", Filter(as_of="2023-07-01T00:00:00Z"), 10)
    assert [s for s, _ in found] == [store.conn.execute("SELECT seq FROM memories WHERE id = ?",
                                                         (early.id,)).fetchone()[0]]


"""Upkeep (pmem/store/erase.py): VACUUM where space is free, the keyword index merged. Purge is
tested against the files themselves in tests/test_trust.py."""

from __future__ import annotations

import pytest

from pmem import Filter, Memory
from pmem.search import search

from filled import segmented


@pytest.mark.slow
def test_upkeep_gives_back_free_space_and_keeps_every_memory(store):
    store.insert([Memory(id="", text=f"memory {i} about the orchids on the balcony") for i in range(300)])
    store.insert([Memory(id="", text=("bulk words of an import " * 60) + str(i)) for i in range(600)])
    store.undo()  # the bulk import: its pages become free pages
    store.checkpoint()
    before = store.space()
    assert before["free_bytes"] >= 0.2 * before["bytes"]
    hits = [(h.memory.id, round(h.score, 6)) for h in search(store, "orchids balcony 17", limit=20)]
    done = store.upkeep()
    assert done["ran"] and done["bytes_after"] < 0.7 * done["bytes_before"]
    assert store.path.stat().st_size == done["bytes_after"]
    assert store.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    store.conn.execute("INSERT INTO memories_fts(memories_fts, rank) VALUES ('integrity-check', 1)")
    assert [(h.memory.id, round(h.score, 6)) for h in search(store, "orchids balcony 17", limit=20)] == hits
    assert store.count(Filter()) == 300
    assert store.upkeep()["ran"] is False  # nothing left to give back


def test_upkeep_merges_the_keyword_index_even_when_little_is_free(store):
    segmented(store)
    segments = store.keywords.segments()
    assert segments >= 4
    done = store.upkeep()
    assert done["ran"] is False and done["index_segments"] == (segments, 1)
    assert store.keywords.segments() == 1


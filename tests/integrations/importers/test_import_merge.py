"""A large import merges the keyword index after it stores (pmem.integrations.importers.registry)."""

from __future__ import annotations

from pmem import Filter, Memory
from pmem.errors import DatabaseError
from pmem.search import search

from filled import segmented


def test_a_large_import_merges_the_keyword_index_and_a_small_one_does_not(store, monkeypatch):
    from pmem.integrations.importers import registry

    def run(prefix: str, n: int) -> None:
        records = [Memory(id=f"{prefix}{i}", text=f"{prefix} imported {i}") for i in range(n)]
        assert registry.run_import(store, records, batch=10).imported == n

    segmented(store, batches=5)  # 200 memories
    assert store.keywords.segments() >= 2
    monkeypatch.setattr(registry, "MERGE_AFTER", 100)
    run("a", 60)  # a tenth of the store and more, but fewer than MERGE_AFTER
    assert store.keywords.segments() > 1
    monkeypatch.setattr(registry, "MERGE_AFTER", 20)
    run("b", 25)  # 25 of 285: less than a tenth
    assert store.keywords.segments() > 1
    run("c", 100)  # 100 of 385
    assert store.keywords.segments() == 1
    assert [h.memory.id for h in search(store, "c imported 17", limit=1, mode="keyword")] == ["c17"]


def test_an_import_whose_merge_fails_still_reports_what_it_stored(store, monkeypatch):
    from pmem.integrations.importers import registry

    monkeypatch.setattr(registry, "MERGE_AFTER", 10)

    def locked(*a, **k):
        raise DatabaseError("database is locked by another process; try again")

    monkeypatch.setattr(store.keywords, "merge", locked)
    records = [Memory(id=f"r{i}", text=f"a record {i}") for i in range(30)]
    done = registry.run_import(store, records, batch=10)
    assert done.imported == 30 and done.operation
    assert store.count(Filter()) == 30


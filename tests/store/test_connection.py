"""The shared connection (pmem/store/connection.py): transactions and snapshots."""

from __future__ import annotations

import pytest

from pmem import Filter, MemoryStore


def test_an_error_after_sqlite_rolled_back_itself_is_the_one_raised(store):
    """After some errors (disk full, I/O) SQLite ends the transaction itself: transaction() must
    raise that error, not its own failed ROLLBACK's "no transaction is active"."""
    with pytest.raises(ValueError, match="the original error"):
        with store.transaction():
            store.conn.execute("ROLLBACK")  # what SQLite does on SQLITE_FULL
            raise ValueError("the original error")
    assert not store.conn.in_transaction
    store.add("the store still writes")


def test_a_snapshot_reads_the_store_as_it_was_while_others_write(store, tmp_path):
    """An export reads in batches inside one snapshot: what another process writes meanwhile is
    not half in it."""
    for i in range(30):
        store.add(f"steady memory {i} of the snapshot test")
    other = MemoryStore(store.path, config=store.config)
    try:
        with store.snapshot():
            seen = []
            for m in store.iter_all(batch=5):
                seen.append(m.id)
                if len(seen) == 7:
                    other.add("written while the export ran")
                    other.forget(seen[-1])
        assert len(seen) == 30
        assert all(store.get(i).forgotten_at is None for i in seen[:6])
        assert store.get(seen[6]).forgotten_at is not None  # the write landed, after the snapshot
        assert store.count(Filter()) == 30
    finally:
        other.close()


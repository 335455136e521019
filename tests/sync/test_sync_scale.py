"""What keeps sync fast at 100,000 memories: a sync with nothing new does no work per memory, and
the bulk insert a join applies creates with (one statement per table) writes exactly what storing
them one at a time writes. Figures: docs/decisions/0046-sync-100k.md."""

from __future__ import annotations

import json

from pmem import sync
from pmem.records import Memory
from pmem.service import MemoryStore
from pmem.store import vectors as store_vectors


def statements_of_an_idle_sync(store: MemoryStore) -> list[str]:
    seen: list[str] = []
    store.conn.set_trace_callback(seen.append)
    try:
        report = sync.run(store)
    finally:
        store.conn.set_trace_callback(None)
    assert report["applied"] == 0 and report["sent"] == 0
    return seen


def test_a_sync_with_nothing_new_runs_the_same_statements_at_any_size(tmp_path, fake_config):
    counts = []
    for n in (50, 1500):
        home = tmp_path / str(n)
        a, b = (MemoryStore(home / x / "pmem.db", config=fake_config) for x in "ab")
        a.insert([Memory(id="", text=f"memory {i} of {n}", tags=[f"t{i % 7}"]) for i in range(n)])
        sync.init(a, str(home / "folder"), key_file=str(home / "key"))
        sync.join(b, str(home / "folder"), key_file=str(home / "key"))
        sync.run(a)
        sync.run(b)
        counts.append(len(statements_of_an_idle_sync(b)))
        a.close()
        b.close()
    assert counts[0] == counts[1], counts


def _fts(store: MemoryStore) -> list[tuple]:
    return store.conn.execute("SELECT f.text, f.context, f.stems FROM memories_fts f ORDER BY f.text").fetchall()


def _rows(store: MemoryStore) -> list[tuple]:
    return store.conn.execute("SELECT text, tags, thread, thread_pos, created_at FROM memories ORDER BY text"
                              ).fetchall()


def _events(store: MemoryStore) -> list[dict]:
    out = []
    for before, after in store.conn.execute("SELECT before, after FROM events"):
        assert before is None
        out.append({k: v for k, v in json.loads(after).items() if k != "id"})
    return sorted(out, key=lambda e: e["text"])


def test_a_bulk_insert_writes_what_adding_one_at_a_time_writes(tmp_path, fake_config):
    """Threads (their positions and the keyword index's neighbour context, which a trigger reads
    from rows inserted just before), tags' counts, events, vectors: `insert` (one statement per
    table) against `add` (the row, its vector and its event, one memory at a time)."""
    clock = lambda: "2025-02-01T00:00:00Z"  # noqa: E731
    batch = [Memory(id="", text=f"Turn {i} of the cabin trip, día {i}", thread="trip" if i % 3 else None,
                    tags=["trip"] if i % 2 else [], created_at=f"2025-01-01T00:00:{i:02d}Z") for i in range(12)]
    bulk = MemoryStore(tmp_path / "bulk" / "pmem.db", config=fake_config, clock=clock)
    single = MemoryStore(tmp_path / "single" / "pmem.db", config=fake_config, clock=clock)
    bulk.insert(batch)
    for m in batch:
        single.add(m.text, tags=m.tags, thread=m.thread, created_at=m.created_at)
    for s in (bulk, single):
        assert s.conn.execute("SELECT count(*) FROM memory_vec").fetchone()[0] == 12
    assert _rows(bulk) == _rows(single)
    assert _fts(bulk) == _fts(single)
    assert any(ctx for _, ctx, _ in _fts(bulk))  # the thread's neighbours are in the context
    q = "SELECT key, n FROM counts WHERE key NOT IN ('operations', 'events') ORDER BY key"
    assert bulk.conn.execute(q).fetchall() == single.conn.execute(q).fetchall()
    assert _events(bulk) == _events(single)
    vectors = "SELECT m.text, v.embedding FROM memory_vec v JOIN memories m ON m.seq = v.seq ORDER BY m.text"
    assert bulk.conn.execute(vectors).fetchall() == single.conn.execute(vectors).fetchall()
    bulk.close()
    single.close()


def test_bulk_vectors_past_bits_from_hold_the_codes_put_writes(store, monkeypatch):
    """The bit index is built once a bulk insert passes BITS_FROM, and a later bulk insert writes
    each code as `VectorIndex.put` would, in the memory's tier partition."""
    monkeypatch.setattr(store_vectors, "BITS_FROM", 30)
    store.insert([Memory(id="", text=f"first {i}") for i in range(40)])
    assert store.vectors.has_bits()
    store.insert([Memory(id="", text=f"then {i}", tier="core" if i % 2 else "archival") for i in range(25)])
    q = store.conn.execute
    assert q("SELECT count(*) FROM memory_bits").fetchone()[0] == 65
    bits = "SELECT seq, part, bits, live FROM memory_bits ORDER BY seq"
    bulk = q(bits).fetchall()
    for seq, blob, tier in q("SELECT v.seq, v.embedding, m.tier FROM memory_vec v JOIN memories m ON m.seq = v.seq"
                             ).fetchall():
        store.vectors.put(seq, blob, tier, True)
    assert q(bits).fetchall() == bulk

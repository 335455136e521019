"""MemoryStore against a real SQLite file with sqlite-vec loaded (fake embedder for speed)."""

from __future__ import annotations

import os
import stat

import pytest

from pmem import Filter, Memory, MemoryStore
from pmem.errors import AmbiguousId, ModelMismatch, NotFound, UsageError


def test_add_get_roundtrip_and_permissions(store):
    m, created = store.add("I am vegetarian", tags=["food", "food", " diet "], source="me",
                           meta={"k": [1, 2]}, created_at="2023-05-08T00:00:00Z")
    assert created
    got = store.get(m.id)
    assert got.text == "I am vegetarian"
    assert got.tags == ["diet", "food"]
    assert got.meta == {"k": [1, 2]}
    assert got.created_at == "2023-05-08T00:00:00Z"
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600
    # the vector and FTS rows exist for it
    seq = store.db.seq(m.id)
    assert store.conn.execute("SELECT count(*) FROM memory_vec WHERE seq = ?", (seq,)).fetchone()[0] == 1
    match = "SELECT rowid FROM memories_fts WHERE memories_fts MATCH 'vegetarian'"
    assert store.conn.execute(match).fetchone()[0] == seq


def test_exact_duplicate_not_stored_twice(store):
    a, _ = store.add("Deploys need approval from Dana")
    b, created = store.add("  Deploys need approval from Dana ")
    assert not created and b.id == a.id
    c, created = store.add("Deploys need approval from Dana", allow_duplicate=True)
    assert created and c.id != a.id
    assert store.count() == 2


def test_exact_duplicates_are_found_through_the_text_index(store):
    """The duplicate check reads an index of each text's length and first 32 characters (m011),
    not every memory (0.18 s a look at 1,000,000): texts that share both, or differ only after
    them, in any script, are still told apart exactly."""
    head = "Über die Brücke: 東京 meeting notes — "  # longer than 32 characters, multi-byte
    texts = [head + end for end in ("alpha", "gamma", "alphas", "ALPHA")] + [head[:20]]
    stored = {t: store.add(t)[0].id for t in texts}
    assert len(set(stored.values())) == len(texts)
    for t in texts:
        again, created = store.add(f"  {t}\n")
        assert not created and again.id == stored[t]
    statements: list[str] = []
    store.conn.set_trace_callback(statements.append)
    assert store.find_exact(head + "beta") is None
    store.conn.set_trace_callback(None)
    (sql,) = [q for q in statements if "FROM memories" in q]
    plan = " ".join(r[3] for r in store.conn.execute("EXPLAIN QUERY PLAN " + sql))
    assert "memories_text_start" in plan and "SCAN" not in plan

def test_pin_makes_core_and_unpin_archival(store):
    m, _ = store.add("I am vegetarian")
    assert store.pin(m.id).tier == "core"
    assert store.get(m.id).pinned
    un = store.unpin(m.id)
    assert (un.tier, un.pinned) == ("archival", False)
    m2, _ = store.add("Always core", tier="core")
    assert m2.pinned


def test_prefix_resolution(store):
    a = store.insert([Memory(id="abc12345", text="one"), Memory(id="abc19999", text="two"),
                      Memory(id="ffff0000", text="three")])
    assert [m.id for m in a] == ["abc12345", "abc19999", "ffff0000"]
    assert store.get("ffff").text == "three"
    with pytest.raises(AmbiguousId):
        store.get("abc1")
    with pytest.raises(NotFound):
        store.get("0000")
    with pytest.raises(NotFound):
        store.get("%")  # LIKE wildcards are not ids


def test_bad_text_rejected_and_nothing_stored(store):
    for bad in ["", "   ", "a\x00b", "x" * 100_001]:
        with pytest.raises(UsageError):
            store.add(bad)
    with pytest.raises(UsageError):
        store.add("ok", tier="bogus")
    assert store.count(Filter.everything()) == 0


def test_edit_reembeds_and_undo_restores_text_and_vector(store):
    m, _ = store.add("The cabin wifi password is hunter2")
    seq = store.db.seq(m.id)
    vec_before = store.vectors.get(seq)
    store.edit(m.id, text="The cabin wifi password is hunter3")
    assert store.vectors.get(seq) != vec_before
    op = store.undo()
    assert op.kind == "edit"
    assert store.get(m.id).text == "The cabin wifi password is hunter2"
    assert store.vectors.get(seq) == vec_before


def test_retag_is_its_own_action(store):
    m, _ = store.add("Trip to Lisbon in May", tags=["travel"])
    store.edit(m.id, add_tags=["2024"], remove_tags=["travel"])
    assert store.get(m.id).tags == ["2024"]
    assert [e.action for e, _ in store.history(m.id)] == ["add", "retag"]


def test_forget_restore_expire_and_filters(store):
    a, _ = store.add("alpha memory")
    b, _ = store.add("beta memory")
    c, _ = store.add("gamma memory")
    store.forget(a.id)
    store.expire(b.id)  # now
    active = {m.id for m in store.list_memories()}
    assert active == {c.id}
    assert {m.id for m in store.list_memories(Filter(include_forgotten=True))} == {a.id, c.id}
    assert {m.id for m in store.list_memories(Filter(include_expired=True))} == {b.id, c.id}
    store.restore(a.id)
    store.restore(b.id)
    assert {m.id for m in store.list_memories()} == {a.id, b.id, c.id}
    assert store.get(b.id).expires_at is None


def test_future_expiry_stays_active(store):
    m, _ = store.add("temporary", expires_at="2999-01-01T00:00:00Z")
    assert [x.id for x in store.list_memories()] == [m.id]


def test_supersede_and_as_of(store):
    old, _ = store.add("I live in Berlin", created_at="2020-01-01T00:00:00Z")
    new, _ = store.add("I live in Lisbon", created_at="2024-03-01T00:00:00Z")
    store.supersede(old.id, new.id)
    o = store.get(old.id)
    assert o.valid_to == "2024-03-01T00:00:00Z" and o.superseded_by == new.id
    assert {m.id for m in store.list_memories()} == {new.id}
    assert {m.id for m in store.list_memories(Filter(as_of="2022-06-01T00:00:00Z"))} == {old.id}
    assert {m.id for m in store.list_memories(Filter(as_of="2025-01-01T00:00:00Z"))} == {new.id}
    with pytest.raises(UsageError):
        store.supersede(new.id, new.id)


def test_import_is_one_operation_and_undo_removes_all(store):
    items = [Memory(id="", text=f"imported fact number {i}") for i in range(1000)]
    stored = store.insert(items, kind="import")
    assert len(stored) == 1000 and len({m.id for m in stored}) == 1000
    ops = store.operations()
    assert ops[0].kind == "import" and ops[0].events == 1000
    store.undo()
    assert store.count(Filter.everything()) == 0
    assert store.conn.execute("SELECT count(*) FROM memory_vec").fetchone()[0] == 0
    match = "SELECT count(*) FROM memories_fts WHERE memories_fts MATCH 'imported'"
    assert store.conn.execute(match).fetchone()[0] == 0


def test_insert_validates_before_writing(store):
    with pytest.raises(UsageError):
        store.insert([Memory(id="", text="fine"), Memory(id="", text="")])
    assert store.count(Filter.everything()) == 0
    assert store.operations() == []


def test_undo_sequence_and_nothing_left(store):
    m, _ = store.add("first")
    store.pin(m.id)
    store.forget(m.id)
    assert store.undo().kind == "forget"
    assert store.undo().kind == "pin"
    assert not store.get(m.id).pinned
    assert store.undo().kind == "add"
    with pytest.raises(NotFound):
        store.get(m.id)
    with pytest.raises(NotFound):
        store.undo()
    # history survives the undone add
    assert [e.action for e, op in store.history(m.id)] == ["add", "pin", "forget"]
    assert all(op.undone_at for _, op in store.history(m.id))


def test_nested_operation_is_one_undo(store):
    a, _ = store.add("one")
    b, _ = store.add("two")
    with store.operation("forget", "both"):
        store.forget(a.id)
        store.forget(b.id)
    assert store.count() == 0
    op = store.undo()
    assert op.events == 2
    assert store.count() == 2


def test_failed_operation_rolls_back(store):
    a, _ = store.add("one")
    with pytest.raises(RuntimeError):
        with store.operation("forget"):
            store.forget(a.id)
            raise RuntimeError("boom")
    assert store.get(a.id).forgotten_at is None
    assert [o.kind for o in store.operations()] == ["add"]


def test_model_mismatch_is_clear(tmp_path, fake_config):
    from pmem.embed import FakeEmbedder

    path = tmp_path / "m.db"
    with MemoryStore(path, config=fake_config, embedder=FakeEmbedder(64)) as s:
        s.add("hello")
    with MemoryStore(path, config=fake_config, embedder=FakeEmbedder(32)) as s:
        with pytest.raises(ModelMismatch, match="pmem reindex"):
            s.add("world")
        s.reindex()
        s.add("world")
        assert s.vector_model() == ("fake-32", 32)
        assert s.count() == 2


def test_reopen_keeps_data_and_schema(tmp_path, fake_config):
    path = tmp_path / "r.db"
    with MemoryStore(path, config=fake_config) as s:
        s.add("persisted", tags=["x"])
    with MemoryStore(path, config=fake_config) as s:
        assert [m.text for m in s.list_memories()] == ["persisted"]
        assert s.stats()["schema_version"] == len(__import__("pmem.store.migrations").store.migrations.MIGRATIONS)


def test_touch_counts_access(store):
    m, _ = store.add("read me")
    store.touch([m.id])
    store.touch([m.id])
    got = store.get(m.id)
    assert got.access_count == 2 and got.last_accessed_at


def test_delete_is_undoable_with_its_vector(store):
    m, _ = store.add("to be purged")
    vec = store.vectors.get(store.db.seq(m.id))
    store.delete(m.id)
    with pytest.raises(NotFound):
        store.get(m.id)
    store.undo()
    assert store.get(m.id).text == "to be purged"
    assert store.vectors.get(store.db.seq(m.id)) == vec


def test_operation_can_span_transactions_by_id(store):
    a, _ = store.add("one")
    b, _ = store.add("two")
    with store.operation("dream", "run") as op:
        store.forget(a.id)
    with store.operation("dream", "run", op_id=op):
        store.forget(b.id)
    assert [o.kind for o in store.operations()][:1] == ["dream"]
    assert store.undo().events == 2
    assert store.count() == 2


def test_insert_with_precomputed_vectors(store):
    from pmem.store import serialize

    vec = serialize([1.0] + [0.0] * 63)
    [m] = store.insert([Memory(id="", text="given vector")], vectors=[vec])
    assert store.vectors.get(store.db.seq(m.id)) == vec


def test_memory_dict_and_row_copy_every_field():
    """to_dict / to_row copy the fields directly (dataclasses.asdict's deep recursion was 70% of
    an export's time): the same values and key order, and changing the dict changes no memory."""
    from dataclasses import asdict

    m = Memory(id="a1", text="t", tags=["x"], meta={"k": {"n": [1]}}, derived_from=["b2"], thread="c",
               thread_pos=3, expires_at="2030-01-01T00:00:00Z", pinned=True)
    want = {**asdict(m), "forgotten": False}
    got = m.to_dict()
    assert got == want and list(got) == list(want)
    got["meta"]["k"]["n"].append(2)
    got["tags"].append("y")
    got["derived_from"].clear()
    assert m.meta == {"k": {"n": [1]}} and m.tags == ["x"] and m.derived_from == ["b2"]
    assert Memory.from_row(m.to_row()) == m


def test_iter_list_pages_oldest_first_through_equal_dates(store):
    """iter_list reads a filter's memories in batches along the date index: the same memories in
    the same order as one whole list (oldest first), also where many share a date."""
    for i in range(40):
        store.add(f"memory number {i} about item {i * 7}", created_at=f"2025-01-{1 + i % 3:02d}T00:00:00Z",
                  tier="episodic" if i % 4 == 0 else "archival", tags=["odd"] if i % 2 else [])
    store.forget(store.list_memories(Filter(tags=("odd",)), limit=1)[0].id)
    for flt in (Filter(), Filter.everything(), Filter(tags=("odd",)), Filter(tiers=("episodic",))):
        whole = [m.id for m in store.list_memories(flt, reverse=True, limit=None)]
        assert [m.id for m in store.iter_list(flt, batch=3)] == whole and whole


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

"""MemoryStore (pmem/service.py over pmem/store/memories.py) against a real SQLite file with sqlite-vec loaded: memory
reads and writes, undo, the kept counts, list orders, the side reader (fake embedder for speed)."""

from __future__ import annotations

import os
import random
import stat

import pytest

from pmem import Filter, Memory, db
from pmem.errors import AmbiguousId, DatabaseError, NotFound, UsageError
from pmem.records import TIERS
from pmem.search import search, semantic_ranks
from pmem.store import keywords as store_keywords
from pmem.store import memories as store_memories
from pmem.store import serialize
from pmem.store import vectors as store_vectors

from filled import fill, scan_count

NOW = "2026-01-01T00:00:00Z"


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


def test_supersede_never_forks_a_fact(store):
    """Only the live head of a chain is replaced: superseding a memory that already has a
    successor (or with a replacement that is itself replaced, merged or forgotten) would leave
    two current versions of one fact."""
    old, _ = store.add("I live in Berlin", created_at="2020-01-01T00:00:00Z")
    new, _ = store.add("I live in Lisbon", created_at="2024-03-01T00:00:00Z")
    other, _ = store.add("I live in Porto", created_at="2024-06-01T00:00:00Z")
    store.supersede(old.id, new.id)
    store.supersede(old.id, new.id)  # the same link again is no fork
    with pytest.raises(UsageError, match=f"{old.id} is not current"):
        store.supersede(old.id, other.id)
    with pytest.raises(UsageError, match=f"{old.id} is not current"):
        store.supersede(other.id, old.id)
    store.forget(other.id)
    with pytest.raises(UsageError, match=f"{other.id} is not current"):
        store.supersede(new.id, other.id)
    assert store.get(old.id).superseded_by == new.id and store.get(new.id).superseded_by is None
    assert {m.id for m in store.list_memories()} == {new.id}


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


def test_insert_with_precomputed_vectors(store):
    from pmem.store import serialize

    vec = serialize([1.0] + [0.0] * 63)
    [m] = store.insert([Memory(id="", text="given vector")], vectors=[vec])
    assert store.vectors.get(store.db.seq(m.id)) == vec


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


def test_kept_counts_follow_every_change(store):
    store.clock = lambda: NOW
    fill(store, 120)
    store.forget("m00004")
    store.set_fields("m00006", "dream-merge", merged_into="m00007")
    store.pin("m00005")  # episodic -> core
    store.edit("m00008", tags=["x", "y"])
    store.expire("m00011", at="2025-01-01T00:00:00Z")
    store.supersede("m00012", "m00013", at="2025-02-01T00:00:00Z")
    store.delete("m00014")
    store.undo()  # the delete comes back
    store.purge(["m00015"])
    added, _ = store.add("a fresh memory", tags=["y"])
    for flt in [Filter(), Filter(tiers=TIERS), Filter(tiers=("core",)), Filter(pinned=True), Filter.everything(),
                Filter(include_forgotten=True), Filter(include_expired=True), Filter(include_superseded=True),
                Filter(tiers=("episodic",), include_merged=True)]:
        assert store.count(flt) == scan_count(store, flt), flt
    stats = store.stats()
    q = store.conn.execute
    assert stats["memories"] == q("SELECT count(*) FROM memories").fetchone()[0] == 120
    assert stats["forgotten"] == 1 and stats["merged"] == 1
    assert stats["pinned"] == q("SELECT count(*) FROM memories WHERE pinned AND forgotten_at IS NULL").fetchone()[0]
    assert stats["by_tier"] == {t: q("SELECT count(*) FROM memories WHERE tier = ? AND forgotten_at IS NULL "
                                     "AND merged_into IS NULL", (t,)).fetchone()[0] for t in TIERS}
    assert stats["events"] == q("SELECT count(*) FROM events").fetchone()[0]
    assert stats["operations"] == q("SELECT count(*) FROM operations").fetchone()[0]
    assert stats["tags"] == dict(q("SELECT j.value, count(*) FROM memories m, json_each(m.tags) j "
                                   "WHERE m.forgotten_at IS NULL GROUP BY j.value").fetchall())
    assert store.counter("vectors") == q("SELECT count(*) FROM memory_vec").fetchone()[0] == 120
    assert q("SELECT count(*) FROM memory_bits").fetchone()[0] == 120
    assert added.id


def test_listing_the_core_tier_reads_its_index_not_the_whole_store(store, monkeypatch):
    """`pmem recall` lists every core memory on each call: that list is answered from the core
    tier's partial index (m009), and lists of other tiers still walk the date index."""
    fill(store, 300)
    plans = {}
    for name, flt in (("core", Filter(pinned=True, tiers=("core",))), ("archival", Filter(tiers=("archival",)))):
        statements: list[str] = []
        store.conn.set_trace_callback(statements.append)
        listed = store.list_memories(flt, sort="created", reverse=True, limit=None)
        store.conn.set_trace_callback(None)
        sql = next(s for s in statements if "FROM memories" in s)
        plans[name] = " ".join(r[3] for r in store.conn.execute("EXPLAIN QUERY PLAN " + sql))
        assert listed and all(m.tier == name for m in listed)
        assert len(listed) == store.count(flt)
    assert "memories_core" in plans["core"]
    twice = Filter(pinned=True, tiers=("core", "core"))  # `--tier core --tier core`
    once = Filter(pinned=True, tiers=("core",))
    assert [m.id for m in store.list_memories(twice, limit=None)] == \
        [m.id for m in store.list_memories(once, limit=None)]
    rng = random.Random(2)
    query = serialize([rng.gauss(0, 1) for _ in range(store.embedder.dim)])
    store.exact_below = 0
    monkeypatch.setattr(store_vectors, "EXACT_SCAN_MAX", 0)
    ranked = semantic_ranks(store, "", Filter(tiers=("core", "core", "archival")), 20, vector=query)
    assert len({s for s, _ in ranked}) == len(ranked) == 20
    assert "memories_core" not in plans["archival"] and "memories_created_seq" in plans["archival"]


def test_every_list_sort_walks_an_index_and_pages_through_one_order(store):
    """`pmem list --sort X` read every memory and sorted them for each page (2.4 s for `updated` at
    1,000,000): each sort now walks an index (m010, and memories_expires for `expires`), and paging
    with --offset goes through the same order as one whole list. Never-accessed memories sort as the
    oldest access; memories that never expire after every date (SQLite put them first)."""
    fill(store, 120)
    for i, day in ((3, "2025-07-09"), (40, "2025-07-02"), (41, "2025-07-02"), (77, "2030-01-01")):
        store.expire(f"m{i:05d}", at=f"{day}T00:00:00Z")  # two on one day: the seq breaks the tie
    for i in range(0, 120, 7):
        store.clock = lambda i=i: f"2026-02-{1 + i % 20:02d}T00:00:00Z"
        store.touch([f"m{i:05d}"])
        if i % 2:
            store.edit(f"m{i:05d}", tags=["edited"])
    seq = dict(store.conn.execute("SELECT id, seq FROM memories"))
    everything = store.list_memories(Filter.everything(), limit=None)

    def after_every_date(value):
        return (value is None, value or "")

    expected = {
        "created": sorted(everything, key=lambda m: (m.created_at, seq[m.id]), reverse=True),
        "updated": sorted(everything, key=lambda m: (m.updated_at, seq[m.id]), reverse=True),
        "accessed": sorted(everything, key=lambda m: (m.last_accessed_at is not None, m.last_accessed_at or "",
                                                      seq[m.id]), reverse=True),
        "id": sorted(everything, key=lambda m: m.id),
        "expires": sorted(everything, key=lambda m: (*after_every_date(m.expires_at), seq[m.id])),
    }
    dated = [m.id for m in expected["expires"] if m.expires_at is not None]
    assert dated[-4:] == ["m00040", "m00041", "m00003", "m00077"] and len(dated) == 10  # and six from fill
    for sort, order in expected.items():
        for reverse in (False, True):
            want = [m.id for m in (order[::-1] if reverse else order)]
            statements: list[str] = []
            store.conn.set_trace_callback(statements.append)
            whole = store.list_memories(Filter.everything(), sort=sort, reverse=reverse, limit=None)
            pages = [m for start in range(0, 130, 13)
                     for m in store.list_memories(Filter.everything(), sort=sort, reverse=reverse, limit=13,
                                                  offset=start)]
            store.conn.set_trace_callback(None)
            assert [m.id for m in whole] == want, (sort, reverse)
            assert [m.id for m in pages] == want, (sort, reverse)
            for sql in statements:
                if "ORDER BY" in sql:
                    plan = " ".join(r[3] for r in store.conn.execute("EXPLAIN QUERY PLAN " + sql))
                    assert "TEMP B-TREE" not in plan, (sort, reverse, plan)
    live = [m.id for m in store.list_memories(Filter(), sort="expires", limit=None)]  # the expired ones left out
    assert live[:2] == ["m00077"] + [m.id for m in expected["expires"] if m.expires_at is None][:1]


def test_hybrid_search_reads_its_keyword_side_on_a_second_connection(store, monkeypatch):
    """Past SIDE_READS_FROM memories the keyword side runs on another thread and connection:
    the same hits as one connection gives; never inside a transaction, where the second
    connection could not see this one's uncommitted rows."""
    fill(store, 300)
    queries = ("topic 5 word3", "note 17", "about word6")
    monkeypatch.setattr(store_memories, "SIDE_READS_FROM", 10**9)
    alone = [[(h.memory.id, round(h.score, 6)) for h in search(store, q, limit=10)] for q in queries]
    with store.side_reader() as side:
        assert side is None
    monkeypatch.setattr(store_memories, "SIDE_READS_FROM", 100)
    threads = []
    real = store_keywords.KeywordIndex.ranks

    def spy(self, *args, **kwargs):
        import threading

        threads.append((self is store.keywords, threading.current_thread().name))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(store_keywords.KeywordIndex, "ranks", spy)
    both = [[(h.memory.id, round(h.score, 6)) for h in search(store, q, limit=10)] for q in queries]
    assert both == alone
    assert threads == [(False, "pmem-keyword-side")] * 3
    threads.clear()
    with store.transaction():
        store.insert([Memory(id="fresh1", text="zebracorn appears only in this transaction")])
        hits = search(store, "zebracorn", limit=3)
        assert [h.memory.id for h in hits][:1] == ["fresh1"]
    assert threads == [(True, "MainThread")]

    with store.side_reader() as side:  # the one the searches used, opened once
        assert side is not None and side.keywords is not store.keywords
    store.close()  # closes it too
    with pytest.raises(db.errors(), match="closed"):
        side.conn.execute("SELECT 1")


def test_side_reader_is_none_where_it_cannot_serve(store, fake_config, monkeypatch):
    from pmem.service import MemoryStore

    monkeypatch.setattr(store_memories, "SIDE_READS_FROM", 1)
    store.add("one memory")
    with store.side_reader() as side:
        assert side is not None
        with store.side_reader() as again:  # held (another thread's search): stay on one connection
            assert again is None
    memory = MemoryStore(":memory:", config=fake_config)
    try:
        memory.add("one memory")
        with memory.side_reader() as side:
            assert side is None
    finally:
        memory.close()


def test_an_error_on_the_keyword_side_is_raised_by_search(store, monkeypatch):

    fill(store, 120)
    monkeypatch.setattr(store_memories, "SIDE_READS_FROM", 100)
    real = store_keywords.KeywordIndex.ranks

    def failing(self, *args, **kwargs):
        if self is not store.keywords:
            raise DatabaseError("database is locked by another process; try again")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(store_keywords.KeywordIndex, "ranks", failing)
    with pytest.raises(DatabaseError, match="locked"):
        search(store, "note 17", limit=5)
    assert [h.memory.id for h in search(store, "note 17", limit=5, mode="keyword")][:1] == ["m00017"]


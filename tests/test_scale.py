"""The paths that keep pmem fast on large stores (issue 13): the bit-vector KNN with float32
rescoring, the kept counts, FTS5's common-word planning, and the migration that brings them."""

from __future__ import annotations

import json
import math
import random

import pytest

from pmem import store as store_module
from pmem.records import TIERS, Memory
from pmem.search import keyword_ranks, search, semantic_ranks
from pmem.store import Filter, serialize

NOW = "2026-01-01T00:00:00Z"


def _cos_dist(a: bytes, b: bytes) -> float:
    x, y = store_module.deserialize(a), store_module.deserialize(b)
    dot = sum(p * q for p, q in zip(x, y))
    return 1.0 - dot / (math.sqrt(sum(p * p for p in x)) * math.sqrt(sum(q * q for q in y)))


def _fill(store, n: int, seed: int = 3, clusters: int = 0):
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
    assert not store._has_bits()  # below BITS_FROM: exact search only, no bit index yet
    assert store.build_bits()
    return rng


def _brute(store, query: bytes, flt: Filter, k: int) -> list[tuple[float, int]]:
    where, params = flt.where(store.clock())
    rows = store.conn.execute(f"SELECT m.seq, v.embedding FROM memories m JOIN memory_vec v ON v.seq = m.seq "
                              f"WHERE {where}", params).fetchall()
    return sorted((_cos_dist(blob, query), seq) for seq, blob in rows)[:k]


FILTERS = [Filter(), Filter(tiers=("episodic",)), Filter(tiers=("core",)), Filter(tiers=TIERS), Filter(tags=("x",)),
           Filter(pinned=True), Filter(include_forgotten=True), Filter.everything(),
           Filter(as_of="2025-03-01T00:00:00Z"), Filter(since="2025-01-10T00:00:00Z")]


@pytest.mark.parametrize("flt", FILTERS, ids=lambda f: repr(f)[:60])
def test_bit_path_equals_exact_when_the_pool_covers_the_store(store, monkeypatch, flt):
    rng = _fill(store, 400)
    store.forget("m00002")
    store.forget("m00003")
    store.pin("m00010")  # an episodic memory moves to core: its bits change partition
    assert store.get("m00010").tier == "core"
    query = serialize([rng.gauss(0, 1) for _ in range(store.embedder.dim)])
    exact = semantic_ranks(store, "", flt, 25, vector=query)
    monkeypatch.setattr(store_module, "EXACT_SCAN_MAX", 0)
    monkeypatch.setattr(store_module, "BIT_POOL", 10_000)
    store.exact_below = 0
    fast = semantic_ranks(store, "", flt, 25, vector=query)
    assert [s for s, _ in fast] == [s for s, _ in exact]
    assert [d for _, d in fast] == pytest.approx([d for _, d in exact], abs=1e-6)
    want = _brute(store, query, flt, 25)
    assert [d for _, d in fast] == pytest.approx([d for d, _ in want], abs=1e-5)
    seqs = {s for s, _ in fast}
    forgotten = {store._seq("m00002"), store._seq("m00003")}
    assert not (seqs & forgotten) or flt.include_forgotten


def test_bit_path_with_a_small_pool_is_approximate_but_close(store, monkeypatch):
    """The default pool (256 of 2,000 64-d vectors around 20 topics): the rescored top 10 still
    mostly agrees with the exact one, and every result passes the filter."""
    rng = _fill(store, 2000, seed=11, clusters=20)
    monkeypatch.setattr(store_module, "EXACT_SCAN_MAX", 0)
    agree = 0
    for _ in range(10):
        base = store.conn.execute("SELECT embedding FROM memory_vec ORDER BY random() LIMIT 1").fetchone()[0]
        noisy = [v + rng.gauss(0, 0.05) for v in store_module.deserialize(base)]
        query = serialize(noisy)
        store.exact_below = 10**9
        exact = semantic_ranks(store, "", Filter(), 10, vector=query)
        store.exact_below = 0
        fast = semantic_ranks(store, "", Filter(), 10, vector=query)
        assert len(fast) == 10
        agree += len({s for s, _ in fast} & {s for s, _ in exact})
        by_seq = store.memories_by_seq(s for s, _ in fast)
        assert all(m.tier in ("core", "archival") and m.forgotten_at is None for m in by_seq.values())
        assert [d for _, d in fast] == sorted(d for _, d in fast)
    assert agree >= 80  # of 100


def test_whole_search_same_results_fast_and_exact(store, monkeypatch):
    _fill(store, 300)
    monkeypatch.setattr(store_module, "EXACT_SCAN_MAX", 0)
    monkeypatch.setattr(store_module, "BIT_POOL", 10_000)
    for q in ("topic 5 word3", "note 17", "about word6"):
        store.exact_below = 10**9
        exact = [(h.memory.id, round(h.score, 6)) for h in search(store, q, limit=10)]
        store.exact_below = 0
        fast = [(h.memory.id, round(h.score, 6)) for h in search(store, q, limit=10)]
        assert fast == exact


def _scan_count(store, flt: Filter) -> int:
    where, params = flt.where(store.clock())
    return store.conn.execute(f"SELECT count(*) FROM memories m WHERE {where}", params).fetchone()[0]


def test_kept_counts_follow_every_change(store):
    store.clock = lambda: NOW
    _fill(store, 120)
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
        assert store.count(flt) == _scan_count(store, flt), flt
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


def test_common_words_are_left_out_of_bm25_on_large_stores(store, monkeypatch):
    words = [f"rare{i}" for i in range(40)]
    memories = [Memory(id=f"k{i:05d}", text=f"common filler {words[i % 40]} text {i}",
                       created_at=f"2025-01-01T00:{i // 60:02d}:{i % 60:02d}Z") for i in range(1500)]
    store.insert(memories, vectors=[serialize([1.0] + [0.0] * (store.embedder.dim - 1))] * len(memories))
    assert store.count() == 1500
    exact = keyword_ranks(store, "common rare7", Filter(), 10)
    store.exact_below = 0
    planned = keyword_ranks(store, "common rare7", Filter(), 10)
    by_seq = store.memories_by_seq(s for s, _ in planned)
    assert len(planned) == 10 and all("rare7" in m.text for m in by_seq.values())
    assert {s for s, _ in planned} <= {s for s, _ in keyword_ranks(store, "rare7", Filter(), 100)}
    assert len(exact) == 10
    # Only common words: the newest rows that hold them, still ranked by BM25 and filtered.
    only = keyword_ranks(store, "common filler", Filter(), 10)
    assert len(only) == 10
    # Fewer rare matches than asked: every row with the rare word first, then the newest rows
    # with the common words, never one BM25 over every row holding a common word.
    statements: list[str] = []
    store.conn.set_trace_callback(statements.append)
    more = keyword_ranks(store, "common rare3 nowhere", Filter(), 100)
    store.conn.set_trace_callback(None)
    assert len(more) == 100
    texts = [store.memories_by_seq([s])[s].text for s, _ in more]
    holding = sum(" rare3 " in t for t in texts)
    assert holding == sum(i % 40 == 3 for i in range(1500)) and all(" rare3 " in t for t in texts[:holding])
    assert [r for _, r in more] == sorted(r for _, r in more)
    ranked = [sql for sql in statements if "bm25(" in sql]
    assert ranked and all("'(\"rare3\" OR \"nowhere\") AND (" in sql or "ORDER BY rowid DESC" in sql for sql in ranked)
    # A date filter that keeps none of the store's newest rows: a window of fewer than
    # DATE_WINDOW memories is ranked whole, at once, inside its storage range (exact).
    monkeypatch.setattr(store_module, "COMMON_RECENT", 200)
    old = Filter(until="2025-01-01T00:04:59Z")  # the first 300: none of the newest 200, and no count says so
    statements.clear()
    store.conn.set_trace_callback(statements.append)
    found = keyword_ranks(store, "common filler", old, 100)
    store.conn.set_trace_callback(None)
    store.exact_below = 10**9
    whole = keyword_ranks(store, "common filler", old, 100)
    assert [r for _, r in found] == pytest.approx([r for _, r in whole]) and len(found) == 100
    assert all(m.created_at <= old.until for m in store.memories_by_seq(s for s, _ in found).values())
    ranked = [sql for sql in statements if "bm25(" in sql]
    assert len(ranked) == 1 and "rowid BETWEEN 1 AND 300" in ranked[0]
    # A larger window: its newest rows stand for the store's newest, common words are ranked
    # among the rows holding them there, and no BM25 of every row holding them follows.
    store.exact_below = 0
    monkeypatch.setattr(store_module, "DATE_WINDOW", 150)
    statements.clear()
    store.conn.set_trace_callback(statements.append)
    newest = keyword_ranks(store, "common filler", old, 100)
    one = keyword_ranks(store, "filler", old, 100)  # one common word: the same, not the store's best first
    store.conn.set_trace_callback(None)
    ranked = [sql for sql in statements if "bm25(" in sql]
    assert len(ranked) == 2 and all("rowid BETWEEN 151 AND 300" in sql and "rowid DESC" in sql for sql in ranked)
    assert len(newest) == len(one) == 100 and {s for s, _ in newest} <= set(range(151, 301))
    assert {s for s, _ in one} <= set(range(151, 301))
    assert keyword_ranks(store, "common filler", Filter(until="2024-12-31T00:00:00Z"), 100) == []
    # --as-of alone: the newest rows created by then stand for the newest, with no whole query
    # after them (it ranked every row holding a common word: 0.1-0.3 s at 1,000,000).
    statements.clear()
    store.conn.set_trace_callback(statements.append)
    then = keyword_ranks(store, "common filler", Filter(as_of=old.until), 100)
    store.conn.set_trace_callback(None)
    ranked = [sql for sql in statements if "bm25(" in sql]
    assert len(ranked) == 1 and "rowid BETWEEN 151 AND 300" in ranked[0]
    assert len(then) == 100 and {s for s, _ in then} <= set(range(151, 301))
    monkeypatch.setattr(store_module, "DATE_WINDOW", 20_000)
    some = Filter(ids=tuple(f"k{i:05d}" for i in range(0, 1500, 7)))
    assert len(keyword_ranks(store, "common rare3 nowhere", some, 100)) == 100


def _exact_and_planned(store, query: str, flt: Filter, n: int):
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


@pytest.mark.parametrize("flt", FILTERS, ids=lambda f: repr(f)[:60])
def test_large_store_keyword_side_filters_only_its_best_rows(store, flt):
    """On a large store BM25 ranks the matching rows before any is looked up and filtered, and only
    the best KEYWORD_FETCH * n are; the result is the whole query's, also where the filter keeps
    fewer of them than asked (then the whole query answers)."""
    _fill(store, 600)
    for query in ("word3", "word3 word5"):
        whole, fast, statements = _exact_and_planned(store, query, flt, 10)
        by_seq = store.memories_by_seq(s for s, _ in fast)
        assert len(by_seq) == len(fast)
        ranked = [sql for sql in statements if "bm25(" in sql]
        if flt.since:  # a date window of fewer than DATE_WINDOW rows: ranked whole in its range
            assert len(ranked) == 1 and "rowid BETWEEN" in ranked[0]
        elif store._estimate(flt) * store_module.KEYWORD_FETCH < store.count(Filter.everything()):
            # A filter known to keep few (a tier, a tag): the whole query at once, ranked once.
            assert len(ranked) == 1 and "ORDER BY rank LIMIT 40)" not in ranked[0]
        else:
            assert "ORDER BY rank LIMIT 40)" in ranked[0]
        if flt == Filter():  # most rows pass: the 40 best by BM25 hold the 10
            assert len(ranked) == 1


def test_a_filter_that_keeps_none_of_few_matches_ranks_once(store):
    """Fewer matching rows than the fetch ranks: when the filter keeps fewer than asked there is
    nothing more to find, and the whole query is not run again."""
    memories = [Memory(id=f"z{i:04d}", text=f"entry {i:03d}" + (" zebra" if i % 40 == 0 else ""))
                for i in range(600)]
    store.insert(memories, vectors=[serialize([1.0] + [0.0] * (store.embedder.dim - 1))] * len(memories))
    store.exact_below = 0
    statements: list[str] = []
    store.conn.set_trace_callback(statements.append)
    none = keyword_ranks(store, "zebra", Filter(tiers=("core",)), 10)
    some = keyword_ranks(store, "zebra", Filter(ids=("z0040", "z0080")), 10)
    store.conn.set_trace_callback(None)
    assert none == [] and len(some) == 2
    assert sum("bm25(" in sql for sql in statements) == 2


def test_common_words_still_rank_the_rows_that_hold_a_rare_word(store, monkeypatch):
    """A common word (a name in a third of the store) chooses no rows, but among the rows holding
    the rare word (all of one length) those that also hold it come first, as BM25 of the whole
    query ranks them; by the rare word alone they would tie."""
    monkeypatch.setattr(store_module, "COMMON_MIN", 100)
    memories = [Memory(id=f"n{i:04d}", text=f"entry {i:03d} " + ("caroline" if i % 3 == 0 else "someone")
                       + (" zebra" if i % 40 == 0 else "")) for i in range(600)]
    store.insert(memories, vectors=[serialize([1.0] + [0.0] * (store.embedder.dim - 1))] * len(memories))
    store.exact_below = 10**9
    whole = keyword_ranks(store, "caroline zebra", Filter(), 5)
    store.exact_below = 0
    statements: list[str] = []
    store.conn.set_trace_callback(statements.append)
    planned = keyword_ranks(store, "caroline zebra", Filter(), 5)
    store.conn.set_trace_callback(None)
    both = {store._seq(f"n{i:04d}") for i in range(0, 600, 120)}  # zebra and caroline
    assert {s for s, _ in planned} == both == {s for s, _ in whole}
    ranked = [sql for sql in statements if "bm25(" in sql]
    assert ranked and all("'(\"zebra\") AND (" in sql for sql in ranked)  # caroline chose no rows


@pytest.mark.parametrize("least, share", [(20_000, 20), (10, 2)], ids=["few-rows", "a-share-of-the-store"])
def test_a_date_window_is_ranked_whole_on_both_sides_where_dates_leave_storage_order(store, monkeypatch, least, share):
    """An imported history appends old dates after new ones. A --since / --until window of fewer
    than DATE_WINDOW memories, or of less than 1 / DATE_SHARE of the store, is still ranked whole:
    the keyword side inside the storage range of the window (which holds every row of it, however
    scattered), the semantic side along the date index instead of the bit pool. Both equal the
    exact search."""
    monkeypatch.setattr(store_module, "BIT_POOL", 16)  # a bit pool this small is approximate here
    monkeypatch.setattr(store_module, "DATE_WINDOW", least)
    monkeypatch.setattr(store_module, "DATE_SHARE", share)  # (10, 2): windows under 600 of 1,200
    rng = random.Random(11)
    dim = store.embedder.dim

    def when(i: int) -> str:  # seq 1-800 this year in order, 801-1200 an old history appended
        day, minute = ("2025-02-01", i) if i < 800 else ("2024-01-01", i - 800)
        return f"{day}T{minute // 60:02d}:{minute % 60:02d}:00Z"

    memories = [Memory(id=f"h{i:05d}", text=f"common filler word{i % 7} {'rare' if i % 13 == 0 else 'plain'} {i}",
                       created_at=when(i)) for i in range(1200)]
    store.insert(memories, vectors=[serialize([rng.gauss(0, 1) for _ in range(dim)]) for _ in memories])
    assert store.build_bits()
    windows = [Filter(until="2024-12-31T00:00:00Z"),  # the history alone, seq 801-1200
               Filter(since="2025-02-01T05:00:00Z"),  # this year's newest, seq 301-800
               Filter(since="2024-01-01T03:00:00Z", until="2025-02-01T02:00:00Z")]  # both ends of storage
    query = serialize([rng.gauss(0, 1) for _ in range(dim)])
    for flt in windows:
        for words in ("common filler", "filler", "rare word3"):
            exact, fast, statements = _exact_and_planned(store, words, flt, 10)
            assert len(fast) == 10
            assert [sql for sql in statements if "bm25(" in sql and "rowid BETWEEN" in sql]
        store.exact_below = 10**9
        exact_sem = store.semantic_ranks(query, flt, 10)
        store.exact_below = 0
        statements = []
        store.conn.set_trace_callback(statements.append)
        assert store.semantic_ranks(query, flt, 10) == exact_sem
        store.conn.set_trace_callback(None)
        assert not [sql for sql in statements if "vec_bit(" in sql]
        assert [s for s, _ in exact_sem] == [s for _, s in _brute(store, query, flt, 10)]
    empty = Filter(since="2023-01-01T00:00:00Z", until="2023-12-31T00:00:00Z")
    assert keyword_ranks(store, "common filler", empty, 10) == [] and store.semantic_ranks(query, empty, 10) == []
    # A fact stored later that holds from an earlier date is valid --as-of that date, though no
    # memory was created by then: --as-of never makes a window whole.
    early, _ = store.add("common filler sunrise", valid_from="2023-06-01T00:00:00Z")
    found = keyword_ranks(store, "common filler", Filter(as_of="2023-07-01T00:00:00Z"), 10)
    assert [s for s, _ in found] == [store.conn.execute("SELECT seq FROM memories WHERE id = ?",
                                                         (early.id,)).fetchone()[0]]


def _old_store(path, fake_config, n: int):
    """A database as pmem wrote it before migration m005_binary_vectors: float32 vectors in vec0."""
    from conftest import schema_before

    from pmem.embed import FakeEmbedder
    from pmem.records import MEMORY_COLUMNS

    conn = schema_before(path, "m005_binary_vectors")
    e = FakeEmbedder(64)
    conn.execute("CREATE VIRTUAL TABLE memory_vec USING vec0(seq INTEGER PRIMARY KEY, "
                 "embedding float[64] distance_metric=cosine, live integer)")
    conn.execute("INSERT INTO settings VALUES ('embed_model', 'fake-64'), ('embed_dim', '64')")
    conn.execute("INSERT INTO operations (id, kind, summary, at) VALUES ('op1', 'import', '', ?)", (NOW,))
    for i in range(n):
        m = Memory(id=f"o{i:05d}", text=f"old memory {i} topic {i % 13}", tags=["t"] if i % 4 == 0 else [],
                   tier="episodic" if i % 3 == 0 else "archival", created_at=NOW, updated_at=NOW,
                   forgotten_at=NOW if i == 5 else None)
        conn.execute(f"INSERT INTO memories ({', '.join(MEMORY_COLUMNS)}) VALUES "
                     f"({', '.join('?' * len(MEMORY_COLUMNS))})", m.to_row())
        seq = conn.execute("SELECT seq FROM memories WHERE id = ?", (m.id,)).fetchone()[0]
        conn.execute("INSERT INTO memory_vec (seq, embedding, live) VALUES (?, ?, ?)",
                     (seq, serialize(e.embed([m.text])[0]), int(i != 5)))
        conn.execute("INSERT INTO events (op_id, memory_id, action, after, at) VALUES ('op1', ?, 'import', ?, ?)",
                     (m.id, json.dumps({"text": m.text}), NOW))
    conn.close()


def test_a_store_of_the_previous_schema_is_migrated(fake_config, tmp_path, monkeypatch):
    from pmem.store import MemoryStore

    path = tmp_path / "old.db"
    _old_store(path, fake_config, 150)
    store = MemoryStore(path, config=fake_config, clock=lambda: NOW)
    try:
        q = store.conn.execute
        assert "vec0" not in q("SELECT sql FROM sqlite_master WHERE name = 'memory_vec'").fetchone()[0].lower()
        assert q("SELECT count(*) FROM memory_vec").fetchone()[0] == 150
        assert not store._has_bits()  # 150 vectors: below BITS_FROM
        assert store.build_bits()
        assert q("SELECT count(*) FROM memory_bits").fetchone()[0] == 150
        assert store.counter("vectors") == 150 and store.counter("events") == 150
        assert store.count() == _scan_count(store, Filter()) == 99
        assert store.stats()["tags"] == {"t": 38}
        query = store.query_vector("old memory 7 topic 7")
        exact = semantic_ranks(store, "", Filter(), 10, vector=query)
        assert exact[0][0] == store._seq("o00007")
        monkeypatch.setattr(store_module, "EXACT_SCAN_MAX", 0)
        monkeypatch.setattr(store_module, "BIT_POOL", 10_000)
        store.exact_below = 0
        assert semantic_ranks(store, "", Filter(), 10, vector=query) == exact
        assert semantic_ranks(store, "", Filter.everything(), 150, vector=query)[-1][0] > 0
        _, created = store.add("a new memory after the migration")
        assert created and store.counter("vectors") == 151
    finally:
        store.close()


def test_the_bit_index_is_built_when_the_store_grows_past_bits_from(store, monkeypatch):
    from pmem import migrations

    monkeypatch.setattr(migrations, "BITS_FROM", 50)
    store.insert([Memory(id="", text=f"memory {i}") for i in range(40)])
    assert not store._has_bits()
    store.insert([Memory(id="", text=f"more {i}") for i in range(30)])
    assert store._has_bits() and store.setting("bit_lo") and store.setting("bit_hi")
    q = store.conn.execute
    assert q("SELECT count(*) FROM memory_bits").fetchone()[0] == 70
    store.reindex()
    assert q("SELECT count(*) FROM memory_bits").fetchone()[0] == 70


def test_dream_pairs_by_lsh_find_the_close_pairs_that_all_pairs_find():
    np = pytest.importorskip("numpy")
    from pmem import dream

    rng = np.random.default_rng(5)
    base = rng.standard_normal((600, 64)).astype(np.float32)
    near = base[:150] + 0.15 * rng.standard_normal((150, 64)).astype(np.float32)
    vecs = np.vstack([base, near])
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    exact = dream._pairs(vecs, 0.9)
    lsh = dream._pairs_lsh(vecs, 0.9)
    assert len(exact) >= 140
    assert {(i, j) for i, j, _ in lsh} <= {(i, j) for i, j, _ in exact}  # never a pair below the threshold
    assert len(lsh) >= 0.99 * len(exact)


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


def test_dream_pairs_by_lsh_on_vectors_that_all_lean_one_way(monkeypatch):
    """e5-like vectors (unrelated pairs near cosine 0.86): hashed raw, every pair shares buckets;
    centred, with the bound that keeps the guarantee, LSH finds what all pairs find and compares
    far fewer pairs."""
    np = pytest.importorskip("numpy")
    from pmem import dream

    rng = np.random.default_rng(7)
    common = rng.standard_normal(64).astype(np.float32)
    common /= np.linalg.norm(common)
    spread = rng.standard_normal((3000, 64)).astype(np.float32)
    spread /= np.linalg.norm(spread, axis=1, keepdims=True)
    base = 2.5 * common + spread
    near = base[:300] + 0.04 * rng.standard_normal((300, 64)).astype(np.float32)
    vecs = np.vstack([base, near])
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    assert 0.8 < float(np.median(np.sum(vecs[:1000] * vecs[1000:2000], axis=1))) < 0.9
    monkeypatch.setattr(dream.pairs, "LSH_LOW", 100)
    for threshold in (0.97, 0.955):
        exact = {(i, j) for i, j, _ in dream._pairs_exact(vecs, threshold)}
        assert len(exact) >= 250
        compared = {}
        for space in ("centred", "raw"):
            found = {(i, j) for i, j, _ in dream._pairs_lsh(vecs, threshold, space=space)}
            assert found <= exact and len(found) >= 0.99 * len(exact)
            assert dream.LSH_LAST["space"] == space
            compared[space] = dream.LSH_LAST["compared"]
        assert compared["centred"] < compared["raw"] / 2  # raw buckets hold unrelated pairs too


def test_doctor_mentions_free_space_a_dream_would_give_back(store, monkeypatch):
    from pmem import doctor
    from pmem.config import load

    store.insert([Memory(id="", text=f"memory {i} about the orchids") for i in range(50)])
    store.insert([Memory(id="", text=("bulk words of an import " * 60) + str(i)) for i in range(600)])
    store.undo()
    store.checkpoint()
    monkeypatch.setattr(doctor, "UPKEEP_BYTES", 1)
    (check,) = [c for c in doctor.run_checks(load(), db_override=store.path) if c.name == "free space"]
    assert check.ok and check.level == "info" and "pmem dream --apply" in check.fix
    store.upkeep()
    assert [c for c in doctor.run_checks(load(), db_override=store.path) if c.name == "free space"] == []


def test_doctor_says_what_it_does_while_it_reads_the_whole_database(store, monkeypatch):
    """The integrity check reads every page (15 s at 1,000,000 memories): doctor holds its `busy`
    context (the CLI's progress line) around exactly that, naming the file's size."""
    from contextlib import contextmanager

    from pmem import db, doctor
    from pmem.config import load

    store.add("a memory to check")
    seen: list[str] = []
    connect = db.connect

    def traced(*args, **kw):
        conn = connect(*args, **kw)
        conn.set_trace_callback(lambda sql: seen.append(sql) if "quick_check" in sql else None)
        return conn

    @contextmanager
    def busy(label):
        seen.append(label)
        yield
        seen.append("done")

    monkeypatch.setattr(db, "connect", traced)
    checks = {c.name: c for c in doctor.run_checks(load(), db_override=store.path, busy=busy)}
    assert checks["database"].ok
    mb = f"{store.path.stat().st_size / 1e6:,.0f} MB"
    assert seen == [f"checking the database ({mb})", "PRAGMA quick_check", "done"]


def _levels(blob: bytes, lo: bytes, hi: bytes) -> list[int]:
    """A vector's level per dimension: 0 below bit_lo, 1 between, 2 above bit_hi."""
    v, a, b = (store_module.deserialize(x) for x in (blob, lo, hi))
    return [(x > p) + (x > q) for x, p, q in zip(v, a, b)]


def test_bit_codes_hold_two_levels_per_dimension(store):
    """memory_bits holds, for each dimension, whether the value is above bit_lo and whether it is
    above bit_hi (thresholds around each dimension's mean), so Hamming distance = level distance."""
    _fill(store, 300)
    dim = store.embedder.dim
    lo, hi = (bytes.fromhex(store.setting(k)) for k in ("bit_lo", "bit_hi"))
    assert all(p < q for p, q in zip(store_module.deserialize(lo), store_module.deserialize(hi)))
    q = store.conn.execute
    assert f"bit[{2 * dim}]" in q("SELECT sql FROM sqlite_master WHERE name = 'memory_bits'").fetchone()[0]
    rows = q("SELECT b.seq, b.bits, v.embedding FROM memory_bits b JOIN memory_vec v ON v.seq = b.seq "
             "ORDER BY b.seq LIMIT 40").fetchall()
    assert len(rows) == 40
    spread = set()
    for seq, bits, blob in rows:
        levels = _levels(blob, lo, hi)
        spread.update(levels)
        want = [level >= 1 for level in levels] + [level == 2 for level in levels]
        got = [bool(bits[i // 8] >> (i % 8) & 1) for i in range(2 * dim)]  # vec0 packs bits LSB first
        assert got == want, seq
    assert spread == {0, 1, 2}
    (_, b1, v1), (_, b2, v2) = rows[0], rows[1]
    hamming = q("SELECT vec_distance_hamming(vec_bit(?), vec_bit(?))", (b1, b2)).fetchone()[0]
    assert hamming == sum(abs(x - y) for x, y in zip(_levels(v1, lo, hi), _levels(v2, lo, hi)))


def test_a_store_with_one_bit_codes_is_migrated_to_two(fake_config, tmp_path, monkeypatch):
    """m008: a bit index of sign bits (as pmem wrote it before) is rebuilt with two bits per
    dimension; searching through it then answers as the exact scan does where the pool covers."""
    from pmem.store import MemoryStore

    path = tmp_path / "m007.db"
    store = MemoryStore(path, config=fake_config)
    _fill(store, 200)
    q = store.conn.execute
    with store.transaction():  # as pmem left it before m008: sign bits of the centred vectors
        q("DROP TABLE memory_bits")
        q("DELETE FROM settings WHERE key IN ('bit_lo', 'bit_hi')")
        q("INSERT INTO settings (key, value) VALUES ('bit_center', ?)", (serialize([0.0] * 64).hex(),))
        q("CREATE VIRTUAL TABLE memory_bits USING vec0(seq INTEGER PRIMARY KEY, part INTEGER PARTITION KEY, "
          "bits bit[64], live INTEGER)")
        q("INSERT INTO memory_bits (seq, part, bits, live) SELECT seq, seq % 16, vec_quantize_binary(embedding), "
          "live FROM memory_vec")
        q("DELETE FROM _pmem_migrations WHERE name = 'm008_bit_levels'")
    query = store.query_vector("note 17 about topic 17")
    exact = semantic_ranks(store, "", Filter(), 10, vector=query)
    store.close()
    store = MemoryStore(path, config=fake_config)
    try:
        q = store.conn.execute
        assert "bit[128]" in q("SELECT sql FROM sqlite_master WHERE name = 'memory_bits'").fetchone()[0]
        assert q("SELECT count(*) FROM memory_bits").fetchone()[0] == 200
        assert store.setting("bit_center") is None and store.setting("bit_lo") and store.setting("bit_hi")
        monkeypatch.setattr(store_module, "EXACT_SCAN_MAX", 0)
        monkeypatch.setattr(store_module, "BIT_POOL", 10_000)
        store.exact_below = 0
        assert semantic_ranks(store, "", Filter(), 10, vector=query) == exact
        _, created = store.add("one more memory after the migration")
        assert created and q("SELECT count(*) FROM memory_bits").fetchone()[0] == 201
    finally:
        store.close()


def test_hybrid_search_reads_its_keyword_side_on_a_second_connection(store, monkeypatch):
    """Past SIDE_READS_FROM memories the keyword side runs on another thread and connection:
    the same hits as one connection gives; never inside a transaction, where the second
    connection could not see this one's uncommitted rows."""
    _fill(store, 300)
    queries = ("topic 5 word3", "note 17", "about word6")
    monkeypatch.setattr(store_module, "SIDE_READS_FROM", 10**9)
    alone = [[(h.memory.id, round(h.score, 6)) for h in search(store, q, limit=10)] for q in queries]
    assert store._side is None
    monkeypatch.setattr(store_module, "SIDE_READS_FROM", 100)
    threads = []
    real = store_module.MemoryStore.keyword_ranks

    def spy(self, *args, **kwargs):
        import threading

        threads.append((self is store, threading.current_thread().name))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(store_module.MemoryStore, "keyword_ranks", spy)
    both = [[(h.memory.id, round(h.score, 6)) for h in search(store, q, limit=10)] for q in queries]
    assert both == alone
    assert threads == [(False, "pmem-keyword-side")] * 3 and store._side is not None
    threads.clear()
    with store.transaction():
        store.insert([Memory(id="fresh1", text="zebracorn appears only in this transaction")])
        hits = search(store, "zebracorn", limit=3)
        assert [h.memory.id for h in hits][:1] == ["fresh1"]
    assert threads == [(True, "MainThread")]
    from pmem import db

    side = store._side
    store.close()
    assert store._side is None
    with pytest.raises(db.errors(), match="closed"):
        side.conn.execute("SELECT 1")


def test_side_reader_is_none_where_it_cannot_serve(store, fake_config, monkeypatch):
    from pmem.store import MemoryStore

    monkeypatch.setattr(store_module, "SIDE_READS_FROM", 1)
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
    from pmem.errors import DatabaseError

    _fill(store, 120)
    monkeypatch.setattr(store_module, "SIDE_READS_FROM", 100)
    real = store_module.MemoryStore.keyword_ranks

    def failing(self, *args, **kwargs):
        if self is not store:
            raise DatabaseError("database is locked by another process; try again")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(store_module.MemoryStore, "keyword_ranks", failing)
    with pytest.raises(DatabaseError, match="locked"):
        search(store, "note 17", limit=5)
    assert [h.memory.id for h in search(store, "note 17", limit=5, mode="keyword")][:1] == ["m00017"]


def test_bit_codes_follow_thresholds_another_process_rebuilt(store, fake_config):
    """A long-lived process (the TUI, the MCP server) writes and queries codes with the thresholds
    in the database now, not those it read first."""
    from pmem import migrations
    from pmem.store import MemoryStore

    rng = _fill(store, 300)
    store.add("a first write reads the thresholds")
    other = MemoryStore(store.path, config=fake_config)
    try:
        shifted = [serialize([3.0 + rng.gauss(0, 1) for _ in range(64)]) for _ in range(300)]
        other.insert([Memory(id=f"s{i:04d}", text=f"shifted {i}") for i in range(300)], vectors=shifted)
        before = store.setting("bit_lo")
        assert other.build_bits() and other.setting("bit_lo") != before
    finally:
        other.close()
    memory, _ = store.add("written after the rebuild")
    q = store.conn.execute
    seq = store._seq(memory.id)
    stored = q("SELECT bits FROM memory_bits WHERE seq = ?", (seq,)).fetchone()[0]
    fresh = q(f"SELECT {migrations.LEVELS_SQL.format(v='v.embedding')} FROM memory_vec v WHERE v.seq = :seq",
              {"seq": seq, "lo": bytes.fromhex(store.setting("bit_lo")),
               "hi": bytes.fromhex(store.setting("bit_hi"))}).fetchone()[0]
    assert stored == fresh


def test_a_large_core_tier_caps_its_one_partition_instead_of_scanning(store, monkeypatch):
    """The core tier is one partition: its top-k is capped at KNN_MAX, so a search of a core tier
    larger than that stays on the bit path (every result still from the tier, best first)."""
    rng = random.Random(4)
    memories = [Memory(id=f"c{i:04d}", text=f"pinned {i}", tier="core", pinned=True) for i in range(120)]
    store.insert(memories, vectors=[serialize([rng.gauss(0, 1) for _ in range(64)]) for _ in range(120)])
    assert store.build_bits()
    monkeypatch.setattr(store_module, "EXACT_SCAN_MAX", 0)
    monkeypatch.setattr(store_module, "KNN_MAX", 48)  # below the core tier's 120 rows
    monkeypatch.setattr(store_module, "WHOLE_EXACT_MAX", 100)  # too many to rank exactly
    store.exact_below = 0
    query = serialize([rng.gauss(0, 1) for _ in range(64)])
    flt = Filter(tiers=("core",))
    where, params = flt.where(store.clock())
    rows = store._bit_ranks(query, flt, 10, where, params)
    assert rows is not None and len(rows) == 10  # not handed to the exact scan
    assert [d for _, d in rows] == sorted(d for _, d in rows)
    assert store.conn.execute("SELECT count(*) FROM memory_bits WHERE part = 0").fetchone()[0] == 120


def test_the_core_tier_is_ranked_exactly_through_its_own_index(store, monkeypatch):
    """With a pool far smaller than the store, the core tier's memories are still ranked exactly
    (its own index, not a bit-index top-k): a core-only search equals the brute force, and every
    core memory of the true top n is in a default search's top n."""
    rng = _fill(store, 900, seed=5)
    monkeypatch.setattr(store_module, "EXACT_SCAN_MAX", 0)
    monkeypatch.setattr(store_module, "BIT_POOL", 20)
    store.exact_below = 0
    for _ in range(5):
        query = serialize([rng.gauss(0, 1) for _ in range(store.embedder.dim)])
        statements: list[str] = []
        store.conn.set_trace_callback(statements.append)
        core = semantic_ranks(store, "", Filter(tiers=("core",)), 10, vector=query)
        store.conn.set_trace_callback(None)
        assert [d for _, d in core] == pytest.approx([d for d, _ in _brute(store, query, Filter(tiers=("core",)), 10)])
        assert any("INDEXED BY memories_core" in sql for sql in statements)
        assert not any("MATCH vec_bit" in sql for sql in statements)
        fast = semantic_ranks(store, "", Filter(), 10, vector=query)
        true_core = {seq for _, seq in _brute(store, query, Filter(), 10)} & {seq for seq, _ in core}
        assert true_core <= {seq for seq, _ in fast}
        assert [d for _, d in fast] == sorted(d for _, d in fast)


def test_listing_the_core_tier_reads_its_index_not_the_whole_store(store, monkeypatch):
    """`pmem recall` lists every core memory on each call: that list is answered from the core
    tier's partial index (m009), and lists of other tiers still walk the date index."""
    _fill(store, 300)
    plans = {}
    for name, flt in (("core", Filter(pinned=True, tiers=("core",))), ("archival", Filter(tiers=("archival",)))):
        statements: list[str] = []
        store.conn.set_trace_callback(statements.append)
        listed = store.list(flt, sort="created", reverse=True, limit=None)
        store.conn.set_trace_callback(None)
        sql = next(s for s in statements if "FROM memories" in s)
        plans[name] = " ".join(r[3] for r in store.conn.execute("EXPLAIN QUERY PLAN " + sql))
        assert listed and all(m.tier == name for m in listed)
        assert len(listed) == store.count(flt)
    assert "memories_core" in plans["core"]
    twice = Filter(pinned=True, tiers=("core", "core"))  # `--tier core --tier core`
    once = Filter(pinned=True, tiers=("core",))
    assert [m.id for m in store.list(twice, limit=None)] == [m.id for m in store.list(once, limit=None)]
    rng = random.Random(2)
    query = serialize([rng.gauss(0, 1) for _ in range(store.embedder.dim)])
    store.exact_below = 0
    monkeypatch.setattr(store_module, "EXACT_SCAN_MAX", 0)
    ranked = semantic_ranks(store, "", Filter(tiers=("core", "core", "archival")), 20, vector=query)
    assert len({s for s, _ in ranked}) == len(ranked) == 20
    assert "memories_core" not in plans["archival"] and "memories_created_seq" in plans["archival"]


class _SlowConnection:
    """A connection whose every statement takes at least `pause` seconds, so another thread
    surely gets partitions to read."""

    def __init__(self, conn, pause: float):
        self.conn, self.pause, self.calls = conn, pause, 0

    def execute(self, sql, params=()):
        import time

        self.calls += 1
        time.sleep(self.pause)
        return self.conn.execute(sql, params)


def _partition_jobs(store, query: bytes):
    from pmem import migrations

    code = store.conn.execute(f"SELECT {migrations.LEVELS_SQL.format(v=':v')}",
                              {"v": query, **store._levels()}).fetchone()[0]
    sql = "SELECT seq, distance FROM memory_bits WHERE bits MATCH vec_bit(?) AND k = ? AND part = ? AND live = 1"
    parts = [migrations.bit_part(TIERS.index(t), p) for t in ("archival", "episodic")
             for p in range(migrations.bit_parts(t))]
    return sql, [[code, 12, p] for p in parts]


def test_partitions_are_shared_with_a_helper_and_each_read_once(store, fake_config):
    """A helper that waits before the work is posted reads some partitions on its own
    connection; together the two read every partition once, as one thread alone would."""
    import threading

    from pmem.store import MemoryStore, PartitionScan

    rng = _fill(store, 900, seed=8)
    query = serialize([rng.gauss(0, 1) for _ in range(store.embedder.dim)])
    sql, jobs = _partition_jobs(store, query)
    alone = sorted(PartitionScan().run(store.conn, sql, [list(j) for j in jobs]))
    assert len(alone) > 12 * 16 and len({seq for seq, _ in alone}) == len(alone)
    helper = MemoryStore(store.path, config=fake_config)
    helper_conn = _SlowConnection(helper.conn, 0.0)
    scan = PartitionScan()
    worker = threading.Thread(target=scan.help, args=(helper_conn,))
    worker.start()
    mine = _SlowConnection(store.conn, 0.01)
    shared = sorted(scan.run(mine, sql, [list(j) for j in jobs]))
    scan.close()
    worker.join(5)
    helper.close()
    assert not worker.is_alive()
    assert shared == alone
    assert helper_conn.calls >= 1 and mine.calls >= 1 and helper_conn.calls + mine.calls == len(jobs)


def test_a_failing_helper_gives_its_partition_back(store):
    """A partition the helper cannot read (its connection closed) is read by the searching
    thread; a helper of a scan closed before any work was posted returns at once."""
    import threading

    from pmem.store import PartitionScan

    rng = _fill(store, 900, seed=9)
    query = serialize([rng.gauss(0, 1) for _ in range(store.embedder.dim)])
    sql, jobs = _partition_jobs(store, query)
    alone = sorted(PartitionScan().run(store.conn, sql, [list(j) for j in jobs]))

    class Broken:
        calls = 0

        def execute(self, *args):
            Broken.calls += 1
            raise store_module.db.errors()[0]("closed")

    scan = PartitionScan()
    worker = threading.Thread(target=scan.help, args=(Broken(),))
    worker.start()
    shared = sorted(scan.run(_SlowConnection(store.conn, 0.01), sql, [list(j) for j in jobs]))
    scan.close()
    worker.join(5)
    assert not worker.is_alive() and Broken.calls == 1
    assert shared == alone
    idle = PartitionScan()
    waiting = threading.Thread(target=idle.help, args=(Broken(),))
    waiting.start()
    idle.close()
    waiting.join(5)
    assert not waiting.is_alive() and Broken.calls == 1


@pytest.mark.parametrize("mode", ["hybrid", "semantic"])
def test_search_with_partitions_shared_equals_one_thread(store, monkeypatch, mode):
    """On the bit path with the side reader, a hybrid or a semantic search gives the hits one
    connection gives, and the side reader's thread helps read the partitions (a semantic search
    at 1,000,000 read its 16 alone: 0.20 s whole process against a hybrid search's 0.15 s)."""
    _fill(store, 900, seed=10)
    monkeypatch.setattr(store_module, "EXACT_SCAN_MAX", 0)
    store.exact_below = 0
    queries = ("topic 5 word3", "note 17", "about word6", "word2 topic 9")
    monkeypatch.setattr(store_module, "SIDE_READS_FROM", 10**9)
    alone = [[(h.memory.id, round(h.score, 6)) for h in search(store, q, limit=10, mode=mode)] for q in queries]
    monkeypatch.setattr(store_module, "SIDE_READS_FROM", 100)
    helped = []
    real = store_module.PartitionScan.help

    def spy(self, conn):
        real(self, conn)
        helped.append(conn is not store.conn)

    monkeypatch.setattr(store_module.PartitionScan, "help", spy)
    both = [[(h.memory.id, round(h.score, 6)) for h in search(store, q, limit=10, mode=mode)] for q in queries]
    assert both == alone
    assert helped == [True] * len(queries)



def _segmented(store, batches: int = 11) -> list[str]:
    """A store whose keyword index is in several segments (one per write, merged by FTS5 only in
    fours) over a few dozen pages: each memory has words of its own."""
    words = ["orchid", "balcony", "kestrel", "harbour", "lantern", "violin", "glacier", "saffron"]
    for b in range(batches):
        store.insert([Memory(id="", text=f"{words[(b + i) % 8]} and {words[(b * 3 + i) % 8]} note {b}-{i} "
                             + " ".join(f"w{b}x{i}y{j}" for j in range(20))) for i in range(40)])
    return words


def test_merging_the_keyword_index_leaves_one_segment_and_the_same_answers(store, monkeypatch):
    words = _segmented(store)
    segments = store.keyword_segments()
    assert segments >= 4
    queries = [f"{a} {b}" for a, b in zip(words, words[3:])] + ["note 7-3", "kestrel w3x5y7"]
    before = {q: keyword_ranks(store, q, Filter(), 30) for q in queries}
    hits = [(h.memory.id, round(h.score, 6)) for h in search(store, "saffron glacier", limit=10)]
    steps = []
    real = store.transaction
    monkeypatch.setattr(store, "transaction", lambda: steps.append(1) or real())
    assert store.merge_keyword_index(step=2) == (segments, 1)
    assert len(steps) > 2  # two pages a step: several transactions
    store.conn.execute("INSERT INTO memories_fts(memories_fts, rank) VALUES ('integrity-check', 1)")
    assert {q: keyword_ranks(store, q, Filter(), 30) for q in queries} == before
    assert [(h.memory.id, round(h.score, 6)) for h in search(store, "saffron glacier", limit=10)] == hits
    steps.clear()
    assert store.merge_keyword_index() == (1, 1) and steps == []  # nothing to merge: no transaction


def test_a_writer_between_two_steps_of_the_merge_keeps_what_it_wrote(store, monkeypatch):
    _segmented(store)
    other = store_module.MemoryStore(store.path, clock=store.clock)
    steps = []
    real = store.transaction

    def step():
        steps.append(1)
        if len(steps) == 2:  # another process writes; it waited at most one step
            other.add("a zeppelin over the harbour", allow_duplicate=True)
        return real()

    monkeypatch.setattr(store, "transaction", step)
    got = store.merge_keyword_index(step=2)
    assert len(steps) > 2
    assert got[1] <= 2 and store.keyword_segments() == got[1]  # the merged index, and the writer's own
    store.conn.execute("INSERT INTO memories_fts(memories_fts, rank) VALUES ('integrity-check', 1)")
    found = search(store, "zeppelin", limit=1, mode="keyword")
    assert [h.memory.text for h in found] == ["a zeppelin over the harbour"]
    assert store.count(Filter()) == 441
    store.merge_keyword_index()
    assert store.keyword_segments() == 1
    other.close()


def test_the_merge_reports_its_progress_up_to_the_whole(store):
    _segmented(store)
    seen: list[tuple[int, int]] = []
    store.merge_keyword_index(step=2, pause=0, progress=lambda done, total: seen.append((done, total)))
    assert len(seen) > 3 and seen[0][0] == 0
    assert len({total for _, total in seen}) == 1 and seen[-1][0] == seen[-1][1] > 0
    assert all(a[0] <= b[0] for a, b in zip(seen, seen[1:]))
    assert all(done < total for done, total in seen[:-1])  # whole only when it is done
    seen.clear()
    store.merge_keyword_index(progress=lambda done, total: seen.append((done, total)))
    assert seen == []  # one segment: nothing to merge, nothing reported


def test_upkeep_merges_the_keyword_index_even_when_little_is_free(store):
    _segmented(store)
    segments = store.keyword_segments()
    assert segments >= 4
    done = store.upkeep()
    assert done["ran"] is False and done["index_segments"] == (segments, 1)
    assert store.keyword_segments() == 1


def test_a_large_import_merges_the_keyword_index_and_a_small_one_does_not(store, monkeypatch):
    from pmem.integrations.importers import registry

    def run(prefix: str, n: int) -> None:
        records = [Memory(id=f"{prefix}{i}", text=f"{prefix} imported {i}") for i in range(n)]
        assert registry.run_import(store, records, batch=10).imported == n

    _segmented(store, batches=5)  # 200 memories
    assert store.keyword_segments() >= 2
    monkeypatch.setattr(registry, "MERGE_AFTER", 100)
    run("a", 60)  # a tenth of the store and more, but fewer than MERGE_AFTER
    assert store.keyword_segments() > 1
    monkeypatch.setattr(registry, "MERGE_AFTER", 20)
    run("b", 25)  # 25 of 285: less than a tenth
    assert store.keyword_segments() > 1
    run("c", 100)  # 100 of 385
    assert store.keyword_segments() == 1
    assert [h.memory.id for h in search(store, "c imported 17", limit=1, mode="keyword")] == ["c17"]


def test_the_distance_bound_keeps_the_pool_of_the_unbounded_knn(store, monkeypatch):
    """One partition's k-th distance bounds the others' KNN (vec0 selects among fewer rows); the
    best `pool` rows are those without the bound, and where the bound keeps fewer than `pool`
    the partitions are read again without it."""
    rng = _fill(store, 2000, seed=5, clusters=20)
    monkeypatch.setattr(store_module, "EXACT_SCAN_MAX", 0)
    store.exact_below = 0
    real = store._bounded_knn
    seen = {"calls": 0, "cut": 0}

    def unbounded(knn, jobs):
        return [(r[0], r[1]) for job in jobs for r in store.conn.execute(knn, job)]

    def checked(knn, jobs, lead, pool, scan):
        got = real(knn, jobs, lead, pool, scan)
        whole = unbounded(knn, jobs)
        best = lambda rows: sorted(rows, key=lambda r: (r[1], r[0]))[:pool]  # noqa: E731
        assert best(got) == best(whole)
        seen["calls"] += 1
        seen["cut"] += len(got) < len(whole)
        # a pool larger than the bound keeps: the partitions are read again, without it
        assert sorted(real(knn, jobs, lead, len(whole), store_module.PartitionScan())) == sorted(whole)
        return got

    monkeypatch.setattr(store, "_bounded_knn", checked)
    seqs = [r[0] for r in store.conn.execute("SELECT seq FROM memory_vec ORDER BY seq")]
    for seq in rng.sample(seqs, 20):
        base = store._get_vec(seq)
        query = serialize([v + rng.gauss(0, 0.3) for v in store_module.deserialize(base)])
        for flt in (Filter(), Filter(tiers=TIERS)):
            fast = semantic_ranks(store, "", flt, 10, vector=query)
            assert len(fast) == 10
    assert seen["calls"] == 40 and seen["cut"] >= 10  # the bound left rows out, and the pool was the same


def test_rows_tied_at_the_bound_in_other_partitions_take_part(store, monkeypatch):
    """Hamming distances are whole numbers and tie often. Each vector here is stored twice in a
    row, so its copies sit in two partitions at the same distance from any query: a pool whose
    last place falls among rows at exactly the bound must be the unbounded KNN's, which needs the
    other partitions' rows at the bound (`distance <= bound`, not `<`)."""
    rng = random.Random(11)
    dim = store.embedder.dim
    centres = [[rng.gauss(0, 1) for _ in range(dim)] for _ in range(8)]
    vectors = [serialize([c + rng.gauss(0, 0.6) for c in centres[i % 8]]) for i in range(600)]
    store.insert([Memory(id=f"d{i:04d}", text=f"copy {i}") for i in range(1200)],
                 vectors=[v for v in vectors for _ in range(2)])
    assert store.build_bits()
    monkeypatch.setattr(store_module, "EXACT_SCAN_MAX", 0)
    store.exact_below = 0
    real = store._bounded_knn
    tied = {"pools": 0}

    def checked(knn, jobs, lead, pool, scan):
        whole = sorted(((r[0], r[1]) for job in jobs for r in store.conn.execute(knn, job)),
                       key=lambda r: (r[1], r[0]))
        lead_rows = list(store.conn.execute(knn, jobs[lead]))
        bound = max(r[1] for r in lead_rows)
        cut = sum(1 for _, d in whole if d < bound) + 1  # the pool's last place: the first row at the bound
        if len(lead_rows) == jobs[lead][1] and cut <= len(whole):
            got = sorted(real(knn, jobs, lead, cut, store_module.PartitionScan()), key=lambda r: (r[1], r[0]))
            assert got[:cut] == whole[:cut]
            tied["pools"] += 1
        return real(knn, jobs, lead, pool, scan)

    monkeypatch.setattr(store, "_bounded_knn", checked)
    for i in rng.sample(range(600), 10):
        query = serialize([v + rng.gauss(0, 0.3) for v in store_module.deserialize(vectors[i])])
        assert len(semantic_ranks(store, "", Filter(), 10, vector=query)) == 10
    assert tied["pools"] == 10


def test_a_writer_waiting_on_the_merge_gets_in_between_two_steps(store, monkeypatch):
    """SQLite's busy handler sleeps up to 0.1 s between tries: the merge pauses longer than
    that between steps, so a writer waits about one step, not the whole merge."""
    import threading
    import time
    from contextlib import contextmanager

    _segmented(store)
    real = store.transaction
    stepping = threading.Event()

    @contextmanager
    def long_step():  # each step holds the lock 0.1 s, as on a large index
        with real():
            stepping.set()
            time.sleep(0.1)
            yield

    monkeypatch.setattr(store, "transaction", long_step)
    waited: list[float] = []

    def writer() -> None:
        other = store_module.MemoryStore(store.path, clock=store.clock)
        stepping.wait()
        t = time.perf_counter()
        other.add("written while the index was merging", allow_duplicate=True)
        waited.append(time.perf_counter() - t)
        other.close()

    thread = threading.Thread(target=writer)
    thread.start()
    t = time.perf_counter()
    assert store.merge_keyword_index(step=1)[1] <= 2
    merging = time.perf_counter() - t
    thread.join()
    assert merging > 0.8  # eight steps and more
    assert waited and waited[0] < 0.4, (waited, merging)


def test_an_error_after_sqlite_rolled_back_itself_is_the_one_raised(store):
    """After some errors (disk full, I/O) SQLite ends the transaction itself: transaction() must
    raise that error, not its own failed ROLLBACK's "no transaction is active"."""
    with pytest.raises(ValueError, match="the original error"):
        with store.transaction():
            store.conn.execute("ROLLBACK")  # what SQLite does on SQLITE_FULL
            raise ValueError("the original error")
    assert not store.conn.in_transaction
    store.add("the store still writes")


def test_an_import_whose_merge_fails_still_reports_what_it_stored(store, monkeypatch):
    from pmem.errors import DatabaseError
    from pmem.integrations.importers import registry

    monkeypatch.setattr(registry, "MERGE_AFTER", 10)

    def locked(*a, **k):
        raise DatabaseError("database is locked by another process; try again")

    monkeypatch.setattr(store, "merge_keyword_index", locked)
    records = [Memory(id=f"r{i}", text=f"a record {i}") for i in range(30)]
    done = registry.run_import(store, records, batch=10)
    assert done.imported == 30 and done.operation
    assert store.count(Filter()) == 30


def test_every_list_sort_walks_an_index_and_pages_through_one_order(store):
    """`pmem list --sort X` read every memory and sorted them for each page (2.4 s for `updated` at
    1,000,000): each sort now walks an index (m010, and memories_expires for `expires`), and paging
    with --offset goes through the same order as one whole list. Never-accessed memories sort as the
    oldest access; memories that never expire after every date (SQLite put them first)."""
    _fill(store, 120)
    for i, day in ((3, "2025-07-09"), (40, "2025-07-02"), (41, "2025-07-02"), (77, "2030-01-01")):
        store.expire(f"m{i:05d}", at=f"{day}T00:00:00Z")  # two on one day: the seq breaks the tie
    for i in range(0, 120, 7):
        store.clock = lambda i=i: f"2026-02-{1 + i % 20:02d}T00:00:00Z"
        store.touch([f"m{i:05d}"])
        if i % 2:
            store.edit(f"m{i:05d}", tags=["edited"])
    seq = dict(store.conn.execute("SELECT id, seq FROM memories"))
    everything = store.list(Filter.everything(), limit=None)

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
    assert dated[-4:] == ["m00040", "m00041", "m00003", "m00077"] and len(dated) == 10  # and six from _fill
    for sort, order in expected.items():
        for reverse in (False, True):
            want = [m.id for m in (order[::-1] if reverse else order)]
            statements: list[str] = []
            store.conn.set_trace_callback(statements.append)
            whole = store.list(Filter.everything(), sort=sort, reverse=reverse, limit=None)
            pages = [m for start in range(0, 130, 13)
                     for m in store.list(Filter.everything(), sort=sort, reverse=reverse, limit=13, offset=start)]
            store.conn.set_trace_callback(None)
            assert [m.id for m in whole] == want, (sort, reverse)
            assert [m.id for m in pages] == want, (sort, reverse)
            for sql in statements:
                if "ORDER BY" in sql:
                    plan = " ".join(r[3] for r in store.conn.execute("EXPLAIN QUERY PLAN " + sql))
                    assert "TEMP B-TREE" not in plan, (sort, reverse, plan)
    live = [m.id for m in store.list(Filter(), sort="expires", limit=None)]  # the expired ones left out
    assert live[:2] == ["m00077"] + [m.id for m in expected["expires"] if m.expires_at is None][:1]


def test_the_hits_of_a_mask_are_numpys_nonzero_in_the_same_order():
    """dream's 1-d search of a pair mask (_hits) answers what np.nonzero does, row by row."""
    import numpy as np

    from pmem.dream import _hits

    rng = np.random.default_rng(4)
    for shape, share in [((7, 13), 0.3), ((1024, 2000), 0.001), ((3, 1), 1.0), ((0, 5), 0.5), ((4, 6), 0.0)]:
        mask = rng.random(shape) < share
        rows, cols = _hits(mask)
        want_rows, want_cols = np.nonzero(mask)
        assert rows.tolist() == want_rows.tolist() and cols.tolist() == want_cols.tolist()

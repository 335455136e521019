"""The vector index (pmem/store/vectors.py): the bit-vector KNN with float32 rescoring, its
partitions shared between two connections, the distance bound, the core tier ranked exactly."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from pmem import Filter, Memory, MemoryStore, db
from pmem.errors import ModelMismatch
from pmem.ranking.profile import DEFAULT
from pmem.records import TIERS
from pmem.search import search, semantic_ranks
from pmem.store import PartitionScan, deserialize, serialize
from pmem.store import memories as store_memories
from pmem.store import vectors as store_vectors

from filled import FILTERS, brute, fill


def test_model_mismatch_is_clear(tmp_path, fake_config):
    from pmem.models.embed import FakeEmbedder

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


def _levels(blob: bytes, lo: bytes, hi: bytes) -> list[int]:
    """A vector's level per dimension: 0 below bit_lo, 1 between, 2 above bit_hi."""
    v, a, b = (deserialize(x) for x in (blob, lo, hi))
    return [(x > p) + (x > q) for x, p, q in zip(v, a, b)]


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
    code = store.conn.execute(f"SELECT {store_vectors.LEVELS_SQL.format(v=':v')}",
                              {"v": query, **store.vectors.levels()}).fetchone()[0]
    sql = "SELECT seq, distance FROM memory_bits WHERE bits MATCH vec_bit(?) AND k = ? AND part = ? AND live = 1"
    parts = [store_vectors.bit_part(TIERS.index(t), p) for t in ("archival", "episodic")
             for p in range(store_vectors.bit_parts(t))]
    return sql, [[code, 12, p] for p in parts]


@pytest.mark.parametrize("flt", FILTERS, ids=lambda f: repr(f)[:60])
def test_bit_path_equals_exact_when_the_pool_covers_the_store(store, monkeypatch, flt):
    rng = fill(store, 400)
    store.forget("m00002")
    store.forget("m00003")
    store.pin("m00010")  # an episodic memory moves to core: its bits change partition
    assert store.get("m00010").tier == "core"
    query = serialize([rng.gauss(0, 1) for _ in range(store.embedder.dim)])
    exact = semantic_ranks(store, "", flt, 25, vector=query)
    monkeypatch.setattr(store_vectors, "EXACT_SCAN_MAX", 0)
    profile = replace(DEFAULT, bit_pool=10_000)
    store.exact_below = 0
    fast = semantic_ranks(store, "", flt, 25, vector=query, profile=profile)
    assert [s for s, _ in fast] == [s for s, _ in exact]
    assert [d for _, d in fast] == pytest.approx([d for _, d in exact], abs=1e-6)
    want = brute(store, query, flt, 25)
    assert [d for _, d in fast] == pytest.approx([d for d, _ in want], abs=1e-5)
    seqs = {s for s, _ in fast}
    forgotten = {store.db.seq("m00002"), store.db.seq("m00003")}
    assert not (seqs & forgotten) or flt.include_forgotten


def test_bit_path_with_a_small_pool_is_approximate_but_close(store, monkeypatch):
    """The default pool (256 of 2,000 64-d vectors around 20 topics): the rescored top 10 still
    mostly agrees with the exact one, and every result passes the filter."""
    rng = fill(store, 2000, seed=11, clusters=20)
    monkeypatch.setattr(store_vectors, "EXACT_SCAN_MAX", 0)
    agree = 0
    for _ in range(10):
        base = store.conn.execute("SELECT embedding FROM memory_vec ORDER BY random() LIMIT 1").fetchone()[0]
        noisy = [v + rng.gauss(0, 0.05) for v in deserialize(base)]
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
    fill(store, 300)
    monkeypatch.setattr(store_vectors, "EXACT_SCAN_MAX", 0)
    profile = replace(DEFAULT, bit_pool=10_000)
    for q in ("topic 5 word3", "note 17", "about word6"):
        store.exact_below = 10**9
        exact = [(h.memory.id, round(h.score, 6)) for h in search(store, q, limit=10, tuning=profile)]
        store.exact_below = 0
        fast = [(h.memory.id, round(h.score, 6)) for h in search(store, q, limit=10, tuning=profile)]
        assert fast == exact


def test_the_bit_index_is_built_when_the_store_grows_past_bits_from(store, monkeypatch):
    monkeypatch.setattr(store_vectors, "BITS_FROM", 50)
    store.insert([Memory(id="", text=f"memory {i}") for i in range(40)])
    assert not store.vectors.has_bits()
    store.insert([Memory(id="", text=f"more {i}") for i in range(30)])
    assert store.vectors.has_bits() and store.setting("bit_lo") and store.setting("bit_hi")
    q = store.conn.execute
    assert q("SELECT count(*) FROM memory_bits").fetchone()[0] == 70
    store.reindex()
    assert q("SELECT count(*) FROM memory_bits").fetchone()[0] == 70


def test_bit_codes_hold_two_levels_per_dimension(store):
    """memory_bits holds, for each dimension, whether the value is above bit_lo and whether it is
    above bit_hi (thresholds around each dimension's mean), so Hamming distance = level distance."""
    fill(store, 300)
    dim = store.embedder.dim
    lo, hi = (bytes.fromhex(store.setting(k)) for k in ("bit_lo", "bit_hi"))
    assert all(p < q for p, q in zip(deserialize(lo), deserialize(hi)))
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


def test_bit_codes_follow_thresholds_another_process_rebuilt(store, fake_config):
    """A long-lived process (the TUI, the MCP server) writes and queries codes with the thresholds
    in the database now, not those it read first."""
    from pmem.service import MemoryStore
    rng = fill(store, 300)
    store.add("a first write reads the thresholds")
    other = MemoryStore(store.path, config=fake_config)
    try:
        shifted = [serialize([3.0 + rng.gauss(0, 1) for _ in range(64)]) for _ in range(300)]
        other.insert([Memory(id=f"s{i:04d}", text=f"shifted {i}") for i in range(300)], vectors=shifted)
        before = store.setting("bit_lo")
        assert other.vectors.build_bits() and other.setting("bit_lo") != before
    finally:
        other.close()
    memory, _ = store.add("written after the rebuild")
    q = store.conn.execute
    seq = store.db.seq(memory.id)
    stored = q("SELECT bits FROM memory_bits WHERE seq = ?", (seq,)).fetchone()[0]
    fresh = q(f"SELECT {store_vectors.LEVELS_SQL.format(v='v.embedding')} FROM memory_vec v WHERE v.seq = :seq",
              {"seq": seq, "lo": bytes.fromhex(store.setting("bit_lo")),
               "hi": bytes.fromhex(store.setting("bit_hi"))}).fetchone()[0]
    assert stored == fresh


def test_a_large_core_tier_caps_its_one_partition_instead_of_scanning(store, monkeypatch):
    """The core tier is one partition: its top-k is capped at KNN_MAX, so a search of a core tier
    larger than that stays on the bit path (every result still from the tier, best first)."""
    rng = random.Random(4)
    memories = [Memory(id=f"c{i:04d}", text=f"pinned {i}", tier="core", pinned=True) for i in range(120)]
    store.insert(memories, vectors=[serialize([rng.gauss(0, 1) for _ in range(64)]) for _ in range(120)])
    assert store.vectors.build_bits()
    monkeypatch.setattr(store_vectors, "EXACT_SCAN_MAX", 0)
    monkeypatch.setattr(store_vectors, "KNN_MAX", 48)  # below the core tier's 120 rows
    monkeypatch.setattr(store_vectors, "WHOLE_EXACT_MAX", 100)  # too many to rank exactly
    store.exact_below = 0
    query = serialize([rng.gauss(0, 1) for _ in range(64)])
    flt = Filter(tiers=("core",))
    statements: list[str] = []
    store.conn.set_trace_callback(statements.append)
    rows = store.vectors.ranks(query, flt, 10)
    store.conn.set_trace_callback(None)
    assert len(rows) == 10 and any("MATCH vec_bit" in s for s in statements)
    assert not any("FROM memories m JOIN memory_vec" in s for s in statements)  # not handed to the exact scan
    assert [d for _, d in rows] == sorted(d for _, d in rows)
    assert store.conn.execute("SELECT count(*) FROM memory_bits WHERE part = 0").fetchone()[0] == 120


def test_the_core_tier_is_ranked_exactly_through_its_own_index(store, monkeypatch):
    """With a pool far smaller than the store, the core tier's memories are still ranked exactly
    (its own index, not a bit-index top-k): a core-only search equals the brute force, and every
    core memory of the true top n is in a default search's top n."""
    rng = fill(store, 900, seed=5)
    monkeypatch.setattr(store_vectors, "EXACT_SCAN_MAX", 0)
    profile = replace(DEFAULT, bit_pool=20)
    store.exact_below = 0
    for _ in range(5):
        query = serialize([rng.gauss(0, 1) for _ in range(store.embedder.dim)])
        statements: list[str] = []
        store.conn.set_trace_callback(statements.append)
        core = semantic_ranks(store, "", Filter(tiers=("core",)), 10, vector=query, profile=profile)
        store.conn.set_trace_callback(None)
        assert [d for _, d in core] == pytest.approx([d for d, _ in brute(store, query, Filter(tiers=("core",)), 10)])
        assert any("INDEXED BY memories_core" in sql for sql in statements)
        assert not any("MATCH vec_bit" in sql for sql in statements)
        fast = semantic_ranks(store, "", Filter(), 10, vector=query, profile=profile)
        true_core = {seq for _, seq in brute(store, query, Filter(), 10)} & {seq for seq, _ in core}
        assert true_core <= {seq for seq, _ in fast}
        assert [d for _, d in fast] == sorted(d for _, d in fast)


def test_partitions_are_shared_with_a_helper_and_each_read_once(store, fake_config):
    """A helper that waits before the work is posted reads some partitions on its own
    connection; together the two read every partition once, as one thread alone would."""
    import threading

    from pmem.service import MemoryStore
    from pmem.store import PartitionScan

    rng = fill(store, 900, seed=8)
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

    rng = fill(store, 900, seed=9)
    query = serialize([rng.gauss(0, 1) for _ in range(store.embedder.dim)])
    sql, jobs = _partition_jobs(store, query)
    alone = sorted(PartitionScan().run(store.conn, sql, [list(j) for j in jobs]))

    class Broken:
        calls = 0

        def execute(self, *args):
            Broken.calls += 1
            raise db.errors()[0]("closed")

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
    fill(store, 900, seed=10)
    monkeypatch.setattr(store_vectors, "EXACT_SCAN_MAX", 0)
    store.exact_below = 0
    queries = ("topic 5 word3", "note 17", "about word6", "word2 topic 9")
    monkeypatch.setattr(store_memories, "SIDE_READS_FROM", 10**9)
    alone = [[(h.memory.id, round(h.score, 6)) for h in search(store, q, limit=10, mode=mode)] for q in queries]
    monkeypatch.setattr(store_memories, "SIDE_READS_FROM", 100)
    helped = []
    real = PartitionScan.help

    def spy(self, conn):
        real(self, conn)
        helped.append(conn is not store.conn)

    monkeypatch.setattr(PartitionScan, "help", spy)
    both = [[(h.memory.id, round(h.score, 6)) for h in search(store, q, limit=10, mode=mode)] for q in queries]
    assert both == alone
    assert helped == [True] * len(queries)


def test_the_distance_bound_keeps_the_pool_of_the_unbounded_knn(store, monkeypatch):
    """One partition's k-th distance bounds the others' KNN (vec0 selects among fewer rows); the
    best `pool` rows are those without the bound, and where the bound keeps fewer than `pool`
    the partitions are read again without it."""
    rng = fill(store, 2000, seed=5, clusters=20)
    monkeypatch.setattr(store_vectors, "EXACT_SCAN_MAX", 0)
    store.exact_below = 0
    real = store.vectors.bounded_knn
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
        assert sorted(real(knn, jobs, lead, len(whole), PartitionScan())) == sorted(whole)
        return got

    monkeypatch.setattr(store.vectors, "bounded_knn", checked)
    seqs = [r[0] for r in store.conn.execute("SELECT seq FROM memory_vec ORDER BY seq")]
    for seq in rng.sample(seqs, 20):
        base = store.vectors.get(seq)
        query = serialize([v + rng.gauss(0, 0.3) for v in deserialize(base)])
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
    assert store.vectors.build_bits()
    monkeypatch.setattr(store_vectors, "EXACT_SCAN_MAX", 0)
    store.exact_below = 0
    real = store.vectors.bounded_knn
    tied = {"pools": 0}

    def checked(knn, jobs, lead, pool, scan):
        whole = sorted(((r[0], r[1]) for job in jobs for r in store.conn.execute(knn, job)),
                       key=lambda r: (r[1], r[0]))
        lead_rows = list(store.conn.execute(knn, jobs[lead]))
        bound = max(r[1] for r in lead_rows)
        cut = sum(1 for _, d in whole if d < bound) + 1  # the pool's last place: the first row at the bound
        if len(lead_rows) == jobs[lead][1] and cut <= len(whole):
            got = sorted(real(knn, jobs, lead, cut, PartitionScan()), key=lambda r: (r[1], r[0]))
            assert got[:cut] == whole[:cut]
            tied["pools"] += 1
        return real(knn, jobs, lead, pool, scan)

    monkeypatch.setattr(store.vectors, "bounded_knn", checked)
    for i in rng.sample(range(600), 10):
        query = serialize([v + rng.gauss(0, 0.3) for v in deserialize(vectors[i])])
        assert len(semantic_ranks(store, "", Filter(), 10, vector=query)) == 10
    assert tied["pools"] == 10



def test_a_write_embeds_each_distinct_text_once(tmp_path, fake_config):
    """An import of a chat history holds many equal turns ("ok", "thanks"): each is embedded once
    and every copy gets its vector."""
    from pmem.models.embed import FakeEmbedder

    class Counting(FakeEmbedder):
        def __init__(self):
            super().__init__(64)
            self.seen: list[str] = []

        def embed(self, texts, query: bool = False):
            self.seen += list(texts)
            return super().embed(texts)

    model = Counting()
    with MemoryStore(tmp_path / "dup.db", config=fake_config, embedder=model) as s:
        texts = ["ok", "thanks", "ok", "see you at nine", "thanks", "ok"]
        blobs = s.embed(texts, batch=2)
        assert model.seen == ["ok", "thanks", "see you at nine"]
        assert blobs == [serialize(v) for v in FakeEmbedder(64).embed(texts)]

"""The keyword index (pmem/store/keywords.py): FTS5's common-word planning on large stores and the
merge of its segments."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pmem import Filter, Memory, MemoryStore
from pmem.ranking.profile import DEFAULT
from pmem.search import keyword_ranks, search
from pmem.store import filter as store_filter
from pmem.store import keywords as store_keywords
from pmem.store import serialize
from pmem.store.filter import estimate

from filled import FILTERS, exact_and_planned, fill, segmented


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
    profile = replace(DEFAULT, common_recent=200)
    old = Filter(until="2025-01-01T00:04:59Z")  # the first 300: none of the newest 200, and no count says so
    statements.clear()
    store.conn.set_trace_callback(statements.append)
    found = keyword_ranks(store, "common filler", old, 100, profile=profile)
    store.conn.set_trace_callback(None)
    store.exact_below = 10**9
    whole = keyword_ranks(store, "common filler", old, 100, profile=profile)
    assert [r for _, r in found] == pytest.approx([r for _, r in whole]) and len(found) == 100
    assert all(m.created_at <= old.until for m in store.memories_by_seq(s for s, _ in found).values())
    ranked = [sql for sql in statements if "bm25(" in sql]
    assert len(ranked) == 1 and "rowid BETWEEN 1 AND 300" in ranked[0]
    # A larger window: its newest rows stand for the store's newest, common words are ranked
    # among the rows holding them there, and no BM25 of every row holding them follows.
    store.exact_below = 0
    monkeypatch.setattr(store_filter, "DATE_WINDOW", 150)
    statements.clear()
    store.conn.set_trace_callback(statements.append)
    newest = keyword_ranks(store, "common filler", old, 100, profile=profile)
    # one common word: the same, not the store's best first
    one = keyword_ranks(store, "filler", old, 100, profile=profile)
    store.conn.set_trace_callback(None)
    ranked = [sql for sql in statements if "bm25(" in sql]
    assert len(ranked) == 2 and all("rowid BETWEEN 151 AND 300" in sql and "rowid DESC" in sql for sql in ranked)
    assert len(newest) == len(one) == 100 and {s for s, _ in newest} <= set(range(151, 301))
    assert {s for s, _ in one} <= set(range(151, 301))
    assert keyword_ranks(store, "common filler", Filter(until="2024-12-31T00:00:00Z"), 100, profile=profile) == []
    # --as-of alone: the newest rows created by then stand for the newest, with no whole query
    # after them (it ranked every row holding a common word: 0.1-0.3 s at 1,000,000).
    statements.clear()
    store.conn.set_trace_callback(statements.append)
    then = keyword_ranks(store, "common filler", Filter(as_of=old.until), 100, profile=profile)
    store.conn.set_trace_callback(None)
    ranked = [sql for sql in statements if "bm25(" in sql]
    assert len(ranked) == 1 and "rowid BETWEEN 151 AND 300" in ranked[0]
    assert len(then) == 100 and {s for s, _ in then} <= set(range(151, 301))
    monkeypatch.setattr(store_filter, "DATE_WINDOW", 20_000)
    some = Filter(ids=tuple(f"k{i:05d}" for i in range(0, 1500, 7)))
    assert len(keyword_ranks(store, "common rare3 nowhere", some, 100, profile=profile)) == 100


@pytest.mark.parametrize("flt", FILTERS, ids=lambda f: repr(f)[:60])
def test_large_store_keyword_side_filters_only_its_best_rows(store, flt):
    """On a large store BM25 ranks the matching rows before any is looked up and filtered, and only
    the best KEYWORD_FETCH * n are; the result is the whole query's, also where the filter keeps
    fewer of them than asked (then the whole query answers)."""
    fill(store, 600)
    for query in ("word3", "word3 word5"):
        whole, fast, statements = exact_and_planned(store, query, flt, 10)
        by_seq = store.memories_by_seq(s for s, _ in fast)
        assert len(by_seq) == len(fast)
        ranked = [sql for sql in statements if "bm25(" in sql]
        if flt.since:  # a date window of fewer than DATE_WINDOW rows: ranked whole in its range
            assert len(ranked) == 1 and "rowid BETWEEN" in ranked[0]
        elif estimate(store.db, flt) * store_keywords.KEYWORD_FETCH < store.count(Filter.everything()):
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
    profile = replace(DEFAULT, common_min=100)
    memories = [Memory(id=f"n{i:04d}", text=f"entry {i:03d} " + ("caroline" if i % 3 == 0 else "someone")
                       + (" zebra" if i % 40 == 0 else "")) for i in range(600)]
    store.insert(memories, vectors=[serialize([1.0] + [0.0] * (store.embedder.dim - 1))] * len(memories))
    store.exact_below = 10**9
    whole = keyword_ranks(store, "caroline zebra", Filter(), 5, profile=profile)
    store.exact_below = 0
    statements: list[str] = []
    store.conn.set_trace_callback(statements.append)
    planned = keyword_ranks(store, "caroline zebra", Filter(), 5, profile=profile)
    store.conn.set_trace_callback(None)
    both = {store.db.seq(f"n{i:04d}") for i in range(0, 600, 120)}  # zebra and caroline
    assert {s for s, _ in planned} == both == {s for s, _ in whole}
    ranked = [sql for sql in statements if "bm25(" in sql]
    assert ranked and all("'(\"zebra\") AND (" in sql for sql in ranked)  # caroline chose no rows


def test_merging_the_keyword_index_leaves_one_segment_and_the_same_answers(store, monkeypatch):
    words = segmented(store)
    segments = store.keywords.segments()
    assert segments >= 4
    queries = [f"{a} {b}" for a, b in zip(words, words[3:])] + ["note 7-3", "kestrel w3x5y7"]
    before = {q: keyword_ranks(store, q, Filter(), 30) for q in queries}
    hits = [(h.memory.id, round(h.score, 6)) for h in search(store, "saffron glacier", limit=10)]
    steps = []
    real = store.db.transaction
    monkeypatch.setattr(store.db, "transaction", lambda: steps.append(1) or real())
    assert store.merge_keyword_index(step=2) == (segments, 1)
    assert len(steps) > 2  # two pages a step: several transactions
    store.conn.execute("INSERT INTO memories_fts(memories_fts, rank) VALUES ('integrity-check', 1)")
    assert {q: keyword_ranks(store, q, Filter(), 30) for q in queries} == before
    assert [(h.memory.id, round(h.score, 6)) for h in search(store, "saffron glacier", limit=10)] == hits
    steps.clear()
    assert store.merge_keyword_index() == (1, 1) and steps == []  # nothing to merge: no transaction


def test_a_writer_between_two_steps_of_the_merge_keeps_what_it_wrote(store, monkeypatch):
    segmented(store)
    other = MemoryStore(store.path, clock=store.clock)
    steps = []
    real = store.db.transaction

    def step():
        steps.append(1)
        if len(steps) == 2:  # another process writes; it waited at most one step
            other.add("a zeppelin over the harbour", allow_duplicate=True)
        return real()

    monkeypatch.setattr(store.db, "transaction", step)
    got = store.merge_keyword_index(step=2)
    assert len(steps) > 2
    assert got[1] <= 2 and store.keywords.segments() == got[1]  # the merged index, and the writer's own
    store.conn.execute("INSERT INTO memories_fts(memories_fts, rank) VALUES ('integrity-check', 1)")
    found = search(store, "zeppelin", limit=1, mode="keyword")
    assert [h.memory.text for h in found] == ["a zeppelin over the harbour"]
    assert store.count(Filter()) == 441
    store.merge_keyword_index()
    assert store.keywords.segments() == 1
    other.close()


def test_the_merge_reports_its_progress_up_to_the_whole(store):
    segmented(store)
    seen: list[tuple[int, int]] = []
    store.merge_keyword_index(step=2, pause=0, progress=lambda done, total: seen.append((done, total)))
    assert len(seen) > 3 and seen[0][0] == 0
    assert len({total for _, total in seen}) == 1 and seen[-1][0] == seen[-1][1] > 0
    assert all(a[0] <= b[0] for a, b in zip(seen, seen[1:]))
    assert all(done < total for done, total in seen[:-1])  # whole only when it is done
    seen.clear()
    store.merge_keyword_index(progress=lambda done, total: seen.append((done, total)))
    assert seen == []  # one segment: nothing to merge, nothing reported


def test_a_writer_waiting_on_the_merge_gets_in_between_two_steps(store, monkeypatch):
    """SQLite's busy handler sleeps up to 0.1 s between tries: the merge pauses longer than
    that between steps, so a writer waits about one step, not the whole merge."""
    import threading
    import time
    from contextlib import contextmanager

    segmented(store)
    real = store.db.transaction
    stepping = threading.Event()

    @contextmanager
    def long_step():  # each step holds the lock 0.1 s, as on a large index
        with real():
            stepping.set()
            time.sleep(0.1)
            yield

    monkeypatch.setattr(store.db, "transaction", long_step)
    waited: list[float] = []

    def writer() -> None:
        other = MemoryStore(store.path, clock=store.clock)
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


"""KeywordIndex.neighbours: the live thread members within the keyword window of each candidate,
what the dense side's thread lift reads (pmem.search.thread_lift)."""

from __future__ import annotations

from pmem import Memory


def seqs(store, memories) -> list[int]:
    by_id = dict(store.conn.execute("SELECT id, seq FROM memories").fetchall())
    return [by_id[m.id] for m in memories]


def test_the_window_s_live_members_on_each_side(store):
    turns = store.insert([Memory(id="", text=f"turn {i}", thread="chat") for i in range(7)])
    alone = store.insert([Memory(id="", text="a note of its own")])
    s = seqs(store, turns + alone)
    got = store.keywords.neighbours(s)
    assert sorted(got[s[3]]) == [s[1], s[2], s[4], s[5]]  # the default window, (2, 2)
    assert sorted(got[s[0]]) == [s[1], s[2]]
    assert s[7] not in got  # no thread: no neighbours
    store.forget(turns[2].id)
    got = store.keywords.neighbours(s)
    assert sorted(got[s[3]]) == [s[0], s[1], s[4], s[5]]  # the forgotten one is stepped over
    assert s[2] not in got  # nor does it have any itself
    store.keywords.set_window(1, 0)
    assert store.keywords.neighbours([s[3]]) == {s[3]: [s[1]]}


def test_other_threads_and_no_candidates(store):
    a = store.insert([Memory(id="", text=f"a {i}", thread="a") for i in range(2)])
    b = store.insert([Memory(id="", text=f"b {i}", thread="b") for i in range(2)])
    s = seqs(store, a + b)
    assert store.keywords.neighbours(s) == {s[0]: [s[1]], s[1]: [s[0]], s[2]: [s[3]], s[3]: [s[2]]}
    assert store.keywords.neighbours([]) == {}
    store.keywords.set_window(0, 0)
    assert store.keywords.neighbours(s) == {}

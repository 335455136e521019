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


def test_candidate_neighbours_are_the_neighbours_among_the_candidates(store):
    """What the thread lift reads: for any set of candidates, each one's window cut to the
    candidates themselves, as neighbours() and a filter give, forgotten members stepped over."""
    import random

    rng = random.Random(7)
    made = []
    for t in range(6):
        made += store.insert([Memory(id="", text=f"thread {t} turn {i}", thread=f"t{t}") for i in range(9)])
    made += store.insert([Memory(id="", text=f"a note {i}") for i in range(5)])
    s = seqs(store, made)
    store.forget(made[4].id)
    store.forget(made[20].id)
    for size in (0, 1, 2, 5, 12, 30, len(s)):
        for _ in range(5):
            picked = rng.sample(s, size)
            kept = set(picked)
            whole = {seq: [n for n in near if n in kept] for seq, near in store.keywords.neighbours(picked).items()}
            assert store.keywords.candidate_neighbours(picked) == {seq: near for seq, near in whole.items() if near}


def test_candidates_alone_in_their_thread_read_no_window(store, monkeypatch):
    turns = store.insert([Memory(id="", text=f"turn {i}", thread=f"chat {i % 3}") for i in range(9)])
    s = seqs(store, turns)
    read: list[list[int]] = []
    real = store.keywords.neighbours
    monkeypatch.setattr(store.keywords, "neighbours", lambda seqs: read.append(list(seqs)) or real(seqs))
    assert store.keywords.candidate_neighbours([s[0], s[1], s[2]]) == {}  # three threads, one candidate each
    assert read == []
    assert store.keywords.candidate_neighbours([s[0], s[3], s[1]]) == {s[0]: [s[3]], s[3]: [s[0]]}
    assert sorted(read[0]) == sorted([s[0], s[3]])

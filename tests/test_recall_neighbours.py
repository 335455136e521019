"""Recall's thread neighbours get the budget the matches leave: a neighbour never takes the place
of a match, still comes where the matches do not fill the block, and joins its match's block in
thread order, bridging the blocks of two matches of its thread."""

from __future__ import annotations

import json

from pmem import Memory, estimate_tokens, recall, render, search

TURNS = ["Mel: Where did you go last summer?", "Ana: Yes, last May, with my sister!",
         "Mel: That sounds lovely.", "Ana: We hiked the volcano trail at dawn.",
         "Mel: Did you bring the dog?", "Ana: No, he stayed with grandpa."]


def chat(store, texts=TURNS, thread="chat") -> list[Memory]:
    """A conversation whose keyword entries hold each turn alone (window 0, 0): a turn's
    neighbours match no query by their words, they come only as recall's context."""
    store.insert([Memory(id="", text=f"note {i}: groceries, taxes and the garden shed") for i in range(30)])
    ms = store.insert([Memory(id="", text=t, thread=thread) for t in texts])
    store.keywords.set_window(0, 0)
    return ms


def matches_only(store, query: str, budget: int) -> list[str]:
    return [m.id for m in recall(store, query, budget=budget, neighbours=0, min_similarity=2.0).relevant]


def test_a_neighbour_never_takes_a_matchs_place(store):
    ms = chat(store)
    others = store.insert([Memory(id="", text=f"Volcano note {i}: lava and ash, the crater rim, day {i}")
                           for i in range(12)])
    query = "hiked the volcano trail at dawn"
    ranked = [h.memory.id for h in search(store, query, mode="keyword", limit=20)]
    assert ranked[0] == ms[3].id and set(ranked[1:]) == {m.id for m in others}  # the turn first, alone
    every = recall(store, query, budget=5000, neighbours=0, min_similarity=2.0)
    budget = every.tokens  # exactly what the matches take: no room for one more line
    r = recall(store, query, budget=budget, neighbours=1, min_similarity=2.0)
    assert [m.id for m in r.relevant] == matches_only(store, query, budget) == [m.id for m in every.relevant]
    assert r.left_out == 0 and not r.neighbour_of and r.tokens <= budget
    # room for one neighbour line past the matches: the nearest one before comes, in thread order
    room = recall(store, query, budget=budget + estimate_tokens(f"- [2026-01-01 · {ms[2].id}] {TURNS[2]}") + 1,
                  neighbours=1, min_similarity=2.0)
    ids = [m.id for m in room.relevant]
    assert set(ids) == set(ranked) | {ms[2].id} and room.neighbour_of == {ms[2].id: ms[3].id}
    assert ids.index(ms[2].id) + 1 == ids.index(ms[3].id)


def test_neighbours_come_where_the_matches_leave_room(store):
    ms = chat(store)
    query = "hiked the volcano trail at dawn"
    r = recall(store, query, neighbours=2, min_similarity=2.0)
    ids = [m.id for m in r.relevant]
    assert ids == [m.id for m in ms[1:6]]  # the match and two on each side, one block in thread order
    assert r.neighbour_of == {m.id: ms[3].id for m in ms[1:6] if m is not ms[3]}
    assert r.tokens <= 1500 and not r.left_out
    data = json.loads(render(r, "json"))
    assert [d["neighbour_of"] for d in data["relevant"]] == [ms[3].id, ms[3].id, None, ms[3].id, ms[3].id]


def test_a_neighbour_bridges_two_matches_into_one_block(store):
    """The best match's neighbour, placed after every match, sits between it and a later match of
    its thread: the thread's members are one block in thread order, before the match of another
    thread that ranked between the two."""
    texts = ["Mel: morning!", "Ana: The volcano trail opens at dawn, the ranger said.", "Mel: That early?",
             "Ana: Yes, the trail.", "Mel: ok"]
    ms = chat(store, texts)
    other, = store.insert([Memory(id="", text="The volcano trail at dawn")])
    query = "the volcano trail opens at dawn, the ranger said"
    ranked = [h.memory.id for h in search(store, query, limit=60) if h.keyword_rank is not None]
    assert ranked == [ms[1].id, other.id, ms[3].id]  # the turn, the other thread's match, the later turn
    r = recall(store, query, neighbours=1, min_similarity=2.0)
    assert [m.id for m in r.relevant] == [*(m.id for m in ms), other.id]
    assert r.neighbour_of == {ms[0].id: ms[1].id, ms[2].id: ms[1].id, ms[4].id: ms[3].id}
    md = render(r, "md")
    assert md.index(texts[2]) < md.index(texts[3]) < md.index(texts[4]) < md.index("The volcano trail at dawn")

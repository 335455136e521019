"""The dense side of a thread: a threaded turn's distance moves towards a nearer live neighbour's
among the dense candidates before the fusion (pmem.search.thread_lift), on the real store with
sqlite-vec (fake-64 vectors: shared words and trigrams give high cosine)."""

from __future__ import annotations

import pytest

from pmem import Memory, search
from pmem.search import DEFAULT_TUNING, Tuning, thread_lift
from pmem.store import Filter

QUESTION = "When did Ana go to the support group?"
ASKED = "Mel: Did you go to the support group this week?"
ANSWER = "Ana: Yes, last Tuesday!"
# Alone, nearer the question than the answer is (fake-64 cosine distance 0.91, 0.92 against 1.0)
CLOSER = ["Ana: Yes, the train was late.", "Ana: I painted the fence blue last year."]
OTHERS = ["Ana: My sister lives in Lisbon.", "Bo: The group meets on Fridays in the library.",
          "Notes about Tuesday's meeting agenda."]


def chat(store, turns=(ASKED, ANSWER, "Mel: How was it?", "Ana: Everyone was kind.", "Mel: I am glad.")):
    threaded = store.insert([Memory(id="", text=t, thread="chat") for t in turns])
    alone = store.insert([Memory(id="", text=t) for t in CLOSER + OTHERS])
    return {m.text: m for m in threaded + alone}


def order(store, mode: str = "semantic", flt: Filter | None = None) -> list[str]:
    return [h.memory.text for h in search(store, QUESTION, flt, mode=mode, limit=20)]


def own_distance(store, text: str) -> float:
    hits = search(store, QUESTION, mode="semantic", limit=20, tuning=Tuning(thread_lift=0.0))
    return next(h.distance for h in hits if h.memory.text == text)


@pytest.mark.parametrize("mode", ["semantic", "hybrid"])
def test_a_turn_whose_neighbour_holds_the_meaning_is_found(store, mode):
    chat(store)
    alone = [h.memory.text for h in search(store, QUESTION, mode=mode, limit=20, tuning=Tuning(thread_lift=0.0))]
    assert all(alone.index(c) < alone.index(ANSWER) for c in CLOSER)  # by its own words it is below them
    lifted = order(store, mode)
    assert all(lifted.index(ANSWER) < lifted.index(c) for c in CLOSER)
    assert lifted[0] == ASKED


def test_what_a_hit_reports_is_its_own_distance_and_its_rank_the_lifted_one(store):
    chat(store)
    hits = {h.memory.text: h for h in search(store, QUESTION, mode="semantic", limit=20)}
    d, near = hits[ANSWER].distance, hits[ASKED].distance
    assert d == pytest.approx(own_distance(store, ANSWER))
    assert near < d and hits[ANSWER].rank_score > 1.0 - d
    assert hits[ANSWER].rank_score == pytest.approx(1.0 - (d - DEFAULT_TUNING.thread_lift * (d - near)))
    for text in CLOSER + OTHERS:  # no thread: the rank is the cosine itself, exactly
        assert hits[text].rank_score == 1.0 - hits[text].distance


@pytest.mark.parametrize("mode", ["semantic", "hybrid"])
def test_memories_without_a_thread_score_exactly_as_before(store, mode):
    store.insert([Memory(id="", text=t) for t in [ASKED, ANSWER, *CLOSER, *OTHERS]])
    on = search(store, QUESTION, mode=mode, limit=20)
    off = search(store, QUESTION, mode=mode, limit=20, tuning=Tuning(thread_lift=0.0))
    assert [(h.memory.id, h.rank_score, h.distance, h.semantic_rank) for h in on] == \
        [(h.memory.id, h.rank_score, h.distance, h.semantic_rank) for h in off]


def test_a_forgotten_neighbour_lends_nothing(store):
    ms = chat(store, (ASKED, ANSWER))
    store.forget(ms[ASKED].id)
    lifted = order(store)
    assert ASKED not in lifted
    assert all(lifted.index(c) < lifted.index(ANSWER) for c in CLOSER)
    hits = {h.memory.text: h for h in search(store, QUESTION, Filter.everything(), mode="semantic", limit=20)}
    # listed too, the forgotten turn neither lends (the answer keeps its cosine) nor borrows
    assert hits[ANSWER].rank_score == 1.0 - hits[ANSWER].distance
    # the turn that asks is put back as any question is (pmem.search.asking), and by that alone
    step = DEFAULT_TUNING.question_penalty * (1.0 - store.thresholds().score_floor)
    assert hits[ASKED].rank_score == pytest.approx(1.0 - hits[ASKED].distance - step)


def test_a_deleted_neighbour_lends_nothing(store):
    ms = chat(store, (ASKED, ANSWER))
    store.delete(ms[ASKED].id)
    hits = {h.memory.text: h for h in search(store, QUESTION, Filter.everything(), mode="semantic", limit=20)}
    assert ASKED not in hits
    assert hits[ANSWER].rank_score == 1.0 - hits[ANSWER].distance


def test_a_neighbour_the_filter_leaves_out_lends_nothing(store):
    ms = chat(store, (ASKED, ANSWER))
    store.pin(ms[ANSWER].id)
    hits = search(store, QUESTION, Filter(pinned=True), mode="semantic", limit=20)
    assert [h.memory.text for h in hits] == [ANSWER]
    assert hits[0].rank_score == 1.0 - hits[0].distance


def test_the_window_is_the_keyword_index_s(store):
    turns = [ASKED, "Mel: How was it?", "Ana: Everyone was kind.", ANSWER]  # the asking turn 3 before
    chat(store, turns)
    wide = order(store)
    store.keywords.set_window(3, 2)
    assert order(store).index(ANSWER) < wide.index(ANSWER)


def test_thread_lift_only_gains_and_breaks_ties_by_seq():
    sem = [(1, 0.2), (2, 0.5), (3, 0.6), (4, 0.6)]
    assert thread_lift(sem, {}, 0.2) is sem
    assert thread_lift(sem, {1: [2]}, 0.0) is sem
    out = dict(thread_lift(sem, {1: [2], 2: [1, 9], 4: [3]}, 0.5))
    assert out == {1: 0.2, 2: 0.35, 3: 0.6, 4: 0.6}  # 9: not a candidate, lends nothing
    assert thread_lift([(5, 0.4), (3, 0.5), (6, 0.2)], {3: [6]}, 0.5) == [(6, 0.2), (3, 0.35), (5, 0.4)]

"""A question is not an answer: a memory whose text is itself a question moves back on the dense side
before the fusion (pmem.search.asking, MemoryStore.questions), on the real store with sqlite-vec
(fake-64 vectors: shared words and trigrams give high cosine) and, marked `model`, with the default
models, on the questions of benchmarks/data/paraphrase.json that a LoCoMo turn asking back took."""

from __future__ import annotations

import pytest

from pmem import Memory, MemoryStore, search
from pmem.search import DEFAULT_TUNING, Tuning, asking
from pmem.store import Filter

OFF = Tuning(question_penalty=0.0)


def seqs(store, texts) -> dict[str, int]:
    ms = store.insert([Memory(id="", text=t) for t in texts])
    by_id = dict(store.conn.execute("SELECT id, seq FROM memories").fetchall())
    return {t: by_id[m.id] for t, m in zip(texts, ms)}  # the stored text is stripped


def test_which_memories_are_questions(store):
    asked = ["Do you have a pet?", "¿Dónde está la llave?", "あなたの猫の名前は？", "متى الموعد؟",
             'Mel asked "how was it?"', "What did she say?)  \n", "Is it Tuesday?\t"]
    stated = ["The key is under the pot.", "Who knows? I left it at home.", "A?B is a valid name",
              "I asked myself why", "Yes!"]
    by_text = seqs(store, asked + stated)
    assert store.questions(by_text.values()) == {by_text[t] for t in asked}
    assert store.questions([]) == set()
    assert store.questions([by_text[stated[0]], 10_000]) == set()  # an unknown row is no question
    store.forget(store.find_exact(asked[0]).id)  # the test is of the text: a filter is search's
    assert by_text[asked[0]] in store.questions([by_text[asked[0]]])


def test_asking_moves_exactly_the_questions_and_sorts_again():
    sem = [(3, 0.25), (1, 0.375), (2, 0.5), (4, 0.75)]  # distances exact in binary: ties are ties
    assert asking(sem, {3}, 0.0625) == [(3, 0.3125), (1, 0.375), (2, 0.5), (4, 0.75)]
    assert asking(sem, {3}, 0.125) == [(1, 0.375), (3, 0.375), (2, 0.5), (4, 0.75)]  # a tie: by seq
    assert asking(sem, {3, 1}, 0.5) == [(2, 0.5), (3, 0.75), (4, 0.75), (1, 0.875)]
    assert asking(sem, {9}, 0.5) == sem  # not a candidate: nothing moves
    assert asking(sem, set(), 0.5) is sem and asking(sem, {3}, 0.0) is sem


QUERY = "When does the group meet?"
# fake-64 distances 0.62 and 0.63: a question a little nearer than the statement, well within the step
ASKS = "Is the group on Fridays?"
ANSWERS = "The group meets on Fridays."


@pytest.mark.parametrize("mode", ["semantic", "hybrid"])
def test_a_statement_as_near_as_a_question_comes_first(store, mode):
    store.insert([Memory(id="", text=t) for t in [ASKS, ANSWERS, "My sister lives in Lisbon.",
                                                   "The fence was painted blue last year."]])
    before = [h.memory.text for h in search(store, QUERY, mode=mode, limit=4, tuning=OFF)]
    assert before.index(ASKS) < before.index(ANSWERS)
    after = [h.memory.text for h in search(store, QUERY, mode=mode, limit=4)]
    assert after.index(ANSWERS) < after.index(ASKS)
    assert sorted(after) == sorted(before)  # moved back, never out


def test_a_question_keeps_its_own_distance_and_loses_the_step_in_rank(store):
    store.insert([Memory(id="", text=t) for t in [ASKS, ANSWERS, "My sister lives in Lisbon."]])
    hits = {h.memory.text: h for h in search(store, QUERY, mode="semantic", limit=3)}
    own = {h.memory.text: h for h in search(store, QUERY, mode="semantic", limit=3, tuning=OFF)}
    step = DEFAULT_TUNING.question_penalty * (1.0 - store.thresholds().score_floor)
    assert hits[ASKS].distance == own[ASKS].distance
    assert hits[ASKS].score == own[ASKS].score  # what a hit reports is its own
    assert hits[ASKS].rank_score == pytest.approx(1.0 - own[ASKS].distance - step)
    for text in (ANSWERS, "My sister lives in Lisbon."):
        assert hits[text].rank_score == own[text].rank_score


def test_a_store_without_questions_ranks_exactly_as_before(store):
    store.insert([Memory(id="", text=t) for t in [ANSWERS, "My sister lives in Lisbon.", "The meeting is at nine."]])
    for mode in ("semantic", "hybrid"):
        on = search(store, QUERY, mode=mode, limit=3)
        off = search(store, QUERY, mode=mode, limit=3, tuning=OFF)
        assert [(h.memory.id, h.rank_score, h.semantic_rank) for h in on] == \
            [(h.memory.id, h.rank_score, h.semantic_rank) for h in off]


def test_keyword_mode_is_untouched(store):
    store.insert([Memory(id="", text=t) for t in [ASKS, ANSWERS]])
    on = search(store, QUERY, mode="keyword", limit=2)
    off = search(store, QUERY, mode="keyword", limit=2, tuning=OFF)
    assert [(h.memory.id, h.rank_score) for h in on] == [(h.memory.id, h.rank_score) for h in off]


# benchmarks/data/paraphrase.json's questions whose memory a LoCoMo turn asking back outranked
# (docs/decisions/0052-question-penalty.md), with those turns and a few others
PAIRS = [
    ("Who looks after our pet when we travel?", "My neighbour Ruth feeds the cat when we're away.",
     "Caroline: That's so nice! What pet do you have?"),
    ("When did we get married?", "Our wedding anniversary is on 21 September.",
     "Caroline: Wow, what an amazing family pic! How long have you been married?"),
]
OTHERS = ["The team standup is at 9:30 every weekday in the small meeting room.",
          "Melanie: We went camping with the kids last weekend.", "The cat, Miso, needs her flea treatment on the 1st.",
          "I run 5 km on Sunday mornings along the canal."]


@pytest.fixture
def real(tmp_path, monkeypatch):
    monkeypatch.setenv("PMEM_THREADS", "1")
    s = MemoryStore(tmp_path / "real.db")  # the default models, the English side on
    yield s
    s.close()


@pytest.mark.model
def test_the_paraphrase_sets_questions_find_the_statement_with_the_real_models(real):
    real.insert([Memory(id="", text=t) for pair in PAIRS for t in pair[1:]] +
                [Memory(id="", text=t) for t in OTHERS])
    for question, statement, asks in PAIRS:
        first = search(real, question, mode="semantic", limit=1, tuning=OFF)[0].memory.text
        assert first == asks, question  # what the dense side found first before
        assert search(real, question, mode="semantic", limit=1)[0].memory.text == statement, question
        ranked = [h.memory.text for h in search(real, question, Filter(), limit=5)]
        assert ranked.index(statement) < ranked.index(asks), question

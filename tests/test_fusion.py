"""Hybrid fusion that follows each query's evidence: the features, the keyword share, and what
they decide with the real default model (a question in other words, a question by a rare name)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pmem import Memory, search
from pmem.search import DEFAULT_TUNING, Evidence, _minmax, evidence, fuse, keyword_ranks, keyword_share, semantic_ranks
from pmem.store import Filter

FLOOR = 0.5  # a model floor for the hand-made lists: cosine 0.75 rescales to 0.5


def test_evidence_reads_both_lists():
    kw = [(1, -8.0), (2, -6.0), (3, -1.0)]
    sem = [(3, 0.1), (4, 0.2), (1, 0.3)]  # distances: cosines 0.9, 0.8, 0.7
    ev = evidence(kw, sem, FLOOR)
    assert ev.kw_best == pytest.approx(8 / (8 + DEFAULT_TUNING.bm25_half))
    assert ev.kw_gap == pytest.approx((8 - 6) / 8)
    assert ev.kw_many == 0.0
    assert ev.sem_best == pytest.approx((0.9 - FLOOR) / (1 - FLOOR))
    assert ev.sem_gap == pytest.approx((0.9 - 0.8) / (1 - FLOOR))
    # the best keyword match (1) is third by meaning: its rescaled cosine over the best one's
    assert ev.agree == pytest.approx(((0.7 - FLOOR) / (1 - FLOOR)) / ((0.9 - FLOOR) / (1 - FLOOR)))


def test_evidence_of_lone_full_and_empty_lists():
    lone = evidence([(1, -3.0)], [(2, 0.1)], FLOOR)
    assert lone.kw_gap == 1.0 and lone.agree == 0.0  # a match standing alone, unknown to the meaning
    full = evidence([(i, -1.0) for i in range(DEFAULT_TUNING.candidates)], [(0, 0.1)], FLOOR)
    assert full.kw_many == 1.0 and full.agree == pytest.approx(1.0)
    assert evidence([], [], FLOOR) == Evidence(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    far = evidence([(1, -3.0)], [(1, 0.9)], FLOOR)  # cosine 0.1: below the floor
    assert far.sem_best == 0.0 and far.agree == 0.0


def test_keyword_share_follows_the_evidence():
    # the dense side's clear winner, and a lone keyword match elsewhere: the meaning decides
    clear = Evidence(kw_best=0.4, kw_gap=1.0, kw_many=0.0, sem_best=0.3, sem_gap=0.15, agree=0.0)
    # many keyword matches, their best also the meaning's best, the dense side flat: the words decide
    words = Evidence(kw_best=0.6, kw_gap=0.05, kw_many=1.0, sem_best=0.35, sem_gap=0.01, agree=1.0)
    assert keyword_share(clear) < 0.1 < 0.5 < keyword_share(words) <= DEFAULT_TUNING.share_max
    fixed = replace(DEFAULT_TUNING, adaptive=False)
    kw, sem = [(1, -5.0), (2, -1.0)], [(2, 0.1), (1, 0.4)]
    want = {1: 0.6 * 1.0 + 0.4 * 0.0, 2: 0.6 * 0.0 + 0.4 * 1.0}
    assert fuse(kw, sem, FLOOR, "q", tuning=fixed) == pytest.approx(want)


def test_search_ranks_by_the_share_of_each_query(store):
    store.insert([Memory(id="", text=t) for t in (
        "Dana approves every deploy", "The cabin wifi password is hunter2", "Dana likes hiking near the cabin",
        "Notes from a lecture on cabins", "The heating at the cabin needs work")])
    seq_of = {m.id: seq for seq, m in store.memories_by_seq(range(1, 50)).items()}
    for query in ("cabin wifi", "Dana deploys", "heating"):
        kw = keyword_ranks(store, query, Filter(), DEFAULT_TUNING.candidates, DEFAULT_TUNING.context_weight)
        sem = semantic_ranks(store, query, Filter(), DEFAULT_TUNING.candidates)
        w = keyword_share(evidence(kw, sem, store.thresholds().score_floor))
        want: dict[int, float] = {}
        for weight, pairs in ((w, [(q, -b) for q, b in kw]), (1 - w, [(q, 1 - d) for q, d in sem])):
            for q, v in _minmax(pairs):
                want[q] = want.get(q, 0.0) + weight * v
        order = [q for q, _ in sorted(want.items(), key=lambda kv: (-kv[1], kv[0]))]
        hits = search(store, query, limit=10, collapse=False)
        assert [seq_of[h.memory.id] for h in hits] == order[:10]
        assert [h.rank_score for h in hits] == pytest.approx([want[q] for q in order[:10]])


# --- the real default model (multilingual-e5-small) ------------------------------------------------

MEMORIES = [
    "I'm allergic to penicillin; it gives me hives.",
    "My GP is Dr. Halvorsen at the Elm Street surgery.",
    "Zsofia's hatchback is a red Fiat.", "Zoltan's hatchback is a green Skoda.",
    # distractors sharing the questions' common words ("avoid", "must", "family", "car")
    "I avoid the motorway at rush hour.", "We try to avoid sugar after eight in the evening.",
    "I must renew the parking permit in March.", "My family visits us every Christmas.",
    "The family car is a blue Volvo with a roof rack.", "We had a family picnic by the lake in June.",
    "The car needs new tyres before the winter.", "The spare key is under the blue flowerpot.",
    "Grandma's birthday is on 9 August.", "The dog's vet is open until 7.",
]


@pytest.fixture
def real_store(tmp_path, monkeypatch):
    from pmem.store import MemoryStore

    monkeypatch.setenv("PMEM_THREADS", "1")
    s = MemoryStore(tmp_path / "real.db")  # the default model: multilingual-e5-small
    s.insert([Memory(id="", text=t) for t in MEMORIES])
    yield s
    s.close()


@pytest.mark.model
@pytest.mark.parametrize("question, answer", [("Which antibiotic must I avoid?", "I'm allergic"),
                                              ("Who is my family doctor?", "My GP")])
def test_a_question_in_other_words_finds_its_memory_first(real_store, question, answer):
    hits = search(real_store, question, limit=3)
    assert hits[0].memory.text.startswith(answer)
    assert hits[0].keyword_rank is None  # by meaning alone, past the memories sharing a common word
    # the share fixed at 0.6, as before, put one of those first
    fixed = search(real_store, question, limit=3, tuning=replace(DEFAULT_TUNING, adaptive=False))
    assert not fixed[0].memory.text.startswith(answer) and fixed[0].keyword_rank == 1


@pytest.mark.model
def test_a_rare_name_still_decides(real_store):
    hits = search(real_store, "What colour is Zsofia's car?", limit=3)
    assert hits[0].memory.text.startswith("Zsofia's")
    assert hits[0].keyword_rank == 1

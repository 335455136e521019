"""benchmarks/dream_bench.py --chat: the figures of what the chat model contributed (merges made and
dropped by reason, model-written vs extractive summaries, the model's stats)."""

from __future__ import annotations

import pytest

from pmem import dream
from pmem.models.cache import PROCESS

from fakes import FakeGenerator

NOW = "2026-01-01T00:00:00Z"


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("dream_bench")


def fresh() -> dict:
    return {"merges": 0, "summaries_by_model": 0, "summaries_extractive": 0, "merges_dropped": {}}


def test_merges_made_and_dropped_are_counted_with_their_texts(store, bench):
    store.config = store.config.with_values(merge_threshold=0.7)  # the fake embedder scores these ~0.73
    notes = ["Bob's sister lives in Lisbon and works as a nurse", "Bob's sister lives in Lisbon with two cats"]
    for text in notes:
        store.add(text, allow_duplicate=True)
    chat, dump = fresh(), []
    plan = dream.plan(store, only={"merge"}, now=NOW, generator=FakeGenerator())
    bench.count_chat(chat, plan, store, "c1", dump)
    assert chat["merges"] == 1 and chat["merges_dropped"] == {}
    (made,) = dump
    assert made["kind"] == "merge" and sorted(made["members"]) == sorted(notes) and made["conv"] == "c1"
    assert "nurse" in made["text"] and "cats" in made["text"]
    # a model that adds what no member says: the merge is dropped, counted by its reason's first words
    liar = FakeGenerator(extra=" She moved there in 2019 from Madrid.")
    bench.count_chat(chat, dream.plan(store, only={"merge"}, now=NOW, generator=liar), store, "c2", dump)
    assert chat["merges"] == 1 and sum(chat["merges_dropped"].values()) == 1
    (why,) = chat["merges_dropped"]
    assert len(why.split()) <= 4 and ":" not in why
    assert dump[-1]["kind"] == "dropped merge" and "Madrid" in dump[-1]["text"]
    assert dump[-1]["reason"].startswith(why)


def test_the_loaded_chat_models_stats_are_summed(bench, monkeypatch):
    class Loaded:
        def __init__(self, calls, runaways):
            self.stats = {"calls": calls, "runaways": runaways}

    for key in list(PROCESS.generators):
        monkeypatch.delitem(PROCESS.generators, key)
    assert bench.chat_stats() == {}
    monkeypatch.setitem(PROCESS.generators, "a.gguf", Loaded(3, 1))
    monkeypatch.setitem(PROCESS.generators, "b.gguf", Loaded(4, 0))
    assert bench.chat_stats() == {"calls": 7, "runaways": 1}


def test_summaries_are_counted_as_written_by_the_model_or_extractive(store, bench):
    for i in range(4):
        store.add(f"Caroline: we went hiking on trail {i} near the lake and it was lovely.", tier="episodic",
                  created_at=f"2023-05-08T10:0{i}:00Z", allow_duplicate=True)

    class Short(FakeGenerator):
        def generate_json(self, messages, schema, max_tokens=256):
            return {"text": "Caroline went hiking on trail 0 near the lake and it was lovely."}

    chat, dump = fresh(), []
    # the fake joins every note: not shorter, so the extractive summary is used; Short's is taken
    for gen in (FakeGenerator(), Short()):
        bench.count_chat(chat, dream.plan(store, only={"compress"}, now=NOW, generator=gen), store, "c", dump)
    assert (chat["summaries_extractive"], chat["summaries_by_model"]) == (1, 1)
    assert [d["extractive"] for d in dump] == [True, False] and dump[1]["text"].startswith("Caroline went hiking")
    assert len(dump[0]["members"]) == 4

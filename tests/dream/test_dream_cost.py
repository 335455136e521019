"""What a dream's plan computes only once, or only for the memories that need it
(docs/decisions/0056-dream-plan-speed.md); that the plan stays the same is checked by
benchmarks/dream_plan_compare.py and dream_bench.py --plan-speed against another tree."""

from __future__ import annotations

import random

import pytest

from pmem import dream, stemming
from pmem.dream import sameness
from pmem.text import stem

from fakes import FakeGenerator

NOW = "2026-01-01T00:00:00Z"


def test_a_word_is_stemmed_once_per_language_and_stemmer(monkeypatch):
    if not stemming.available():
        pytest.skip("Snowball (the multilingual extra) is not installed")
    calls = []
    real = stemming.normalize
    monkeypatch.setattr(stemming, "normalize", lambda text, lang=None: calls.append((text, lang)) or real(text, lang))
    fresh = "".join(random.Random().choice("bcdfgklmnprstvz") for _ in range(12))  # a word no test stemmed yet
    text = f"Dana: I adopted two rescue kittens from the shelter on Tuesday, {fresh}ings"
    first = sameness.facets(text)
    stemmed = len(calls)
    assert stemmed > 0
    assert sameness.facets(text) == first and len(calls) == stemmed  # every word's stem was kept
    assert real("kittens", "en") == "kitten" and "kitten" in first.stems  # Snowball's stem is the one kept
    assert real("парке", "ru") in sameness.facets("Я встретился с Сергеем в парке").stems  # per language
    # the stem kept is the one of the stemmer in use: without Snowball, the simple stemmer's
    monkeypatch.setattr(stemming, "available", lambda: False)
    assert sameness.facets(text).stems == frozenset(stem(w) for w in first.forms.values())


def test_merge_reads_who_said_it_without_every_members_facets(store, monkeypatch):
    store.config = store.config.with_values(merge_threshold=-1.0)
    store.add("I love the beach at Carmel with my dogs.", meta={"speaker": "Audrey"})
    store.add("I love the beach at Carmel with my two dogs.", meta={"speaker": "Andrew"})
    computed = []
    real = sameness.facets
    monkeypatch.setattr(sameness, "facets", lambda text, meta=None: computed.append(text) or real(text, meta))
    plan = dream.plan(store, only={"merge"}, now=NOW, generator=FakeGenerator())
    # the speaker from meta alone keeps the two apart (the texts have no label)
    assert plan.considered == 2
    assert [p for p in plan.proposals if p.kind == "merge"] == [] and plan.dropped == []
    assert computed == []  # nothing merged: no memory's facets were needed


def test_a_merge_still_labels_its_one_speaker(store):
    store.config = store.config.with_values(merge_threshold=-1.0)
    store.add("Audrey: My dogs love the beach at Carmel.", meta={"speaker": "Audrey"})
    store.add("Audrey: My dogs run on the beach at Carmel every weekend.", meta={"speaker": "Audrey"})
    plan = dream.plan(store, only={"merge"}, now=NOW, generator=FakeGenerator())
    (merge,) = [p for p in plan.proposals if p.kind == "merge"]
    assert merge.result_text.startswith("Audrey: ")


def test_a_sentence_start_is_looked_for_only_before_a_capitalised_word(monkeypatch):
    searched = []
    pattern = sameness._SENTENCE_START

    class Counting:
        @staticmethod
        def search(text):
            searched.append(text)
            return pattern.search(text)

    monkeypatch.setattr(sameness, "_SENTENCE_START", Counting)
    said = sameness.facets("The printer is on the third floor. Then Dana moved it to Lisbon in may, not May 3")
    assert len(searched) == 5  # The, Then, Dana, Lisbon, May: of 19 words
    # a capitalised stop word opening a sentence is no name; "may" is a month only capitalised
    assert said.names == {"dana", "lisbon"} and "month:5" in said.keys and said.negated
    assert sameness.facets("the printer is on the third floor").keys == frozenset()

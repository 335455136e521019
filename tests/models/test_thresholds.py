"""Cosine thresholds per embedding model (pmem.models.thresholds): stored with the model, used by dream,
extract and recall through the store, the user's settings still winning where they exist."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pmem import dream, extract
from pmem.config import Settings
from pmem.models import thresholds
from pmem.models.embed import FakeEmbedder
from pmem.models.thresholds import E5_SMALL, MINILM, effective, for_model
from pmem.recall import recall
from pmem.service import MemoryStore

from fakes import FakeGenerator


class NamedFake(FakeEmbedder):
    """A fake embedder that stores its vectors under a real model's name."""

    def __init__(self, name: str):
        super().__init__(64)
        self.name = name


def test_each_model_has_its_own_thresholds():
    assert for_model("all-MiniLM-L6-v2") is MINILM
    assert for_model("all-MiniLM-L6-v2.f16") is MINILM  # the stored name: the GGUF's stem
    assert for_model("multilingual-e5-small") is E5_SMALL
    assert for_model("multilingual-e5-small.q4") is E5_SMALL  # E5Embedder's name
    assert for_model("/models/multilingual-e5-small.q4.e5s1") is E5_SMALL
    assert for_model("fake-64") is MINILM and for_model(None) is MINILM  # unknown: as before
    assert (MINILM.dedup, MINILM.merge, MINILM.supersede, MINILM.grounding, MINILM.recall_cutoff) == \
        (0.86, 0.80, 0.85, 0.5, 0.2)
    assert E5_SMALL.recall_cutoff > MINILM.recall_cutoff and E5_SMALL.dedup > MINILM.dedup
    from pmem.models.e5 import THRESHOLDS, E5Embedder

    assert THRESHOLDS is E5_SMALL and E5Embedder.thresholds is E5_SMALL


def test_user_settings_override_the_models_values():
    assert effective("multilingual-e5-small", Settings()) is E5_SMALL  # defaults: the model's
    mine = Settings().with_values(dedup_threshold=0.92)  # set by the user, even to MiniLM's default
    assert effective("multilingual-e5-small", mine).dedup == 0.92
    assert effective("multilingual-e5-small", mine).merge == E5_SMALL.merge
    assert effective("all-MiniLM-L6-v2", Settings(merge_threshold=0.7)).merge == 0.7


def _store(tmp_path, name: str, **settings) -> MemoryStore:
    return MemoryStore(tmp_path / f"{name}.db", config=Settings(embed_model="fake-64", **settings),
                       embedder=NamedFake(name))


@pytest.mark.parametrize("name, want", [("multilingual-e5-small.q4", E5_SMALL), ("all-MiniLM-L6-v2.f16", MINILM)])
def test_a_store_uses_its_vectors_models_thresholds(tmp_path, name, want):
    with _store(tmp_path, name) as store:
        store.add("Dana approves deploys on Fridays")
        assert store.vector_model()[0] == name
        assert store.thresholds() == want
        p = dream.plan(store, only={"dedup"}, generator=False)
        assert p.settings["dedup_threshold"] == want.dedup and p.settings["merge_threshold"] == want.merge


def test_a_store_without_vectors_uses_the_configured_models():
    assert MemoryStore.thresholds  # the method exists on the class
    s = Settings(embed_model="multilingual-e5-small")
    assert effective(s.embed_model, s) is E5_SMALL


def test_dream_dedup_follows_the_models_threshold(tmp_path):
    """Two near-duplicates at a cosine between MiniLM's and e5's dedup thresholds: one model pairs
    them, the other does not."""
    texts = ["I prefer dark mode in every code editor", "I prefer the dark mode in every code editor"]
    cos = sum(a * b for a, b in zip(*FakeEmbedder(64).embed(texts)))
    assert MINILM.dedup <= cos < E5_SMALL.dedup, cos
    found = {}
    for name in ("all-MiniLM-L6-v2.f16", "multilingual-e5-small.q4"):
        with _store(tmp_path, name) as store:
            for t in texts:
                store.add(t, allow_duplicate=True)
            found[name] = len(dream.plan(store, only={"dedup"}, generator=False).proposals)
    assert found == {"all-MiniLM-L6-v2.f16": 1, "multilingual-e5-small.q4": 0}


def test_extraction_reconciles_and_grounds_with_the_models_thresholds(tmp_path, monkeypatch, model_thresholds):
    """The same fact against the same stored memory: MiniLM's contained cosine (lowered here
    for the fake's scale) says update; under the e5 name its own higher one says add."""
    model_thresholds("fake-minilm", replace(MINILM, contained=0.0))
    model_thresholds("fake-e5", replace(MINILM, contained=0.99, grounding=0.0))
    actions = {}
    real = extract.check_grounding
    for name in ("fake-minilm", "fake-e5"):
        with _store(tmp_path, name) as store:
            store.add("Dana approves deploys")
            seen: list[float] = []
            monkeypatch.setattr(extract, "check_grounding",
                                lambda *a, seen=seen, **k: seen.append(k["min_similarity"]) or real(*a, **k))
            r = extract.extract(store, "Dana approves deploys on Fridays.", generator=FakeGenerator())
            actions[name] = [f.action for f in r.facts]
            assert seen and set(seen) == {thresholds.BY_MODEL[name].grounding}
    assert actions == {"fake-minilm": ["update"], "fake-e5": ["add"]}


def test_recall_cuts_meaning_only_matches_at_the_models_cutoff(tmp_path, monkeypatch, model_thresholds):
    model_thresholds("fake-strict", replace(MINILM, recall_cutoff=0.999))
    got = {}
    for name in ("all-MiniLM-L6-v2.f16", "fake-strict"):
        with _store(tmp_path, name) as store:
            store.add("The cabin wifi password is on the fridge")
            # no shared keyword, some meaning (the fake's trigrams): kept only under a low cut-off
            got[name] = len(recall(store, "wifipassword cabinfridge").relevant)
            assert len(recall(store, "wifipassword cabinfridge", min_similarity=0.0).relevant) == 1  # explicit wins
    assert got["fake-strict"] == 0 and got["all-MiniLM-L6-v2.f16"] == 1


def test_agent_hooks_use_the_models_cutoffs(tmp_path, monkeypatch, model_thresholds):
    from pmem.integrations import hooks

    def given(store, min_similarity, session):
        """Whether the memory comes into the agent's context for a misspelt prompt."""
        prompt = hooks.HookInput(session_id=session, prompt="the cabbin wiifi passwrd fridg")
        block = hooks.build_context(store, "user-prompt", prompt, hooks.HookSettings(min_similarity=min_similarity))
        return "cabin wifi password" in block

    model_thresholds("fake-strict", replace(MINILM, hook=0.999, hook_words=0.999))
    got = {}
    for name in ("all-MiniLM-L6-v2.f16", "fake-strict"):
        with _store(tmp_path, name) as store:
            store.add("The cabin wifi password is on the fridge")
            got[name] = given(store, None, f"{name}-1")
            assert given(store, 0.0, f"{name}-2")  # explicit wins
    assert got == {"all-MiniLM-L6-v2.f16": True, "fake-strict": False}

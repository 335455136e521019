"""pmem dream with the real models: MiniLM finds paraphrased duplicates, SmolLM2 writes grounded text
(or the dream falls back to an extractive summary)."""

from __future__ import annotations

import pytest

from pmem import dream
from pmem.extract import check_grounding
from pmem.service import MemoryStore

pytestmark = pytest.mark.model
NOW = "2026-01-01T00:00:00Z"


@pytest.fixture
def real_store(tmp_path, monkeypatch):
    monkeypatch.setenv("PMEM_THREADS", "1")
    s = MemoryStore(tmp_path / "real.db")
    yield s
    s.close()


def test_real_dedup_finds_a_paraphrase_and_nothing_else(real_store):
    a, _ = real_store.add("Melanie painted a lake sunrise last year which holds special meaning to her.")
    b, _ = real_store.add("Note: Melanie painted a lake sunrise last year which holds special meaning to her.")
    real_store.add("Caroline is researching adoption agencies to build a family.")
    real_store.add("Melanie ran a charity race for mental health last Saturday.")
    (p,) = dream.plan(real_store, only={"dedup"}, now=NOW, generator=False).proposals
    assert set(p.members) == {a.id, b.id}


def test_real_compress_is_grounded_or_extractive(real_store):
    turns = ["Caroline: I went to a LGBTQ support group yesterday and it was so powerful.",
             "Melanie: Wow, that's cool! I painted that lake sunrise last year.",
             "Caroline: The transgender stories were so inspiring, I felt accepted.",
             "Melanie: That's great. I'm swamped with the kids and work."]
    for t in turns:
        real_store.add(t, tier="episodic", created_at="2023-05-08T13:56:00Z")
    plan = dream.plan(real_store, only={"compress"}, now=NOW)
    (p,) = plan.proposals
    assert plan.generator and plan.generator.startswith("SmolLM2") or plan.notes
    if not p.details["extractive"]:
        assert check_grounding(p.result_text, turns, real_store.embedder).ok
    else:
        assert "extractive" in p.reason
    dream.apply(real_store, plan)
    assert dream.plan(real_store, only={"compress"}, now=NOW).proposals == []


@pytest.mark.parametrize("model", ["multilingual-e5-small", "all-MiniLM-L6-v2"])
def test_real_paraphrases_are_one_memory_and_swapped_values_are_not(tmp_path, monkeypatch, model):
    """Issue 14: "I prefer dark mode in every code editor" / "In code editors I always prefer dark
    mode" is one memory; sister / brother and Monday / Tuesday stay two (e5 puts the sister pair at
    0.973, MiniLM the meeting pair at 0.983: above their dedup thresholds)."""
    monkeypatch.setenv("PMEM_THREADS", "1")
    monkeypatch.setenv("PMEM_EMBED_MODEL", model)
    with MemoryStore(tmp_path / "pairs.db") as s:
        a, _ = s.add("I prefer dark mode in every code editor")
        b, _ = s.add("In code editors I always prefer dark mode")
        for text in ("My sister lives in Porto", "My brother lives in Porto",
                     "I have a meeting with Bob on Monday", "I have a meeting with Bob on Tuesday"):
            s.add(text)
        (p,) = dream.plan(s, only={"dedup"}, now=NOW, generator=False).proposals
        assert set(p.members) == {a.id, b.id}

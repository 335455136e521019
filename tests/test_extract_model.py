"""End to end with the real models: SmolLM2-135M-Instruct labels, MiniLM grounds and reconciles."""

from __future__ import annotations

import pytest

from pmem.extract import check_grounding, extract
from pmem.service import MemoryStore
from pmem.store import Filter

pytestmark = [pytest.mark.model, pytest.mark.slow]

CHAT = """1:56 pm on 8 May, 2023
Caroline: Hey Mel! Good to see you! How have you been?
Melanie: Hey Caroline! I'm swamped with the kids & work. What's up with you?
Caroline: I went to a LGBTQ support group yesterday and it was so powerful.
Melanie: Wow, that's cool! I painted that lake sunrise last year.
"""


def as_said(result, text: str) -> str:
    """A stored fact with its resolved dates put back as said: what the grounding gate checked."""
    for d in result.dates:
        if d["fact"] == text:
            text = text.replace(d["resolved"], d["phrase"])
    return text


@pytest.fixture
def real_store(tmp_path):
    s = MemoryStore(tmp_path / "real.db")
    yield s
    s.close()


def test_real_extraction_end_to_end(real_store):
    r = extract(real_store, CHAT)
    assert r.model.startswith("SmolLM2") and r.candidates >= 3
    assert r.facts, r.to_dict()
    # Relative dates are resolved against the chat's date; the fact as said is what the gate grounded.
    assert {(d["phrase"], d["resolved"]) for d in r.dates} == {("yesterday", "on 7 May 2023"), ("last year", "in 2022")}
    for f in r.facts:
        m = real_store.get(f.id)
        assert check_grounding(as_said(r, m.text), [CHAT], real_store.embedder, min_support=0.6).ok
        assert m.derived_from == r.source_ids and m.meta["extract"]["run"] == r.run
    assert {f.action for f in r.facts} == {"add"}
    again = extract(real_store, CHAT)
    assert {f.action for f in again.facts} == {"noop"}
    real_store.undo()
    real_store.undo()
    assert real_store.list_memories(Filter.everything(), limit=None) == []


def test_real_grounding_rejects_an_invented_fact(real_store):
    g = check_grounding("Melanie owns three horses in Texas", [CHAT], real_store.embedder, min_support=0.6)
    assert not g.ok


def test_real_model_in_rewrite_mode_stores_only_grounded_facts(real_store, monkeypatch):
    """The choose-and-rewrite path with a real (too small) model: whatever it writes, the gate
    decides, and nothing it invents is stored."""
    monkeypatch.setenv("PMEM_EXTRACT_MODE", "rewrite")
    from pmem.config import load

    real_store.config = load()
    r = extract(real_store, CHAT)
    from pmem.models.generate import load_generator

    assert load_generator("SmolLM2-135M-Instruct", mode="rewrite").strong
    assert r.source_ids, r.to_dict()  # the source is kept whatever the model did
    for f in r.facts:
        if f.action in ("add", "update", "supersede"):
            text = as_said(r, real_store.get(f.id).text)
            assert check_grounding(text, [CHAT], real_store.embedder, min_support=0.6).ok
    for f in r.rejected:
        assert f.action == "rejected" and f.reason
    monkeypatch.delenv("PMEM_EXTRACT_MODE")
    assert not load_generator("SmolLM2-135M-Instruct").strong  # auto: 135M parameters only label

"""Recall: core first, relevant next, newest facts win, within the token budget."""

from __future__ import annotations

import json

import pytest

from pmem import Memory, estimate_tokens, recall, render
from pmem.errors import UsageError


def test_core_first_then_relevant(store):
    store.add("I am vegetarian", pinned=True)
    store.add("Dinner with Dana on Friday at the Thai place")
    store.add("Deploys need approval from Dana")
    r = recall(store, "dinner plans Friday")
    assert [m.text for m in r.core] == ["I am vegetarian"]
    assert r.relevant[0].text.startswith("Dinner with Dana")
    text = render(r, "md")
    assert text.index("I am vegetarian") < text.index("Dinner with Dana")


@pytest.mark.parametrize("fmt", ["md", "xml", "json", "text"])
def test_budget_is_respected_in_every_format(store, fmt):
    store.insert([Memory(id="", text=f"fact number {i} about the cabin trip and its packing list") for i in range(200)])
    store.add("core fact", pinned=True)
    for budget in (30, 120, 500):
        r = recall(store, "cabin trip", budget=budget, fmt=fmt)
        out = render(r, fmt)
        if fmt != "json":
            assert estimate_tokens(out) <= budget
        assert r.tokens <= budget
        assert r.left_out > 0


def test_superseded_facts_lose_to_newer(store):
    old, _ = store.add("I live in Berlin", created_at="2020-01-01T00:00:00Z")
    new, _ = store.add("I live in Lisbon", created_at="2024-01-01T00:00:00Z")
    store.supersede(old.id, new.id)
    texts = [m.text for m in recall(store, "where do I live").memories()]
    assert "I live in Lisbon" in texts and "I live in Berlin" not in texts


def test_no_query_gives_core_and_recent(store):
    store.add("older", created_at="2020-01-01T00:00:00Z")
    store.add("newer", created_at="2024-01-01T00:00:00Z")
    store.add("pinned one", pinned=True)
    r = recall(store)
    assert [m.text for m in r.core] == ["pinned one"]
    assert [m.text for m in r.relevant] == ["newer", "older"]
    assert "(most recent)" in render(r)


def test_xml_and_json_escape_memory_text(store):
    store.add('<script>alert("x")</script> & more', pinned=True)
    xml = render(recall(store, fmt="xml"), "xml")
    assert "<script>" not in xml and "&lt;script&gt;" in xml
    data = json.loads(render(recall(store, fmt="json"), "json"))
    assert data["core"][0]["text"].startswith("<script>")


def test_recall_counts_access(store):
    m, _ = store.add("pinned", pinned=True)
    recall(store)
    assert store.get(m.id).access_count == 1


def test_bad_options(store):
    with pytest.raises(UsageError):
        recall(store, "x", budget=0)
    with pytest.raises(UsageError):
        recall(store, "x", fmt="yaml")


def test_estimate_tokens_is_conservative():
    assert estimate_tokens("") == 0
    assert estimate_tokens("hello world") >= 2
    assert estimate_tokens("a1b2c3d4e5f6" * 10) >= 120 / 4


def test_recall_cuts_at_the_min_score_setting(store, monkeypatch):
    from pmem import search
    from pmem.config import load

    store.add("Dinner with Dana on Friday at the Thai place")
    store.add("Deploys need approval from Dana")
    store.add("The cabin wifi password is hunter2")
    for i in range(8):
        store.add(f"Filler note {i} about gardening")
    scores = {h.memory.text: h.score for h in search(store, "dinner with Dana on Friday", limit=60)}
    r = recall(store, "dinner with Dana on Friday")
    # the default (0.02) keeps the keyword matches, drops the meaning-only noise ...
    words = {h.memory.text for h in search(store, "dinner with Dana on Friday", limit=60) if h.keyword_rank}
    assert {m.text for m in r.relevant} == {t for t, v in scores.items() if v >= 0.02} | words
    assert "Deploys need approval from Dana" in {m.text for m in r.relevant}
    assert len(r.relevant) < len(scores)
    assert r.scores == {m.id: pytest.approx(scores[m.text]) for m in r.relevant}
    # ... and the setting, on search's scale, leaves out the meaning-only matches below it
    low = min(scores.values()) + 1e-9
    monkeypatch.setenv("PMEM_RECALL_MIN_SCORE", str(low))
    store.config = load()
    assert store.config.recall_min_score == pytest.approx(low)
    assert {m.text for m in recall(store, "dinner with Dana on Friday").relevant} == \
        {t for t, v in scores.items() if v >= low} | words
    assert {m.text for m in recall(store, "dinner with Dana on Friday", min_score=1.0).relevant} == words
    monkeypatch.setenv("PMEM_RECALL_MIN_SCORE", "1.5")
    with pytest.raises(UsageError):
        load()


@pytest.mark.parametrize("fmt", ["md", "xml", "json", "text"])
def test_packing_many_core_memories_renders_only_what_may_fit(store, monkeypatch, fmt):
    """Hundreds of pinned memories of varied length under a small budget: the same choice as
    rendering the block for every candidate (greedy, in order), but a candidate whose own line is
    past what is left is refused without rendering the block again."""
    import importlib

    recall_module = importlib.import_module("pmem.recall")

    store.insert([Memory(id="", text=("pinned fact %d " % i) + "word " * (i % 17), tier="core", pinned=True)
                  for i in range(300)])
    core = store.list_memories(store_module_filter(), sort="created", reverse=True, limit=None)
    measure = "md" if fmt == "json" else fmt
    for budget in (90, 400):  # 90: room for pmem's two marker lines (pmem.ownblocks) and a memory
        want = recall_module.Recalled(query=None, budget=budget)
        for m in core:  # the reference: render the whole block for every candidate
            want.core.append(m)
            block = render(want, measure)  # measured as recall measures: estimate_tokens line by line
            if sum(recall_module.estimate_tokens(line + "\n") for line in block.split("\n")) > budget:
                want.core.pop()
        renders: list[int] = []
        real = recall_module.render

        def counted(r, f="md", renders=renders, real=real):
            renders.append(1)
            return real(r, f)

        monkeypatch.setattr(recall_module, "render", counted)
        got = recall(store, None, budget=budget, fmt=fmt)
        monkeypatch.setattr(recall_module, "render", real)
        assert [m.id for m in got.core] == [m.id for m in want.core] and got.core
        assert got.left_out >= len(core) - len(want.core)
        assert len(renders) < len(want.core) + 40  # not one per candidate (300)


def store_module_filter():
    from pmem.store import Filter

    return Filter(pinned=True, tiers=("core",))

"""Extraction into a project: the source and every fact get the project's scope, and a project's
fact never rewrites a global memory (the fake chat model stands in, as in test_extract.py; the
MCP path with the real models is in test_mcp.py)."""

from __future__ import annotations

from pmem import extract as ex
from pmem.store import Filter

from fakes import FakeGenerator

PROJECT = "/work/garden-planner"


def test_facts_of_a_project_extraction_keep_its_scope(store):
    r = ex.extract(store, "I moved to Lisbon from Berlin in March.\n\nI still prefer dark mode.",
                   generator=FakeGenerator(), scope=PROJECT)
    assert r.facts and r.source_ids
    stored = store.list_memories(Filter.everything(), limit=None)
    assert {m.scope for m in stored} == {PROJECT}
    assert store.list_memories(Filter(scope="global"), limit=None) == []  # nothing leaked to every project


def test_a_project_fact_does_not_supersede_a_global_memory(store):
    old, _ = store.add("Dana's daughter is 7 years old")  # global
    r = ex.extract(store, "Dana: My daughter is 8 years old now.", generator=FakeGenerator(), scope=PROJECT)
    assert [f.action for f in r.facts] == ["add"]
    assert store.get(old.id).valid_to is None  # still true everywhere else
    assert store.get(r.facts[0].id).scope == PROJECT
    mine = ex.extract(store, "Dana: My daughter is 9 years old now.", generator=FakeGenerator(), scope=PROJECT)
    assert [f.action for f in mine.facts] == ["supersede"]  # the project's own fact is reconciled
    assert store.get(r.facts[0].id).superseded_by == mine.facts[0].id

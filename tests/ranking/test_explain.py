"""`search(..., explain=True)` and `pmem search --explain`: each result's way through the stages,
consistent with the ranking it explains, and no change to that ranking."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from pmem.cli.app import app
from pmem.ranking.explain import line, way
from pmem.search import DEFAULT_TUNING, fused, search

TEXTS = [
    "Deploys to production need approval from Dana.",
    "Who approves the deploys to production?",
    "The team standup is at 9:30 every weekday in the small meeting room.",
    "Dana's cat is called Miso and sleeps on the printer.",
    "Kenji from legal reviews every contract before it goes out.",
    "The [bold]printer[/bold] on floor three jams on Mondays.",
    "Production deploys happen on Tuesdays after the standup.",
]
QUERIES = ["who approves deploys", "printer", "standup meeting room", "contract review", "Miso"]


@pytest.fixture
def filled(store):
    for i, text in enumerate(TEXTS):
        store.add(text, thread="t" if i < 4 else None)
    return store


@pytest.mark.parametrize("mode", ["hybrid", "semantic", "keyword"])
def test_explain_changes_no_ranking_and_agrees_with_it(filled, mode):
    for query in QUERIES:
        plain = search(filled, query, mode=mode, limit=7)
        hits = search(filled, query, mode=mode, limit=7, explain=True)
        assert [(h.memory.id, h.score, h.rank_score) for h in hits] == \
            [(h.memory.id, h.score, h.rank_score) for h in plain]
        fused = [h.explain["fusion"]["score"] for h in hits]
        assert fused == sorted(fused, reverse=True)  # the fused score order is the result order
        for h in hits:
            way = h.explain
            assert way["fusion"]["score"] == round(h.rank_score, 6) and way["score"] == round(h.score, 6)
            assert way["keyword"]["rank"] == h.keyword_rank and way["dense"]["rank"] == h.semantic_rank
            assert (way["keyword"]["bm25"] is None) == (h.keyword_rank is None)
            if h.distance is not None:
                assert way["dense"]["cosine"] == pytest.approx(1.0 - h.distance, abs=2e-6)
            if way["question_penalty"]["step"]:
                assert h.memory.text.endswith("?")
            if mode == "hybrid" and not way["dense_first"]["moved"]:
                share = way["fusion"]["share"]
                kp, dp = way["fusion"]["keyword_part"] or 0.0, way["fusion"]["dense_part"] or 0.0
                assert way["fusion"]["score"] == pytest.approx(share * kp + (1 - share) * dp, abs=1e-5)


def test_a_dense_first_move_is_named_on_the_memory_it_moved():
    """The words' best (1) ranks first by the fusion; the dense side's best (2) clears the margin
    and is moved above it: its account says so and why, the other's does not."""
    kw = [(1, -12.0), (3, -2.0), (2, -1.0)]
    sem = [(2, 0.05), (3, 0.3), (1, 0.4)]
    words = replace(DEFAULT_TUNING, adaptive=False, keyword_weight=0.7)  # the words decide the fusion
    plain = fused(kw, sem, 0.5, "q", tuning=replace(words, dense_first=False))
    assert max(plain.scores, key=plain.scores.get) == 1 and plain.moved is None
    eager = replace(words, dense_first_within=0, dense_margin=0.0)
    fusion = fused(kw, sem, 0.5, "q", tuning=eager)
    assert fusion.moved == (2, "margin") and max(fusion.scores, key=fusion.scores.get) == 2
    ways = {seq: way(seq, "hybrid", eager, fusion, kw_rank=None, bm25=None, sem_rank=None, distance=None,
                     lifted=None, question=False, penalty=0.0, floor=0.5, score=fusion.scores[seq], relevance=0.0)
            for seq in (1, 2)}
    assert ways[2]["dense_first"] == {"used": True, "moved": True, "why": "margin"}
    assert ways[1]["dense_first"]["moved"] is False
    assert "dense-first (margin)" in line(ways[2]) and "dense-first" not in line(ways[1])


def test_cli_explain_json_names_the_keyword_dense_and_fusion_stage_of_every_result(monkeypatch):
    monkeypatch.setenv("PMEM_EMBED_MODEL", "fake-64")
    runner = CliRunner()
    for text in TEXTS:
        assert runner.invoke(app, ["add", text]).exit_code == 0
    for mode in ("hybrid", "semantic", "keyword"):
        r = runner.invoke(app, ["search", "printer deploys", "--explain", "--json", "--mode", mode])
        assert r.exit_code == 0, r.output
        results = json.loads(r.output)
        assert results
        for item in results:
            way = item["explain"]
            for stage in ("keyword", "dense", "fusion"):
                assert way[stage]["stage"], (mode, stage)
            assert way["keyword"]["used"] == (mode != "semantic") and way["dense"]["used"] == (mode != "keyword")
        assert [i["explain"]["fusion"]["score"] for i in results] == [i["rank_score"] for i in results]
    plain = json.loads(runner.invoke(app, ["search", "printer", "--json"]).output)
    assert plain and all("explain" not in item for item in plain)


def test_cli_explain_shows_memory_text_literally(monkeypatch):
    monkeypatch.setenv("PMEM_EMBED_MODEL", "fake-64")
    runner = CliRunner()
    for text in TEXTS:
        assert runner.invoke(app, ["add", text]).exit_code == 0
    r = runner.invoke(app, ["search", "printer", "--explain"])
    assert r.exit_code == 0, r.output
    assert "[bold]printer[/bold]" in r.output  # markup in a memory is text, not style
    lines = r.output.splitlines()
    assert lines[0].startswith("# profile ") and "keyword share" in lines[0]
    ways = [line for line in lines[1:] if line.startswith("\t")]
    assert ways and all("fused " in w for w in ways)
    assert len(ways) == len(lines) - 1 - len(ways)  # one way line under each result

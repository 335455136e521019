"""Hybrid search: keyword, semantic, fusion, filters, and query safety."""

from __future__ import annotations

import pytest

from pmem import Filter, Memory, search
from pmem.errors import UsageError
from pmem.search import fts_query, query_words, semantic_ranks


def seed(store):
    return store.insert([
        Memory(id="aaaa0001", text="The wifi password at the cabin is hunter2", tags=["home"],
               created_at="2023-01-01T00:00:00Z"),
        Memory(id="aaaa0002", text="Deploys need approval from Dana", tags=["work"],
               created_at="2023-06-01T00:00:00Z"),
        Memory(id="aaaa0003", text="Dana likes hiking near the cabin", tags=["home", "people"],
               created_at="2024-01-01T00:00:00Z"),
        Memory(id="aaaa0004", text="Raw chat log about cabins", tier="episodic",
               created_at="2024-02-01T00:00:00Z"),
    ])


def ids(hits):
    return [h.memory.id for h in hits]


def test_query_words_drop_stop_words_but_never_everything():
    assert query_words("who approves the deploys?") == ["approves", "deploys"]
    assert query_words("the") == ["the"]
    assert fts_query('"NEAR(" AND *') == '"near" OR "and"' or fts_query('"NEAR(" AND *') == '"near"'
    assert fts_query("!!! ???") is None


def test_keyword_mode_ranks_by_bm25(store):
    seed(store)
    hits = search(store, "wifi password", mode="keyword")
    assert ids(hits) == ["aaaa0001"]
    assert hits[0].keyword_rank == 1 and hits[0].semantic_rank is None


def test_hybrid_fuses_both_lists(store):
    seed(store)
    hits = search(store, "cabin", limit=10)
    assert set(ids(hits)) == {"aaaa0001", "aaaa0002", "aaaa0003"}  # episodic excluded by default
    both = [h for h in hits if h.keyword_rank and h.semantic_rank]
    assert both and all(0.0 <= h.score <= 1.0 for h in hits)
    assert hits == sorted(hits, key=lambda h: -h.rank_score)  # ranked by the fusion, not by score


def test_filters_tags_tiers_dates(store):
    seed(store)
    assert ids(search(store, "cabin", Filter(tags=("people",)))) == ["aaaa0003"]
    assert ids(search(store, "cabin", Filter(tags=("home", "people")))) == ["aaaa0003"]
    assert "aaaa0004" in ids(search(store, "cabins", Filter(tiers=("episodic",))))
    assert set(ids(search(store, "cabin", Filter(since="2023-05-01T00:00:00Z")))) == {"aaaa0002", "aaaa0003"}
    assert set(ids(search(store, "cabin", Filter(until="2023-05-01T00:00:00Z")))) == {"aaaa0001"}


def test_semantic_widens_knn_past_filtered_rows(store):
    # Many near neighbours that the filter removes: the KNN must widen to find the one that passes.
    store.insert([Memory(id="", text=f"cabin note {i}", tags=["noise"]) for i in range(200)])
    store.insert([Memory(id="bbbb0001", text="unrelated gardening tip", tags=["keep"])])
    hits = search(store, "cabin note", Filter(tags=("keep",)), mode="semantic", limit=1)
    assert ids(hits) == ["bbbb0001"]


def test_forgotten_and_expired_are_not_found(store):
    seed(store)
    store.forget("aaaa0001")
    store.expire("aaaa0003")
    assert ids(search(store, "cabin", mode="keyword")) == []
    assert set(ids(search(store, "cabin", Filter(include_expired=True), mode="keyword"))) == {"aaaa0003"}


def test_bad_arguments(store):
    with pytest.raises(UsageError):
        search(store, "x", mode="fuzzy")
    with pytest.raises(UsageError):
        search(store, "x", limit=0)
    with pytest.raises(UsageError):
        search(store, "  ")


def test_empty_store_returns_nothing(store):
    assert search(store, "anything") == []


def test_a_fact_and_its_source_share_one_slot(store):
    turn = Memory(id="bbbb0001", text="Caroline: I went to the pottery class on Sunday")
    fact = Memory(id="bbbb0002", text="Caroline went to the pottery class on Sunday", derived_from=["bbbb0001"])
    sibling = Memory(id="bbbb0003", text="Caroline liked the pottery teacher", derived_from=["bbbb0001"])
    other = Memory(id="bbbb0004", text="Melanie paints pottery at home")
    store.insert([turn, fact, sibling, other])
    loose = ids(search(store, "pottery class", mode="keyword", limit=4, collapse=False))
    assert set(loose) == {"bbbb0001", "bbbb0002", "bbbb0003", "bbbb0004"}
    shown = ids(search(store, "pottery class", mode="keyword", limit=4))
    # The better ranked of turn and fact stands for both; the freed slot goes to the next memory.
    best = loose[0]
    assert shown[0] == best
    assert "bbbb0004" in shown
    assert not ({"bbbb0001", "bbbb0002"} <= set(shown))
    assert len(shown) == len(set(shown))


def test_sibling_facts_of_an_unlisted_source_all_stay(store):
    source = Memory(id="cccc0001", text="long raw conversation", tier="episodic")
    facts = [Memory(id=f"cccc000{i}", text=f"Fact {i} about the garden hose", derived_from=["cccc0001"])
             for i in range(2, 5)]
    store.insert([source, *facts])
    shown = ids(search(store, "garden hose", mode="keyword", limit=10))
    assert set(shown) == {"cccc0002", "cccc0003", "cccc0004"}


def test_collapse_fills_the_limit_from_lower_ranks(store):
    base = Memory(id="dddd0001", text="alpha beta gamma")
    derived = [Memory(id=f"dddd00{i:02d}", text=f"alpha beta gamma copy {i}", derived_from=["dddd0001"])
               for i in range(2, 8)]
    rest = [Memory(id=f"eeee00{i:02d}", text=f"alpha unrelated {i}") for i in range(1, 6)]
    store.insert([base, *derived, *rest])
    shown = search(store, "alpha beta gamma", mode="keyword", limit=4)
    assert len(shown) == 4
    assert sum(h.memory.id.startswith("dddd") for h in shown) == 1


def _exact_nearest(store, vector, flt, n):
    """Brute force in Python: the reference the store's semantic ranks must equal."""
    import math

    from pmem.store import deserialize

    q = deserialize(vector)
    qn = math.sqrt(sum(x * x for x in q))
    kept = store.list_memories(flt, limit=None)
    vecs = store.vectors(m.id for m in kept)
    out = []
    for m in kept:
        v = deserialize(vecs[m.id])
        dot = sum(a * b for a, b in zip(q, v))
        out.append((1.0 - dot / (qn * math.sqrt(sum(x * x for x in v))), m.id))
    return sorted(out)[:n]


def test_filters_and_large_k_work_past_the_knn_limit(store):
    """sqlite-vec refuses k > 4096: a tag filter or -k 3000 on a store of 4,201 memories used to
    end in 'k value in knn query too large'. Results must equal an exact scan."""
    import random

    from pmem.store import KNN_MAX, serialize

    rng = random.Random(7)
    n = KNN_MAX + 105
    dim = store.embedder.dim
    memories = [Memory(id=f"m{i:05d}", text=f"note {i} about topic {i % 97}",
                       tags=(["x"] if i % 50 == 0 else []) + (["half"] if i % 2 else []),
                       tier="episodic" if i % 7 == 0 else "archival") for i in range(n)]
    vectors = [serialize([rng.gauss(0, 1) for _ in range(dim)]) for _ in range(n)]
    store.insert(memories, vectors=vectors)
    store.forget("m00001")
    query = serialize([rng.gauss(0, 1) for _ in range(dim)])
    by_seq = {}
    for flt, k in [(Filter(tags=("x",)), 100), (Filter(tags=("half",)), 3000), (Filter(), 3000),
                   (Filter.everything(), KNN_MAX + 50), (Filter(tiers=("episodic",)), 100)]:
        got = semantic_ranks(store, "", flt, k, vector=query)
        want = _exact_nearest(store, query, flt, k)
        assert len(got) == len(want) == min(k, store.count(flt))
        by_seq.update(store.memories_by_seq(seq for seq, _ in got if seq not in by_seq))
        assert [d for _, d in got] == pytest.approx([d for d, _ in want], abs=1e-5)
        # Same memories in the same order, up to float32-vs-double near-ties.
        for (seq, d), (_, mid) in zip(got, want):
            assert by_seq[seq].id == mid or any(abs(d - w) < 1e-5 for w, m2 in want if m2 == by_seq[seq].id)
        cutoff = want[-1][0] - 1e-5
        assert {mid for d, mid in want if d < cutoff} <= {by_seq[seq].id for seq, _ in got}
    # The whole search path, as `pmem search q --tag x` and `-k 3000` run it.
    assert {h.memory.id for h in search(store, "topic", Filter(tags=("x",)), limit=200)} == \
        {m.id for m in memories if "x" in m.tags and m.tier == "archival"}
    assert len(search(store, "note", limit=3000, mode="semantic")) == 3000


# -- scores: absolute, comparable across queries; ranking unchanged ---------------------------

def test_scores_are_comparable_across_queries(store):
    seed(store)
    store.add("Notes from a lecture")
    strong = search(store, "wifi password at the cabin")
    weak = search(store, "lecture on quantum chromodynamics and gluon plasma")
    assert ids(strong)[0] == "aaaa0001" and weak  # both queries have a top hit ...
    assert strong[0].rank_score == pytest.approx(1.0) and weak[0].rank_score == pytest.approx(1.0)
    # ... but only the strong one scores high: a weak top hit no longer reads as 1.0
    assert weak[0].score < 0.15 and strong[0].score > weak[0].score + 0.2


def test_score_parts_saturate_and_start_at_the_models_floor():
    from pmem.search import DEFAULT_TUNING, relevance

    half = DEFAULT_TUNING.bm25_half
    assert relevance(-half, None, 0.2, "keyword") == pytest.approx(0.5)
    assert relevance(-1e9, None, 0.2, "keyword") == pytest.approx(1.0)
    assert relevance(None, 0.2, 0.2, "semantic") == 0.0 and relevance(None, 0.1, 0.2, "semantic") == 0.0
    assert relevance(None, 0.6, 0.2, "semantic") == pytest.approx(0.5)
    assert relevance(-half, 0.6, 0.2) == pytest.approx(0.5)
    # the same cosine is a weaker match under a model whose unrelated texts sit higher (e5)
    from pmem.models.thresholds import E5_SMALL, MINILM

    assert relevance(None, 0.85, MINILM.score_floor) > 0.3 > relevance(None, 0.85, E5_SMALL.score_floor)


def _scaled(pairs):
    """Min-max scaling, written out here: the fusion the tests expect, not search's own code."""
    lo, hi = min((v for _, v in pairs), default=0.0), max((v for _, v in pairs), default=0.0)
    return [(q, (v - lo) / (hi - lo) if hi > lo else 1.0) for q, v in pairs]


def _old_fusion_order(store, query, flt=None, tuning=None):
    """The ranking search() had before scores became absolute: min-max fused, ties by seq."""
    from pmem.search import DEFAULT_TUNING, keyword_ranks

    tuning = tuning or DEFAULT_TUNING
    flt = flt or Filter()
    kw = keyword_ranks(store, query, flt, tuning.candidates, tuning.context_weight)
    sem = semantic_ranks(store, query, flt, tuning.candidates)
    fused: dict[int, float] = {}
    w = tuning.keyword_weight
    for weight, pairs in ((w, [(q, -b) for q, b in kw]), (1 - w, [(q, 1 - d) for q, d in sem])):
        for q, v in _scaled(pairs):
            fused[q] = fused.get(q, 0.0) + weight * v
    return [q for q, _ in sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))]


def test_ranking_with_a_fixed_share_is_the_fusion_of_before(store):
    from dataclasses import replace

    from pmem.search import DEFAULT_TUNING

    seed(store)
    for i in range(30):
        store.add(f"Note {i}: the cabin {'wifi' if i % 3 else 'heating'} needs {'a password' if i % 2 else 'work'}")
    seq_of = {m.id: seq for seq, m in store.memories_by_seq(range(1, 200)).items()}
    fixed = replace(DEFAULT_TUNING, adaptive=False)  # the share per query: tests/ranking/test_fusion.py
    for query in ("cabin wifi password", "Dana deploys", "heating work"):
        hits = search(store, query, limit=20, collapse=False, tuning=fixed)
        assert [seq_of[h.memory.id] for h in hits] == _old_fusion_order(store, query)[:20]
        assert [h.rank_score for h in hits] == sorted((h.rank_score for h in hits), reverse=True)


def test_min_score_drops_weak_hits_and_keeps_the_order(store):
    seed(store)
    store.add("Notes from a lecture about cabins")
    every = search(store, "cabin wifi password", limit=10)
    cut = sorted(h.score for h in every)[len(every) // 2]
    kept = search(store, "cabin wifi password", limit=10, min_score=cut)
    assert ids(kept) == [h.memory.id for h in every if h.score >= cut]
    assert 0 < len(kept) < len(every) and all(h.score >= cut for h in kept)
    assert search(store, "cabin wifi password", min_score=1.0) == []
    # the limit counts kept hits, also without collapsing (later pages are read)
    assert ids(search(store, "cabin wifi password", limit=2, collapse=False, min_score=cut)) == \
        [h.memory.id for h in search(store, "cabin wifi password", limit=10, collapse=False) if h.score >= cut][:2]
    for bad in (-0.1, 1.5):
        with pytest.raises(UsageError):
            search(store, "cabin", min_score=bad)


def test_cli_min_score_and_json_fields(fake_config, monkeypatch):
    import json

    from typer.testing import CliRunner

    from pmem.cli.app import app

    monkeypatch.setenv("PMEM_EMBED_MODEL", "fake-64")
    runner = CliRunner()
    for text in ("The wifi password at the cabin is hunter2", "Dana likes hiking near the cabin",
                 "Deploys need approval from Dana"):
        assert runner.invoke(app, ["add", text]).exit_code == 0
    r = runner.invoke(app, ["search", "cabin wifi password", "--json"])
    hits = json.loads(r.stdout)
    assert hits and {"score", "rank_score"} <= set(hits[0]) and hits[0]["rank_score"] == pytest.approx(1.0)
    cut = hits[0]["score"] - 1e-6  # JSON rounds to 6 places
    strict = json.loads(runner.invoke(app, ["search", "cabin wifi password", "--json", "--min-score",
                                            str(cut)]).stdout)
    assert [h["id"] for h in strict] == [h["id"] for h in hits if h["score"] >= cut] and len(strict) < len(hits)
    bad = runner.invoke(app, ["search", "cabin", "--min-score", "2"])
    assert bad.exit_code == 2 and "--min-score" in bad.output


def test_the_dense_stages_run_while_the_keyword_side_ranks(store, monkeypatch):
    """With a side reader the searching thread runs the thread lift and the question penalty
    (dense_stages) before it waits for the keyword side: a keyword side that waits for them
    still ends, and the hits are those of one connection."""
    import importlib
    import threading

    from pmem.store import memories as store_memories

    from filled import fill

    s = importlib.import_module("pmem.search")
    fill(store, 300)
    queries = ("topic 5 word3", "note 17", "about word6")
    monkeypatch.setattr(store_memories, "SIDE_READS_FROM", 10**9)
    alone = [[(h.memory.id, h.rank_score) for h in search(store, q, limit=10)] for q in queries]
    monkeypatch.setattr(store_memories, "SIDE_READS_FROM", 100)
    ran, waited = threading.Event(), []
    real_dense, real_keyword = s.dense_stages, s.keyword_ranks

    def dense(*args, **kwargs):
        out = real_dense(*args, **kwargs)
        ran.set()
        return out

    def keyword(*args, **kwargs):
        waited.append(ran.wait(5))
        return real_keyword(*args, **kwargs)

    monkeypatch.setattr(s, "dense_stages", dense)
    monkeypatch.setattr(s, "keyword_ranks", keyword)
    both = []
    for q in queries:
        ran.clear()
        both.append([(h.memory.id, h.rank_score) for h in search(store, q, limit=10)])
    assert waited == [True] * len(queries)
    assert both == alone

"""A dream on a large store compares only what changed since the last applied dream (and what
that resembles): the same proposals about the changed memories as a full plan, without reading
every memory, and what a person turned down stays turned down until --full."""

from __future__ import annotations

import json
import random

import pytest

from pmem import dream
from pmem.store import Filter

NOW = "2026-01-01T00:00:00Z"
WORDS = ("amber basil cedar delta ember fjord garnet harbor indigo juniper kelp lagoon maple nectar onyx "
         "pebble quartz raven sorrel tundra umber violet willow xenon yarrow zephyr anchor bramble comet "
         "dune estuary falcon glacier heron iris jasper kestrel lichen meadow nimbus orchid prairie").split()


def add(store, text, **kw):
    kw.setdefault("allow_duplicate", True)
    return store.add(text, **kw)[0]


@pytest.fixture
def large(store, monkeypatch):
    """A store the dream treats as large (INCREMENTAL_FROM lowered), of distinct notes, one old
    near-duplicate pair, and a dream applied in which the person turned everything down."""
    monkeypatch.setattr(dream, "INCREMENTAL_FROM", 20)
    rng = random.Random(7)
    background = [add(store, f"{' '.join(rng.sample(WORDS, 5))} number {i}") for i in range(60)]
    old_a = add(store, "The boat shed key hangs behind the blue door")
    old_b = add(store, "The boat shed key hangs behind the blue door!")
    add(store, "Favourite tea of the household is a smoky lapsang from Fujian hills",
        created_at="2024-01-01T00:00:00Z")
    first = dream.plan(store, now=NOW, generator=False)
    assert first.since is None and first.considered == 63  # no dream yet: everything
    assert [set(p.members) for p in first.proposals if p.kind == "dedup"] == [{old_a.id, old_b.id}]
    assert not first.dropped and first.counts()["merge"] == 0  # no merge candidates among these notes
    dream.apply(store, first, accept=set(), backup=False)  # the person turned it all down
    assert store.dream_mark() == first.mark > 0
    return {"background": background, "old": (old_a, old_b)}


def _key(p):
    return (p.kind, tuple(sorted(p.members)))


def test_only_what_changed_is_compared_and_found_as_a_full_plan_finds_it(store, large):
    twin = large["background"][17]
    new_dup = add(store, twin.text + "!")
    # The same subject with another value, not close in meaning (cosine 0.51 with the fake
    # embedder): found through the subject's words, not the vectors.
    new_tea = add(store, "Favourite tea of the household is green sencha with toasted brown rice",
                  created_at="2025-01-01T00:00:00Z")
    expiring = large["background"][3]
    store.edit(large["background"][40].id, expires_at="2025-06-01T00:00:00Z")  # an edit is a change too
    plan = dream.plan(store, now=NOW, generator=False)
    full = dream.plan(store, now=NOW, generator=False, full=True)
    assert plan.since == store.dream_mark() and plan.changed == 3
    assert plan.considered < full.considered == 65
    got = {_key(p) for p in plan.proposals}
    assert got == {_key(p) for p in full.proposals if set(p.members) & {new_dup.id, new_tea.id,
                                                                         large["background"][40].id}}
    assert ("dedup", tuple(sorted([twin.id, new_dup.id]))) in got
    assert any(k[0] == "supersede" and new_tea.id in k[1] for k in got)
    assert ("expire", (large["background"][40].id,)) in got
    # the pair turned down in the last dream is left alone; a full plan shows it again
    old = tuple(sorted(m.id for m in large["old"]))
    assert ("dedup", old) not in got and ("dedup", old) in {_key(p) for p in full.proposals}
    assert expiring.id not in {i for p in plan.proposals for i in p.members}


def test_an_expiry_that_passed_without_a_change_is_still_proposed(store, large):
    m = store.edit(large["background"][5].id, expires_at="2025-12-31T00:00:00Z")
    plan = dream.plan(store, now=NOW, generator=False)
    dream.apply(store, plan, backup=False)
    later = "2026-03-01T00:00:00Z"
    plan = dream.plan(store, now=later, generator=False)
    assert plan.changed == 1  # what the last dream applied (the stamp) is a change; nothing else
    assert [p.kind for p in plan.proposals] == []  # stamped already: nothing new
    other = large["background"][6]
    store.conn.execute("UPDATE memories SET expires_at = ? WHERE id = ?", ("2026-02-01T00:00:00Z", other.id))
    store.conn.commit()  # an expiry set long ago (no event after the mark) that has now passed
    plan = dream.plan(store, now=later, generator=False)
    assert ("expire", (other.id,)) in {_key(p) for p in plan.proposals}
    assert m.id not in {i for p in plan.proposals for i in p.members}


def test_old_episodes_are_compressed_without_being_changed(store, large):
    ids = [add(store, f"Caroline: we went hiking on trail {i} near the lake and it was lovely.",
               tier="episodic", created_at=f"2023-05-08T10:0{i}:00Z").id for i in range(4)]
    dream.apply(store, dream.plan(store, now="2023-05-09T00:00:00Z", generator=False), backup=False)
    plan = dream.plan(store, now=NOW, generator=False)  # now they are old
    assert plan.since is not None and plan.changed == 0
    assert [sorted(p.members) for p in plan.proposals if p.kind == "compress"] == [sorted(ids)]


def test_the_mark_moves_only_after_a_whole_dream(store, large):
    mark = store.dream_mark()
    add(store, "The garden gate code is 4471")
    plan = dream.plan(store, now=NOW, generator=False)
    assert store.dream_mark() == mark  # planning writes nothing
    partial = dream.plan(store, now=NOW, generator=False, only={"dedup", "expire"})
    dream.apply(store, partial, backup=False)
    assert store.dream_mark() == mark  # supersede and merge did not look
    plan.complete = False  # a time limit cut it short
    dream.apply(store, plan, backup=False)
    assert store.dream_mark() == mark
    plan = dream.plan(store, now=NOW, generator=False)
    plan.dropped.append({"kind": "merge", "members": [], "reason": "no chat model to write the merge"})
    dream.apply(store, plan, backup=False)
    assert store.dream_mark() == mark  # a merge left undone: looked at again next time
    plan = dream.plan(store, now=NOW, generator=False)
    dream.apply(store, plan, backup=False)
    assert store.dream_mark() == plan.mark > mark
    assert dream.plan(store, now=NOW, generator=False).changed == 0


def test_a_quarter_of_the_store_changed_reads_everything(store, large, monkeypatch):
    for i in range(25):
        add(store, f"a fresh note {i} about {WORDS[i]} and {WORDS[-i - 1]}")
    plan = dream.plan(store, now=NOW, generator=False)
    assert plan.since is None and plan.considered == store.count(Filter.live())


def test_a_small_store_always_compares_everything(store, large, monkeypatch):
    monkeypatch.setattr(dream, "INCREMENTAL_FROM", 10_000)
    plan = dream.plan(store, now=NOW, generator=False)
    assert plan.since is None and plan.considered == 63


def test_partners_are_every_stored_vector_at_the_threshold(store, large, monkeypatch):
    """_partners reads the vectors a block at a time: the same rows as comparing with each."""
    import numpy as np

    monkeypatch.setattr(dream, "PARTNER_BLOCK", 7)
    changed = large["background"][:5] + [large["old"][0]]
    everyone = store.list(Filter.live(), limit=None)
    seq = store.storage_order(m.id for m in everyone)
    vecs = dream._vectors(store, everyone)
    new = dream._vectors(store, changed)
    for threshold in (0.3, 0.5, 0.9):
        want = sorted(seq[m.id] for m, v in zip(everyone, vecs) if np.max(new @ v) >= threshold - 1e-6)
        assert dream._partners(store, changed, threshold) == want
        assert len(want) >= len(changed)


def test_cli_full_and_the_plan_json_say_what_was_compared(store, large, monkeypatch):
    from typer.testing import CliRunner

    from pmem.cli.app import app

    monkeypatch.setenv("PMEM_DB", str(store.path))
    add(store, large["background"][9].text + "!")
    runner = CliRunner()
    r = runner.invoke(app, ["dream", "--json", "--no-model"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["since_event"] == store.dream_mark() and data["changed"] == 1 and data["counts"]["dedup"] == 1
    r = runner.invoke(app, ["dream", "--no-model"])
    assert "changed since the last dream: 1 memory," in r.stderr and "--full" in r.stderr
    r = runner.invoke(app, ["dream", "--json", "--no-model", "--full"])
    data = json.loads(r.stdout)
    assert data["since_event"] is None and data["counts"]["dedup"] == 2
    mark = store.dream_mark()
    r = runner.invoke(app, ["dream", "--apply", "--yes", "--json", "--no-model", "--only", "expire"])
    assert r.exit_code == 0 and store.dream_mark() == mark  # expire alone does not move it

"""A dream on a large store compares only what changed since the last applied dream (and what
that resembles): the same proposals about the changed memories as a full plan, without reading
every memory, and what a person turned down stays turned down until --full."""

from __future__ import annotations

import json
import random

import pytest

from pmem import dream
from pmem.records import Memory
from pmem.store import Filter

NOW = "2026-01-01T00:00:00Z"
WORDS = ("amber basil cedar delta ember fjord garnet harbor indigo juniper kelp lagoon maple nectar onyx "
         "pebble quartz raven sorrel tundra umber violet willow xenon yarrow zephyr anchor bramble comet "
         "dune estuary falcon glacier heron iris jasper kestrel lichen meadow nimbus orchid prairie").split()


def add(store, text, **kw):
    kw.setdefault("allow_duplicate", True)
    return store.add(text, **kw)[0]


def mark(store):
    """The event the recorded dream mark stands at (None: no mark)."""
    return (store.dream_mark() or {}).get("event")


@pytest.fixture
def large(store, monkeypatch):
    """A store the dream treats as large (INCREMENTAL_FROM lowered), of distinct notes, one old
    near-duplicate pair, and a dream applied in which the person turned everything down."""
    monkeypatch.setattr(dream.planning, "INCREMENTAL_FROM", 20)
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
    assert mark(store) == first.mark > 0
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
    store.edit(large["background"][40].id, expires_at="2025-06-01T00:00:00Z")  # an edit is a change too
    plan = dream.plan(store, now=NOW, generator=False)
    full = dream.plan(store, now=NOW, generator=False, full=True)
    # the memory whose expiry passed is proposed for expiry, not compared
    assert plan.since == mark(store) and plan.changed == 2
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


def test_what_a_dream_changed_outside_the_pairs_is_not_compared_again(store, large):
    """The kept duplicate's tags and date, the newer fact's valid_from and the older fact's
    supersession (it leaves the active set) decide no pair: the next dream compares none of them,
    and a new near-duplicate of the kept one still meets it, from its own side. A date that
    orders supersede, moved, is a change."""
    twin = large["background"][17]
    dup = add(store, twin.text + "!", tags=["garden"], created_at=twin.created_at)
    newer = add(store, "Favourite tea of the household is green sencha with toasted brown rice",
                created_at="2025-01-01T00:00:00Z")
    plan = dream.plan(store, now=NOW, generator=False)
    assert {p.kind for p in plan.proposals} == {"dedup", "supersede"}
    kept = next(p.target for p in plan.proposals if p.kind == "dedup")
    assert kept == dup.id  # the longer of the two
    dream.apply(store, plan, backup=False)
    assert store.get(kept).tags == ["garden"] and store.get(newer.id).valid_from is not None
    again = dream.plan(store, now=NOW, generator=False)
    assert again.since == plan.mark and again.changed == 0 and again.proposals == []
    third = add(store, twin.text + "?", created_at="2020-01-01T00:00:00Z")
    store.edit(large["background"][3].id, text="The porch light is on a timer until midnight")
    after = dream.plan(store, now=NOW, generator=False)
    assert after.changed == 2
    assert [sorted(p.members) for p in after.proposals] == [sorted([kept, third.id])]
    dream.apply(store, after, backup=False)
    assert store.get(kept).created_at == "2020-01-01T00:00:00Z"  # the earliest of its duplicates
    assert dream.plan(store, now=NOW, generator=False).changed == 1


def test_an_expiry_that_passed_without_a_change_is_still_proposed(store, large):
    m = store.edit(large["background"][5].id, expires_at="2025-12-31T00:00:00Z")
    plan = dream.plan(store, now=NOW, generator=False)
    dream.apply(store, plan, backup=False)
    later = "2026-03-01T00:00:00Z"
    plan = dream.plan(store, now=later, generator=False)
    assert plan.changed == 0  # the stamp the last dream applied changed nothing a pair is decided on
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
    before = mark(store)
    gate = add(store, "The garden gate code is 4471")
    plan = dream.plan(store, now=NOW, generator=False)
    assert mark(store) == before  # planning writes nothing
    partial = dream.plan(store, now=NOW, generator=False, only={"dedup", "expire"})
    dream.apply(store, partial, backup=False)
    assert mark(store) == before  # supersede and merge did not look
    plan.complete = plan.resume = False  # cut short where no dream could go on from
    dream.apply(store, plan, backup=False)
    assert mark(store) == before
    plan = dream.plan(store, now=NOW, generator=False)
    dream.apply(store, plan, backup=False)
    assert mark(store) == plan.mark > before
    assert dream.plan(store, now=NOW, generator=False).changed == 0
    assert store.dream_mark()["revisit"] == [] and gate.id not in store.dream_mark()["waiting"]


def test_a_quarter_of_the_store_changed_reads_everything(store, large, monkeypatch):
    for i in range(25):
        add(store, f"a fresh note {i} about {WORDS[i]} and {WORDS[-i - 1]}")
    plan = dream.plan(store, now=NOW, generator=False)
    assert plan.since is None and plan.considered == store.count(Filter.live())


def test_a_small_store_always_compares_everything(store, large, monkeypatch):
    monkeypatch.setattr(dream.planning, "INCREMENTAL_FROM", 10_000)
    plan = dream.plan(store, now=NOW, generator=False)
    assert plan.since is None and plan.considered == 63


def test_neighbours_are_every_stored_vector_at_the_threshold(store, large, monkeypatch):
    """neighbours reads the vectors a block at a time: the same pairs as comparing each stored
    vector (up to `upto`) with each of the chunk's, two of the chunk once, none with itself."""
    monkeypatch.setattr(dream.pairs, "PARTNER_BLOCK", 7)
    everyone = store.list_memories(Filter.live(), limit=None)
    seq = store.storage_order(m.id for m in everyone)
    vec = {seq[m.id]: v for m, v in zip(everyone, dream.vectors_of(store, everyone))}
    chunk = {seq[m.id]: m for m in large["background"][:5] + [large["old"][0]]}
    sizes = {}
    for threshold in (0.3, 0.5, 0.9):
        for upto in (None, max(chunk) - 1):
            want = {(a, b) for a in chunk for b in vec if (upto is None or b <= upto)
                    and (b < a or b not in chunk) and float(vec[a] @ vec[b]) >= threshold - 1e-6}
            got = list(zip(*(column.tolist() for column in dream.neighbours(store, chunk, threshold, upto))))
            assert {(a, b) for a, b, _ in got} == want and len(got) == len(want)
            assert all(abs(cos - float(vec[a] @ vec[b])) < 1e-5 for a, b, cos in got)
            sizes[(threshold, upto)] = len(want)
    assert sizes[(0.3, None)] > sizes[(0.3, max(chunk) - 1)] > 0 and sizes[(0.9, None)] < sizes[(0.3, None)]


def test_cli_full_and_the_plan_json_say_what_was_compared(store, large, monkeypatch):
    from typer.testing import CliRunner

    from pmem.cli.app import app

    monkeypatch.setenv("PMEM_DB", str(store.path))
    add(store, large["background"][9].text + "!")
    runner = CliRunner()
    r = runner.invoke(app, ["dream", "--json", "--no-model"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["since_event"] == mark(store) and data["changed"] == 1 and data["counts"]["dedup"] == 1
    r = runner.invoke(app, ["dream", "--no-model"])
    assert "changed since the last dream: 1 memory," in r.stderr and "--full" in r.stderr
    r = runner.invoke(app, ["dream", "--json", "--no-model", "--full"])
    data = json.loads(r.stdout)
    assert data["since_event"] is None and data["counts"]["dedup"] == 2
    before = mark(store)
    r = runner.invoke(app, ["dream", "--apply", "--yes", "--json", "--no-model", "--only", "expire"])
    assert r.exit_code == 0 and mark(store) == before  # expire alone does not move it


def test_a_merge_dropped_for_want_of_a_chat_model_waits_for_one(store, large):
    """Without a chat model a merge is dropped every night: the mark still moves (or every plan
    would be a whole one); the members wait, and the next plan that may use a model compares
    them again."""
    from fakes import FakeGenerator

    store.config = store.config.with_values(merge_threshold=0.75)  # x and y: 0.78; the notes: 0.73 at most
    dream.apply(store, dream.plan(store, now=NOW, generator=False, full=True), accept=set(), backup=False)
    x = add(store, "The cabin water heater needs a new anode rod every spring, says the plumber Tom")
    y = add(store, "Plumber Tom says the cabin water heater anode rod is due every spring")
    pair = {x.id, y.id}
    plan = dream.plan(store, now=NOW, generator=False)
    assert plan.since is not None
    assert any(set(d["members"]) == pair and d["reason"].startswith("no chat model") for d in plan.dropped)
    dream.apply(store, plan, accept=set(), backup=False)
    assert mark(store) == plan.mark and pair <= set(store.dream_mark()["waiting"])
    again = dream.plan(store, now=NOW, generator=False)  # still no model: not compared again
    assert again.since == plan.mark and again.dropped == [] and again.changed == 0
    dream.apply(store, again, backup=False)
    assert pair <= set(store.dream_mark()["waiting"])  # still waiting
    with_model = dream.plan(store, now=NOW, generator=FakeGenerator())
    assert with_model.since is not None and with_model.changed >= 2
    tried = [p for p in with_model.proposals if p.kind == "merge" and set(p.members) == pair]
    tried += [d for d in with_model.dropped if set(d["members"]) == pair]
    assert tried and not any(d["reason"].startswith("no chat model") for d in with_model.dropped)


def test_an_undo_between_planning_and_applying_is_not_lost(store, large):
    x = add(store, "The boat shed ladder hangs on the north wall")
    y = add(store, "The boat shed ladder hangs on the north wall!")
    store.forget(y.id)
    plan = dream.plan(store, now=NOW, generator=False)
    store.undo()  # in another terminal, while the plan waits for review: y is back
    dream.apply(store, plan, backup=False)
    again = dream.plan(store, now=NOW, generator=False)
    assert again.since is not None
    assert ("dedup", tuple(sorted([x.id, y.id]))) in {_key(p) for p in again.proposals}


def test_a_mark_in_another_form_is_no_mark(store, large):
    store.conn.execute("UPDATE settings SET value = '65' WHERE key = 'dream_mark'")
    store.conn.commit()
    assert store.dream_mark() is None
    assert dream.plan(store, now=NOW, generator=False).since is None
    add(store, "a note to undo")
    store.undo()


def test_a_proposal_skipped_as_stale_brings_its_members_back(store, large):
    b = add(store, "Favourite tea of the household is smoky lapsang", created_at="2024-01-01T00:00:00Z")
    a = add(store, "Favourite tea of the household is smoky lapsang!", created_at="2024-02-01T00:00:00Z")
    c = add(store, "Favourite tea of the household is green sencha", created_at="2025-01-01T00:00:00Z")
    plan = dream.plan(store, now=NOW, generator=False)
    assert {p.kind for p in plan.proposals if a.id in p.members} >= {"dedup"}
    store.forget(a.id)  # during the review
    result = dream.apply(store, plan, backup=False)
    assert result.skipped and mark(store) == plan.mark
    inc = {_key(p) for p in dream.plan(store, now=NOW, generator=False).proposals}
    full = {_key(p) for p in dream.plan(store, now=NOW, generator=False, full=True).proposals}
    assert ("supersede", tuple(sorted([b.id, c.id]))) in inc & full


def test_undo_takes_the_mark_back_before_what_it_undid(store, large):
    x = add(store, "The boat shed spare key is in the red tin")
    y = add(store, "The boat shed spare key is in the red tin!")
    pair = ("dedup", tuple(sorted([x.id, y.id])))
    first = dream.plan(store, now=NOW, generator=False)
    dream.apply(store, first, backup=False)  # the dedup applied
    dream.apply(store, dream.plan(store, now=NOW, generator=False), backup=False)  # an empty nightly dream
    assert mark(store) > first.mark
    store.undo()  # the person takes the first dream back (the empty one recorded no operation)
    assert mark(store) == first.mark  # just before the undone dream's own events
    assert pair in {_key(p) for p in dream.plan(store, now=NOW, generator=False).proposals}


def test_undo_of_a_forget_brings_the_memory_back_into_the_comparison(store, large):
    x = add(store, "The boat shed ladder hangs on the north wall")
    y = add(store, "The boat shed ladder hangs on the north wall!")
    store.forget(y.id)
    dream.apply(store, dream.plan(store, now=NOW, generator=False), backup=False)
    store.undo()  # y is back, with no event of its own
    plan = dream.plan(store, now=NOW, generator=False)
    assert plan.since is not None
    assert ("dedup", tuple(sorted([x.id, y.id]))) in {_key(p) for p in plan.proposals}


def test_included_pinned_memories_are_compared(store, large):
    a = add(store, "Passport number is in the fireproof box", pinned=True)
    b = add(store, "Passport number is in the fireproof box!", pinned=True)
    dream.apply(store, dream.plan(store, now=NOW, generator=False), backup=False)
    plan = dream.plan(store, now=NOW, generator=False, include=[a.id, b.id])
    assert plan.since is not None
    assert ("dedup", tuple(sorted([a.id, b.id]))) in {_key(p) for p in plan.proposals}


def test_another_model_or_threshold_compares_everything_again(store, large, monkeypatch):
    assert dream.plan(store, now=NOW, generator=False).since is not None
    store.config = store.config.with_values(dedup_threshold=0.75)
    assert dream.plan(store, now=NOW, generator=False).since is None
    store.config = store.config.with_values(dedup_threshold=0.92, dedup_lexical=0.4)
    assert dream.plan(store, now=NOW, generator=False).since is None


@pytest.mark.slow
def test_facts_of_a_subject_are_found_past_a_thousand_mentions(store, large):
    talk = "we talked about how the favourite coffee of the household ran out, day"
    store.insert([Memory(id=f"e{i:05d}", text=f"{talk} {i}", tier="episodic", created_at="2025-12-20T00:00:00Z")
                  for i in range(1100)], summary="chat")
    old = add(store, "Favourite coffee of the household is a dark roast from Huila",
              created_at="2024-01-01T00:00:00Z")
    dream.apply(store, dream.plan(store, now=NOW, generator=False, full=True), backup=False)
    new = add(store, "Favourite coffee of the household is pale washed beans with cardamom",
              created_at="2025-01-01T00:00:00Z")
    subject = "favourite coffee of the household".split()
    assert [m.id for m in store.facts_starting_with(subject)] == [old.id, new.id]
    plan = dream.plan(store, now=NOW, generator=False)
    assert plan.since is not None
    assert ("supersede", tuple(sorted([old.id, new.id]))) in {_key(p) for p in plan.proposals}


def test_a_mark_that_cannot_be_written_leaves_the_dream_applied(store, large, monkeypatch):
    from pmem.errors import DatabaseError

    x = add(store, "The shed padlock code is written under the bench")
    y = add(store, "The shed padlock code is written under the bench!")
    before = mark(store)

    def locked(*a, **k):
        raise DatabaseError("database is locked by another process; try again")

    monkeypatch.setattr(store, "set_dream_mark", locked)
    result = dream.apply(store, dream.plan(store, now=NOW, generator=False), backup=False)
    assert result.applied and result.op_id
    assert any(store.get(m.id).merged_into for m in (x, y)) and mark(store) == before


def test_old_episodes_are_read_for_compress_but_not_compared_again(store, large):
    """Old episodes are read every night until compressed; a dedup among them that a person
    turned down does not come back."""
    e1 = add(store, "Caroline: the lake was cold and clear this morning.", tier="episodic",
             created_at="2023-05-08T10:00:00Z")
    e2 = add(store, "Caroline: the lake was cold and clear this morning!", tier="episodic",
             created_at="2023-06-09T10:00:00Z")  # alone on its day: never compressed
    first = dream.plan(store, now=NOW, generator=False, full=True)
    assert ("dedup", tuple(sorted([e1.id, e2.id]))) in {_key(p) for p in first.proposals}
    dream.apply(store, first, accept=set(), backup=False)
    plan = dream.plan(store, now=NOW, generator=False)
    assert plan.since is not None and plan.considered >= 2  # read (for compress)
    assert all(e1.id not in p.members for p in plan.proposals)  # and not compared again
    assert all(e1.id not in p.members for p in dream.plan(store, now=NOW, generator=False, only={"dedup", "merge",
                                                                                               "supersede"}).proposals)


def _pair_keys(plan):
    return {_key(p) for p in plan.proposals if p.kind in dream.PAIR_KINDS}


@pytest.fixture
def sliced(store, monkeypatch):
    """A store the dream treats as large, compared 8 memories a slice: distinct notes with a
    near-duplicate pair and a changed fact each stored slices apart."""
    monkeypatch.setattr(dream.planning, "INCREMENTAL_FROM", 20)
    monkeypatch.setattr(dream.planning, "SLICE", 8)
    rng = random.Random(11)
    notes = [add(store, f"{' '.join(rng.sample(WORDS, 5))} number {i}") for i in range(50)]
    early = add(store, "The boat shed key hangs behind the blue door", created_at="2024-01-01T00:00:00Z")
    tea = add(store, "Favourite tea of the household is a smoky lapsang from Fujian hills",
              created_at="2024-01-01T00:00:00Z")
    notes += [add(store, f"{' '.join(rng.sample(WORDS, 5))} count {i}") for i in range(30)]
    late = add(store, "The boat shed key hangs behind the blue door!", created_at="2025-01-01T00:00:00Z")
    new_tea = add(store, "Favourite tea of the household is green sencha with toasted brown rice",
                  created_at="2025-01-01T00:00:00Z")
    return {"notes": notes, "dup": (early, late), "tea": (tea, new_tea)}


@pytest.mark.parametrize("read_max", [None, 6])
def test_a_first_dream_of_a_large_store_goes_a_slice_at_a_time_and_finds_what_a_whole_plan_finds(
        store, sliced, monkeypatch, read_max):
    if read_max:  # a slice planned in pieces that read at most 6 memories (with their subjects' facts)
        monkeypatch.setattr(dream.planning, "READ_MAX", read_max)
    sizes = []  # memories each run of the planners read
    run = dream.SlicePlanner.run
    monkeypatch.setattr(dream.SlicePlanner, "run", lambda self, ms, *a, **k: sizes.append(len(ms := list(ms)))
                        or run(self, ms, *a, **k))
    seen = []
    plan = dream.plan(store, now=NOW, generator=False, progress=lambda done, total: seen.append((done, total)))
    live = store.count(Filter.live())
    assert plan.complete and plan.through is None and plan.left == 0 and plan.considered == live == 84
    assert seen[-1] == (84, 84) and len(seen) == 11  # 8 a slice
    assert max(sizes) < live / 2  # a slice and what it resembles, never the store
    if read_max:
        assert max(sizes) <= read_max + 1 and len(sizes) > 2 * len(seen)
    monkeypatch.setattr(dream.planning, "INCREMENTAL_FROM", 10_000)  # the same store compared whole
    whole = dream.plan(store, now=NOW, generator=False)
    assert _pair_keys(plan) == _pair_keys(whole)
    early, late = sliced["dup"]
    tea, new_tea = sliced["tea"]
    assert ("dedup", tuple(sorted([early.id, late.id]))) in _pair_keys(plan)
    assert ("supersede", tuple(sorted([tea.id, new_tea.id]))) in _pair_keys(plan)


def test_a_time_limit_stops_between_slices_and_the_next_dream_goes_on(store, sliced, monkeypatch):
    windows = []
    live_after = store.live_after
    monkeypatch.setattr(store, "live_after", lambda seq, limit: windows.append(seq) or live_after(seq, limit))
    over = {"after": 7}  # the budget runs out in the 7th slice (when it looks for what resembles it)
    monkeypatch.setattr(dream.Budget, "over", lambda self: len(windows) >= over["after"])
    cut = dream.plan(store, now=NOW, generator=False, max_seconds=60)
    assert not cut.complete and cut.left == 84 - 6 * 8 and cut.through == windows[6]
    assert "36 memories not compared yet" in " ".join(cut.notes)
    early, late = sliced["dup"]
    assert all(late.id not in p.members for p in cut.proposals)  # stored after the stop
    dream.apply(store, cut, backup=False)
    assert store.dream_mark()["through"] == cut.through and mark(store) == cut.mark
    over["after"] = 10 ** 9
    rest = dream.plan(store, now=NOW, generator=False)
    assert rest.complete and rest.through is None and rest.since == cut.mark
    assert rest.considered < 84  # the first six slices are not read again
    assert ("dedup", tuple(sorted([early.id, late.id]))) in _pair_keys(rest)
    dream.apply(store, rest, accept=set(), backup=False)
    assert "through" not in store.dream_mark()  # every memory compared: only what changes from now on
    assert dream.plan(store, now=NOW, generator=False).considered == 0


def test_between_nights_what_changed_is_scanned_only_against_what_was_compared(store, sliced, monkeypatch):
    """A first dream cut short: the next night scans a changed memory against the memories
    compared so far (up to `through`) and no further; one stored after that meets it when its
    own slice comes, so the pair is still found."""
    windows = []
    live_after = store.live_after
    monkeypatch.setattr(store, "live_after", lambda seq, limit: windows.append(seq) or live_after(seq, limit))
    over = {"after": 4}  # three slices of 8
    monkeypatch.setattr(dream.Budget, "over", lambda self: len(windows) >= over["after"])
    dream.apply(store, dream.plan(store, now=NOW, generator=False, max_seconds=60), accept=set(), backup=False)
    through = store.dream_mark()["through"]
    early, late = sliced["dup"]
    inside = sliced["notes"][2]
    order = store.storage_order([inside.id, early.id])
    assert order[inside.id] <= through < order[early.id]
    store.edit(inside.id, text=early.text + "?")  # now a near-duplicate of `early`
    scans = []
    neighbours = dream.neighbours
    monkeypatch.setattr(dream.planning, "neighbours", lambda st, chunk, threshold, upto=None, budget=None:
                        scans.append((sorted(chunk), upto)) or neighbours(st, chunk, threshold, upto, budget))
    over["after"] = 10 ** 9
    nxt = dream.plan(store, now=NOW, generator=False)
    assert nxt.complete and nxt.changed == 1
    assert scans[0] == ([order[inside.id]], through)  # what changed, against the part compared so far
    assert any({inside.id, early.id} <= set(p.members) for p in nxt.proposals if p.kind == "dedup")


def test_a_memory_an_earlier_slice_proposed_is_left_to_the_next_dream(store, sliced):
    early, late = sliced["dup"]
    for i in range(10):
        add(store, f"another note {i} about {WORDS[i]} and {WORDS[-i - 1]}")
    third = add(store, "The boat shed key hangs behind the blue door.", created_at="2025-06-01T00:00:00Z")
    plan = dream.plan(store, now=NOW, generator=False)
    dups = [set(p.members) for p in plan.proposals if p.kind == "dedup"]
    assert dups == [{early.id, late.id}]  # the third was met in a later slice than the pair
    assert {early.id, late.id} & set(plan.revisit)
    dream.apply(store, plan, backup=False)
    nxt = dream.plan(store, now=NOW, generator=False)
    assert nxt.since == plan.mark
    assert any(third.id in p.members and p.kind == "dedup" for p in nxt.proposals)


def test_the_cli_says_how_many_memories_are_left_to_compare(store, sliced, monkeypatch):
    from typer.testing import CliRunner

    from pmem.cli.app import app

    monkeypatch.setenv("PMEM_DB", str(store.path))
    monkeypatch.setattr(dream.Budget, "over", lambda self: False)  # never
    r = CliRunner().invoke(app, ["dream", "--json", "--no-model"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["complete"] and data["not_compared"] == 0
    calls = []
    monkeypatch.setattr(dream.Budget, "over", lambda self: calls.append(1) or len(calls) > 3)
    r = CliRunner().invoke(app, ["dream", "--no-model", "--max-seconds", "5"])
    assert r.exit_code == 0, r.output
    assert "memories not compared yet" in r.stderr and "run again to continue" in r.stderr


def test_what_changed_and_the_time_limit_left_is_compared_next_time(store, sliced, monkeypatch):
    """A dream whose time runs out among what changed still moves the mark (or a change larger
    than a night's time would be compared from the start every night): what it did not compare
    is looked at next time."""
    dream.apply(store, dream.plan(store, now=NOW, generator=False), accept=set(), backup=False)
    before = mark(store)
    monkeypatch.setattr(dream.planning, "SLICE", 2)
    twins = [add(store, f"{m.text}!") for m in sliced["notes"][:5]]  # five near-duplicates, two a slice
    calls = []
    with monkeypatch.context() as m:  # out of time when comparing the second two
        m.setattr(dream.Budget, "over", lambda self: calls.append(1) or len(calls) > 1)
        cut = dream.plan(store, now=NOW, generator=False, max_seconds=1)
    assert not cut.complete and cut.resume and cut.changed == 5
    assert "time limit reached while comparing memories" in cut.notes
    found = {i for p in cut.proposals for i in p.members}
    assert len([t for t in twins if t.id in found]) == 2 and {t.id for t in twins[2:]} <= set(cut.revisit)
    dream.apply(store, cut, backup=False)
    assert mark(store) == cut.mark > before and "through" not in store.dream_mark()
    rest = dream.plan(store, now=NOW, generator=False)
    assert rest.complete and {t.id for t in twins[2:]} <= {i for p in rest.proposals for i in p.members}


def test_a_slice_mark_in_another_form_compares_everything(store, sliced):
    dream.apply(store, dream.plan(store, now=NOW, generator=False), accept=set(), backup=False)
    store.conn.execute("UPDATE settings SET value = json_set(value, '$.through', 'x') WHERE key = 'dream_mark'")
    store.conn.commit()
    plan = dream.plan(store, now=NOW, generator=False)
    assert plan.complete and plan.considered == store.count(Filter.live())


def test_proposals_the_time_limit_left_unapplied_come_back_in_the_next_dream(store, sliced, monkeypatch):
    plan = dream.plan(store, now=NOW, generator=False)
    assert len(plan.proposals) >= 2
    with monkeypatch.context() as m:
        m.setattr(dream.Budget, "over", lambda self: self.deadline is not None)  # out of time at once
        result = dream.apply(store, plan, backup=False, max_seconds=1)
    assert not result.complete and not result.applied
    assert mark(store) == plan.mark  # what was planned is not planned again from the start
    assert {i for p in plan.proposals for i in p.members} <= set(store.dream_mark()["revisit"])
    again = dream.plan(store, now=NOW, generator=False)
    assert again.since == plan.mark and _pair_keys(again) == _pair_keys(plan)


def test_applying_keeps_a_quarter_of_max_seconds(store, sliced, monkeypatch):
    from typer.testing import CliRunner

    from pmem.cli.app import app

    monkeypatch.setenv("PMEM_DB", str(store.path))
    asked = []
    plan = dream.plan
    monkeypatch.setattr(dream, "plan", lambda *a, **k: asked.append(k["max_seconds"]) or plan(*a, **k))
    for args in (["--max-seconds", "40"], ["--apply", "--yes", "--max-seconds", "40"], ["--apply", "--yes"]):
        r = CliRunner().invoke(app, ["dream", "--json", "--no-model", "--no-upkeep", *args])
        assert r.exit_code == 0, r.output
    assert asked == [40, 30, None]

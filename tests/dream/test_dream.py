"""pmem dream: each proposal kind, the plan/apply split, idempotence, one undo, pinned safety,
backups, and an apply killed with SIGKILL part way."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pmem import dream
from pmem.errors import UsageError
from pmem.records import TIERS
from pmem.search import search
from pmem.service import MemoryStore
from pmem.store import Filter

from fakes import FakeGenerator, writing_while_embedding

OLD = "2023-05-08T10:00:00Z"
NOW = "2026-01-01T00:00:00Z"


@pytest.fixture(autouse=True)
def _loose_merge(store):
    store.config = store.config.with_values(merge_threshold=0.7)  # the fake embedder scores related notes ~0.73


def add(store, text, **kw):
    kw.setdefault("allow_duplicate", True)
    return store.add(text, **kw)[0]


def everything(store):
    return [m.to_dict() for m in store.list_memories(Filter.everything(), sort="id", limit=None)]


def snapshot(store, queries=("wifi password", "favorite color", "hiking trail", "dentist")):
    flt = Filter(tiers=TIERS)
    return {q: [h.to_dict() for h in search(store, q, flt, limit=10)] for q in queries} | {
        "rows": everything(store)}


def rich_store(store):
    """One of everything a dream acts on."""
    ids = {}
    ids["dup_a"] = add(store, "The wifi password at the cabin is hunter2", tags=["home"],
                       created_at="2024-03-01T00:00:00Z").id
    ids["dup_b"] = add(store, "The wifi password at the cabin is hunter2!", tags=["net"],
                       created_at="2024-02-01T00:00:00Z").id
    ids["old_color"] = add(store, "My favorite color is blue", created_at="2024-01-01T00:00:00Z").id
    ids["new_color"] = add(store, "My favorite color is green", created_at="2024-05-01T00:00:00Z").id
    ids["milk"] = add(store, "Buy milk for the party", expires_at="2025-12-01T00:00:00Z").id
    ids["episodes"] = [add(store, f"Caroline: we went hiking on trail {i} near the lake and it was lovely.",
                           tier="episodic", created_at=f"2023-05-08T10:0{i}:00Z").id for i in range(4)]
    ids["recent"] = add(store, "Caroline: hiking again tomorrow on the lake trail.", tier="episodic",
                        created_at="2025-12-30T00:00:00Z").id
    ids["dentist"] = add(store, "Dentist appointment is on Tuesday at 3pm", pinned=True).id
    ids["dentist2"] = add(store, "Dentist appointment is on Tuesday at 3pm.", pinned=True).id
    return ids


def test_plan_writes_nothing_and_is_deterministic(store):
    rich_store(store)
    changes = store.conn.total_changes
    a = dream.plan(store, now=NOW, generator=False).to_dict()
    b = dream.plan(store, now=NOW, generator=False).to_dict()
    assert store.conn.total_changes == changes
    a.pop("elapsed_s"), b.pop("elapsed_s")
    assert a == b
    assert {p["kind"] for p in a["proposals"]} == {"dedup", "supersede", "expire", "compress"}
    assert all(len(p["id"]) == 12 for p in a["proposals"])


def test_dedup_keeps_the_most_informative_with_union_of_tags_and_earliest_date(store):
    ids = rich_store(store)
    plan = dream.plan(store, only={"dedup"}, now=NOW, generator=False)
    (p,) = plan.proposals
    assert p.kind == "dedup" and p.target == ids["dup_b"]  # the longer text ("!") is kept
    assert set(p.members) == {ids["dup_a"], ids["dup_b"]}
    dream.apply(store, plan, backup=False)
    canon, gone = store.get(ids["dup_b"]), store.get(ids["dup_a"])
    assert canon.tags == ["home", "net"] and canon.created_at == "2024-02-01T00:00:00Z"
    assert gone.merged_into == canon.id
    hits = search(store, "wifi password cabin", Filter(tiers=TIERS))
    assert [h.memory.id for h in hits].count(gone.id) == 0


def test_dedup_needs_words_and_numbers_to_match(store):
    add(store, "Team meeting moved to 3pm on Friday")
    add(store, "Team meeting moved to 4pm on Friday")
    add(store, "The cat sleeps on the red sofa")
    assert dream.plan(store, only={"dedup"}, now=NOW, generator=False).proposals == []


def test_newest_wins_ties_in_dedup(store):
    a = add(store, "Alice likes green tea", created_at="2024-01-01T00:00:00Z")
    b = add(store, "Alice likes green tea", created_at="2024-06-01T00:00:00Z")
    (p,) = dream.plan(store, only={"dedup"}, now=NOW, generator=False).proposals
    assert p.target == b.id and p.members == [b.id, a.id]


def test_supersede_newer_value_wins(store):
    ids = rich_store(store)
    plan = dream.plan(store, only={"supersede"}, now=NOW, generator=False)
    (p,) = plan.proposals
    assert p.members == [ids["old_color"], ids["new_color"]]
    dream.apply(store, plan, backup=False)
    old = store.get(ids["old_color"])
    assert old.superseded_by == ids["new_color"] and old.valid_to == "2024-05-01T00:00:00Z"
    asof = store.list_memories(Filter(as_of="2024-02-01T00:00:00Z"), limit=None)
    assert ids["old_color"] in [m.id for m in asof]


def test_supersede_ignores_narrative_sentences(store):
    add(store, "Caroline is planning to study counseling", created_at="2024-01-01T00:00:00Z")
    add(store, "Caroline is going swimming with the kids", created_at="2024-02-01T00:00:00Z")
    assert dream.subject_value("Caroline is planning to study counseling") is None
    assert dream.subject_value("My favorite color: teal") == ("my favorite color", "teal")
    assert dream.plan(store, only={"supersede"}, now=NOW, generator=False).proposals == []


def test_expire_marks_and_restore_brings_back(store):
    ids = rich_store(store)
    plan = dream.plan(store, only={"expire"}, now=NOW, generator=False)
    (p,) = plan.proposals
    assert p.members == [ids["milk"]]
    dream.apply(store, plan, backup=False)
    m = store.get(ids["milk"])
    assert m.meta["expired_at"] == m.expires_at
    assert dream.plan(store, only={"expire"}, now=NOW, generator=False).proposals == []
    store.restore(m.id)
    assert store.get(m.id).expires_at is None


def test_purge_only_when_asked_backs_up_and_undo_restores(store, pmem_home):
    ids = rich_store(store)
    late = "2026-06-01T00:00:00Z"  # the milk expired 6 months before: past the 30-day grace
    assert not [p for p in dream.plan(store, now=late, generator=False).proposals if p.kind == "purge"]
    before = snapshot(store)
    plan = dream.plan(store, only={"purge"}, now=late, generator=False)
    assert [p.members for p in plan.proposals] == [[ids["milk"]]]
    result = dream.apply(store, plan)
    assert result.backup and Path(result.backup).exists()
    assert not store.get_many([ids["milk"]])
    backup = MemoryStore(result.backup, config=store.config)
    assert backup.get(ids["milk"]).text == "Buy milk for the party"
    backup.close()
    store.undo()
    assert snapshot(store) == before


def test_merge_is_written_by_the_model_and_grounded(store):
    a = add(store, "Bob's sister lives in Lisbon and works as a nurse", tags=["family"])
    b = add(store, "Bob's sister lives in Lisbon with two cats", tags=["pets"])
    gen = FakeGenerator()
    plan = dream.plan(store, only={"merge"}, now=NOW, generator=gen)
    (p,) = plan.proposals
    assert set(p.members) == {a.id, b.id} and "Lisbon" in p.result_text and "fake-chat" in p.reason
    result = dream.apply(store, plan, backup=False)
    new = store.get(result.created[p.id])
    assert new.derived_from == p.members and new.tags == ["family", "pets"] and new.tier == "archival"
    assert store.get(a.id).merged_into == new.id and store.get(b.id).merged_into == new.id
    assert dream.plan(store, only={"merge"}, now=NOW, generator=gen).proposals == []


TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"  # a GitHub token's shape (split: not a real one)


def test_merge_keeps_a_secret_its_members_were_allowed_to_hold(store):
    a = add(store, f"The deploy bot's GitHub token is {TOKEN} for the ops repo", allow_secret=True)
    b = add(store, "The deploy bot's GitHub token is for the ops repo and the docs repo")
    plan = dream.plan(store, only={"merge"}, now=NOW, generator=FakeGenerator())
    (p,) = plan.proposals
    assert TOKEN in p.result_text
    result = dream.apply(store, plan, backup=False)
    assert result.skipped == [] and result.applied == [p.id]
    new = store.get(result.created[p.id])
    assert TOKEN in new.text and new.derived_from == p.members and store.get(a.id).merged_into == new.id
    assert store.get(b.id).merged_into == new.id


def test_merge_that_brings_a_secret_no_member_holds_is_refused(store):
    add(store, f"The deploy bot's GitHub token is {TOKEN} for the ops repo", allow_secret=True)
    add(store, "The deploy bot's GitHub token is for the ops repo and the docs repo")
    plan = dream.plan(store, only={"merge"}, now=NOW, generator=FakeGenerator())
    other = "ghp_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2"
    plan.proposals[0].result_text = plan.proposals[0].result_text.replace(TOKEN, other)  # as if the model wrote it
    result = dream.apply(store, plan, backup=False)
    assert result.applied == [] and "GitHub token" in result.skipped[0]["reason"]
    assert other not in {m.text for m in store.list_memories(Filter(), limit=None)}


def test_applying_a_merge_embeds_before_taking_the_write_lock(fake_config, tmp_path):
    """Another process can write while dream embeds a merge's text (issue 10, defect 12's rule)."""
    db = tmp_path / "shared.db"
    embedder = writing_while_embedding(db, fake_config)
    written, locked = embedder.written, embedder.locked
    with MemoryStore(db, config=fake_config.with_values(merge_threshold=-1.0), embedder=embedder) as s:
        add(s, "Bob's sister lives in Lisbon and works as a nurse")
        add(s, "Bob's sister lives in Lisbon with two cats")
        plan = dream.plan(s, only={"merge"}, now=NOW, generator=FakeGenerator())
        plan.proposals = [p for p in plan.proposals if "Bob's sister" in (p.result_text or "")][:1]
        assert plan.proposals
        written.clear()
        result = dream.apply(s, plan, backup=False)
        assert result.applied == [plan.proposals[0].id]
    assert locked == [] and written


def test_merge_that_adds_facts_is_dropped(store):
    add(store, "Bob's sister lives in Lisbon and works as a nurse")
    add(store, "Bob's sister lives in Lisbon with two cats")
    invents = FakeGenerator(extra=" She moved there in 2019 from Madrid.")
    plan = dream.plan(store, only={"merge"}, now=NOW, generator=invents)
    assert plan.proposals == [] and plan.dropped and "grounded" in plan.dropped[0]["reason"]


def test_no_model_means_no_merge(store):
    add(store, "Bob's sister lives in Lisbon and works as a nurse")
    add(store, "Bob's sister lives in Lisbon with two cats")
    plan = dream.plan(store, only={"merge"}, now=NOW, generator=False)
    assert plan.proposals == [] and plan.dropped[0]["reason"] == "no chat model to write the merge"


def test_the_stores_own_settings_reach_dreams_grounding(store, monkeypatch):
    monkeypatch.setenv("PMEM_EXTRACT_MIN_SUPPORT", "0.1")  # the global configuration: never read by dream
    add(store, "Bob's sister lives in Lisbon and works as a nurse")
    add(store, "Bob's sister lives in Lisbon with two cats")
    gen = FakeGenerator(extra=" Lovely.")  # one word that is not in the members
    store.config = store.config.with_values(extract_min_support=0.99)
    strict = dream.plan(store, only={"merge"}, now=NOW, generator=gen)
    assert strict.proposals == [] and "not grounded" in strict.dropped[0]["reason"]
    assert "need 99%" in strict.dropped[0]["reason"]
    store.config = store.config.with_values(extract_min_support=0.6)
    assert [p.kind for p in dream.plan(store, only={"merge"}, now=NOW, generator=gen).proposals] == ["merge"]


def test_the_stores_own_chat_model_is_the_one_dream_loads(store, tmp_path):
    add(store, "Bob's sister lives in Lisbon and works as a nurse")
    add(store, "Bob's sister lives in Lisbon with two cats")
    store.config = store.config.with_values(chat_model=str(tmp_path / "the-stores-own.gguf"))
    plan = dream.plan(store, only={"merge"}, now=NOW)
    assert plan.proposals == [] and any("the-stores-own.gguf" in n for n in plan.notes)


def test_compress_old_episodes_extractively_without_a_model(store):
    ids = rich_store(store)
    plan = dream.plan(store, only={"compress"}, now=NOW, generator=False)
    (p,) = plan.proposals
    assert p.members == ids["episodes"] and "extractive" in p.reason
    for sentence in p.result_text.removeprefix("2023-05-08: ").split("Caroline: ")[1:]:
        assert any(sentence.strip() in store.get(i).text for i in p.members)  # verbatim
    result = dream.apply(store, plan, backup=False)
    summary = store.get(result.created[p.id])
    assert summary.tier == "episodic" and summary.derived_from == ids["episodes"]
    assert summary.created_at == OLD
    default = {m.id for m in store.list_memories(Filter(tiers=TIERS), limit=None)}
    assert not default & set(ids["episodes"]) and summary.id in default and ids["recent"] in default


def test_compress_with_a_model(store):
    ids = rich_store(store)
    plan = dream.plan(store, only={"compress"}, now=NOW, generator=FakeGenerator())
    # The fake joins every note: not shorter, so the extractive summary is used; a shorter one is taken.
    assert "extractive" in plan.proposals[0].reason

    class Short(FakeGenerator):
        def generate_json(self, messages, schema, max_tokens=256):
            return {"text": "Caroline went hiking on trail 0 near the lake and it was lovely."}

    (p,) = dream.plan(store, only={"compress"}, now=NOW, generator=Short()).proposals
    assert p.result_text.startswith("Caroline went hiking") and "grounded" in p.reason
    assert p.members == ids["episodes"]


def test_pinned_memories_are_untouched_unless_included(store):
    ids = rich_store(store)
    plan = dream.plan(store, now=NOW, generator=False)
    assert not {ids["dentist"], ids["dentist2"]} & {i for p in plan.proposals for i in p.members}
    before = [store.get(ids["dentist"]).to_dict(), store.get(ids["dentist2"]).to_dict()]
    dream.apply(store, plan, backup=False)
    assert [store.get(ids["dentist"]).to_dict(), store.get(ids["dentist2"]).to_dict()] == before
    plan = dream.plan(store, only={"dedup"}, now=NOW, generator=False,
                      include=[ids["dentist"], ids["dentist2"]])
    assert [set(p.members) for p in plan.proposals] == [{ids["dentist"], ids["dentist2"]}]


def test_second_dream_proposes_nothing(store):
    rich_store(store)
    for i in range(6):  # a second old day, and merges
        add(store, f"Melanie: painted a sunrise over the lake, canvas number {i}.", tier="episodic",
            created_at=f"2023-06-0{i + 1}T09:00:00Z")
    add(store, "Bob's sister lives in Lisbon and works as a nurse")
    add(store, "Bob's sister lives in Lisbon with two cats")
    first = dream.plan(store, only=set(dream.KINDS), now=NOW, generator=FakeGenerator())
    assert {p.kind for p in first.proposals} == set(dream.KINDS) - {"purge"} or first.proposals
    result = dream.apply(store, first, backup=False)
    assert len(result.applied) == len(first.proposals)
    second = dream.plan(store, only=set(dream.KINDS), now=NOW, generator=FakeGenerator())
    assert second.proposals == [], second.to_dict()


def test_whole_dream_is_one_undo_restoring_identical_search(store):
    rich_store(store)
    add(store, "Bob's sister lives in Lisbon and works as a nurse")
    add(store, "Bob's sister lives in Lisbon with two cats")
    before = snapshot(store)
    ops_before = len(store.operations(100))
    plan = dream.plan(store, now=NOW, generator=FakeGenerator())
    assert {p.kind for p in plan.proposals} >= {"dedup", "merge", "compress", "expire", "supersede"}
    result = dream.apply(store, plan, backup=False)
    ops = store.operations(100)
    assert len(ops) == ops_before + 1 and ops[0].kind == "dream" and ops[0].id == result.op_id
    assert snapshot(store) != before
    store.undo()
    assert snapshot(store) == before
    assert json.dumps(snapshot(store), sort_keys=True) == json.dumps(before, sort_keys=True)


def test_apply_accepts_a_subset_and_skips_stale_proposals(store):
    ids = rich_store(store)
    plan = dream.plan(store, now=NOW, generator=False)
    dedup = next(p for p in plan.proposals if p.kind == "dedup")
    sup = next(p for p in plan.proposals if p.kind == "supersede")
    store.edit(ids["new_color"], text="My favorite color is purple")  # changed after the plan
    result = dream.apply(store, plan, accept={dedup.id, sup.id}, backup=False)
    assert result.applied == [dedup.id]
    assert result.skipped == [{"id": sup.id, "reason": f"memory {ids['new_color']} changed since the plan"}]
    assert store.get(ids["old_color"]).superseded_by is None
    # A plan survives JSON (the TUI and scripts hand it around) and is found by id prefix.
    assert plan.get(dedup.id[:6]) is dedup and json.loads(json.dumps(plan.to_dict()))["proposals"]


def test_max_seconds_stops_early(store):
    rich_store(store)
    plan = dream.plan(store, now=NOW, generator=False, max_seconds=1e-9)
    assert not plan.complete
    result = dream.apply(store, dream.plan(store, now=NOW, generator=False), backup=False, max_seconds=1e-9)
    assert not result.complete and not result.applied


def test_backups_rotate_and_are_private(store, pmem_home):
    from pmem.backup import backup_database, list_backups

    add(store, "something to back up")
    made = [backup_database(store, keep=2, label="test") for _ in range(4)]
    kept = list_backups()
    assert kept == made[-2:]
    for p in kept:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600
        b = MemoryStore(p, config=store.config)
        assert b.count() == 1
        b.close()
    assert stat.S_IMODE(kept[0].parent.stat().st_mode) == 0o700


def test_kill_9_mid_apply_leaves_whole_proposals(store, tmp_path):
    for i in range(40):  # 40 dedup proposals
        add(store, f"Reminder number {i}: water the {i} orchids on the balcony", created_at="2024-01-01T00:00:00Z")
        add(store, f"Reminder number {i}: water the {i} orchids on the balcony!", created_at="2024-02-01T00:00:00Z")
    plan = dream.plan(store, only={"dedup"}, now=NOW, generator=False)
    assert len(plan.proposals) == 40
    before = snapshot(store, queries=("orchids balcony",))
    store.close()
    script = textwrap.dedent(f"""
        import sys, time
        from pmem import dream
        from pmem.config import load
        from pmem.service import MemoryStore
        s = MemoryStore({str(tmp_path / 'test.db')!r}, config=load())
        plan = dream.plan(s, only={{"dedup"}}, now={NOW!r}, generator=False)
        def progress(done, total):
            print(done, flush=True)
            time.sleep(0.02)
        dream.apply(s, plan, progress=progress, backup=False)
        print("finished", flush=True)
    """)
    env = {**os.environ, "PMEM_EMBED_MODEL": "fake-64"}
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    for line in proc.stdout:
        if line.strip() == "12":
            break
    time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL

    s = MemoryStore(tmp_path / "test.db", config=store.config)
    try:
        assert s.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        applied = 0
        for p in plan.proposals:
            canon, other = s.get(p.target), s.get(p.members[1])
            done = other.merged_into == canon.id
            assert canon.created_at == ("2024-01-01T00:00:00Z" if done else canon.created_at)
            events = [e for e in s.history(other.id) if e[0].action == "dedup"]
            assert len(events) == (1 if done else 0)  # the change and its event, or neither
            applied += done
        assert 12 <= applied < 40
        (op,) = [o for o in s.operations(5) if o.kind == "dream"]
        assert op.events == applied * 2
        s.undo()
        assert snapshot(s, queries=("orchids balcony",)) == before
    finally:
        s.close()


def test_cli_dream_plan_json_apply_and_undo(store, monkeypatch):
    from typer.testing import CliRunner

    from pmem.cli.app import app

    rich_store(store)
    monkeypatch.setenv("PMEM_DB", str(store.path))
    monkeypatch.setenv("PMEM_COMPRESS_AFTER_DAYS", "30")
    runner = CliRunner()
    r = runner.invoke(app, ["dream", "--json", "--no-model"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["counts"]["dedup"] == 1 and data["proposals"][0]["id"]
    r = runner.invoke(app, ["dream", "--no-model"])
    assert r.exit_code == 0 and "\tdedup\t" in r.stdout
    r = runner.invoke(app, ["dream", "--apply", "--no-model"])
    assert r.exit_code == 2 and "--yes" in r.stderr
    r = runner.invoke(app, ["dream", "--only", "bogus"])
    assert r.exit_code == 2
    r = runner.invoke(app, ["dream", "--apply", "--yes", "--no-model", "--only", "dedup,expire"])
    assert r.exit_code == 0, r.output
    assert "applied 2 of 2" in r.stderr and "backup:" in r.stderr
    r = runner.invoke(app, ["dream", "--json", "--no-model", "--only", "dedup,expire"])
    assert json.loads(r.stdout)["proposals"] == []
    r = runner.invoke(app, ["undo"])
    assert r.exit_code == 0 and "dream" in r.output
    r = runner.invoke(app, ["dream", "--apply", "--yes", "--json", "--no-model", "--only", "dedup"])
    upkeep = json.loads(r.stdout)["upkeep"]
    assert upkeep["ran"] is False and upkeep["bytes_after"] == upkeep["bytes_before"] > 0  # little is free
    r = runner.invoke(app, ["dream", "--apply", "--yes", "--json", "--no-model", "--no-upkeep"])
    assert r.exit_code == 0 and json.loads(r.stdout)["upkeep"] is None


def test_a_dream_with_nothing_to_do_still_merges_the_keyword_index(store, monkeypatch):
    """`pmem dream --apply --yes` from cron: no proposal, and the upkeep still runs."""
    from typer.testing import CliRunner

    from pmem.cli.app import app
    from pmem.records import Memory

    for batch in range(6):  # a segment a write
        store.insert([Memory(id="", text=f"a plain note {batch}-{i} about w{batch}x{i}") for i in range(20)])
    segments = store.keywords.segments()
    assert segments >= 2
    monkeypatch.setenv("PMEM_DB", str(store.path))
    runner = CliRunner()
    r = runner.invoke(app, ["dream", "--apply", "--yes", "--json", "--no-model", "--only", "expire"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["plan"]["proposals"] == []
    assert data["upkeep"]["index_segments"] == [segments, 1]
    assert store.keywords.segments() == 1
    r = runner.invoke(app, ["dream", "--apply", "--yes", "--no-model", "--only", "expire"])
    assert r.exit_code == 0 and "nothing to do" in r.stderr and "upkeep not done" not in r.stderr


def test_ctrl_c_during_upkeep_keeps_what_the_dream_applied_and_says_so(store, monkeypatch):
    """Ctrl-C in the upkeep after `--apply`: the proposals are committed, the summary is printed,
    and the exit is 130 with a line saying what happened."""
    from typer.testing import CliRunner

    from pmem.cli.app import app
    from pmem.service import MemoryStore

    rich_store(store)
    monkeypatch.setenv("PMEM_DB", str(store.path))

    def interrupted(self, *a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(MemoryStore, "upkeep", interrupted)
    runner = CliRunner()
    r = runner.invoke(app, ["dream", "--apply", "--yes", "--no-model", "--only", "dedup,expire"])
    assert r.exit_code == 130
    assert "applied 2 of 2" in r.stderr and "interrupted during upkeep" in r.stderr
    r = runner.invoke(app, ["dream", "--json", "--no-model", "--only", "dedup,expire"])
    assert json.loads(r.stdout)["proposals"] == []  # applied, and committed
    r = runner.invoke(app, ["dream", "--apply", "--yes", "--json", "--no-model", "--only", "dedup"])
    assert r.exit_code == 130 and "interrupted during upkeep" in r.stderr
    data = json.loads(r.stdout)  # nothing to do: still whole JSON on stdout
    assert data["plan"]["proposals"] == [] and data["upkeep"]["interrupted"] is True


def test_a_failing_proposal_is_rolled_back_and_the_rest_applied(store, monkeypatch):
    ids = rich_store(store)
    plan = dream.plan(store, only={"dedup", "supersede"}, now=NOW, generator=False)
    real = store.supersede

    def broken(*a, **kw):
        real(*a, **kw)  # writes, then fails: the transaction must take the writes back
        raise UsageError("boom")

    monkeypatch.setattr(store, "supersede", broken)
    result = dream.apply(store, plan, backup=False)
    assert [p.kind for p in plan.proposals if p.id in result.applied] == ["dedup"]
    assert result.skipped[0]["reason"] == "failed: boom"
    assert store.get(ids["old_color"]).superseded_by is None
    assert store.operations(1)[0].events == 2  # the dedup's, nothing of the failed one


def test_all_stale_leaves_no_empty_operation(store):
    ids = rich_store(store)
    plan = dream.plan(store, only={"supersede"}, now=NOW, generator=False)
    store.edit(ids["old_color"], text="My favorite color was blue once")
    ops = len(store.operations(100))
    result = dream.apply(store, plan, backup=False)
    assert result.op_id is None and len(store.operations(100)) == ops


def test_supersede_uses_the_extraction_rule_for_changed_numbers(store):
    old = add(store, "Bob runs 5 km along the river every morning", created_at="2024-01-01T00:00:00Z")
    new = add(store, "Bob runs 10 km along the river every morning", created_at="2025-01-01T00:00:00Z")
    (p,) = dream.plan(store, only={"supersede"}, now=NOW, generator=False).proposals
    assert p.members == [old.id, new.id] and "extraction rule" in p.reason


def test_dedup_leaves_a_one_word_swap_alone(store):
    """The same frame with another value is another fact, however close the vectors."""
    store.config = store.config.with_values(dedup_threshold=-1.0)  # every pair is close enough here
    add(store, "My sister lives in Porto near the river")
    add(store, "My brother lives in Porto near the river")
    add(store, "Weekly meeting with Bob on Monday mornings")
    add(store, "Weekly meeting with Bob on Tuesday mornings")
    assert dream.plan(store, only={"dedup"}, now=NOW, generator=False).proposals == []

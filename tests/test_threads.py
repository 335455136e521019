"""Threads: positions, the neighbour-aware keyword index kept in step by every write (and undo),
recall's neighbour blocks within the budget, JSONL round trips, dream, and the migration."""

from __future__ import annotations

import io
import json
import random

import pytest
from conftest import schema_before

from pmem import Memory, dream, estimate_tokens, recall, render, search, transfer
from pmem.errors import UsageError
from pmem.records import TIERS
from pmem.search import Tuning
from pmem.service import MemoryStore
from pmem.store import Filter, migrations

OLD = "2023-05-08T10:00:00Z"
NOW = "2026-01-01T00:00:00Z"


def index_rows(store) -> list[tuple]:
    """The keyword index by memory id (an undone purge comes back under a new rowid)."""
    return sorted(store.conn.execute("SELECT m.id, f.text, f.context FROM memories_fts f "
                                     "JOIN memories m ON m.seq = f.rowid").fetchall())


def expected_rows(store) -> list[tuple]:
    """The index computed from the rows alone: each memory's text and its live thread
    neighbours' (the configured window), as the triggers should keep it."""
    before, after = store.keywords.window()
    rows = store.conn.execute("SELECT seq, text, thread, thread_pos, forgotten_at IS NULL AND merged_into IS NULL "
                              "FROM memories ORDER BY seq").fetchall()
    ids = dict(store.conn.execute("SELECT seq, id FROM memories").fetchall())
    out = []
    for seq, text, thread, pos, alive in rows:
        context = None
        if thread is not None and alive:
            live = sorted((p, s, t) for s, t, th, p, alive in rows if th == thread and alive and s != seq)
            lower = [t for p, s, t in live if (p, s) < (pos, seq)][-before:] if before else []
            upper = [t for p, s, t in live if (p, s) > (pos, seq)][:after]
            if lower or upper:
                context = " ".join(lower[::-1] + upper)
        out.append((ids[seq], text, context))
    return sorted(out)


def assert_index_in_step(store) -> None:
    assert index_rows(store) == expected_rows(store)
    assert store.conn.execute("SELECT count(*) FROM memories_fts").fetchone()[0] == \
        store.conn.execute("SELECT count(*) FROM memories").fetchone()[0]
    store.conn.execute("INSERT INTO memories_fts(memories_fts, rank) VALUES ('integrity-check', 1)")


def conversation(store, thread="chat", n=6) -> list[Memory]:
    texts = ["Mel: Where did you go last summer?", "Ana: Yes, last May, with my sister!",
             "Mel: That sounds lovely.", "Ana: We hiked the volcano trail at dawn.",
             "Mel: Did you bring the dog?", "Ana: No, he stayed with grandpa."][:n]
    return store.insert([Memory(id="", text=t, thread=thread) for t in texts])


def keyword_ids(store, query: str) -> list[str]:
    return [h.memory.id for h in search(store, query, mode="keyword", limit=20)]


# -- positions --------------------------------------------------------------------------------

def test_insert_and_add_append_to_a_thread(store):
    ms = conversation(store, n=3)
    assert [(m.thread, m.thread_pos) for m in ms] == [("chat", 0), ("chat", 1), ("chat", 2)]
    m, _ = store.add("Ana: And then it rained.", thread="chat")
    assert m.thread_pos == 3 and store.get(m.id).thread_pos == 3
    other, _ = store.add("A note in another thread", thread="  notes ")
    assert (other.thread, other.thread_pos) == ("notes", 0)
    alone, _ = store.add("I am vegetarian")
    assert (alone.thread, alone.thread_pos) == (None, None)
    kept = store.insert([Memory(id="", text="placed", thread="chat", thread_pos=10),
                         Memory(id="", text="after it", thread="chat")])
    assert [m.thread_pos for m in kept] == [10, 11]


def test_bad_thread_values_are_usage_errors(store):
    with pytest.raises(UsageError):
        store.insert([Memory(id="", text="x", thread="t", thread_pos=-1)])
    with pytest.raises(UsageError):
        store.add("x", thread="t" * 501)
    assert store.count(Filter(tiers=TIERS)) == 0
    with pytest.raises(UsageError, match="line 1: 'thread_pos'"):
        transfer.parse_jsonl(['{"text": "x", "thread": "t", "thread_pos": "3"}'])
    with pytest.raises(UsageError, match="line 1: 'thread'"):
        transfer.parse_jsonl(['{"text": "x", "thread": 3}'])
    # a position without a thread means nothing and is dropped
    (m,) = store.insert(transfer.parse_jsonl(['{"text": "x", "thread_pos": 3}']))
    assert (m.thread, m.thread_pos) == (None, None)


def test_neighbours_in_thread_order_skip_forgotten(store):
    ms = conversation(store)
    store.forget(ms[2].id)
    before, after = store.thread_neighbours(ms[3], 2, 2)
    assert [m.id for m in before] == [ms[0].id, ms[1].id]
    assert [m.id for m in after] == [ms[4].id, ms[5].id]
    assert store.thread_neighbours(ms[0], 1, 1) == ([], [ms[1]])
    alone, _ = store.add("alone")
    assert store.thread_neighbours(alone, 3, 3) == ([], [])


# -- the keyword index -------------------------------------------------------------------------

def filler(store, n=30) -> None:
    """Unrelated memories, so that BM25's idf of a word in one conversation is positive."""
    store.insert([Memory(id="", text=f"note {i}: groceries, taxes and the garden shed") for i in range(n)])


def test_index_holds_neighbours_and_the_shown_text_is_the_turn(store):
    filler(store)
    ms = conversation(store)
    store.keywords.set_window(2, 1)
    assert_index_in_step(store)
    # "volcano" is only in turn 3; the turns whose window holds it match too
    assert set(keyword_ids(store, "volcano")) == {ms[2].id, ms[3].id, ms[4].id, ms[5].id}
    # and rank below it when the neighbours' words weigh less than the turn's own
    hits = search(store, "volcano", mode="keyword", limit=5, tuning=Tuning(context_weight=0.5))
    assert hits[0].memory.id == ms[3].id
    assert hits[0].memory.text == "Ana: We hiked the volcano trail at dawn."  # the turn, not its window
    assert [h.memory.text for h in hits[1:]] == [store.get(h.memory.id).text for h in hits[1:]]


def test_editing_a_neighbour_updates_the_index(store):
    ms = conversation(store)
    assert ms[0].id not in keyword_ids(store, "kayaking")
    store.edit(ms[1].id, text="Ana: Yes, last May, kayaking with my sister!")
    # turn 0 never says kayaking: it is found through its neighbour's new text
    assert ms[0].id in keyword_ids(store, "kayaking")
    assert ms[0].id not in keyword_ids(store, "hiked")  # three turns away
    assert_index_in_step(store)


def test_every_write_and_its_undo_keeps_the_index_exact(store):
    ms = conversation(store)
    snapshot = index_rows(store)
    changes = [
        lambda: store.edit(ms[2].id, text="Mel: That sounds like a volcano."),
        lambda: store.forget(ms[3].id),
        lambda: store.delete(ms[1].id),  # what dream --purge does to a row
        lambda: store.set_fields(ms[4].id, "dedup", merged_into=ms[5].id),
        lambda: store.set_fields(ms[0].id, "edit", thread="elsewhere", thread_pos=0),
        lambda: store.add("Ana: one more", thread="chat"),
    ]
    states = []
    for change in changes:
        states.append(index_rows(store))
        change()
        assert_index_in_step(store)
    assert index_rows(store) != snapshot
    for state in reversed(states):
        store.undo()
        assert index_rows(store) == state
        assert_index_in_step(store)
    assert index_rows(store) == snapshot


def test_random_writes_keep_the_index_in_step(store):
    rng = random.Random(7)
    words = "apple pear fig plum kiwi lime date".split()
    ids = [m.id for m in conversation(store)]
    for step in range(40):
        action = rng.choice(["add", "edit", "forget", "restore", "purge", "undo", "move"])
        live = [m.id for m in store.list_memories(Filter.everything(), limit=None)]
        target = rng.choice(live) if live else None
        if action == "add":
            ids.append(store.add(f"{rng.choice(words)} {step}", thread=rng.choice(["chat", "other"]),
                                 allow_duplicate=True)[0].id)
        elif target and action == "edit":
            store.edit(target, text=f"{rng.choice(words)} {rng.choice(words)} {step}")
        elif target and action == "forget":
            store.forget(target)
        elif target and action == "restore":
            store.restore(target)
        elif target and action == "purge":
            store.delete(target)
        elif target and action == "move":
            store.set_fields(target, "edit", thread_pos=rng.randrange(8))
        elif action == "undo":
            store.undo()
        assert_index_in_step(store)


def test_changing_the_window_rewrites_the_index(store):
    ms = conversation(store)
    store.keywords.set_window(0, 0)
    assert store.keywords.window() == (0, 0)
    assert {r[2] for r in index_rows(store)} == {None}
    assert keyword_ids(store, "volcano") == [ms[3].id]
    store.keywords.set_window(1, 2)
    assert_index_in_step(store)
    assert set(keyword_ids(store, "volcano")) == {ms[1].id, ms[2].id, ms[3].id, ms[4].id}
    with pytest.raises(UsageError):
        store.keywords.set_window(-1, 0)


def test_a_memory_without_a_thread_behaves_as_today(store):
    store.add("The wifi password at the cabin is hunter2")
    m, _ = store.add("Deploys need approval from Dana")
    store.add("Dinner with Dana on Friday")
    assert m.thread is None and m.thread_pos is None
    assert {r[2] for r in index_rows(store)} == {None}
    assert keyword_ids(store, "deploys") == [m.id]
    r0, r2 = recall(store, "deploys Dana", neighbours=0), recall(store, "deploys Dana", neighbours=2)
    assert [x.id for x in r0.relevant] == [x.id for x in r2.relevant] and not r2.neighbour_of
    assert render(r0) == render(r2)
    assert json.loads(render(r2, "json"))["relevant"][0]["neighbour_of"] is None


# -- recall ------------------------------------------------------------------------------------

def test_recall_brings_neighbours_as_one_block_in_thread_order(store):
    filler(store)
    ms = conversation(store)
    store.add("Unrelated: the volcano documentary is on Friday")
    store.keywords.set_window(0, 0)  # only the turn itself matches; its neighbours come from recall
    r = recall(store, "hiked volcano trail dawn", neighbours=1, min_similarity=2.0)
    ids = [m.id for m in r.relevant]
    assert ids.index(ms[2].id) + 1 == ids.index(ms[3].id) and ids.index(ms[3].id) + 1 == ids.index(ms[4].id)
    assert r.neighbour_of[ms[2].id] == ms[3].id and r.neighbour_of[ms[4].id] == ms[3].id
    assert ms[3].id not in r.neighbour_of
    assert len(ids) == len(set(ids))  # each memory once
    data = json.loads(render(r, "json"))
    assert {d["id"]: d["neighbour_of"] for d in data["relevant"]}[ms[4].id] == ms[3].id
    none = recall(store, "hiked volcano trail dawn", neighbours=0, min_similarity=2.0)
    assert ms[4].id not in {m.id for m in none.relevant}


def test_recall_neighbours_setting_and_validation(store, monkeypatch):
    from pmem.config import load

    ms = conversation(store)
    monkeypatch.setenv("PMEM_RECALL_NEIGHBOURS", "2")
    store.config = load()
    assert store.config.recall_neighbours == 2
    r = recall(store, "hiked the volcano trail", min_similarity=2.0)
    assert {ms[1].id, ms[2].id, ms[4].id, ms[5].id} <= {m.id for m in r.relevant}
    with pytest.raises(UsageError):
        recall(store, "volcano", neighbours=-1)


@pytest.mark.parametrize("fmt", ["md", "xml", "json", "text"])
def test_recall_never_exceeds_the_budget_with_neighbours(store, fmt):
    for t in range(6):
        store.insert([Memory(id="", text=f"turn {i} of chat {t}: the cabin trip packing list, item {i * t}",
                             thread=f"chat-{t}") for i in range(30)])
    store.add("core fact", pinned=True)
    for neighbours in (0, 1, 3):
        for budget in (30, 120, 500, 1500, 4000):
            r = recall(store, "cabin trip", budget=budget, fmt=fmt, neighbours=neighbours)
            out = render(r, fmt)
            if fmt != "json":
                assert estimate_tokens(out) <= budget
            assert r.tokens <= budget
            ids = [m.id for m in r.memories()]
            assert len(ids) == len(set(ids))
            if neighbours and budget >= 4000:  # every match fits, with room left for context
                assert r.neighbour_of and not r.left_out
            if r.left_out:  # matches of one size were left out: no neighbour took their place
                assert not r.neighbour_of


# -- JSONL ---------------------------------------------------------------------------------------

def test_thread_order_survives_export_and_import(store, fake_config, tmp_path):
    ms = conversation(store)
    store.add("Ana: and one more thing", thread="chat")
    store.forget(ms[2].id)
    lines = list(transfer.export_jsonl(store.iter_all()))
    assert json.loads(lines[0])["thread"] == "chat" and "thread_pos" in json.loads(lines[0])
    random.Random(3).shuffle(lines)  # file order is not thread order
    with MemoryStore(tmp_path / "other.db", config=fake_config) as other:
        other.insert(transfer.parse(io.StringIO("".join(lines)), "jsonl"))

        def order(s):
            return [(m.id, m.text, m.thread_pos) for m in sorted(
                s.list_memories(Filter.everything(), limit=None), key=lambda m: m.thread_pos)]

        assert order(other) == order(store)
        assert index_rows(other) == index_rows(store)
        md = "".join(transfer.export_markdown(store.iter_all()))
        back = transfer.parse(io.StringIO(md), "md")
        assert sorted((m.id, m.thread, m.thread_pos) for m in back) == \
            sorted((m.id, m.thread, m.thread_pos) for m in store.iter_all())


# -- dream ---------------------------------------------------------------------------------------

def test_compressed_summary_stands_for_its_members_span(store):
    def turn(text, thread, pos):
        return Memory(id="", text=text, tier="episodic", created_at=OLD, thread=thread, thread_pos=pos)

    ms = store.insert([turn("Caroline: I went to the LGBTQ support group yesterday.", "a", 0),
                       turn("Caroline: The support group was really powerful.", "a", 1),
                       turn("Melanie: I painted a lake sunrise last year.", "b", 0),
                       turn("Melanie: Painting is my way to relax.", "b", 1)])
    later = store.insert([Memory(id="", text="Caroline: I will go again next week.", tier="episodic",
                                 created_at=NOW, thread="a", thread_pos=2)])[0]
    plan = dream.plan(store, only={"compress"}, now=NOW, generator=False)
    groups = [set(p.members) for p in plan.proposals]
    assert all(g <= {ms[0].id, ms[1].id} or g <= {ms[2].id, ms[3].id} for g in groups)  # one thread each
    result = dream.apply(store, plan, backup=False)
    summaries = [store.get(i) for i in result.created.values()]
    a = next(s for s in summaries if s.thread == "a")
    assert a.thread_pos == 0
    before, after = store.thread_neighbours(later, 1, 0)
    assert before == [a]  # the thread is still walkable: the summary stands where its members were
    assert_index_in_step(store)
    store.undo()
    assert_index_in_step(store)


# -- extraction and migration -----------------------------------------------------------------

def test_extract_sources_join_the_thread_of_their_source(store):
    from pmem.extract import keep_source

    first = keep_source(store, "Ana: We moved to Lisbon.", source="chat-ana")
    second = keep_source(store, "Ana: The flat has a balcony.", source="chat-ana")
    got = store.get_many(first + second)
    assert [(m.thread, m.thread_pos) for m in got] == [("chat-ana", 0), ("chat-ana", 1)]
    third = keep_source(store, "No source here.")
    assert store.get(third[0]).thread is None
    named = keep_source(store, "Bo: hi there, long day.", source="x", thread="evening")
    assert store.get(named[0]).thread == "evening"


def test_migration_threads_an_existing_store(tmp_path, fake_config):
    path = tmp_path / "old.db"
    conn = schema_before(path, "m004_threads")

    def row(mid, text, created, tier="episodic", source="chat", derived="[]", merged=None):
        conn.execute("INSERT INTO memories (id, text, tier, source, created_at, updated_at, derived_from, "
                     "merged_into) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                     (mid, text, tier, source, created, created, derived, merged))

    row("bbbb0001", "Ana: second message about kayaking", "2023-01-02T00:00:00Z", merged="dddd0001")
    row("aaaa0001", "Ana: first message", "2023-01-01T00:00:00Z", merged="dddd0001")
    row("cccc0001", "Ana: third message", "2023-01-03T00:00:00Z")
    row("dddd0001", "summary of the first two", "2023-01-01T00:00:00Z", source="pmem dream",
        derived='["aaaa0001", "bbbb0001"]')
    row("eeee0001", "a fact from the chat", "2023-01-02T00:00:00Z", tier="archival")
    row("ffff0001", "an episode with no source", "2023-01-02T00:00:00Z", source=None)
    conn.execute("INSERT INTO operations (id, kind, summary, at) VALUES ('op1', 'edit', '', '2023-01-03T00:00:00Z')")
    conn.execute("INSERT INTO events (op_id, memory_id, action, before, after, at) VALUES "
                 "('op1', 'cccc0001', 'edit', ?, ?, '2023-01-03T00:00:00Z')",
                 (json.dumps({"id": "cccc0001", "text": "Ana: 3rd", "tier": "episodic", "source": "chat",
                              "created_at": "2023-01-03T00:00:00Z", "updated_at": "2023-01-03T00:00:00Z"}),
                  json.dumps({"id": "cccc0001", "text": "Ana: third message"})))
    conn.close()
    with MemoryStore(path, config=fake_config) as s:
        assert s.stats()["schema_version"] == len(migrations.MIGRATIONS)
        place = {m.id: (m.thread, m.thread_pos) for m in s.iter_all()}
        assert place == {"aaaa0001": ("chat", 0), "bbbb0001": ("chat", 1), "cccc0001": ("chat", 2),
                         "dddd0001": ("chat", 0), "eeee0001": (None, None), "ffff0001": (None, None)}
        assert_index_in_step(s)
        # the third message is found through the summary that now stands before it
        assert s.get("cccc0001").id in [h.memory.id for h in search(
            s, "summary", Filter(tiers=TIERS), mode="keyword")]
        # undoing an edit recorded before threads existed keeps the thread the migration gave
        s.undo()
        assert (s.get("cccc0001").text, s.get("cccc0001").thread) == ("Ana: 3rd", "chat")
        assert_index_in_step(s)


# -- the CLI -------------------------------------------------------------------------------------

def test_cli_thread_context_and_neighbours(monkeypatch, pmem_home):
    from typer.testing import CliRunner

    from pmem.cli.app import app

    monkeypatch.setenv("PMEM_EMBED_MODEL", "fake-64")
    runner = CliRunner()

    def ok(*args, input=None):
        r = runner.invoke(app, list(args), input=input)
        assert r.exit_code == 0, (args, r.output, r.exception)
        return r.stdout

    turns = ["Mel: Where did you go last summer?", "Ana: Yes, last May, with my sister!", "Mel: That sounds lovely."]
    ids = [ok("add", t, "--thread", "chat").strip() for t in turns]
    assert json.loads(ok("add", "Ana: the volcano", "--thread", "chat", "--json"))["thread_pos"] == 3
    hits = json.loads(ok("search", "sister", "--mode", "keyword", "--context", "1", "--json", "-k", "1"))
    assert hits[0]["id"] in ids and set(hits[0]["context"]) == {"before", "after"}
    plain = ok("search", "sister", "--mode", "keyword", "-C", "1").splitlines()
    assert "--" in plain and any(line.split("\t")[3] == "-" for line in plain if line != "--")
    assert "context" not in json.loads(ok("search", "sister", "--json"))[0]
    data = json.loads(ok("recall", "sister", "--neighbours", "1", "--format", "json"))
    assert {m["id"] for m in data["relevant"]} >= set(ids)
    for args in (("search", "sister", "-C", "-1"), ("recall", "sister", "--neighbours", "-1")):
        r = runner.invoke(app, list(args))
        assert r.exit_code == 2 and r.output.count("\n") == 1 and "pmem: error:" in r.output
    exported = ok("export")
    assert [json.loads(line)["thread_pos"] for line in exported.splitlines()] == [0, 1, 2, 3]
    ok("undo")  # the add of the fourth turn
    assert "thread: chat (position 1)" in ok("show", ids[1])


def test_purging_a_turn_erases_its_words_from_its_neighbours_entries(store):
    ms = conversation(store)
    secret = "Quokkazebra93517 is the locker code"
    m, _ = store.add(secret, thread="chat")  # in the keyword entries of turns 4 and 5 too
    assert store.conn.execute("SELECT count(*) FROM memories_fts WHERE memories_fts MATCH 'quokkazebra93517'"
                              ).fetchone()[0] == 3
    store.purge([m.id])
    assert_index_in_step(store)
    assert store.conn.execute("SELECT count(*) FROM memories_fts WHERE memories_fts MATCH 'quokkazebra93517'"
                              ).fetchone()[0] == 0
    store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = b"".join(p.read_bytes() for p in (store.path, store.path.with_name(store.path.name + "-wal"))
                    if p.exists())
    assert b"uokkazebra93517" not in data
    assert ms[5].id in keyword_ids(store, "grandpa")

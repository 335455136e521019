"""Extraction: parsing, the grounding gate, reconciliation, one-operation runs, failure paths.

A deterministic fake generator stands in for the chat model (habit 5); test_extract_model.py
runs the real SmolLM2 GGUF end to end."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from pmem import extract as ex
from pmem.errors import ExtractionError, ModelError, UsageError
from pmem.models.thresholds import MINILM
from pmem.store import Filter

from fakes import FakeGenerator, writing_while_embedding


def active(store):
    return store.list_memories(Filter(), limit=None)


def everything(store):
    return store.list_memories(Filter.everything(), limit=None)


# -- parsing ---------------------------------------------------------------------------------

def test_parse_speaker_lines_with_date_header():
    turns = ex.parse_input("1:56 pm on 8 May, 2023\nCaroline: Hi Mel!\nMelanie: I paint.\nstill me\n")
    assert [(t.speaker, t.text) for t in turns] == [("Caroline", "Hi Mel!"), ("Melanie", "I paint. still me")]
    assert turns[0].date == "2023-05-08T13:56:00Z"


def test_parse_json_messages_keeps_user_turns():
    text = json.dumps([{"role": "user", "content": "I am vegetarian."},
                       {"role": "assistant", "content": "Noted!"},
                       {"speaker": "Dana", "text": "I run the deploys."}])
    turns = ex.parse_input(text)
    assert [(t.speaker, t.text) for t in turns] == [(None, "I am vegetarian."), ("Dana", "I run the deploys.")]


def test_parse_plain_text_paragraphs():
    turns = ex.parse_input("I moved to Lisbon.\nIt is sunny.\n\nI prefer dark mode.")
    assert [t.text for t in turns] == ["I moved to Lisbon. It is sunny.", "I prefer dark mode."]
    assert all(t.speaker is None for t in turns)


def test_dates_need_a_year():
    assert ex.parse_date("Date: 2024-02-03") == "2024-02-03T00:00:00Z"
    assert ex.parse_date("Note: 7d") is None
    assert ex.parse_date("Meeting at 3") is None


def test_candidates_skip_questions_and_chatter():
    assert not ex.is_candidate("What are you up to this weekend?", "Mel")
    assert not ex.is_candidate("Wow, thanks so much, that's awesome!", "Mel")
    assert ex.is_candidate("I painted a lake sunrise last year.", "Mel")


def test_third_person():
    assert ex.third_person("Mel", "I'm keen on my painting") == "Mel is keen on Mel's painting"
    assert ex.third_person(None, "I like tea") == "I like tea"
    assert ex.third_person("Mel", "The lake was calm.") == "Mel: The lake was calm."


# -- grounding -------------------------------------------------------------------------------

def test_grounding_accepts_spans_and_rejects_inventions():
    src = ["Melanie: I painted a lake sunrise last year!"]
    assert ex.check_grounding("Melanie painted a lake sunrise last year", src, min_support=0.6).ok
    g = ex.check_grounding("Melanie owns three horses in Texas", src, min_support=0.6)
    assert not g.ok and g.support < 0.6 and "missing" in g.reason


def test_grounding_requires_every_number():
    g = ex.check_grounding("Caroline is 32 years old", ["Caroline: I turned 23 years old"], min_support=0.1)
    assert not g.ok and "'32'" in g.reason


def test_grounding_checks_meaning_with_an_embedder():
    from pmem.models.embed import FakeEmbedder

    e = FakeEmbedder(64)
    src = ["Dana approves deploys on Fridays."]
    assert ex.check_grounding("Dana approves deploys on Fridays", src, e, min_support=0.6).ok
    g = ex.check_grounding("Fridays Dana deploys approves", src, e, min_support=0.6, min_similarity=0.99)
    assert not g.ok and "cosine" in g.reason and g.similarity is not None


def test_grounding_uses_the_threshold_it_is_given(monkeypatch):
    from pmem.config import load

    monkeypatch.setenv("PMEM_EXTRACT_MIN_SUPPORT", "0.9")
    strict = load().extract_min_support
    assert not ex.check_grounding("Dana approves deploys weekly", ["Dana approves deploys."], min_support=strict).ok
    # The gate never reads the configuration itself: without a threshold it uses the default.
    assert ex.check_grounding("Dana approves deploys weekly", ["Dana approves deploys."]).ok
    monkeypatch.setenv("PMEM_EXTRACT_MIN_SUPPORT", "0.5")
    assert ex.check_grounding("Dana approves deploys weekly", ["Dana approves deploys."],
                              min_support=load().extract_min_support).ok


def test_no_content_words_is_ungrounded():
    assert not ex.check_grounding("it is so", ["it is so"], min_support=0.1).ok


# -- reconciliation rules --------------------------------------------------------------------

@pytest.mark.parametrize("new, old, cos, want", [
    ("Mel likes tea", "Mel likes tea", 1.0, "noop"),
    ("Mel likes tea", "Mel likes green tea", 0.9, "noop"),
    ("Mel likes green tea", "Mel likes tea", 0.9, "update"),
    ("Mel's daughter is 8", "Mel's daughter is 7", 0.9, "supersede"),
    ("I moved to Lisbon", "I live in Berlin", 0.65, "supersede"),
    ("Mel likes coffee", "Mel likes tea", 0.8, "add"),
])
def test_decide_rules(new, old, cos, want):
    assert ex.decide(new, old, cos) == want


def test_decide_asks_the_judge_only_when_rules_cannot():
    asked = []
    judge = lambda old, new: asked.append((old, new)) or "contradicts"  # noqa: E731
    assert ex.decide("Mel likes coffee", "Mel likes tea", 0.8, judge) == "supersede"
    assert ex.decide("Mel likes tea", "Mel likes tea", 1.0, judge) == "noop"
    assert ex.decide("Mel likes coffee", "Bob owns a boat", 0.3, judge) == "add"
    assert len(asked) == 1


# -- whole runs ------------------------------------------------------------------------------

CHAT = """8 May, 2023
Caroline: Hey Mel! How have you been?
Melanie: I painted a lake sunrise last year! Wow, thanks!
Caroline: I went to a LGBTQ support group yesterday.
"""


def test_extract_stores_source_and_linked_facts(store):
    r = ex.extract(store, CHAT, generator=FakeGenerator(), tags=["chat"], source="test")
    assert [f.action for f in r.facts] == ["add", "add"]
    texts = {m.text for m in active(store)}
    # relative dates resolved against the date line the turns were said under (8 May 2023)
    assert texts == {"Melanie painted a lake sunrise in 2022!", "Caroline went to a LGBTQ support group on 7 May 2023."}
    assert sorted((d["phrase"], d["resolved"]) for d in r.dates) == [("last year", "in 2022"),
                                                                      ("yesterday", "on 7 May 2023")]
    assert r.counts()["dates_resolved"] == 2
    (src,) = store.list_memories(Filter(tiers=("episodic",)), limit=None)
    assert src.text == CHAT.strip() and src.created_at == "2023-05-08T00:00:00Z" and src.tags == ["chat"]
    for f in r.facts:
        m = store.get(f.id)
        assert m.derived_from == [src.id] and m.tags == ["chat"] and m.source == "test"
        assert m.meta["extract"]["model"] == "fake-chat" and m.meta["extract"]["run"] == r.run
        assert m.meta["extract"]["span"] in CHAT and m.created_at.startswith("2023-05-08")
    assert store.operations(1)[0].id == r.run


def test_one_undo_reverts_the_whole_run(store):
    store.add("I live in Berlin")
    before = {m.id: m for m in everything(store)}
    ex.extract(store, "I moved to Lisbon from Berlin in March.\n\nI still prefer dark mode.", generator=FakeGenerator())
    assert len(everything(store)) > len(before)
    store.undo()
    assert {m.id: m for m in everything(store)} == before


def test_second_run_finds_facts_already_known(store):
    ex.extract(store, CHAT, generator=FakeGenerator())
    n = len(active(store))
    r = ex.extract(store, CHAT, generator=FakeGenerator())
    assert [f.action for f in r.facts] == ["noop", "noop"] and all(f.target for f in r.facts)
    assert len(active(store)) == n  # only a second episodic source was stored


def test_supersede_keeps_the_old_fact_in_history(store):
    old, _ = store.add("Dana's daughter is 7 years old")
    r = ex.extract(store, "Dana: My daughter is 8 years old now.", generator=FakeGenerator())
    assert [f.action for f in r.facts] == ["supersede"]
    old = store.get(old.id)
    assert old.superseded_by == r.facts[0].id and old.valid_to
    assert old.id not in {m.id for m in active(store)}
    assert old.id in {m.id for m in store.list_memories(Filter(include_superseded=True), limit=None)}


def test_update_refines_a_stored_memory(store, monkeypatch, model_thresholds):
    old, _ = store.add("Dana approves deploys")
    model_thresholds("fake-64", replace(MINILM, contained=0.0))  # the fake's cosines are low
    r = ex.extract(store, "Dana approves deploys on Fridays.", generator=FakeGenerator())
    assert [f.action for f in r.facts] == ["update"] and r.facts[0].id == old.id
    m = store.get(old.id)
    assert m.text == "Dana approves deploys on Fridays." and len(m.derived_from) == 1
    store.undo()
    assert store.get(old.id).text == "Dana approves deploys"


def test_strong_model_rewrites_are_gated(store):
    writes = {"Melanie: I painted a lake sunrise last year!": "Melanie painted a lake sunrise",
              "Caroline: I went to a LGBTQ support group yesterday.": "Caroline adopted two dogs in 2021"}
    r = ex.extract(store, CHAT, generator=FakeGenerator(strong=True, writes=writes))
    assert [f.text for f in r.facts] == ["Melanie painted a lake sunrise"]
    assert [f.text for f in r.rejected] == ["Caroline adopted two dogs in 2021"]
    assert "Caroline adopted two dogs in 2021" not in {m.text for m in everything(store)}
    assert r.counts()["rejected"] == 1


def test_dry_run_stores_nothing(store):
    r = ex.extract(store, CHAT, generator=FakeGenerator(), dry_run=True)
    assert len(r.facts) == 2 and r.run is None and r.source_ids == []
    assert everything(store) == [] and store.operations() == []


def test_review_can_drop_and_edit(store):
    answers = iter([None, "Caroline went to a support group"])
    r = ex.extract(store, CHAT, generator=FakeGenerator(), review=lambda f: next(answers))
    assert r.dropped == 1 and [f.text for f in r.facts] == ["Caroline went to a support group"]
    assert store.get(r.facts[0].id).meta["extract"]["edited"] is True


def test_no_facts_still_keeps_the_source(store):
    r = ex.extract(store, "Hey! How are you?\n\nThanks, great!", generator=FakeGenerator())
    assert r.facts == [] and len(r.source_ids) == 1
    assert store.get(r.source_ids[0]).tier == "episodic"


def test_why_explains_a_fact(store):
    r = ex.extract(store, CHAT, generator=FakeGenerator())
    info = ex.why(store, r.facts[0].id)
    assert info["extracted"] and info["model"] == "fake-chat" and info["run"]["id"] == r.run
    assert info["sources"][0]["text"] == CHAT.strip() and info["span"] in CHAT


def test_long_input_is_chunked_and_split(store, monkeypatch):
    monkeypatch.setattr("pmem.store.MAX_TEXT", 2000)
    lines = "\n".join(f"Dana: I visited city number {i} with my sister." for i in range(120))
    gen = FakeGenerator()
    r = ex.extract(store, lines, generator=gen)
    assert gen.calls > 1 and len(r.source_ids) > 1
    fact = store.get(r.facts[-1].id)
    assert r.facts[-1].span in store.get(fact.derived_from[0]).text


# -- failure paths ---------------------------------------------------------------------------

@pytest.mark.parametrize("text, message", [("", "empty"), ("   \n", "empty"), ("ab\x00cd", "binary")])
def test_bad_input_is_refused(store, text, message):
    with pytest.raises(UsageError, match=message):
        ex.extract(store, text, generator=FakeGenerator())
    assert everything(store) == []


def test_junk_answers_are_ignored_not_stored(store):
    r = ex.extract(store, CHAT, generator=FakeGenerator(junk=True))
    assert r.facts == [] and r.invalid > 0 and len(r.source_ids) == 1


def test_model_failure_keeps_the_source(store):
    class Broken:
        name = "broken"

        def generate_json(self, *a, **k):
            raise ExtractionError("broken returned output that is not JSON after 3 tries")

    with pytest.raises(ExtractionError, match="kept as episodic memory") as info:
        ex.extract(store, CHAT, generator=Broken())
    (src,) = everything(store)
    assert src.tier == "episodic" and src.id in str(info.value)


def test_missing_model_keeps_the_source(store, tmp_path, monkeypatch):
    store.config = store.config.with_values(chat_model=str(tmp_path / "nope.gguf"))
    with pytest.raises(ModelError, match="kept as episodic"):
        ex.extract(store, CHAT)
    assert [m.tier for m in everything(store)] == ["episodic"]


def test_corrupt_model_keeps_the_source(store, tmp_path, monkeypatch):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 64)
    store.config = store.config.with_values(chat_model=str(bad))
    with pytest.raises(ModelError, match="cannot load|kept as episodic"):
        ex.extract(store, CHAT)
    assert [m.tier for m in everything(store)] == ["episodic"]


def test_interrupted_model_phase_stores_nothing(store):
    text = "\n".join(f"Dana: I visited city number {i} with my sister." for i in range(80))
    with pytest.raises(KeyboardInterrupt):
        ex.extract(store, text, generator=FakeGenerator(fail_on_call=2))
    assert everything(store) == [] and store.operations() == []


def test_interrupted_write_phase_is_rolled_back(store, monkeypatch):
    store.add("Dana likes tea")
    before = everything(store)
    real_insert, calls = store.insert, []

    def flaky(*a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_insert(*a, **k)

    monkeypatch.setattr(store, "insert", flaky)
    with pytest.raises(KeyboardInterrupt):
        ex.extract(store, CHAT, generator=FakeGenerator())
    assert everything(store) == before and len(store.operations()) == 1


# -- the command line ------------------------------------------------------------------------

@pytest.fixture
def cli(monkeypatch, pmem_home):
    monkeypatch.setenv("PMEM_EMBED_MODEL", "fake-64")
    monkeypatch.setattr("pmem.models.generate.load_generator", lambda *a, **k: FakeGenerator())
    from pmem.cli.app import app

    runner = CliRunner()
    return lambda *args, input=None: runner.invoke(app, list(args), input=input)


def test_cli_extract_json_dry_run(cli):
    r = cli("extract", "--dry-run", "--json", input=CHAT)
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["dry_run"] and data["counts"]["add"] == 2 and data["source_ids"] == []
    assert json.loads(cli("list", "--all", "--json").stdout) == []


def test_cli_extract_and_why(cli):
    r = cli("extract", input=CHAT)
    assert r.exit_code == 0, r.output
    fid = r.stdout.split()[1]
    w = cli("why", fid)
    assert w.exit_code == 0 and "fake-chat" in w.stdout and "Caroline: Hey Mel!" in w.stdout
    assert cli("undo").exit_code == 0
    assert json.loads(cli("list", "--all", "--json").stdout) == []


def test_cli_add_extract(cli):
    r = cli("add", "--extract", "I moved to Lisbon last month; I still prefer dark mode.", "--json")
    assert r.exit_code == 0, r.output
    assert [f["text"] for f in json.loads(r.stdout)["facts"]] == ["I moved to Lisbon last month",
                                                                   "I still prefer dark mode."]


def test_extract_resolves_dates_against_at_and_leaves_undated_text(store):
    said = "I moved to Lisbon last month."
    r = ex.extract(store, said, generator=FakeGenerator(), at="2026-11-12T10:00:00Z", dry_run=True)
    assert [f.text for f in r.facts] == ["I moved to Lisbon in October 2026."]
    assert r.dates == [{"phrase": "last month", "resolved": "in October 2026", "said": "2026-11-12T10:00:00Z",
                        "fact": "I moved to Lisbon in October 2026."}]
    undated = ex.extract(store, said, generator=FakeGenerator(), dry_run=True)  # no known date: left as said
    assert [f.text for f in undated.facts] == ["I moved to Lisbon last month."] and undated.dates == []


def test_review_sees_the_resolved_text(store):
    seen = []
    ex.extract(store, "I moved to Lisbon last month.", generator=FakeGenerator(), at="2026-11-12",
               dry_run=True, review=lambda f: seen.append(f.text) or f.text)
    assert seen == ["I moved to Lisbon in October 2026."]


def _chatgpt_export(tmp_path):
    from export_fixtures import chatgpt_conversation

    said = 1_794_499_200  # 2026-11-12T16:00:00Z
    convs = [chatgpt_conversation("x1", [("user", "I started a new job at the bakery last month."),
                                         ("assistant", "Congratulations on the job!")], start=said),
             chatgpt_conversation("x2", [("user", "My sister visits us next year.")], start=said)]
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(convs))
    return path


def test_cli_extract_a_chat_export_by_shape(cli, tmp_path):
    path = _chatgpt_export(tmp_path)
    r = cli("extract", str(path), "--json", "--tag", "mine")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["counts"]["conversations"] == 2 and data["counts"]["add"] == 2
    assert data["counts"]["dates_resolved"] == 2 and len(data["runs"]) == 2
    facts = json.loads(cli("list", "--json").stdout)
    by_source = {m["source"]: m for m in facts if m["tier"] != "episodic"}
    assert by_source["chatgpt:x1"]["text"] == "I started a new job at the bakery in October 2026."
    assert by_source["chatgpt:x2"]["text"] == "My sister visits us in 2027."
    assert by_source["chatgpt:x1"]["created_at"].startswith("2026-11-12")
    assert set(by_source["chatgpt:x1"]["tags"]) >= {"chatgpt", "mine"}
    assert not any("Congratulations" in m["text"] for m in facts)  # the assistant's words are context only
    again = json.loads(cli("extract", str(path), "--json").stdout)  # extracted already: nothing new
    assert again["counts"] == {"conversations_skipped": 2, "dates_resolved": 0} and again["runs"] == []


def test_cli_extract_a_chat_export_same_facts_as_import(cli, tmp_path):
    path = _chatgpt_export(tmp_path)
    dry = json.loads(cli("extract", str(path), "--dry-run", "--json").stdout)
    assert json.loads(cli("list", "--all", "--json").stdout) == []  # a dry run stores nothing
    r = cli("import", str(path), "--extract", "--json")
    assert r.exit_code == 0, r.output
    listed = json.loads(cli("list", "--all", "--json").stdout)
    imported = {m["text"] for m in listed if (m.get("meta") or {}).get("extract", {}).get("role") != "source"
                and (m.get("meta") or {}).get("kind") != "turn"}
    assert len(imported) == 2 and imported == {f["text"] for f in dry["facts"]}


def test_cli_extract_a_chat_export_refuses_single_text_options(cli, tmp_path):
    r = cli("extract", str(_chatgpt_export(tmp_path)), "--at", "2026-01-01")
    assert r.exit_code == 2 and "--at does not apply to a chat export" in r.output
    assert "Traceback" not in r.output


def test_cli_extract_plain_json_messages_still_text(cli, tmp_path):
    f = tmp_path / "messages.json"
    f.write_text(json.dumps([{"role": "user", "content": "I moved to Lisbon last month.", "date": "2026-11-12"}]))
    r = cli("extract", str(f), "--json")
    assert r.exit_code == 0, r.output
    assert [x["text"] for x in json.loads(r.stdout)["facts"]] == ["I moved to Lisbon in October 2026."]


@pytest.mark.parametrize("data, message", [(b"", "no text|empty"), (b"\xff\xfe\x00x", "binary|UTF-8"),
                                           (b"caf\xe9 au lait", "UTF-8")])
def test_cli_bad_input_one_line_error(cli, tmp_path, data, message):
    f = tmp_path / "in.txt"
    f.write_bytes(data)
    r = cli("extract", str(f))
    assert r.exit_code == 2 and re.search(message, r.stderr) and len(r.stderr.strip().splitlines()) == 1
    assert json.loads(cli("list", "--all", "--json").stdout) == []


def test_cli_no_facts_exit_zero_with_note(cli):
    r = cli("extract", input="Hey! How are you?\n")
    assert r.exit_code == 0 and "no facts found" in r.stderr


def test_cli_missing_model_is_one_line(monkeypatch, pmem_home, tmp_path):
    monkeypatch.setenv("PMEM_EMBED_MODEL", "fake-64")
    monkeypatch.setenv("PMEM_CHAT_MODEL", str(tmp_path / "missing.gguf"))
    from pmem.cli.app import app

    r = CliRunner().invoke(app, ["extract"], input=CHAT)
    assert r.exit_code == 1 and "kept as episodic memory" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_tidy_rewrite_removes_prompt_echoes_only():
    from pmem.extract import tidy_rewrite

    assert tidy_rewrite("1. Caroline: I went to a support group.", "Caroline") == \
        "Caroline went to a support group."
    assert tidy_rewrite("  12) Melanie paints sunsets", "Melanie") == "Melanie paints sunsets"
    assert tidy_rewrite("- Caroline moved to Lisbon", "Caroline") == "Caroline moved to Lisbon"
    # numbers that are content stay; so does text that merely mentions the speaker
    assert tidy_rewrite("2023 was the year Caroline moved", "Caroline") == "2023 was the year Caroline moved"
    assert tidy_rewrite("3 dogs live with Caroline", "Caroline") == "3 dogs live with Caroline"
    assert tidy_rewrite("Caroline's plan: move", "Caroline") == "Caroline's plan: move"


class WrongNumberGenerator(FakeGenerator):
    """A weak model in rewrite mode: echoes sentences with list numbers, one place off."""

    def generate_json(self, messages, schema, max_tokens=256):
        props = schema["properties"]
        if "facts" not in props:
            return super().generate_json(messages, schema, max_tokens)
        lines = re.findall(r"^\d+\. (.*)$", messages[-1]["content"], re.M)
        return {"facts": [{"n": (i % len(lines)) + 1, "kind": "event", "fact": f"{i}. {s}"}
                          for i, s in enumerate(lines, 1)]}


def test_rewrites_follow_their_text_not_the_sentence_number(store):
    r = ex.extract(store, CHAT, generator=WrongNumberGenerator(strong=True))
    assert r.facts and not r.rejected
    turns = ex.parse_input(CHAT)
    for f in r.facts:
        assert not re.match(r"^\d", f.text)  # the echoed list number is gone
        # provenance points at the turn whose words the fact uses
        assert f.span in turns[f.turn].text
        assert f.text.split()[0] == turns[f.turn].speaker


def test_extraction_embeds_before_taking_the_write_lock(fake_config, tmp_path, monkeypatch, model_thresholds):
    """issue 10, defect 12: every model call of a run happens outside its write transaction, so
    another process can write while extraction embeds (and a second run, an update, too)."""
    from pmem.models.embed import FakeEmbedder
    from pmem.service import MemoryStore

    db = tmp_path / "shared.db"
    embedder = writing_while_embedding(db, fake_config)  # another process writes while this one embeds
    written, locked = embedder.written, embedder.locked
    with MemoryStore(db, config=fake_config, embedder=embedder) as store:
        old, _ = store.add("Dana approves deploys")  # the vector table exists, as in a store in use
        written.clear()
        r = ex.extract(store, CHAT, generator=FakeGenerator(), tags=["chat"], source="test")
        assert [f.action for f in r.facts] == ["add", "add"]
        model_thresholds("fake-64", replace(MINILM, contained=0.0))  # the fake's cosines are low
        r = ex.extract(store, "Dana approves deploys on Fridays.", generator=FakeGenerator())
        assert [f.action for f in r.facts] == ["update"] and store.get(old.id).text.endswith("on Fridays.")
    assert locked == [] and len(written) >= 2
    with MemoryStore(db, config=fake_config, embedder=FakeEmbedder(64)) as s:
        assert {m.id for m in s.list_memories(Filter(), limit=None)} >= set(written)

"""Keyword search beyond English through the store (issue 14): the FTS5 `stems` column of
m006, kept by the triggers through pmem_stems, and queried by search.fts_query."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

pytest.importorskip("snowballstemmer")

from conftest import schema_before  # noqa: E402

from pmem import Memory, search  # noqa: E402
from pmem.cli.app import app  # noqa: E402
from pmem.search import fts_query  # noqa: E402
from pmem.service import MemoryStore  # noqa: E402
from pmem.stemming import index_language, index_stems  # noqa: E402
from pmem.store import migrations  # noqa: E402

runner = CliRunner()


def stems_column(store) -> dict[int, str]:
    return dict(store.conn.execute("SELECT rowid, stems FROM memories_fts"))


def assert_stems_in_step(store) -> None:
    rows = dict(store.conn.execute("SELECT seq, text FROM memories"))
    assert stems_column(store) == {seq: index_stems(text) for seq, text in rows.items()}


def keyword(store, query: str) -> list[str]:
    return [h.memory.text for h in search(store, query, mode="keyword", limit=10)]


def test_cli_keyword_search_matches_russian_case_endings_and_english_as_before(monkeypatch):
    monkeypatch.setenv("PMEM_EMBED_MODEL", "fake-64")
    for text in ("Я поставил машину на парковке у вокзала", "I parked the car near the station",
                 "Кошка спит на диване"):
        assert runner.invoke(app, ["add", text]).exit_code == 0

    def hits(query):
        r = runner.invoke(app, ["search", "--mode", "keyword", "--json", query])
        assert r.exit_code == 0, r.output
        return [h["text"] for h in json.loads(r.stdout)]

    assert hits("машина") == ["Я поставил машину на парковке у вокзала"]
    assert hits("машину") == ["Я поставил машину на парковке у вокзала"]
    assert hits("где моя машина?") == ["Я поставил машину на парковке у вокзала"]
    assert hits("parking") == ["I parked the car near the station"]  # porter, unchanged
    assert hits("где") == []  # a Russian stop word alone finds nothing through stems
    assert fts_query("parking") == '"parking"'  # an English query adds no stems clause


def test_german_and_spanish_inflections(store):
    store.insert([Memory(id="", text="Meine Schwestern wohnen in Hamburg."),
                  Memory(id="", text="Las manzanas están en la cocina.")])
    assert keyword(store, "Wo wohnt meine Schwester?") == ["Meine Schwestern wohnen in Hamburg."]
    assert keyword(store, "¿dónde está la manzana?") == ["Las manzanas están en la cocina."]


def test_every_write_path_keeps_the_stems_column(store):
    a = store.add("Машина стоит на третьем уровне")[0].id
    b = store.add("The parking lot is full")[0].id
    store.insert([Memory(id="", text=t, thread="chat") for t in
                  ("Мы купили новую машину", "Она красная", "Ana: das Auto ist rot")])
    assert_stems_in_step(store)
    store.edit(a, text="Велосипеды стоят у входа")
    assert_stems_in_step(store)
    assert keyword(store, "велосипед") == ["Велосипеды стоят у входа"]
    assert "Велосипеды стоят у входа" not in keyword(store, "машины")
    store.forget(b)
    assert_stems_in_step(store)
    store.undo()  # the forget
    store.undo()  # the edit
    assert_stems_in_step(store)
    assert "Машина стоит на третьем уровне" in keyword(store, "машину")
    assert keyword(store, "велосипед") == []
    store.conn.execute("INSERT INTO memories_fts(memories_fts, rank) VALUES ('integrity-check', 1)")


def test_migration_adds_stems_to_an_existing_store(tmp_path, fake_config):
    path = tmp_path / "old.db"
    conn = schema_before(path, "m006_stems")
    for mid, text in (("aaaa0001", "Я оставил ключи у соседки"), ("bbbb0001", "The parking permit expires")):
        conn.execute("INSERT INTO memories (id, text, tier, created_at, updated_at) "
                     "VALUES (?, ?, 'archival', '2023-01-01T00:00:00Z', '2023-01-01T00:00:00Z')", (mid, text))
    assert [r[1] for r in conn.execute("PRAGMA table_info(memories_fts)")] == ["text", "context"]
    conn.close()
    with MemoryStore(path, config=fake_config) as s:
        assert s.stats()["schema_version"] == len(migrations.MIGRATIONS)
        assert_stems_in_step(s)
        assert keyword(s, "ключ") == ["Я оставил ключи у соседки"]
        assert keyword(s, "parked") == ["The parking permit expires"]
        s.edit("aaaa0001", text="Ключи лежат на полке")
        assert_stems_in_step(s)


def test_english_writes_and_queries_never_import_the_stemmers():
    """Triggers ask on every write and searches on every query: English must not pay the 24 ms."""
    import subprocess
    import sys

    code = ("import sys; from pmem import stemming; import pmem.search; "
            "q = sys.modules['pmem.search'].fts_query('where did I park the car'); "
            "s = stemming.index_stems('I parked the car on level 3'); "
            "print(q, repr(s), 'snowballstemmer' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "\"park\" OR \"car\" '' False"


def test_store_counts_memories_per_language_through_every_write(store):
    a = store.add("Машина стоит на третьем уровне парковки")[0].id
    store.add("Meine Schwester wohnt in Hamburg und arbeitet dort")
    b = store.add("The parking lot is full")[0].id
    assert store.keywords.languages() == {"de": 1, "ru": 1}
    store.edit(a, text="Mi hermana vive en Oporto con su familia")
    assert store.keywords.languages() == {"de": 1, "es": 1}
    store.edit(b, text="Я оставил ключи у соседки")
    assert store.keywords.languages() == {"de": 1, "es": 1, "ru": 1}
    store.undo()
    store.undo()
    assert store.keywords.languages() == {"de": 1, "ru": 1}
    store.add("Las manzanas están en la cocina")
    assert store.keywords.languages() == {"de": 1, "es": 1, "ru": 1}
    store.undo()  # the add: the row is deleted
    assert store.keywords.languages() == {"de": 1, "ru": 1}
    store.forget(a)
    expected: dict[str, int] = {}
    for (text,) in store.conn.execute("SELECT text FROM memories"):
        lang = index_language(text)
        if lang != "en":
            expected[lang] = expected.get(lang, 0) + 1
    assert store.keywords.languages() == expected
    assert store.stats()["languages"] == expected


def test_a_short_latin_query_is_stemmed_in_the_languages_the_store_holds(store):
    """'Schwestern Geburtstag' has no function word: it reads as English, whose keyword side is
    porter on the text. Once the store holds German memories it is stemmed as German too."""
    store.add("I called my sister about the trip")
    assert fts_query("Schwestern Geburtstag", store.keywords.languages()) == '"schwestern" OR "geburtstag"'
    store.add("Der Geburtstag meiner Schwester ist im Mai.")
    assert keyword(store, "Schwestern Geburtstage") == ["Der Geburtstag meiner Schwester ist im Mai."]
    assert "stems:" in fts_query("Schwestern Geburtstage", store.keywords.languages())
    # an English query (it has English function words) still adds no stems clause
    assert "stems:" not in fts_query("when is my sister's birthday", store.keywords.languages())


def test_migration_counts_languages_and_fills_stems_missing_from_the_index(tmp_path, fake_config):
    """A store indexed without the stemmers (m006 ran with no snowballstemmer) gets its stems."""
    path = tmp_path / "old.db"
    conn = schema_before(path, "m007_languages")
    for mid, text in (("aaaa0001", "Я оставил ключи у соседки"), ("bbbb0001", "The parking permit expires"),
                      ("cccc0001", "Las manzanas están en la cocina")):
        conn.execute("INSERT INTO memories (id, text, tier, created_at, updated_at) "
                     "VALUES (?, ?, 'archival', '2023-01-01T00:00:00Z', '2023-01-01T00:00:00Z')", (mid, text))
    conn.execute("UPDATE memories_fts SET stems = ''")  # as written where the stemmers were missing
    conn.close()
    with MemoryStore(path, config=fake_config) as s:
        assert s.stats()["schema_version"] == len(migrations.MIGRATIONS)
        assert_stems_in_step(s)
        assert s.keywords.languages() == {"es": 1, "ru": 1}
        assert keyword(s, "ключ") == ["Я оставил ключи у соседки"]
        s.conn.execute("INSERT INTO memories_fts(memories_fts, rank) VALUES ('integrity-check', 1)")


def test_a_non_english_query_drops_its_own_function_words(store):
    """"где", "welche", "qué" are not what a question is about: they matched any memory holding them."""
    store.add("Welche Sprache lernt Anna gerade?")
    store.add("Das Auto meines Vaters ist rot.")
    assert keyword(store, "Welche Farbe hat das Auto?") == ["Das Auto meines Vaters ist rot."]
    assert '"где"' not in fts_query("где я оставил машину")
    assert fts_query("где").startswith('"где"')  # a query of function words alone still searches for them
    assert fts_query("where is the car") == '"car"'  # English: its own stop words, as before

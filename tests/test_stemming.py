"""The keyword-search prototype for languages beyond English (pmem.stemming)."""

from __future__ import annotations

import pytest

pytest.importorskip("snowballstemmer")

from pmem import stemming  # noqa: E402


@pytest.mark.parametrize("text, lang", [
    ("Машина стоит на третьем уровне парковки", "ru"),
    ("Пароль от wifi на даче: hunter2", "ru"),
    ("Meine Schwester wohnt in Hamburg und arbeitet als Ärztin.", "de"),
    ("El dentista cambió la cita al jueves a las tres.", "es"),
    ("Ma voisine arrose mes plantes pendant les vacances.", "fr"),
    ("The wifi password at the cabin is hunter2", "en"),
    ("hunter2", "en"),
    ("", "en"),
])
def test_language_guess(text, lang):
    assert stemming.detect_language(text) == lang


def test_russian_inflections_meet_and_function_words_go():
    memory = set(stemming.normalize("Машина стоит на третьем уровне парковки аэропорта").split())
    assert set(stemming.query_terms("где моя машину на парковке")) == {"машин", "парковк"} <= memory
    assert "на" not in memory and "где" not in stemming.query_terms("где машину")
    assert stemming.query_terms("абонемента") == stemming.normalize("абонемент").split()


def test_english_stems_as_before_and_latin_words_in_russian_text():
    assert stemming.normalize("The cars were parked at the airport") == "car park airport"
    assert stemming.normalize("Пароль от wifi на даче") == "парол wifi дач"
    assert stemming.query_terms("parking cars") == ["park", "car"]


def test_query_words_in_another_latin_language_also_get_english_stems():
    terms = stemming.query_terms("Wo wohnen meine Schwestern?")
    assert "schwest" in terms and "wohn" in terms and "wo" not in terms
    assert set(stemming.normalize("Meine Schwester wohnt in Hamburg").split()) & set(terms)


def test_one_language_loads_without_the_other_33_and_stems_as_snowballstemmer_does():
    """A Russian query loads the Russian stemmer alone (the package's __init__ imports all 34
    languages, ~25 ms); its stems equal snowballstemmer's own."""
    import subprocess
    import sys

    code = ("import sys; from pmem import stemming; "
            "words = ['машину', 'машины', 'припарковал', 'Schwestern', 'manzanas', 'parking']; "
            "ours = [stemming._stemmer(l).stemWord(w) for l in ('ru', 'de', 'es', 'en') for w in words]; "
            "loaded = sorted(m for m in sys.modules if m.startswith('_pmem_snowball.')); "
            "whole = 'snowballstemmer' in sys.modules; "
            "import snowballstemmer; "
            "theirs = [snowballstemmer.stemmer(n).stemWord(w) for n in ('russian', 'german', 'spanish', 'english') "
            "for w in words]; "
            "print(ours == theirs, whole, len(loaded) <= 6, ours[0])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "False", "True", "машин"]

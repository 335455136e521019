"""The text toolkit search, extract and dream share: one set of rules for words, stems, sentences."""

from __future__ import annotations

import pytest

from pmem import text


@pytest.mark.parametrize("word, want", [
    ("moved", "mov"), ("moving", "mov"), ("moves", "mov"),  # inflections of one word meet
    ("paintings", "painting"), ("boxes", "box"),
    ("red", "red"), ("sing", "sing"), ("was", "was"),  # never below three letters
    ("2019", "2019"),
])
def test_stem(word, want):
    assert text.stem(word) == want


def test_words_split_possessives_and_keep_digits():
    assert text.words("Caroline's 3 dogs, aged 10.") == ["caroline", "3", "dogs", "aged", "10"]


def test_content_words_drop_stop_words_and_single_letters_but_not_digits():
    assert text.content_words("I moved to a flat in Lisbon in 2019, 5 km away") == [
        "moved", "flat", "lisbon", "2019", "5", "km", "away"]
    assert text.content_words("it is what it is") == []


def test_content_stems_is_the_set_of_stems_of_the_content_words():
    assert text.content_stems("Moving boxes; she moved the box") == {"mov", "box"}


def test_numbers_and_jaccard():
    assert text.numbers("1,200 people at 10:30, 3.5 hours") == {"1,200", "10:30", "3.5"}
    assert text.jaccard(set(), set()) == 1.0
    assert text.jaccard({"a", "b"}, {"b", "c"}) == pytest.approx(1 / 3)


def test_split_sentences_on_ends_semicolons_and_lines():
    assert text.split_sentences('I paint. "It relaxes me" 3 kids; all grown\nnew line') == [
        "I paint.", '"It relaxes me" 3 kids', "all grown", "new line"]
    assert text.split_sentences("version 2.5 is out") == ["version 2.5 is out"]


def test_speaker_sentences_carry_the_speaker():
    assert text.speaker_sentences("Mel: I paint.  I run!") == ["Mel: I paint.", "Mel: I run!"]
    assert text.speaker_sentences("No speaker here. Two sentences.") == ["No speaker here.", "Two sentences."]


def test_search_uses_the_same_stop_words():
    import importlib

    assert importlib.import_module("pmem.ranking.stages").STOP_WORDS is text.STOP_WORDS

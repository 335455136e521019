"""Words, stems, stop words and sentences: the one text toolkit search, extract and dream share.

Pure functions of strings, importing nothing of pmem, so every layer may use them. Two
different rule sets used to live in dream.py and extract.py; they are kept here side by side
under explicit names until a benchmark shows that one set serves both (benchmarks/README.md).
"""

from __future__ import annotations

import re

# Common English function words: they match almost everything and drown BM25 in noise.
STOP_WORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being below
between both but by can could did do does doing down during each few for from further had has have
having he her here hers herself him himself his how i if in into is it its itself just me more most my
myself no nor not now of off on once only or other our ours ourselves out over own same she should so
some such than that the their theirs them themselves then there these they this those through to too
under until up very was we were what when where which while who whom why will with would you your
yours yourself yourselves s t don did does didn doesn isn wasn weren aren won wouldn shouldn ever
also get got go going gone like really much many tell told say said well yes yeah oh hey hi
""".split())

WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?", re.UNICODE)  # letters and digits, with one inner apostrophe
NUMBER = re.compile(r"\d+(?:[.,:]\d+)*")  # 8, 3.5, 1,200, 10:30
_SUFFIXES = ("ing", "ed", "es", "s")
# Sentence ends for extraction: after . ! ? (and closing quotes/brackets) before a capital or a
# digit, and at semicolons; lines are split first.
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])|;\s+")
# Sentence ends for summaries: after . ! ? before anything.
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+(?=\S)")
_SPEAKER_PREFIX = re.compile(r"^([A-Z][\w .'-]{0,30}):\s+")


# -- stems ------------------------------------------------------------------------------------

def _strip_suffix(word: str, min_stem: int) -> str:
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= min_stem:
            return word[: -len(suffix)]
    return word


def stem_min3(word: str) -> str:
    """Strip one of -ing, -ed, -es, -s, leaving at least 3 letters ("moved" -> "mov").

    Extraction's rule (grounding and reconciliation)."""
    return _strip_suffix(word, 3)


def stem_min4(word: str) -> str:
    """Strip one of -ing, -ed, -es, -s, leaving at least 4 letters ("moved" stays "moved").

    Dream's rule (duplicate and subject detection)."""
    return _strip_suffix(word, 4)


# -- words ------------------------------------------------------------------------------------

def words(text: str) -> list[str]:
    """Lower-case words, possessives split off ("Caroline's" -> "caroline"); digits kept."""
    return [w.split("'")[0] for w in WORD.findall(text.lower())]


def content_words(text: str) -> list[str]:
    """`words` without stop words and single letters (single digits stay), in order, unstemmed."""
    return [w for w in words(text) if w not in STOP_WORDS and (len(w) > 1 or w.isdigit())]


def content_stems(text: str) -> set[str]:
    """The set of meaningful stems (`stem_min4`) of `text`: no stop words, no bare numbers."""
    out = set()
    for w in WORD.findall(text.lower()):
        w = w.replace("'s", "")
        if w in STOP_WORDS or len(w) < 2 or w.isdigit():
            continue
        out.add(stem_min4(w))
    return out


def has_digit(word: str) -> bool:
    """Does `word` hold a digit (an age, a count, a year, "3pm")?"""
    return any(c.isdigit() for c in word)


def numbers(text: str) -> set[str]:
    """The numbers written in `text` ("1,200", "3.5", "10:30") as strings."""
    return set(NUMBER.findall(text))


def jaccard(a: set[str], b: set[str]) -> float:
    """|a & b| / |a | b|; two empty sets are identical (1.0)."""
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


# -- sentences --------------------------------------------------------------------------------

def split_sentences(text: str) -> list[str]:
    """Lines, then sentences (after . ! ? before a capital or digit, and at semicolons), stripped."""
    out = []
    for part in re.split(r"\s*\n+\s*", text):
        out.extend(s.strip() for s in _SENTENCE_END.split(part) if s.strip())
    return out


def speaker_sentences(text: str) -> list[str]:
    """A memory's sentences, verbatim, whitespace collapsed; a 'Speaker: ' prefix is carried
    onto each of them, so a sentence taken alone still says who said it."""
    text = " ".join(text.split())
    speaker = ""
    m = _SPEAKER_PREFIX.match(text)
    if m:
        speaker, text = m.group(0), text[m.end():]
    return [speaker + s for s in _SENTENCE_BREAK.split(text) if s.strip()]

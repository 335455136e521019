"""Words, stems, stop words and sentences: the one text toolkit search, extract and dream share.

Pure functions of strings, importing nothing of pmem, so every layer may use them. dream.py and
extract.py used to tokenise and stem with different rules ("moved" was `moved` in dream and
`mov` in extract; dream dropped digits). Dream now uses extraction's rules: on dream_bench
(MiniLM, 2 conversations) dedup precision went 0.884 -> 0.894 at the same recall, R@10 after a
dream 0.840 -> 0.844; extract_bench is unchanged by construction.
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

def stem(word: str) -> str:
    """Strip one of -ing, -ed, -es, -s, leaving at least 3 letters ("moved", "moving" -> "mov").

    Light on purpose: grounding and duplicate detection only need inflections of one word to
    meet, and a wrong conflation costs little where every rule also checks meaning."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


# -- words ------------------------------------------------------------------------------------

def words(text: str) -> list[str]:
    """Lower-case words, possessives split off ("Caroline's" -> "caroline"); digits kept."""
    return [w.split("'")[0] for w in WORD.findall(text.lower())]


def content_words(text: str) -> list[str]:
    """`words` without stop words and single letters (single digits stay), in order, unstemmed."""
    return [w for w in words(text) if w not in STOP_WORDS and (len(w) > 1 or w.isdigit())]


def content_stems(text: str) -> set[str]:
    """The set of `stem`s of `text`'s content words (numbers included)."""
    return {stem(w) for w in content_words(text)}


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

"""Do two memories state the same fact? What must stay equal, and how much of the rest they share.

Two memories are one fact said twice only if the things that make facts different are equal:
the speaker, names, numbers, dates and times (however written: "14 June 2025", "June 14, 2025",
"2025-06-14"), identifiers ("eu-west-1"), values of a closed class (weekdays, months, kin: "sister"
/ "brother"), and whether it is negated ("not", "never", "kein", "не"). Those are the `keys`. The
rest is compared as stems in the text's own language (Snowball, pmem.stemming, when the
`multilingual` extra is installed), so that "approval" meets "approved" and "Отчёт пишет Сергей"
meets "Отчёт написан Сергеем". First person is read as the speaker ("Dana: I moved to Porto" is
"Dana moved to Porto"). How the rule was chosen: docs/decisions/0048-dedup-by-meaning.md.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable

from .. import stemming
from ..text import STOP_WORDS, jaccard

# Words that open a sentence without naming anything ("Remember that Lisa is vegan"): not names.
LEAD_INS = frozenset("""remember note apparently also btw fyi reminder update actually basically seems according
okay ok so well please maybe probably reportedly""".split())

_MONTHS = {
    1: "january jan januar enero январь января январе",
    2: "february feb februar febrero февраль февраля феврале",
    3: "march mar märz marz marzo март марта марте",
    4: "april apr abril апрель апреля апреле",
    5: "may mai mayo май мая мае",
    6: "june jun juni junio июнь июня июне",
    7: "july jul juli julio июль июля июле",
    8: "august aug agosto август августа августе",
    9: "september sep sept septiembre setiembre сентябрь сентября сентябре",
    10: "october oct oktober octubre октябрь октября октябре",
    11: "november nov noviembre ноябрь ноября ноябре",
    12: "december dec dezember diciembre декабрь декабря декабре",
}
_WEEKDAYS = {
    1: "monday mondays mon montag montags lunes понедельник понедельника понедельникам",
    2: "tuesday tuesdays tue tues dienstag dienstags martes вторник вторника вторникам",
    3: "wednesday wednesdays wed mittwoch mittwochs miércoles miercoles среда среду среды средам",
    4: "thursday thursdays thu thur thurs donnerstag donnerstags jueves четверг четверга четвергам",
    5: "friday fridays fri freitag freitags viernes пятница пятницу пятницы пятницам",
    6: "saturday saturdays sat samstag samstags sábado sabado sábados суббота субботу субботы субботам",
    7: "sunday sundays sun sonntag sonntags domingo domingos воскресенье воскресенья воскресеньям",
}
# Kin: "my sister" and "my brother" are two people however close the rest (e5: 0.973).
_KIN = {
    "mother": "mother mom mum mama mutter madre мама мать матери мамой матерью маму",
    "father": "father dad papa vater padre папа отец отца отцом папой",
    "sister": "sister sisters schwester hermana сестра сестры сестру сестрой сестре",
    "brother": "brother brothers bruder hermano брат брата брату братом",
    "son": "son sons sohn hijo сын сына сыном сыну",
    "daughter": "daughter daughters tochter hija дочь дочери дочерью",
    "wife": "wife ehefrau esposa жена жены женой жене жену",
    "husband": "husband ehemann esposo marido муж мужа мужем мужу",
    "aunt": "aunt tante tía tia тётя тетя тётей тетей",
    "uncle": "uncle onkel tío tio дядя дядей",
    "cousin": "cousin cousine primo prima",
    "niece": "niece nichte sobrina племянница племянницей",
    "nephew": "nephew neffe sobrino племянник племянником",
    "grandmother": "grandmother grandma granny oma großmutter abuela бабушка бабушки бабушкой бабушке",
    "grandfather": "grandfather grandpa opa großvater abuelo дедушка дедушки дедушкой",
    "grandson": "grandson enkel nieto внук внуком",
    "granddaughter": "granddaughter enkelin nieta внучка внучкой",
    "boyfriend": "boyfriend freund novio парень",
    "girlfriend": "girlfriend freundin novia девушка",
}
_NUMBER_WORDS = {w: str(i) for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve".split())}
_VALUES: dict[str, str] = {}
for _n, _names in _MONTHS.items():
    _VALUES.update((w, f"month:{_n}") for w in _names.split())
for _n, _names in _WEEKDAYS.items():
    _VALUES.update((w, f"day:{_n}") for w in _names.split())
for _k, _names in _KIN.items():
    _VALUES.update((w, f"kin:{_k}") for w in _names.split())
_VALUES.update((w, f"n:{n}") for w, n in _NUMBER_WORDS.items() if w != "one")  # "one of" is no count
# Obligation said in other words ("need approval" / "must be approved"): one value, not a word of the rest.
_VALUES.update((w, "modal:must") for w in "must need needs needed require requires required mandatory".split())
# "may", "sun", "sat", "mar", "jan" are also words: a month or day only next to a number or capitalised.
_AMBIGUOUS = frozenset({"may", "mar", "jan", "sun", "sat", "wed", "mon", "fri", "tue", "thu", "dec", "oct", "nov",
                        "sep", "aug", "jun", "jul", "apr", "feb", "mai", "freund", "freundin", "frau", "mann",
                        "девушка", "парень"})

# "in every editor" / "always in editors" say the same thing: not words that make two facts different.
QUANTIFIERS = frozenset({"every", "always"})

# Negation: "Raj is allergic to peanuts" / "Raj is not allergic to peanuts" (stop words elsewhere).
NEGATIONS = frozenset("""not no never cannot nor neither nobody nothing none nowhere don't doesn't didn't isn't
aren't wasn't weren't won't can't couldn't shouldn't wouldn't haven't hasn't hadn't n't
nicht kein keine keinen keinem keiner keines nie niemals nichts niemand
nunca jamás jamas nada nadie ni не нет никогда ни ничего никто
without ohne sin без""".split())

_TIME = re.compile(r"\b(\d{1,2})(?:[:.](\d{2}))?\s*([ap])\.?\s?m\b\.?", re.I)
_CLOCK = re.compile(r"\b(\d{1,2}):(\d{2})\b")
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b")
_DOTTED_DATE = re.compile(r"\b(\d{1,2})\.(\d{1,2})(?:\.(\d{2,4}))?(?![\d.,])")
_IDENT = re.compile(r"\b(?=[\w-]*\d)[^\W_]+(?:[-_/][^\W_]+)+\b|\b(?=\w*\d)(?=\w*[^\W\d_])\w+\b")
_NUM = re.compile(r"\d+(?:[.,]\d+)*")
_ORDINAL = re.compile(r"\b(\d+)(?:st|nd|rd|th|er|º|ª)\b", re.I)
# German writes a day as an ordinal with a dot ("am 12. Mai"): that dot ends no sentence.
_DAY_DOT = re.compile(r"\b(\d{1,2})\.(?=\s+(?:%s)\b)" % "|".join(
    sorted({w for n in _MONTHS.values() for w in n.split() if len(w) > 3} | {"mai"}, key=len, reverse=True)), re.I)
_TOKEN = re.compile(r"[^\W_]+(?:'[^\W_]+)?", re.UNICODE)
_SPEAKER = re.compile(r"^([A-Z][\w .'-]{0,30}):\s+")
_SENTENCE_START = re.compile(r"(?:^|[.!?;:]\s+)$")
# German capitalises every noun: after a determiner it is a noun, not a name.
_DE_DETERMINERS = frozenset("""der die das den dem des ein eine einen einem einer eines kein keine keinen
keinem meine mein meinen meinem meiner dein deine sein seine ihr ihre unser unsere jeden jede jedes jeder im am
um zum zur vom beim""".split())


@dataclass(frozen=True)
class Facets:
    """What a memory's text says, for comparing it with another (see `facets`)."""

    text: str  # the text compared: without its speaker label, first person read as the speaker
    speaker: str | None
    lang: str
    keys: frozenset[str]  # names, numbers, dates, times, identifiers, closed-class values
    names: frozenset[str]  # the capitalised words among the keys (lower case)
    words: frozenset[str]  # every word, lower case, and its stem (a name of one side must occur in the other)
    negated: bool
    stems: frozenset[str]  # content stems of the rest, in the text's language
    forms: dict[str, str] = field(default_factory=dict, compare=False)  # stem -> a word it came from
    # name key -> the name unstemmed, in Latin letters ("name:серг" -> "sergej"): names across languages
    name_of: dict[str, str] = field(default_factory=dict, compare=False)


def speaker_of(text: str, meta: dict[str, Any] | None = None) -> str | None:
    """Who said it: meta["speaker"] (importers), else a "Name: " label at the start."""
    said = (meta or {}).get("speaker")
    if isinstance(said, str) and said.strip():
        return said.strip()
    m = _SPEAKER.match(text)
    if m and m.group(1).strip().lower() not in LEAD_INS:
        return m.group(1).strip()
    return None


def _without_label(text: str, speaker: str | None) -> str:
    m = _SPEAKER.match(text)
    if m and (speaker is None or m.group(1).strip() == speaker or m.group(1).strip().lower() in LEAD_INS):
        return text[m.end():]
    return text


def _dates_and_times(text: str, keys: set[str]) -> str:
    """Dates and clock times as keys, taken out of the text so their digits are not counted twice."""
    def clock(h: int, mins: str | None, half: str | None) -> str:
        if half:
            h = h % 12 + (12 if half.lower() == "p" else 0)
        return f"time:{h}:{mins or '00'}"

    def iso(m: re.Match) -> str:
        keys.update({f"n:{int(m.group(1))}", f"month:{int(m.group(2))}", f"n:{int(m.group(3))}"})
        return " "

    def dotted(m: re.Match) -> str:
        day, month = int(m.group(1)), int(m.group(2))
        if not (1 <= day <= 31 and 1 <= month <= 12):
            return m.group(0)
        keys.update({f"n:{day}", f"month:{month}"})
        if m.group(3):
            keys.add(f"n:{int(m.group(3))}")
        return " "

    def twelve(m: re.Match) -> str:
        keys.add(clock(int(m.group(1)), m.group(2), m.group(3)))
        return " "

    def twenty_four(m: re.Match) -> str:
        keys.add(clock(int(m.group(1)), m.group(2), None))
        return " "

    text = _ISO_DATE.sub(iso, text)
    text = _TIME.sub(twelve, text)
    text = _CLOCK.sub(twenty_four, text)
    text = _DAY_DOT.sub(r"\1", text)
    text = _DOTTED_DATE.sub(dotted, text)
    return _ORDINAL.sub(r"\1", text)


def facets(text: str, meta: dict[str, Any] | None = None) -> Facets:
    """The keys, negation and stems of a memory's text (and its speaker, from meta or its label)."""
    speaker = speaker_of(text, meta)
    body = _without_label(text, speaker).strip()
    if speaker:
        from ..extract import third_person

        said = third_person(speaker, body)
        body = body if said.startswith(f"{speaker}: ") else said
    lang = stemming.detect_language(body)
    snowball = stemming.available()
    keys: set[str] = set()
    rest = _dates_and_times(body, keys)
    for m in _IDENT.finditer(rest):
        keys.add("id:" + m.group(0).lower())
    rest = _IDENT.sub(" ", rest)
    for m in _NUM.finditer(rest):
        keys.add("n:" + (m.group(0).replace(",", "").lstrip("0") or "0"))
    rest = _NUM.sub(" ", rest)
    names: set[str] = set()
    name_of: dict[str, str] = {}
    plain: list[str] = []
    tokens = list(_TOKEN.finditer(rest))
    genitive = False  # the word before was a German name in the genitive ("Annas Geburtstag")
    for k, m in enumerate(tokens):
        raw = m.group(0)
        word = raw.lower()
        base = word.split("'")[0]
        # whether it opens a sentence: read only of a capitalised word (a search of all the text
        # before it; every word's was most of facets' cost)
        start = raw[0].isupper() and bool(_SENTENCE_START.search(rest[:m.start()]))
        value = _VALUES.get(base)
        if value is not None and (base not in _AMBIGUOUS or raw[0].isupper() and not start):
            keys.add(value)
            continue
        if word in NEGATIONS or base in NEGATIONS or word.endswith("n't"):
            continue
        capital = raw[0].isupper() and base not in ("i",)
        if capital and lang == "de" and not start and k and (
                genitive or tokens[k - 1].group(0).lower() in _DE_DETERMINERS):
            capital = False  # a German noun after its article, or after a name in the genitive
        genitive = False
        if capital and (not start or (base not in STOP_WORDS and base not in LEAD_INS
                                      and base not in stemming.STOP_WORDS.get(lang, ()))):
            names.add(base)
            key = "name:" + _key(base, lang, snowball)
            keys.add(key)
            name_of.setdefault(key, latin(base))
            genitive = lang == "de" and base.endswith("s")
            continue
        plain.append(base)
    forms: dict[str, str] = {}
    stop = STOP_WORDS | stemming.STOP_WORDS.get(lang, frozenset()) | QUANTIFIERS
    for word in plain:
        if word not in stop and (len(word) > 1 or word.isdigit()):
            forms.setdefault(_key(word, lang, snowball), word)
    negated = sum(1 for w in _TOKEN.findall(body.lower()) if w in NEGATIONS or w.endswith("n't")) % 2 == 1
    every = {w.split("'")[0] for w in _TOKEN.findall(body.lower())}
    every |= {_key(w, lang, snowball) for w in every}
    return Facets(text=body, speaker=speaker, lang=lang, keys=frozenset(keys), names=frozenset(names),
                  words=frozenset(every), negated=negated, stems=frozenset(forms), forms=forms, name_of=name_of)


_CYRILLIC_LATIN = dict(zip("абвгдеёжзийклмнопрстуфхцчшщъыьэюя", (
    "a b v g d e e zh z i j k l m n o p r s t u f kh ts ch sh shch  y  e yu ya".split(" "))))


def latin(word: str) -> str:
    """A word in Latin letters without accents, for names across scripts ("Иван" -> "ivan")."""
    return _plain("".join(_CYRILLIC_LATIN.get(c, c) for c in word.lower()))


NAME_ENDING = 2  # letters of inflection a name may carry across languages ("Kazan" / "Казани", "Anna" / "Annas")


def same_name(x: str, y: str) -> bool:
    """Two names (latin()) one person or place in another language's inflection: equal, or one
    the other with at most NAME_ENDING letters changed at its end, the rest of four letters or
    more ("sergej" / "sergeem", "kazan" / "kazani"; "anna" / "anne" stay two people)."""
    if x == y:
        return True
    common = len(next((p for p in (x[:i] for i in range(min(len(x), len(y)), 0, -1)) if y.startswith(p)), ""))
    return common >= 4 and len(x) - common <= NAME_ENDING and len(y) - common <= NAME_ENDING


def _plain(word: str) -> str:
    """Without accents: "Lucía" and "Lucia" are one name."""
    return "".join(c for c in unicodedata.normalize("NFKD", word) if not unicodedata.combining(c))


def _stem(word: str, lang: str) -> str:
    """One word's stem: "Сергеем" and "Сергей" are one name."""
    return _stem_as(word, lang, stemming.available())


@lru_cache(maxsize=1 << 16)
def _key(word: str, lang: str, snowball: bool) -> str:
    """A word as facets() and content() compare it: its stem (Snowball's, or the simple stemmer's
    when `snowball` is False), without accents; kept, since a plan reads the same words in every
    pair and Snowball in pure Python was half of a LoCoMo conversation's plan without a chat
    model (docs/decisions/0056-dream-plan-speed.md)."""
    return _plain(_stem_as(word, lang, snowball))


def _stem_as(word: str, lang: str, snowball: bool) -> str:
    if snowball:
        return stemming.normalize(word, lang) or word
    from ..text import stem

    return stem(word)


def content(text: str) -> set[str]:
    """Every content word's stem in the text's language, and its numbers: what a text says."""
    from ..text import numbers

    lang = stemming.detect_language(text)
    stop = STOP_WORDS | stemming.STOP_WORDS.get(lang, frozenset())
    words = [w.split("'")[0] for w in _TOKEN.findall(text.lower())]
    snowball = stemming.available()
    return {_key(w, lang, snowball) for w in words if w not in stop and not w.isdigit() and len(w) > 1} | numbers(text)


def differs(a: Facets, b: Facets) -> str | None:
    """Why `a` and `b` are two facts whatever their wording, or None when nothing that makes facts
    different differs: the speakers (when both have one), negation, the keys. A name of one side
    passes when the other side holds the word at all ("Production deploys" / "deploys to
    production"): it was only capitalised where a sentence starts."""
    if a.speaker and b.speaker and a.speaker != b.speaker:
        return f"said by {a.speaker} / {b.speaker}"
    if a.negated != b.negated:
        return "one is negated"
    only_a = {k for k in a.keys - b.keys if not (k.startswith("name:") and k[5:] in b.words)}
    only_b = {k for k in b.keys - a.keys if not (k.startswith("name:") and k[5:] in a.words)}
    if (only_a or only_b) and (a.lang != b.lang or a.lang == "ru"):
        only_a, only_b = _names_inflected(a, b, only_a, only_b)
    if only_a or only_b:
        return "different " + ", ".join(sorted({k.split(":", 1)[0] for k in only_a | only_b}))
    return None


def _names_inflected(a: Facets, b: Facets, only_a: set[str], only_b: set[str]) -> tuple[set[str], set[str]]:
    """`only_a` and `only_b` less the names the other side holds in another language's form or
    inflection (same_name): "Carlos" stems to "carlo" in English and "carl" in Spanish, Russian
    declines names ("Сергей" / "Сергеем"), and "Иван" is "Ivan" in Latin letters."""
    def held(k: str, x: Facets, y: Facets) -> bool:
        name = x.name_of.get(k)
        return bool(name) and any(same_name(name, other) for other in y.name_of.values())

    return {k for k in only_a if not held(k, a, b)}, {k for k in only_b if not held(k, b, a)}


def rest(a: Facets, b: Facets) -> tuple[set[str], set[str]]:
    """The stems of each side outside the keys, less the other side's names: a word capitalised
    only where a sentence starts ("Printer on third floor" / "The printer on the third floor")
    is a name on one side and a plain word on the other."""
    names_a = {k[5:] for k in a.keys if k.startswith("name:")}
    names_b = {k[5:] for k in b.keys if k.startswith("name:")}
    return set(a.stems) - names_b, set(b.stems) - names_a


def overlap(a: Facets, b: Facets) -> float:
    """Jaccard of the stems outside the keys (1.0 when neither has any)."""
    x, y = rest(a, b)
    return jaccard(x, y) if x or y else 1.0


@dataclass(frozen=True)
class Rule:
    """When a pair is one fact. From `review` with equal keys, a person is asked; from `auto`, a
    dedup is applied when every stem outside the keys either occurs on both sides or meets a word
    of the other side at `synonym` or closer by itself ("bought" / "purchased", "written" /
    "writes"), but for at most `spare` stems, and `lexical` of the stems are shared."""

    auto: float
    review: float
    lexical: float = 0.0
    synonym: float = 2.0  # above any cosine: words meet only by their stems
    spare: int = 0
    # From this cosine, the word test before dedup by meaning also makes a dedup (with equal keys):
    # half the stems shared and not one swapped; LoCoMo's reworded facts need it
    # (docs/decisions/0048-dedup-by-meaning.md).
    close: float = 2.0
    # Two languages: words cannot be compared, so a pair whose keys are equal is one fact from this
    # cosine of the two texts embedded alike (e5's "query: " on both: `symmetric`), and is compared
    # at all from `bilingual_floor` on the stored vectors' scale; above 1, never.
    bilingual: float = 2.0
    bilingual_floor: float = 2.0


WordCosine = Callable[[str, str], float]
ALIGN_MAX = 6  # stems a side may lack before their words are not compared one by one


def unaligned(a: Facets, b: Facets, word_cosine: WordCosine | None, synonym: float) -> tuple[int, list[str]]:
    """How many stems of either side the other lacks and no word of it stands for (greedy, best
    pair first, each word used once), and the pairs that met ("bought / purchased 0.974")."""
    x, y = rest(a, b)
    only_a, only_b = sorted(x - y), sorted(y - x)
    if word_cosine is None or synonym > 1.0 or not only_a or not only_b or max(len(only_a), len(only_b)) > ALIGN_MAX:
        return len(only_a) + len(only_b), []
    scored = sorted(((word_cosine(a.forms[x], b.forms[y]), x, y) for x in only_a for y in only_b), reverse=True)
    used_a: set[str] = set()
    used_b: set[str] = set()
    met = []
    for cos, x, y in scored:
        if cos < synonym:
            break
        if x not in used_a and y not in used_b:
            used_a.add(x)
            used_b.add(y)
            met.append(f"{a.forms[x]} / {b.forms[y]} {cos:.3f}")
    return len(only_a) + len(only_b) - 2 * len(met), met


def two_languages(a: Facets, b: Facets) -> bool:
    """Whether `a` and `b` are in two languages: guessed so, and sharing under half of their
    words besides names and numbers, stop words included (an English text guessed as another
    language still shares its words: "Raj is allergic to peanuts" / "... to shellfish")."""
    if a.lang == b.lang:
        return False

    def said(f: Facets) -> set[str]:
        return {w for w in _TOKEN.findall(f.text.lower()) if not w.isdigit()} - f.names

    return jaccard(said(a), said(b)) < 0.5


def verdict(a: Facets, b: Facets, cosine: float, rule: Rule,
            word_cosine: WordCosine | None = None, symmetric: float | None = None) -> tuple[str | None, str]:
    """("dedup" | "review" | None, why) for two memories at `cosine`; `word_cosine` compares two
    words the sides do not share (None: words meet only by their stems); `symmetric`: the two
    texts' cosine embedded alike (Rule.bilingual), for a pair in two languages."""
    bilingual = rule.bilingual <= 1.0 and two_languages(a, b)
    if cosine < (min(rule.review, rule.bilingual_floor) if bilingual else rule.review):
        return None, f"cosine {cosine:.3f}"
    why = differs(a, b)
    if why:
        return None, why
    if bilingual:
        anchored = any(k.startswith(("name:", "n:", "id:", "time:")) for k in a.keys)
        if anchored and symmetric is not None and symmetric >= rule.bilingual:
            return "dedup", (f"one fact in two languages ({a.lang} / {b.lang}): the same names, numbers and dates "
                             f"at cosine {symmetric:.3f}")
        if cosine < rule.review:
            return None, f"in two languages at cosine {symmetric if symmetric is not None else cosine:.3f}"
        return "review", (f"the same names, numbers and dates in two languages ({a.lang} / {b.lang}) at cosine "
                          f"{cosine:.3f}; the same fact?")
    shared = overlap(a, b)
    if cosine >= rule.close:
        x, y = rest(a, b)
        if jaccard(x | a.keys, y | b.keys) >= 0.5 and not (len(x - y) == 1 and len(y - x) == 1):
            return "dedup", f"the same names, numbers and dates at cosine {cosine:.3f}"
    left, met = unaligned(a, b, word_cosine, rule.synonym) if cosine >= rule.auto else (None, [])
    if left is not None and left <= rule.spare and shared >= rule.lexical:
        return "dedup", "the same names, numbers and dates" + (f"; {', '.join(met)}" if met else "")
    x, y = rest(a, b)
    other = sorted(a.forms[w] for w in x - y) + sorted(b.forms[w] for w in y - x)
    return "review", (f"the same names, numbers and dates at cosine {cosine:.3f}; "
                      f"the same in other words? ({', '.join(other[:6]) or 'word order'})")

"""Words for keyword search beyond English: language guess, stop words and Snowball stems.

The keyword index keeps, beside each memory's text (porter-stemmed, English), a `stems` column:
`index_stems(text)`, its words' Snowball stems in its own language (migration m006). A
non-English query's stems are OR-ed against it, so "машину" finds "машина" and "Schwestern" finds
"Schwester", with each language's function words dropped. The store counts its memories per
guessed language (`pmem_lang`, migration m007), so a short Latin-script query with no function
words ("Schwestern Geburtstag") is stemmed in each language the store actually holds.

Stemming uses `snowballstemmer` (pure Python, so it installs everywhere; it runs PyStemmer's C
code instead when that is installed). The language of a text is guessed per text: Cyrillic
script is Russian; Latin script is whichever of English, German, Spanish and French has the
most stop words in it (English when none does). A query is short, so its words are stemmed in
its guessed language and in English, and the stems are OR-ed.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from functools import lru_cache

LANGUAGES = {"en": "english", "ru": "russian", "de": "german", "es": "spanish", "fr": "french"}

_STOP_TEXT = {
    "en": """a about above after again against all am an and any are as at be because been before being
        below between both but by can could did do does doing down during each few for from further had
        has have having he her here hers herself him himself his how i if in into is it its itself just
        me more most my myself no nor not now of off on once only or other our ours ourselves out over
        own same she should so some such than that the their theirs them themselves then there these
        they this those through to too under until up very was we were what when where which while who
        whom why will with would you your yours yourself yourselves s t don didn doesn isn wasn weren
        aren won wouldn shouldn ever also get got go going gone like really much many tell told say said
        well yes yeah oh hey hi""",
    "ru": """и в во не что он на я с со как а то все всё она так его но да ты к у же вы за бы по только ее её
        мне было вот от меня еще ещё нет о из ему теперь когда даже ну вдруг ли если уже или ни быть был
        него до вас нибудь опять уж вам ведь там потом себя ничего ей может они тут где есть надо ней для
        мы тебя их чем была сам чтоб без будто чего раз тоже себе под будет ж тогда кто этот того потому
        этого какой совсем ним здесь этом один почти мой тем чтобы нее неё сейчас были куда зачем всех
        никогда можно при наконец два об другой хоть после над больше тот через эти нас про всего них
        какая много разве три эту моя впрочем хорошо свою этой перед иногда лучше чуть том нельзя такой
        им более всегда конечно всю между это мои моё моего моей мою свой своя свои наш наша наши какие
        каком какую какого сколько""",
    "de": """aber alle allem allen aller alles als also am an ander andere anderem anderen anderer anderes
        auch auf aus bei beim bin bis bist da damit dann das dass dasselbe dazu dein deine deinem deinen
        deiner dem den denn der des dessen dich die dies diese dieselbe diesem diesen dieser dieses dir
        doch dort du durch ein eine einem einen einer eines einig einige er es etwas euer eure für fürs
        gegen gewesen hab habe haben hat hatte hatten hier hin hinter ich ihm ihn ihnen ihr ihre ihrem
        ihren ihrer im in indem ins ist jede jedem jeden jeder jedes jene jetzt kann kein keine können
        könnte machen man manche mein meine meinem meinen meiner mich mir mit muss musste nach nicht
        nichts noch nun nur ob oder ohne sehr sein seine seinem seinen seiner selbst sich sie sind so
        solche soll sollte sondern sonst über um und uns unser unsere unter viel vom von vor wann war
        waren warum was weil welche welchem welchen welcher welches wenn wer werde werden wie wieder
        will wir wird wo wollen wollte würde zu zum zur zwar zwischen""",
    "es": """a al algo algunas algunos ante antes como con contra cual cuál cuando cuándo de del desde donde
        dónde durante e el él ella ellas ellos en entre era eres es esa esas ese eso esos esta está
        están estas este esto estos estoy fue fueron ha habéis han has hay he la las le les lo los más
        me mi mis mí mucho muy nada ni no nos nosotros o os otra otro para pero poco por porque que qué
        quien quién quienes se sea ser si sí sin sobre su sus también tanto te tengo tiene tienen todo
        todos tu tus tú un una uno unos y ya yo cómo""",
    "fr": """a ai au aux avec avoir c ce ces cet cette d dans de des du elle elles en est et été être eu il
        ils j je l la le les leur leurs lui m ma mais me même mes moi mon n ne nos notre nous on ont ou
        où par pas pour qu que quel quelle quels quelles qui s sa sans se ses si son sont sur ta te tes
        toi ton tu un une vos votre vous y suis es sommes êtes étais était comment quand faut""",
}
STOP_WORDS: dict[str, frozenset[str]] = {k: frozenset(v.split()) for k, v in _STOP_TEXT.items()}

_WORD = re.compile(r"\w+", re.UNICODE)
_CYRILLIC = re.compile(r"[\u0400-\u04ff]")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


LATIN = ("de", "es", "fr")  # stemmed Latin-script languages besides English


def _guess(text: str) -> str | None:
    """"ru" for mostly Cyrillic text; else the Latin-script language with most stop words; None
    when the text holds no stop word of any of them (a short query often does not)."""
    ws = words(text)
    if not ws:
        return None
    cyrillic = sum(1 for w in ws if _CYRILLIC.search(w))
    if cyrillic * 2 >= len(ws):
        return "ru"
    votes = {lang: sum(w in STOP_WORDS[lang] for w in ws) for lang in ("en", *LATIN)}
    best = max(votes, key=lambda lang: (votes[lang], lang == "en"))
    return best if votes[best] else None


def detect_language(text: str) -> str:
    """"ru" for mostly Cyrillic text; else the Latin-script language with most stop words; "en"."""
    return _guess(text) or "en"


@lru_cache(maxsize=None)
def _stemmer(lang: str):
    """The Snowball stemmer of `lang`: PyStemmer's C one when installed, else snowballstemmer's."""
    name = LANGUAGES[lang]
    try:
        import Stemmer  # type: ignore[import-not-found]  # PyStemmer, optional

        return Stemmer.Stemmer(name)
    except ImportError:
        pass
    module = _snowball_module(f"{name}_stemmer")
    return getattr(module, f"{name.capitalize()}Stemmer")()


def _snowball_module(name: str):
    """One language module of the snowballstemmer package, without the package's __init__, which
    imports all 34 languages (~25 ms for a query that needs one). The modules import only their
    siblings (basestemmer, among), so they load under a private alias of the package's folder."""
    import importlib
    import sys

    if "snowballstemmer" in sys.modules:  # someone imported it whole: use that
        return importlib.import_module(f"snowballstemmer.{name}")
    alias = "_pmem_snowball"
    if alias not in sys.modules:
        import types
        from importlib.util import find_spec

        spec = find_spec("snowballstemmer")
        if spec is None or not spec.submodule_search_locations:
            raise ImportError("snowballstemmer is not installed")
        package = types.ModuleType(alias)
        package.__path__ = list(spec.submodule_search_locations)
        sys.modules[alias] = package
    return importlib.import_module(f"{alias}.{name}")


def _stem_words(ws: list[str], lang: str) -> list[str]:
    """Cyrillic words with the Russian stemmer, others with lang's (Russian text quotes Latin words)."""
    out = []
    for w in ws:
        word_lang = "ru" if _CYRILLIC.search(w) else ("en" if lang == "ru" else lang)
        out.append(_stemmer(word_lang).stemWord(w))
    return out


def content_words(text: str, lang: str) -> list[str]:
    ws = words(text)
    stop = STOP_WORDS[lang] | (STOP_WORDS["en"] if lang != "en" else frozenset())
    kept = [w for w in ws if w not in stop and (len(w) > 1 or w.isdigit())]
    return kept or ws


def normalize(text: str, lang: str | None = None) -> str:
    """The text as the keyword index would hold it: content words' stems, space-separated."""
    lang = lang or detect_language(text)
    return " ".join(_stem_words(content_words(text, lang), lang))


def query_terms(text: str) -> list[str]:
    """Stems to OR together for a query: in its guessed language and, for Latin script, English."""
    lang = detect_language(text)
    kept = content_words(text, lang)
    terms = _stem_words(kept, lang)
    if lang not in ("en", "ru"):
        terms += _stem_words(kept, "en")
    return list(dict.fromkeys(t for t in terms if t))


@lru_cache(maxsize=None)
def available() -> bool:
    """Whether the Snowball stemmers (the `multilingual` extra) are installed. Found once per
    process without importing them (24 ms): triggers ask on every write, searches on every query,
    and an English query never needs them."""
    from importlib.util import find_spec

    return find_spec("snowballstemmer") is not None or find_spec("Stemmer") is not None


def index_stems(text: str | None) -> str:
    """What the keyword index's `stems` column holds for a memory: the Snowball stems of its
    words when its text is not English (English keeps FTS5's porter on the `text` column), or
    only its Cyrillic words' stems when it is; '' without the extra. Deterministic: SQLite
    triggers call it as pmem_stems(text) (registered by db.connect)."""
    if not text or not available():
        return ""
    lang = detect_language(text)
    if lang == "en":
        cyr = [w for w in words(text) if _CYRILLIC.search(w) and w not in STOP_WORDS["ru"]]
        return " ".join(_stem_words(cyr, "ru"))
    return normalize(text, lang)


def query_stems(text: str, languages: Collection[str] = ()) -> list[str]:
    """Stems to match against the `stems` column for a query; none for an English query
    (without Cyrillic words), so English keyword search is the porter match alone.

    `languages` are those the store holds memories in (KeywordIndex.languages()). A Latin-script
    query with no stop word of any language cannot be told from English; it is stemmed in each
    of the store's Latin-script languages, so the stemmers load only where such memories exist."""
    if not available():
        return []
    guess = _guess(text)
    if guess is None and not _CYRILLIC.search(text):
        latin = [lang for lang in LATIN if lang in languages]
        if not latin:
            return []
        kept = content_words(text, "en")
        stems = [t for lang in latin for t in _stem_words(kept, lang)]
        return list(dict.fromkeys(t for t in stems if t))
    if guess == "en" and not _CYRILLIC.search(text):
        return []
    return query_terms(text)


def function_words(text: str) -> frozenset[str]:
    """The stop words of a non-English text's guessed language (empty for English): cheap, no
    stemmer needed."""
    guess = _guess(text)
    return STOP_WORDS[guess] if guess not in (None, "en") else frozenset()


def index_language(text: str | None) -> str:
    """The language a memory is counted under (`pmem_lang`, migration m007); cheap, and needs
    no stemmer."""
    return detect_language(text) if text else "en"

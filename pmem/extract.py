"""Text -> grounded facts -> reconciled against what is stored, as one undoable operation.

The pipeline, and why each step is shaped the way it is:

1. The input is kept as an `episodic` memory, so nothing is ever lost, even when the model fails.
2. It is parsed ("Speaker: text" lines, JSON messages, or plain text) and split into sentences;
   rules drop what is never a durable fact (questions, greetings, short reactions).
3. The chat model *labels* the remaining sentences (prompts.py) and never writes: written facts
   from a 135M model are mostly invented. A small model names each sentence's kind and the
   rules choose; a strong model (generate.STRONG_PARAMS) also chooses, and rewrites a sentence
   into a third-person fact. The fact text of a labelled sentence is a deterministic
   third-person form of it (`third_person`).
4. Every fact must pass the grounding gate (`check_grounding`): its content words and numbers
   occur in the source and its embedding is close to a source sentence. Failures are counted,
   never stored.
5. Each fact is reconciled with similar stored memories by deterministic rules (ADD, NOOP,
   UPDATE, SUPERSEDE); a strong model is asked only where the rules cannot decide.
6. All writes happen in one `store.operation("extract")`: one `pmem undo` reverts a whole run,
   and an interrupted run leaves nothing half-applied. Everything the run stores or searches for
   is embedded before that transaction starts (`store.prepared_vectors`), so the write lock is
   never held while a model works.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable

from . import dates, prompts, secretscan, timeutil
from .errors import ExtractionError, ModelError, UsageError
from .grounding import Grounding, check_grounding  # noqa: F401 - re-exported: extract.check_grounding is public
from .models.thresholds import MINILM, Thresholds
from .text import content_stems, content_words, has_digit, split_sentences, stem

if TYPE_CHECKING:
    from .models.embed import Embedder
    from .models.generate import Generator
    from .service import MemoryStore

MAX_INPUT = 2_000_000  # characters; the episodic copy is split into parts of store.MAX_TEXT
CHUNK_CHARS = 1500  # sentences shown to the model per call (about 400 tokens)
CHUNK_SENTENCES = 24
# Reconciliation's cosines on MiniLM's scale; each model has its own (pmem.models.thresholds, passed to
# decide() by reconcile() from the store).
NOOP_COSINE = MINILM.noop  # 0.95: near-identical to a stored memory: already known
CONTAINED_COSINE = MINILM.contained  # 0.85: same words, one a subset of the other: known (or a refinement)
CHANGE_COSINE = MINILM.change  # 0.6: a change ("moved to", "no longer") this close to a stored fact supersedes it
JUDGE_COSINE = MINILM.judge  # 0.75: where rules cannot decide, a strong model judges pairs at least this close

# Words that carry no fact on their own: with these and stop words gone, "Wow, thanks so much!"
# is empty and never reaches the model.
CHATTER = frozenset("""
wow thanks thank cool awesome great nice glad hey hi hello lol haha sure totally amazing sounds
good congrats congratulations yeah yep okay ok sweet love lovely wonderful cheers bye
take care see soon fun happy sorry omg absolutely definitely exactly true right agree means lot
""".split())
CHANGE_WORDS = frozenset("moved now longer anymore switched changed instead quit left new became".split())
_CHANGE_STEMS = {w[:-2] if w.endswith("ed") else w for w in CHANGE_WORDS}  # as text.stem leaves them
FIRST_PERSON = re.compile(r"\b(I|I'm|I've|I'll|I'd|me|my|mine|myself|we|our|us)\b", re.IGNORECASE)
_SPEAKER = re.compile(r"^\s*([A-Z][\w.'\- ]{0,30}?)\s*:\s+(\S.*)$")


# -- parsing ----------------------------------------------------------------------------------

@dataclass
class Turn:
    """One message or paragraph of the input; speaker None means the memory's owner."""

    text: str
    speaker: str | None = None
    date: str | None = None
    index: int = 0

    @property
    def display(self) -> str:
        return f"{self.speaker}: {self.text}" if self.speaker else self.text


_DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%d %B, %Y", "%d %B %Y", "%B %d, %Y",
                 "%B %d %Y", "%d %b %Y", "%b %d, %Y")


def parse_date(text: str) -> str | None:
    """A date header ('1:56 pm on 8 May, 2023', '2023-05-08', 'Date: 8 May 2023') or None.

    A year is required, so that a line such as 'Note: 7d' is never mistaken for a date."""
    s = re.sub(r"^\s*(?:#+\s*)?(?:date|session[\w ]*?|on)\s*[:\-\u2013]?\s*", "", text.strip(), flags=re.I)
    s = s.strip(" []()*_")
    if not re.search(r"\b(19|20)\d\d\b", s) or len(s) > 40:
        return None
    for fmt in _DATE_FORMATS:
        try:
            return timeutil.iso(datetime.strptime(s.replace("am", "AM").replace("pm", "PM"), fmt))
        except ValueError:
            continue
    if re.fullmatch(r"\d{4}-\d\d-\d\d(?:[T ][\d:]+Z?)?", s):
        try:
            return timeutil.parse_when(s)
        except UsageError:
            return None
    return None


def _json_turns(text: str) -> list[Turn] | None:
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None
    if isinstance(data, dict):
        data = data.get("messages")
    if not isinstance(data, list) or not data or not all(isinstance(d, dict) for d in data):
        return None
    turns = []
    for d in data:
        content = d.get("content", d.get("text"))
        if not isinstance(content, str) or not content.strip():
            continue
        role = str(d.get("role") or "").lower()
        if role in ("assistant", "system", "tool", "developer"):
            continue  # what an assistant said is kept in the source, but is not the person's fact
        speaker = d.get("speaker") or d.get("name") or (None if role in ("user", "") else role)
        date = d.get("date") or d.get("timestamp") or d.get("created_at")
        turns.append(Turn(content.strip(), str(speaker) if speaker else None,
                          parse_date(str(date)) if date else None, len(turns)))
    return turns


def parse_input(text: str) -> list[Turn]:
    """JSON messages, "Speaker: text" lines (with optional date header lines), or plain text."""
    stripped = text.strip()
    if stripped[:1] in "[{":
        turns = _json_turns(stripped)
        if turns is not None:
            return turns
    lines = [ln for ln in stripped.splitlines()]
    dates = [parse_date(ln) for ln in lines]
    speakers = [_SPEAKER.match(ln) if d is None else None for ln, d in zip(lines, dates)]
    body = [ln for ln, d in zip(lines, dates) if ln.strip() and d is None]
    chat = sum(1 for m in speakers if m) >= max(2, len(body) // 2)
    turns: list[Turn] = []
    date: str | None = None
    if chat:
        for ln, d, m in zip(lines, dates, speakers):
            if d is not None:
                date = d
            elif m:
                turns.append(Turn(m.group(2).strip(), m.group(1).strip(), date, len(turns)))
            elif ln.strip() and turns:
                turns[-1].text += " " + ln.strip()
        return turns
    paragraph: list[str] = []
    for ln, d in [*zip(lines, dates), ("", None)]:
        if d is not None or not ln.strip():
            if paragraph:
                turns.append(Turn(" ".join(paragraph), None, date, len(turns)))
                paragraph = []
            date = d if d is not None else date
        else:
            paragraph.append(ln.strip().lstrip("-*• ").strip())
    return turns


# -- candidates -------------------------------------------------------------------------------

def is_candidate(sentence: str, speaker: str | None = None) -> bool:
    """Could this sentence hold a durable fact? Rules, so that chatter never costs a model call."""
    s = sentence.strip()
    if s.endswith("?") or len(s) < 12:
        return False
    meaningful = [w for w in content_words(s) if w not in CHATTER]
    if len(meaningful) < 2:
        return False
    # A fact is about someone: the speaker (first person), or a named person or thing.
    return bool(FIRST_PERSON.search(s)) or speaker is None or bool(re.search(r"\s[A-Z][a-z]+", s))


_PRONOUNS = [
    (r"\bI'm\b|\bI am\b", "{s} is"), (r"\bI've\b|\bI have\b", "{s} has"), (r"\bI'll\b", "{s} will"),
    (r"\bI'd\b", "{s} would"), (r"\bI\b", "{s}"), (r"\b[Mm]y\b", "{s}'s"), (r"\bmine\b", "{s}'s"),
    (r"\bmyself\b", "{s}"), (r"\bme\b", "{s}"),
]


def third_person(speaker: str | None, sentence: str) -> str:
    """'Caroline' + "I went to my group" -> "Caroline went to Caroline's group".

    Deterministic, so the fact names its subject without a model writing anything; clumsy grammar
    ("Caroline love") costs nothing in search, and every word still comes from the source."""
    if not speaker:
        return sentence
    out = sentence
    for pattern, repl in _PRONOUNS:
        out = re.sub(pattern, repl.format(s=speaker), out)
    if out == sentence:
        return f"{speaker}: {sentence}"
    return out[0].upper() + out[1:]


# -- extraction -------------------------------------------------------------------------------

@dataclass
class Fact:
    text: str
    span: str  # the source sentence it was taken from
    turn: int  # index of its Turn in the parsed input
    kind: str = "event"
    speaker: str | None = None
    date: str | None = None
    support: float = 0.0
    action: str = ""  # add, noop, update, supersede; "rejected" for the gate's refusals
    target: str | None = None  # the stored memory it updates, supersedes or duplicates
    id: str | None = None  # the stored memory it became
    reason: str = ""
    edited: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ExtractResult:
    model: str
    dry_run: bool
    run: str | None = None  # the operation id (what `pmem undo` reverts)
    source_ids: list[str] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)  # accepted: add, noop, update, supersede
    rejected: list[Fact] = field(default_factory=list)  # refused by the grounding gate
    dropped: int = 0  # refused in review
    candidates: int = 0  # sentences shown to the model
    invalid: int = 0  # model answers that pointed at nothing (ignored)
    turns: int = 0
    dates: list[dict[str, str]] = field(default_factory=list)  # relative dates resolved: phrase, resolved, said, fact

    def counts(self) -> dict[str, int]:
        c = {a: sum(1 for f in self.facts if f.action == a) for a in ("add", "noop", "update", "supersede")}
        return {**c, "rejected": len(self.rejected), "dropped": self.dropped, "candidates": self.candidates,
                "invalid": self.invalid, "turns": self.turns, "dates_resolved": len(self.dates)}

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run, "model": self.model, "dry_run": self.dry_run, "source_ids": self.source_ids,
                "counts": self.counts(), "facts": [f.to_dict() for f in self.facts],
                "rejected": [f.to_dict() for f in self.rejected], "dates": self.dates}


def resolve_dates(fact: Fact, at: str | None) -> list[dict[str, str]]:
    """Rewrite the fact's relative dates against when it was said (its turn's date, else `at`):
    "last month", said on 2026-11-12, becomes "in October 2026" (pmem.dates). With no known date
    the text stays as it is. Returns what was resolved."""
    said = fact.date or at
    if not said:
        return []
    fact.text, changes = dates.resolve_relative(fact.text, said)
    return [{"phrase": c.phrase, "resolved": c.text, "said": said, "fact": fact.text} for c in changes]


@dataclass
class _Sentence:
    text: str
    turn: Turn

    @property
    def display(self) -> str:
        return f"{self.turn.speaker}: {self.text}" if self.turn.speaker else self.text


_ENUMERATION = re.compile(r"^\s*(?:\d{1,3}\s*[.)]|[-*\u2022])\s+")


def tidy_rewrite(fact: str, speaker: str | None) -> str:
    """Undo what a weak model copies from the prompt into a written fact: the list number the
    sentence was shown with, and a "Speaker: I ..." echo of the sentence (made third person, as
    the label path does). The result still has to pass the grounding gate."""
    fact = _ENUMERATION.sub("", fact.strip(), count=1).strip()
    if speaker and fact.lower().startswith(speaker.lower() + ":"):
        fact = third_person(speaker, fact[len(speaker) + 1:].strip())
    return fact


def _best_source(fact: str, chunk: list[_Sentence], claimed: _Sentence) -> _Sentence:
    """The shown sentence a written fact shares most words with. Small models often give the
    wrong sentence number; provenance (and the gate) should follow the text, not the number.
    The claimed sentence wins ties."""
    want = {stem(w) for w in content_words(fact)}

    def overlap(s: _Sentence) -> int:
        return len(want & {stem(w) for w in content_words(s.display)})

    best = max(chunk, key=overlap)
    return best if overlap(best) > overlap(claimed) else claimed


def _chunks(sentences: list[_Sentence]) -> list[list[_Sentence]]:
    chunks: list[list[_Sentence]] = [[]]
    size = 0
    for s in sentences:
        if chunks[-1] and (size + len(s.display) > CHUNK_CHARS or len(chunks[-1]) >= CHUNK_SENTENCES):
            chunks.append([])
            size = 0
        chunks[-1].append(s)
        size += len(s.display)
    return [c for c in chunks if c]


def propose(turns: list[Turn], generator: "Generator", progress: Callable[[int, int], None] | None = None
            ) -> tuple[list[Fact], int, int]:
    """Candidate facts from the model, before grounding: (facts, sentences shown, invalid answers)."""
    sentences = [_Sentence(s, t) for t in turns for s in split_sentences(t.text) if is_candidate(s, t.speaker)]
    chunks = _chunks(sentences)
    facts: list[Fact] = []
    invalid = 0
    strong = bool(getattr(generator, "strong", False))
    for i, chunk in enumerate(chunks):
        shown = [s.display for s in chunk]
        if strong:
            answer = generator.generate_json(prompts.rewrite_messages(shown),
                                             prompts.rewrite_schema(len(chunk), len(chunk)),
                                             max_tokens=60 * len(chunk) + 32)
            items = answer.get("facts")
            picks = []
            for item in items if isinstance(items, list) else []:
                n = item.get("n") if isinstance(item, dict) else None
                if isinstance(n, int) and 1 <= n <= len(chunk) and isinstance(item.get("fact"), str):
                    s = _best_source(item["fact"], chunk, chunk[n - 1])
                    picks.append((s, str(item.get("kind") or "event"), tidy_rewrite(item["fact"], s.turn.speaker)))
                else:
                    invalid += 1
        else:
            choose = bool(getattr(generator, "chooses", False))
            answer = generator.generate_json(prompts.label_messages(shown, choose),
                                             prompts.label_schema(len(chunk), choose),
                                             max_tokens=8 * len(chunk) + 16)
            labels = answer.get("labels")
            if not isinstance(labels, list):
                labels = []
            invalid += abs(len(chunk) - len(labels)) + sum(1 for x in labels if x not in prompts.KINDS)
            picks = [(s, str(label), third_person(s.turn.speaker, s.text))
                     for s, label in zip(chunk, labels) if label in prompts.KINDS and label != "none"]
        for s, kind, text in picks:
            facts.append(Fact(text=text, span=s.text, turn=s.turn.index, kind=kind, speaker=s.turn.speaker,
                              date=s.turn.date))
        if progress:
            progress(i + 1, len(chunks))
    return facts, len(sentences), invalid


class _Cached:
    """An embedder that remembers: the gate sees each source sentence many times."""

    def __init__(self, embedder: "Embedder"):
        self.inner, self.name, self.dim = embedder, embedder.name, embedder.dim
        self.memo: dict[str, list[float]] = {}

    def embed(self, texts: list[str]) -> list[list[float]]:
        todo = list(dict.fromkeys(t for t in texts if t not in self.memo))
        if todo:
            self.memo.update(zip(todo, self.inner.embed(todo)))
        return [self.memo[t] for t in texts]


def ground(facts: list[Fact], turns: list[Turn], embedder: "Embedder | None", min_support: float,
           min_similarity: float = MINILM.grounding) -> tuple[list[Fact], list[Fact]]:
    """(grounded, rejected): each fact is checked against the turn it came from (`min_similarity`:
    the grounding cosine of the embedder's model, pmem.models.thresholds)."""
    ok, rejected = [], []
    if embedder is not None and facts:  # one batch for every text the gate will compare
        embedder = _Cached(embedder)
        embedder.embed([f.text for f in facts] + [p for f in facts for p in split_sentences(turns[f.turn].display)])
    for f in facts:
        g = check_grounding(f.text, [turns[f.turn].display], embedder, min_support=min_support,
                            min_similarity=min_similarity)
        f.support = round(g.support, 3)
        if g.ok:
            ok.append(f)
        else:
            f.action, f.reason = "rejected", g.reason
            rejected.append(f)
    return ok, rejected


# -- reconciliation ---------------------------------------------------------------------------

def decide(new: str, old: str, cosine: float, judge: Callable[[str, str], str] | None = None,
           thresholds: Thresholds | None = None, stems: tuple[set[str], set[str]] | None = None) -> str:
    """How a new fact relates to one stored memory: noop, update, supersede or add.

    Rules first, each one cheap and explainable; `judge` (a strong model) only for close pairs
    that no rule settles. `thresholds`: the cosines of the model that measured `cosine` (default
    MiniLM's: this module's *_COSINE constants). `stems`: content_stems of new and old, where
    the caller has them (a dream compares each memory with many)."""
    if thresholds is None:
        noop, contained, change, judged = NOOP_COSINE, CONTAINED_COSINE, CHANGE_COSINE, JUDGE_COSINE
    else:
        noop, contained, change, judged = thresholds.noop, thresholds.contained, thresholds.change, thresholds.judge
    a, b = stems if stems is not None else (content_stems(new), content_stems(old))
    if cosine >= noop or a == b:
        return "noop"
    if cosine >= contained and a <= b:
        return "noop"  # the stored memory already says all of it
    if cosine >= contained and b < a:
        return "update"  # the new fact says the same and more
    only_new, only_old = a - b, b - a
    if only_new and only_old and all(has_digit(w) for w in only_new | only_old) and cosine >= change:
        return "supersede"  # the same statement with a different number: age, count, price
    if cosine >= change and (a & _CHANGE_STEMS) and not (b & _CHANGE_STEMS) and only_old:
        return "supersede"  # "moved to Lisbon" after "lives in Berlin"
    if judge is not None and cosine >= judged:
        return {"same": "noop", "refines": "update", "contradicts": "supersede"}.get(judge(old, new), "add")
    return "add"


def _judge(generator: "Generator") -> Callable[[str, str], str] | None:
    if not getattr(generator, "strong", False):
        return None  # a small model's judgement is noise; its facts are simply added

    def judge(old: str, new: str) -> str:
        try:
            answer = generator.generate_json(prompts.judge_messages(old, new), prompts.JUDGE_SCHEMA, 16)
        except ExtractionError:
            return "unrelated"
        return str(answer.get("relation", "unrelated"))

    return judge


def _similar(store: "MemoryStore", text: str, limit: int = 5, scope: str | None = None):
    from .search import search
    from .store import Filter

    flt = Filter() if scope is None else Filter(scope=scope)  # a project's: global plus its own
    return [h for h in search(store, text, flt, limit=limit, mode="semantic") if h.distance is not None]


def reconcile(store: "MemoryStore", fact: Fact, judge=None, scope: str | None = None) -> tuple[str, str | None]:
    """(action, target id) against the most similar stored memories, closest first. A fact for a
    project (`scope`) may find it already stored globally, but rewrites only the project's own."""
    thresholds = store.thresholds()
    for hit in _similar(store, fact.text, scope=scope):
        action = decide(fact.text, hit.memory.text, 1.0 - hit.distance, judge, thresholds)
        if scope is not None and action not in ("add", "noop") and hit.memory.scope != scope:
            continue
        if action != "add":
            return action, hit.memory.id
    return "add", None


# -- the whole run ----------------------------------------------------------------------------

def _source_parts(text: str) -> list[str]:
    from .store import MAX_TEXT

    parts, current = [], ""
    for line in text.splitlines(keepends=True):
        while len(line) > MAX_TEXT:
            parts.append(line[:MAX_TEXT])
            line = line[MAX_TEXT:]
        if len(current) + len(line) > MAX_TEXT:
            parts.append(current)
            current = ""
        current += line
    if current.strip():
        parts.append(current)
    return [p for p in parts if p.strip()]


def _source_texts(text: str) -> list[str]:
    """The texts the source memories will hold (as the store normalises them), to embed ahead."""
    return [p.strip() for p in _source_parts(text)]


def _check_text(text: str) -> str:
    if not isinstance(text, str):
        raise UsageError("extract takes text")
    if "\x00" in text:
        raise UsageError("input looks binary (NUL bytes); pmem extracts from text")
    if not text.strip():
        raise UsageError("nothing to extract from: the input is empty")
    if len(text) > MAX_INPUT:
        raise UsageError(f"input is {len(text):,} characters; the limit is {MAX_INPUT:,}")
    return text.strip()


def _store_sources(store: "MemoryStore", text: str, *, turns: list[Turn], tags, at, source, model, run,
                   allow_secret: bool = False, thread: str | None = None, scope: str | None = None) -> list[str]:
    """Keep the input as episodic memory; its parts are appended, in order, to `thread` (by
    default the source: what one source sends over time reads as one conversation)."""
    date = at or next((t.date for t in turns if t.date), None)
    meta = {"extract": {"model": model, "run": run, "role": "source"}}
    items = [store.new_memory(p, tier="episodic", tags=tags, source=source, meta=meta, created_at=date,
                              thread=thread or source, scope=scope) for p in _source_parts(text)]
    return [m.id for m in store.insert(items, kind="extract", summary="extract source", allow_secret=allow_secret)]


def keep_source(store: "MemoryStore", text: str, *, tags=(), at=None, source=None, model: str = "",
                allow_secret: bool = False, thread: str | None = None, scope: str | None = None) -> list[str]:
    """Store only the input, as its own operation: what a failed extraction still keeps."""
    text = _check_text(text)
    turns = parse_input(text)
    with store.prepared_vectors(_source_texts(text)), \
            store.operation("extract", f"extract source (model failed): {text[:60]}") as op:
        return _store_sources(store, text, turns=turns, tags=list(tags), at=at, source=source, model=model, run=op,
                              allow_secret=allow_secret, thread=thread, scope=scope)


def extract(store: "MemoryStore", text: str, *, generator: "Generator | None" = None, tags=(), at: str | None = None,
            source: str | None = None, dry_run: bool = False, thread: str | None = None,
            review: Callable[[Fact], str | None] | None = None,
            progress: Callable[[int, int], None] | None = None, allow_secret: bool = False,
            scope: str | None = None) -> ExtractResult:
    """Extract, ground and reconcile facts from `text`; store them with their source in one operation,
    in `scope` (None: global; a project's facts rewrite only that project's memories).

    Relative dates in a fact are resolved against when it was said (`resolve_dates`) before review.
    `review(fact)` returns the text to keep (possibly edited) or None to drop the fact. A model
    failure still stores the source (unless dry_run) and then raises, naming the stored id."""
    text = _check_text(text)
    if not allow_secret:  # secret gate (pmem/secretscan.py): refuse before any model runs
        secretscan.refuse(text, what="the input")
    tags = list(tags)
    turns = parse_input(text)
    model = getattr(generator, "name", None) or store.config.chat_model
    try:
        if generator is None:
            from .models.generate import load_generator

            generator = load_generator(settings=store.config, cache=store.vectors.models)
            model = generator.name
        proposed, shown, invalid = propose(turns, generator, progress)
    except (ModelError, ExtractionError) as exc:
        if dry_run:
            raise
        ids = keep_source(store, text, tags=tags, at=at, source=source, model=model, allow_secret=allow_secret,
                          thread=thread, scope=scope)
        raise type(exc)(f"{exc}; the input was kept as episodic memory {', '.join(ids)}") from None
    result = ExtractResult(model=model, dry_run=dry_run, candidates=shown, invalid=invalid, turns=len(turns))
    embedder = store.embedder
    grounded, result.rejected = ground(proposed, turns, embedder, float(store.config.extract_min_support),
                                       store.thresholds().grounding)
    seen: set[frozenset] = set()
    accepted: list[Fact] = []
    for f in grounded:  # the same sentence said twice in one input is one fact
        if secretscan.first_secret(f.text):  # secret gate: a fact never carries one, allowed or not
            f.action, f.reason = "rejected", "contains a secret"
            result.rejected.append(f)
            continue
        resolved = resolve_dates(f, at)
        key = frozenset(content_stems(f.text))
        if key in seen:
            continue
        seen.add(key)
        if review is not None:
            kept = review(f)
            if kept is None:
                result.dropped += 1
                continue
            if kept.strip() and kept.strip() != f.text:
                f.text, f.edited = kept.strip(), True
        result.dates.extend(resolved)
        accepted.append(f)
    judge = _judge(generator)
    if dry_run:
        for f in accepted:
            f.action, f.target = reconcile(store, f, judge, scope)
        result.facts = accepted
        return result
    # Embed first, then write: every text this run stores or searches for is embedded before the
    # write transaction starts, so other processes can write while the model works.
    with store.prepared_vectors(_source_texts(text) + [f.text.strip() for f in accepted]), \
            store.operation("extract", f"extract {len(accepted)} facts: {text[:60]}") as op:
        result.run = op
        result.source_ids = _store_sources(store, text, turns=turns, tags=tags, at=at, source=source,
                                           model=model, run=op, allow_secret=allow_secret, thread=thread,
                                           scope=scope)
        for f in accepted:
            _apply(store, f, result, tags=tags, at=at, source=source, judge=judge, scope=scope)
            result.facts.append(f)
    return result


def _part_of(result: ExtractResult, store: "MemoryStore", f: Fact) -> str:
    if len(result.source_ids) == 1:
        return result.source_ids[0]
    for sid in result.source_ids:  # long input: the part that holds the span
        if f.span in store.get(sid).text:
            return sid
    return result.source_ids[0]


def _apply(store: "MemoryStore", f: Fact, result: ExtractResult, *, tags, at, source, judge,
           scope: str | None = None) -> None:
    f.action, f.target = reconcile(store, f, judge, scope)
    if f.action == "noop":
        return
    src = _part_of(result, store, f)
    info = {"model": result.model, "run": result.run, "span": f.span, "kind": f.kind, "support": f.support}
    if f.edited:
        info["edited"] = True
    if f.action == "update":
        old = store.get(f.target)
        store.edit(old.id, text=f.text, meta={**old.meta, "extract": info}, action="extract")
        store.set_fields(old.id, "extract", derived_from=[*old.derived_from, src])
        f.id = old.id
        return
    when = f.date or at
    m = store.new_memory(f.text, tags=tags, source=source, meta={"extract": info}, created_at=when,
                         valid_from=when, derived_from=[src], scope=scope)
    f.id = store.insert([m], kind="extract", summary=f.text[:80])[0].id
    if f.action == "supersede":
        store.supersede(f.target, f.id, at=when)


# -- provenance -------------------------------------------------------------------------------

def why(store: "MemoryStore", memory_id: str) -> dict[str, Any]:
    """Where a memory came from: its extraction run, model, span and source text."""
    m = store.get(memory_id)
    info = m.meta.get("extract") if isinstance(m.meta.get("extract"), dict) else {}
    run = None
    if info.get("run"):
        op = store.get_operation(info["run"])
        if op:
            run = {"id": op.id, "kind": op.kind, "at": op.at, "undone_at": op.undone_at}
    sources = store.get_many(m.derived_from)
    return {"memory": m.to_dict(), "extracted": bool(info) and info.get("role") != "source",
            "model": info.get("model"), "run": run, "span": info.get("span"), "kind": info.get("kind"),
            "support": info.get("support"), "edited": bool(info.get("edited")),
            "sources": [s.to_dict() for s in sources],
            "missing_sources": [i for i in m.derived_from if i not in {s.id for s in sources}]}

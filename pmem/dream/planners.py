"""One planner per proposal kind over one set of memories (Planning), and the text helpers they use."""

from __future__ import annotations

import re
from contextlib import closing
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Callable, Generator, Iterable, Iterator

from .. import prompts, timeutil
from ..errors import PmemError
from ..extract import decide
from ..grounding import check_grounding
from ..models.loading import default_threads
from ..models.thresholds import MINILM, Thresholds
from ..records import Memory
from ..text import WORD, content_stems, numbers, speaker_sentences
from . import sameness
from .pairs import close_pairs
from .records import Budget, Plan, Proposal, _fingerprint, _parse, declined_key
from .sameness import Facets

if TYPE_CHECKING:
    from ..service import MemoryStore

MERGE_MAX = 4           # members of one merge proposal
COMPRESS_MAX = 12       # members of one summary
COMPRESS_TOPIC = MINILM.compress_topic  # 0.35 on MiniLM's scale (each model: pmem.models.thresholds)
COMPRESS_KEEP = 0.6     # share of a group's tokens an extractive summary may keep
SUMMARY_COVER = 0.5     # share of an episode's content words (and numbers) a model's summary must keep
SUMMARY_TRIAL = 8       # model summaries a dream asks for before it judges them
SUMMARY_KEPT = 0.25     # the share of the model's summaries so far that must pass for it to write the next
SUBJECT_MIN_WORDS = 2
VALUE_MAX_WORDS = 6

_COPULA = re.compile(r"^(?P<subject>.+?)\s+(?:is|are|was|were|=)\s+(?P<value>.+)$", re.IGNORECASE)
_COLON = re.compile(r"^(?P<subject>[^:]{2,60}):\s+(?P<value>.+)$")


def _tokens(text: str) -> int:
    from ..recall import estimate_tokens

    return estimate_tokens(text)


def subject_value(text: str) -> tuple[str, str] | None:
    """("favorite color of caroline"-like subject, value) for a short key/value fact, else None.

    The rule: the text before the first copula (is/are/was/were/=) or colon is the subject; it
    must hold at least SUBJECT_MIN_WORDS content words, and the value at most VALUE_MAX_WORDS
    words, so narrative sentences ("Caroline is planning to ...") never qualify.
    """
    t = " ".join(text.strip().split()).rstrip(".!")
    m = _COLON.match(t) or _COPULA.match(t)
    if not m:
        return None
    subject, value = m.group("subject").strip(), m.group("value").strip()
    subj_words = [w for w in WORD.findall(subject.lower())]
    if len(content_stems(subject)) < SUBJECT_MIN_WORDS or len(subj_words) > 8:
        return None
    value_words = WORD.findall(value.lower())
    if not value_words or len(value_words) > VALUE_MAX_WORDS:
        return None
    return " ".join(subj_words), " ".join(value_words)


def extractive_summary(texts: list[str], keep: float | None = None, prefix: str = "") -> str:
    """The most informative sentences of `texts`, verbatim and in order, within `keep` of their tokens.

    Greedy coverage: each step takes the sentence adding the most content words not yet covered
    (ties: the earlier one), until the budget is spent or nothing new is left."""
    sents: list[tuple[int, str, set[str], int]] = []
    for t in texts:
        for s in speaker_sentences(t):
            sents.append((len(sents), s, content_stems(s) | numbers(s), _tokens(s)))
    total = sum(s[3] for s in sents)
    budget = max(1, int(total * (COMPRESS_KEEP if keep is None else keep)))
    covered: set[str] = set()
    chosen: list[int] = []
    used = 0
    remaining = list(sents)
    while remaining:
        best = max(remaining, key=lambda s: (len(s[2] - covered), -s[0]))
        gain = len(best[2] - covered)
        if gain == 0:
            break
        if chosen and used + best[3] > budget:
            remaining.remove(best)
            continue
        chosen.append(best[0])
        covered |= best[2]
        used += best[3]
        remaining.remove(best)
    if not chosen and sents:
        chosen = [0]
    body = " ".join(sents[i][1] for i in sorted(chosen))
    return (prefix + body).strip()



def grounded(store: "MemoryStore", text: str, sources: list[str]) -> tuple[bool, str]:
    """The extraction's grounding gate (pmem.grounding) for a text a dream wrote from `sources`."""
    g = check_grounding(text, sources, embedder=store.embedder, min_support=float(store.config.extract_min_support),
                        min_similarity=store.thresholds().grounding)
    return bool(g.ok), g.reason



def _informative_key(m: Memory, words: set[str]):
    return (len(words), len(m.text), m.created_at, m.id)


class _Stems(dict):
    """Memory id -> content stems of its text, each computed when first asked: the planners ask
    only for memories in pairs, and a large store's slices read each memory several times (at
    100,000, 605,376 texts stemmed for a plan: 7 s of its 47)."""

    def __init__(self, memories: Iterable[Memory]):
        super().__init__()
        self._texts = {m.id: m.text for m in memories}

    def __missing__(self, memory_id: str) -> set[str]:
        stems = self[memory_id] = content_stems(self._texts[memory_id])
        return stems



# Pairs at least this close are checked by the extraction's supersede rule. Extraction checks a new
# fact against its few nearest stored ones (and from 0.6); a dream checks every pair, where its
# change-word rule at 0.6-0.8 mostly pairs unrelated facts about one person (measured on LoCoMo).
SUPERSEDE_COSINE = MINILM.supersede  # 0.85 on MiniLM's scale (each model: pmem.models.thresholds)


def load_generator_quietly(store: "MemoryStore") -> tuple[Any, str | None]:
    """The store's configured chat model, or (None, why not)."""
    from ..models.generate import load_generator

    try:
        return load_generator(settings=store.config, cache=store.vectors.models), None
    except PmemError as exc:
        return None, str(exc)


@dataclass
class SummaryTrial:
    """Whether a dream goes on asking the chat model for summaries (one a plan, whatever it reads
    at a time). From the SUMMARY_TRIAL-th answer on, once fewer than SUMMARY_KEPT of its
    summaries so far passed every gate, the rest are extractive. A small model's summaries keep a
    fraction of their facts (SmolLM2-135M on 5 LoCoMo conversations: a median 16% of the content
    words, 11 of 182 grounded ones past SUMMARY_COVER; the extractive one 81%), and writing them
    was three quarters of a plan's time. Judged on the answers in order, so the plan does not
    depend on how many lanes wrote them."""

    asked: int = 0
    kept: int = 0
    asking: bool = True

    def judged(self) -> bool:
        """True once, when the model has just been refused."""
        if self.asking and self.asked >= SUMMARY_TRIAL and self.kept < SUMMARY_KEPT * self.asked:
            self.asking = False
            return True
        return False


@dataclass
class Planning:
    """What every planner reads and writes: one per set of memories a plan reads (the store, or
    on a large one a slice and what it resembles; SlicePlanner).

    Planners run in APPLY_ORDER; each appends its proposals to `result` and adds the memories it
    takes out of the active set to `claimed`, so that a later kind never proposes them again."""

    store: "MemoryStore"
    result: Plan
    kinds: list[str]
    now: str
    budget: Budget
    expired: list[Memory]  # usable memories past expires_at, sorted by (expires_at, id)
    active: list[Memory]  # usable, not expired, not superseded
    vecs: Any  # unit vectors of `active` (numpy rows), or None when no kind needs them
    index: dict[str, int]  # memory id -> row in `active` / `vecs`
    words: dict[str, set[str]]  # memory id -> content stems
    claimed: set[str]
    generator: Any  # None: load the configured chat model when needed; False: no model
    thresholds: Thresholds = MINILM  # the cosines of the vectors' model, with the user's settings
    # arrays (i, j, cosine), i < j rows of `active`: the pairs to compare, best first, when a
    # slice's scan found them (neighbours); None: every pair of `active` is compared
    near: Any = None
    facets: dict[str, Facets] = field(default_factory=dict)  # memory id -> sameness.facets (FacetsOf)
    word_vectors: "WordVectors | None" = None  # single words under the vectors' model, for dedup
    texts: "WordVectors | None" = None  # texts embedded alike on both sides (query=True), for dedup
    summaries: SummaryTrial = field(default_factory=SummaryTrial)  # the plan's (SlicePlanner's)
    _gen_tried: bool = False

    def pairable(self, keep: Callable[[Memory], bool]) -> list[int]:
        """Rows of `active` that a pair kind compares: those that `keep`."""
        return [i for i, m in enumerate(self.active) if keep(m)]

    def pairs(self, rows: list[int], threshold: float) -> list[tuple[int, int, float]]:
        """(i, j, cosine) of the pairs among `rows` of `active` at `threshold` or closer, best first."""
        if self.near is None:  # every row: the vectors as they are, not a copy
            vecs = self.vecs if len(rows) == len(self.active) else self.vecs[rows]
            return [(rows[x], rows[y], s) for x, y, s in close_pairs(vecs, threshold)]
        import numpy as np

        i, j, cos = self.near
        keep = np.zeros(len(self.active), dtype=bool)
        keep[rows] = True
        chosen = (cos >= threshold) & keep[i] & keep[j]
        return list(zip(i[chosen].tolist(), j[chosen].tolist(), cos[chosen].tolist()))

    def pairs_across(self, rows: list[int], langs: list[str], threshold: float) -> list[tuple[int, int, float]]:
        """`pairs` of two rows whose texts are in two languages (`langs`, one a row of `active`),
        each row with its ACROSS_NEAREST closest in the other languages only: a translation is a
        text's nearest, and e5 puts unrelated texts near 0.86, so a low floor would pair most of
        two languages. Each language's rows against the others': a store in one costs nothing."""
        if self.near is not None:  # a slice: its pairs were found at the pair kinds' lowest threshold
            return [(i, j, s) for i, j, s in self.pairs(rows, threshold) if langs[i] != langs[j]]
        import numpy as np

        by_lang: dict[str, list[int]] = {}
        for i in rows:
            by_lang.setdefault(langs[i], []).append(i)
        if len(by_lang) < 2:
            return []
        found: dict[tuple[int, int], float] = {}
        groups = sorted(by_lang.values(), key=len)
        for k, group in enumerate(groups[:-1]):  # each smaller language against every larger one
            theirs = np.array([i for g in groups[k + 1:] for i in g])
            keep = min(ACROSS_NEAREST, len(theirs))
            for start in range(0, len(group), 1024):
                mine = group[start:start + 1024]
                sims = self.vecs[mine] @ self.vecs[theirs].T
                top = np.argpartition(-sims, keep - 1, axis=1)[:, :keep]
                for r, cols in enumerate(top.tolist()):
                    for c in cols:
                        s = float(sims[r, c])
                        if s >= threshold:
                            found[(min(mine[r], int(theirs[c])), max(mine[r], int(theirs[c])))] = s
        out = [(i, j, s) for (i, j), s in found.items()]
        out.sort(key=lambda p: (-round(p[2], 6), p[0], p[1]))
        return out

    def cosine(self, i: int, j: int) -> float:
        return float(self.vecs[i] @ self.vecs[j])

    @property
    def settings(self):
        return self.store.config

    def writer(self):
        """The chat model that writes merges and summaries, loaded on first use; None if unavailable."""
        if not self._gen_tried:
            self._gen_tried = True
            if self.generator is None:
                self.generator, why = load_generator_quietly(self.store)
                if self.generator is None:
                    self.result.notes.append(f"chat model unavailable: {why}")
        gen = self.generator or None
        if gen is not None:
            self.result.generator = getattr(gen, "name", type(gen).__name__)
        return gen


def _purge_due(ctx: Planning, m: Memory) -> bool:
    """With `--purge`: an expired memory past purge_grace_days."""
    grace_end = timeutil.iso(_parse(ctx.now) - timedelta(days=int(ctx.settings.purge_grace_days)))
    return "purge" in ctx.kinds and m.expires_at <= grace_end


def _plan_expire(ctx: Planning) -> None:
    """Expired memories no dream has stamped yet (and that purge does not take)."""
    for m in ctx.expired:
        if not _purge_due(ctx, m) and m.meta.get("expired_at") != m.expires_at:
            ctx.result.proposals.append(Proposal(
                "expire", [m.id], f"expires_at {m.expires_at} has passed",
                fingerprints={m.id: _fingerprint(m)}))


def _plan_purge(ctx: Planning) -> None:
    """Expired memories past the grace period, deleted (only when purge is asked for)."""
    for m in ctx.expired:
        if _purge_due(ctx, m):
            ctx.result.proposals.append(Proposal(
                "purge", [m.id],
                f"expired {m.expires_at[:10]}, past the {ctx.settings.purge_grace_days}-day grace",
                fingerprints={m.id: _fingerprint(m)}))


class FacetsOf(dict):
    """Memory id -> sameness.facets of its text and meta, each computed when first asked (as _Stems)."""

    def __init__(self, memories: Iterable[Memory]):
        super().__init__()
        self._memories = {m.id: m for m in memories}

    def __missing__(self, memory_id: str) -> Facets:
        m = self._memories[memory_id]
        found = self[memory_id] = sameness.facets(m.text, m.meta)
        return found


class WordVectors:
    """Single words as the store's model embeds them, asked for in batches and kept for the plan:
    dedup compares the words two near-duplicates do not share ("bought" / "purchased"). With
    `query`, texts embedded alike on both sides (e5's "query: "), for pairs in two languages."""

    def __init__(self, store: "MemoryStore", query: bool = False):
        self.store = store
        self.query = query
        self.vectors: dict[str, Any] = {}
        self.failed = False

    def want(self, words: Iterable[str]) -> None:
        import numpy as np

        missing = [w for w in dict.fromkeys(words) if w not in self.vectors]
        if not missing or self.failed:
            return
        try:
            embedder = self.store.embedder
            query = self.query and getattr(embedder, "query_aware", False)
            found = np.array(embedder.embed(missing, query=True) if query else embedder.embed(missing),  # type: ignore[call-arg]
                             dtype=np.float32)
        except PmemError:  # no model: words meet only by their stems
            self.failed = True
            return
        found /= np.maximum(np.linalg.norm(found, axis=1, keepdims=True), 1e-12)
        self.vectors.update(zip(missing, found))

    def cosine(self, x: str, y: str) -> float:
        self.want((x, y))
        if self.failed:
            return -1.0
        return float(self.vectors[x] @ self.vectors[y])


def dedup_rule(thresholds: Thresholds, settings) -> sameness.Rule:
    """The dedup rule of a model's thresholds and the user's settings
    (docs/decisions/0048-dedup-by-meaning.md)."""
    return sameness.Rule(auto=thresholds.dedup, review=thresholds.dedup, lexical=float(settings.dedup_lexical),
                         synonym=thresholds.synonym, spare=DEDUP_SPARE, close=thresholds.dedup_close,
                         bilingual=thresholds.dedup_bilingual, bilingual_floor=thresholds.dedup_bilingual_floor)


ACROSS_NEAREST = 3  # texts of other languages a memory is compared with by Rule.bilingual (pairs_across)
DEDUP_SPARE = 1  # stems of a near-duplicate pair that may stay unmatched ("a" new laptop / "the" laptop)


def _plan_dedup(ctx: Planning) -> None:
    """Near-duplicates of one tier: close vectors, the same names, numbers, dates and speaker, and
    the rest in other words at most (pmem.dream.sameness). A pair that passes all but the last
    is proposed as a "review": applied only when a person says yes."""
    if ctx.vecs is None:
        return
    active, facets = ctx.active, ctx.facets
    rule = dedup_rule(ctx.thresholds, ctx.settings)
    rows = list(range(len(active)))
    found = ctx.pairs(rows, rule.review)
    symmetric: dict[tuple[int, int], float] = {}
    if rule.bilingual <= 1.0 and rule.bilingual_floor < rule.review and ctx.texts is not None \
            and ctx.store.keywords.languages():  # a store in English alone has no pair in two languages
        from .. import stemming

        langs = [stemming.detect_language(m.text) for m in active]
        seen = {(i, j) for i, j, _ in found}
        found += [p for p in ctx.pairs_across(rows, langs, rule.bilingual_floor) if (p[0], p[1]) not in seen]
        found.sort(key=lambda p: (-round(p[2], 6), p[0], p[1]))
    candidates = []
    for i, j, s in found:
        a, b = active[i], active[j]
        if a.tier == b.tier and sameness.differs(facets[a.id], facets[b.id]) is None:
            candidates.append((i, j, s))
    if ctx.texts is not None and rule.bilingual <= 1.0:  # two languages: the texts embedded alike, one batch
        across = [(i, j) for i, j, _ in candidates
                  if sameness.two_languages(facets[active[i].id], facets[active[j].id])]
        if across:
            ctx.texts.want(active[x].text for pair in across for x in pair)
            symmetric = {(i, j): ctx.texts.cosine(active[i].text, active[j].text) for i, j in across}
    words = ctx.word_vectors
    if words is not None:  # one batch for the words the candidates do not share
        wanted = []
        for i, j, _ in candidates:
            fa, fb = facets[active[i].id], facets[active[j].id]
            if (i, j) in symmetric:  # two languages: judged on the texts, not their words
                continue
            x, y = sameness.rest(fa, fb)
            only_a, only_b = x - y, y - x
            if only_a and only_b and max(len(only_a), len(only_b)) <= sameness.ALIGN_MAX:
                wanted += [fa.forms[x] for x in only_a] + [fb.forms[y] for y in only_b]
        words.want(wanted)
    edges: list[tuple[int, int, float, str]] = []
    asks: list[tuple[int, int, float, str]] = []
    for i, j, s in candidates:
        kind, why = sameness.verdict(facets[active[i].id], facets[active[j].id], s, rule,
                                     words.cosine if words is not None else None, symmetric.get((i, j)))
        if kind is None:  # a pair in two languages below the dedup cosine, and not one fact
            continue
        (edges if kind == "dedup" else asks).append((i, j, s, why))
    # Groups by complete linkage on what must stay equal: A ~ B and B ~ C join A and C only when
    # A and C do not differ too (A said by Dana, C by Ravi, B by nobody).
    root: dict[int, int] = {}  # row -> the first row of its group
    groups: dict[int, list[int]] = {}  # first row -> the group's rows
    best: dict[int, float] = {}  # first row -> the group's closest pair
    for i, j, s, _ in edges:  # best pair first
        ri, rj = root.get(i, i), root.get(j, j)
        gi, gj = groups.get(ri, [i]), groups.get(rj, [j])
        if ri == rj or any(sameness.differs(facets[active[x].id], facets[active[y].id]) for x in gi for y in gj):
            continue
        keep, gone = min(ri, rj), max(ri, rj)
        groups[keep] = gi + gj
        groups.pop(gone, None)
        best[keep] = max(best.pop(gone, s), best.get(keep, s), s)
        for x in groups[keep]:
            root[x] = keep
    kept: set[str] = set()
    for first, group in sorted(groups.items(), key=lambda g: min(active[i].id for i in g[1])):
        members = [active[i] for i in group]
        canon = max(members, key=lambda m: _informative_key(m, ctx.words[m.id]))
        others = sorted((m for m in members if m.id != canon.id), key=lambda m: (m.created_at, m.id))
        score = best[first]
        ctx.result.proposals.append(Proposal(
            "dedup", [canon.id] + [m.id for m in others],
            f"{len(members)} near-duplicates (cosine up to {score:.3f}); keeping the most informative",
            result_text=canon.text, target=canon.id, score=score,
            details={"tags": sorted(set().union(*(m.tags for m in members))),
                     "created_at": min(m.created_at for m in members)},
            fingerprints={m.id: _fingerprint(m) for m in members}))
        ctx.claimed.update(m.id for m in others)
        kept.add(canon.id)
    # Asked, not applied: a pair left unanswered keeps both memories, and claims neither. A pair
    # with the memory a dedup keeps is asked now, against it (the next dream would ask it anyway);
    # one with a memory a dedup takes is not (its question is the kept one's). A pair a person
    # left unaccepted in an applied dream is not asked again while both stay as they were.
    declined = {tuple(e) for e in ctx.result.declined}
    for i, j, s, why in asks:
        pair = [active[i], active[j]]
        if any(m.id in ctx.claimed for m in pair) or tuple(declined_key(pair)) in declined:
            continue
        canon = next((m for m in pair if m.id in kept), None) or \
            max(pair, key=lambda m: _informative_key(m, ctx.words[m.id]))
        other = pair[1] if canon is pair[0] else pair[0]
        ctx.result.proposals.append(Proposal(
            "review", [canon.id, other.id], f"one fact twice? {why}", result_text=canon.text, target=canon.id,
            score=s, details={"tags": sorted(set(canon.tags) | set(other.tags)),
                              "created_at": min(canon.created_at, other.created_at)},
            fingerprints={m.id: _fingerprint(m) for m in pair}))


def _plan_supersede(ctx: Planning) -> None:
    """Older facts replaced by newer ones: the extraction's rule, and same subject / new value."""
    active, claimed = ctx.active, ctx.claimed
    facts = ctx.pairable(lambda m: m.id not in claimed and m.tier != "episodic")
    when = {m.id: (m.valid_from or m.created_at) for m in active}
    found: list[tuple[Memory, Memory, str]] = []
    if ctx.vecs is not None and len(facts) > 1:
        for a, b, cos in ctx.pairs(facts, ctx.thresholds.supersede):
            x, y = active[a], active[b]
            if when[x.id] == when[y.id]:
                continue
            older, newer = (x, y) if when[x.id] < when[y.id] else (y, x)
            if decide(newer.text, older.text, cos, None, ctx.thresholds,
                      stems=(ctx.words[newer.id], ctx.words[older.id])) == "supersede":
                found.append((older, newer, f"the extraction rule: a changed fact (cosine {cos:.2f})"))
    by_subject: dict[str, list[tuple[Memory, str]]] = {}
    for i in facts:
        sv = subject_value(active[i].text)
        if sv:
            by_subject.setdefault(sv[0], []).append((active[i], sv[1]))
    for subject in sorted(by_subject):
        group = sorted(by_subject[subject], key=lambda f: (when[f[0].id], f[0].id))
        newest, value = group[-1]
        for old, old_value in group[:-1]:
            if old_value != value and when[old.id] < when[newest.id]:
                found.append((old, newest, f"same subject '{subject}': '{value}' replaces '{old_value}'"))
    for older, newer, why in found:
        if older.id in claimed:
            continue
        ctx.result.proposals.append(Proposal(
            "supersede", [older.id, newer.id], why, result_text=newer.text, target=newer.id,
            fingerprints={older.id: _fingerprint(older), newer.id: _fingerprint(newer)}))
        claimed.add(older.id)


def _plan_merge(ctx: Planning) -> None:
    """Archival memories about one subject, written as one by the chat model and grounded."""
    if ctx.vecs is None:
        return
    active, claimed = ctx.active, ctx.claimed
    threshold = ctx.thresholds.merge
    # Turns of a conversation (thread members) are left to compress, whose summary stands in
    # their thread for their span: merging them lost speakers and content
    # (docs/decisions/0049-merges-keep-speakers.md).
    pool = ctx.pairable(lambda m: m.id not in claimed and m.tier == "archival" and not m.derived_from
                        and m.thread is None)
    if len(pool) < 2:
        return
    # who said it alone (what facets() reads it from), not every member's facets: most are never merged
    speaker = {i: sameness.speaker_of(active[i].text, active[i].meta) for i in pool}

    def one_voice(rows: list[int]) -> bool:  # members said by different people are never merged
        return len({speaker[x] for x in rows} - {None}) <= 1

    cluster_of: dict[int, int] = {}
    clusters: list[list[int]] = []
    for i, j, _ in ctx.pairs(pool, threshold):  # best pair first; complete linkage
        ci, cj = cluster_of.get(i), cluster_of.get(j)
        if ci is None and cj is None:
            if one_voice([i, j]):
                cluster_of[i] = cluster_of[j] = len(clusters)
                clusters.append([i, j])
            continue
        if ci is not None and cj is not None:
            continue
        c, new = (ci, j) if ci is not None else (cj, i)
        members = clusters[c]
        if len(members) >= MERGE_MAX or not one_voice(members + [new]):
            continue
        if all(ctx.cosine(x, new) >= threshold for x in members):
            members.append(new)
            cluster_of[new] = c
    groups = [sorted((active[i] for i in members), key=lambda m: (m.created_at, m.id))
              for members in sorted(clusters, key=lambda c: min(active[i].id for i in c))]
    with closing(_written(ctx, "merge", [[m.text for m in ms] for ms in groups])) as written:
        for ms in groups:
            if ctx.budget.over() or not _merge_one(ctx, ms, written):
                ctx.result.complete = False
                ctx.result.notes.append("time limit reached while planning merges")
                return


def _merge_one(ctx: Planning, ms: list[Memory], written: Iterator[tuple[str | None, str]]) -> bool:
    """The merge of `ms` proposed, or dropped with its reason; False (nothing planned) when the
    time limit passed before its text was begun."""
    result, claimed = ctx.result, ctx.claimed
    gen = ctx.writer()
    ids = [m.id for m in ms]
    if gen is None:
        result.dropped.append({"kind": "merge", "members": ids, "reason": "no chat model to write the merge"})
        return True
    answer = next(written, None)
    if answer is None:
        return False
    text, why = answer
    if text is None:
        result.dropped.append({"kind": "merge", "members": ids, "reason": why})
        return True
    text = _in_their_voice(text, ms, ctx.facets)
    ms, lost = _keeping_all_of(text, ms)
    ids = [m.id for m in ms]
    if len(ms) < 2:
        result.dropped.append({"kind": "merge", "members": [m.id for m in ms] + sorted(lost),
                               "reason": "would drop what its members say: " + _lost_words(lost), "text": text})
        return True
    ok, why = grounded(ctx.store, text, [m.text for m in ms])
    if not ok:
        result.dropped.append({"kind": "merge", "members": ids + sorted(lost), "reason": f"not grounded: {why}",
                               "text": text})
        return True
    if lost:
        result.notes.append(f"a merge keeps out {len(lost)} member(s) whose words it drops: {_lost_words(lost)}")
    score = min(ctx.cosine(ctx.index[a.id], ctx.index[b.id]) for a in ms for b in ms if a.id < b.id)
    result.proposals.append(Proposal(
        "merge", ids, f"{len(ms)} related memories (cosine >= {score:.3f}) written as one by "
        f"{getattr(gen, 'name', 'the chat model')}; grounded",
        result_text=text, score=score,
        details={"tags": sorted(set().union(*(m.tags for m in ms))), "tier": "archival",
                 "created_at": ms[0].created_at},
        fingerprints={m.id: _fingerprint(m) for m in ms}))
    claimed.update(ids)
    return True


def _in_their_voice(text: str, members: list[Memory], facets: dict[str, Facets]) -> str:
    """A merge of memories one speaker said, labelled as theirs were ("Audrey: ...")."""
    said = {facets[m.id].speaker for m in members}
    if len(said) != 1 or None in said:
        return text
    who = said.pop()
    labelled = all(m.text.startswith(f"{who}: ") for m in members)
    return f"{who}: {text}" if labelled and not text.startswith(f"{who}: ") else text


def _keeping_all_of(text: str, members: list[Memory]) -> tuple[list[Memory], dict[str, list[str]]]:
    """The members every content word of which the text still holds, and for the others the words
    it drops (the grounding gate turned around: a merge never drops what a member says)."""
    have = sameness.content(text)
    kept, lost = [], {}
    for m in members:
        missing = sameness.content(m.text) - have
        if missing:
            lost[m.id] = sorted(missing)
        else:
            kept.append(m)
    return kept, lost


def _lost_words(lost: dict[str, list[str]]) -> str:
    return "; ".join(f"{mid}: {', '.join(words[:5])}" for mid, words in sorted(lost.items()))


def _model_text(gen, kind: str, texts: list[str]) -> tuple[str | None, str]:
    try:
        out = gen.generate_json(prompts.dream_messages(kind, texts), prompts.DREAM_SCHEMA, max_tokens=256)
    except PmemError as exc:
        return None, f"the chat model failed: {exc}"
    text = " ".join(str((out or {}).get("text", "")).split())
    if not text:
        return None, "the chat model wrote nothing"
    return text, ""


def _written(ctx: Planning, kind: str, groups: list[list[str]]) -> Generator[tuple[str | None, str], None, None]:
    """The chat model's (text, why) for each group of notes, in order, asked when the planner
    first wants one; it ends early once the time limit has passed. With the model's lanes
    (LlamaGenerator.lanes: one per thread pmem may use, each a context of its own on one core)
    every lane writes the next group not yet begun while the planner checks the answers before
    (a long answer holds up no other lane), and none begins once the time limit has passed. An
    answer does not depend on the lane that writes it (LlamaGenerator._prepare): the plan is the
    one a single lane makes."""
    gen = ctx.writer()
    lanes = 1
    if hasattr(gen, "lanes"):
        lanes = gen.lanes(int(ctx.settings.threads) or default_threads())
    if lanes < 2:  # the planner checks the time limit before it asks for each
        for texts in groups:
            yield _model_text(gen, kind, texts)
        return
    from concurrent.futures import ThreadPoolExecutor

    def ask(texts: list[str]) -> tuple[str | None, str] | None:
        return None if ctx.budget.over() else _model_text(gen, kind, texts)

    with ThreadPoolExecutor(lanes, thread_name_prefix="pmem-dream") as pool:
        futures = [pool.submit(ask, texts) for texts in groups]
        try:
            for future in futures:
                answer = future.result()
                if answer is None:
                    return
                yield answer
        finally:
            for future in futures:
                future.cancel()


def _compress_groups(ctx: Planning, days: int) -> list[list[Memory]]:
    """Old episodic memories grouped by day, then by topic (adjacent similarity)."""
    import numpy as np

    vecs, index = ctx.vecs, ctx.index
    cutoff = timeutil.iso(_parse(ctx.now) - timedelta(days=days))
    candidates = [m for m in ctx.active if m.tier == "episodic" and m.id not in ctx.claimed
                  and not m.derived_from and not m.pinned and m.created_at < cutoff]
    # Time order; memories stored with the same timestamp (turns of one conversation) keep the
    # order they were stored in.
    seq = ctx.store.storage_order(m.id for m in candidates)
    old = sorted(candidates, key=lambda m: (m.created_at, seq.get(m.id, 0), m.id))
    by_day: dict[tuple[str, str], list[Memory]] = {}
    for m in old:
        by_day.setdefault((m.created_at[:10], m.thread or ""), []).append(m)  # a summary stays in one thread
    groups: list[list[Memory]] = []
    for day in sorted(by_day):
        ms = by_day[day]
        if len(ms) < 2:
            continue
        segments: list[list[Memory]] = [[ms[0]]]
        centroid = vecs[index[ms[0].id]].copy()
        for m in ms[1:]:
            v = vecs[index[m.id]]
            norm = float(np.linalg.norm(centroid)) or 1.0
            similar = float(v @ centroid) / norm >= ctx.thresholds.compress_topic
            if similar and len(segments[-1]) < COMPRESS_MAX:
                segments[-1].append(m)
                centroid = centroid + v
            else:
                segments.append([m])
                centroid = v.copy()
        # No singletons inside a day: they join the segment before (or after), so every old
        # episodic memory of a day with two or more is compressed and a second dream finds none.
        merged: list[list[Memory]] = []
        for seg in segments:
            if len(seg) == 1 and merged:
                merged[-1].append(seg[0])
            else:
                merged.append(seg)
        if len(merged) > 1 and len(merged[0]) == 1:
            merged[1] = merged[0] + merged[1]
            merged = merged[1:]
        groups.extend(merged)
    return groups


def _plan_compress(ctx: Planning) -> None:
    """Old episodes of one day and topic, summarised by the chat model (grounded) or extractively."""
    if ctx.vecs is None:
        return
    result = ctx.result
    days = int(ctx.settings.compress_after_days)
    groups = _compress_groups(ctx, days)
    trial = ctx.summaries
    # The trial's groups are asked for first and alone, so that a model it refuses writes no more
    # than they; after it the lanes run ahead of the planner's checks, and stop when one refuses.
    left = max(0, SUMMARY_TRIAL - trial.asked) if trial.asking else 0
    for part in (groups[:left], groups[left:]):
        written = _written(ctx, "compress", [[m.text for m in ms] for ms in part]) if trial.asking else None
        try:
            for ms in part:
                if ctx.budget.over() or not _compress_one(ctx, ms, days, written, trial):
                    result.complete = False
                    result.notes.append("time limit reached while planning compression")
                    return
                if written is not None and trial.judged():
                    written.close()  # the answers not begun are cancelled
                    written = None
                    result.notes.append(
                        f"the chat model's summaries kept too few facts ({trial.kept} of {trial.asked} kept "
                        f"{SUMMARY_COVER:.0%} of their episode's content words): this dream's other summaries "
                        "are extractive")
        finally:
            if written is not None:
                written.close()


def summary_cover(text: str, sources: list[str]) -> float:
    """The share of what the sources say (sameness.content: content words in their language, and
    numbers, as a merge keeps all of them) that `text` still says."""
    src = set().union(*map(sameness.content, sources))
    return len(src & sameness.content(text)) / len(src) if src else 1.0


def _summary_refused(ctx: Planning, text: str, texts: list[str], tokens: int) -> str:
    """Why the chat model's summary of an episode of `tokens` tokens is not taken ("" when it is):
    it keeps under SUMMARY_COVER of the episode's content words, over COMPRESS_KEEP of its
    tokens, or is not grounded in it (the cheap checks first)."""
    cover = summary_cover(text, texts)
    if cover < SUMMARY_COVER:
        return f"the model's summary kept {cover:.0%} of the episode's content words, under {SUMMARY_COVER:.0%}"
    if _tokens(text) > COMPRESS_KEEP * tokens:
        return f"the model's summary kept over {COMPRESS_KEEP:.0%} of the tokens"
    ok, why = grounded(ctx.store, text, texts)
    return "" if ok else why


def _compress_one(ctx: Planning, ms: list[Memory], days: int, written: Iterator[tuple[str | None, str]] | None,
                  trial: SummaryTrial) -> bool:
    """The summary of one old episode proposed: the chat model's where it is grounded, short
    enough and keeps SUMMARY_COVER of the episode's content words, else an extractive one (also
    when `written` is None: the trial refused the model); False (nothing planned) when the time
    limit passed before the model's text was begun."""
    result = ctx.result
    ids = [m.id for m in ms]
    texts = [m.text for m in ms]
    day = ms[0].created_at[:10]
    before = sum(_tokens(t) for t in texts)
    gen = ctx.writer()
    text, how = None, ""
    if gen is not None and written is None:
        how = f"extractive summary (the chat model's summaries: {trial.kept} of {trial.asked} kept)"
    elif gen is not None:
        answer = next(written, None)
        if answer is None:
            return False
        text, why = answer
        trial.asked += 1
        if text is not None:
            why = _summary_refused(ctx, text, texts, before)
            if why:
                text = None
            else:
                how = f"summary by {getattr(gen, 'name', 'the chat model')}, grounded"
                trial.kept += 1
        if text is None:
            how = f"extractive summary (model output refused: {why})"
    else:
        how = "extractive summary (no chat model)"
    if text is None:
        text = extractive_summary(texts, prefix=f"{day}: ")
    result.proposals.append(Proposal(
        "compress", ids, f"{len(ms)} episodic memories of {day}, older than {days} days; {how}; "
        f"{before} -> {_tokens(text)} tokens",
        result_text=text,
        details={"tags": sorted(set().union(*(m.tags for m in ms))), "tier": "episodic",
                 "created_at": ms[0].created_at, "extractive": how.startswith("extractive")},
        fingerprints={m.id: _fingerprint(m) for m in ms}))
    ctx.claimed.update(ids)
    return True


Planner = Callable[[Planning], None]

# One planner per kind, run in this order (APPLY_ORDER), each seeing what the earlier ones claimed.
PLANNERS: dict[str, Planner] = {
    "expire": _plan_expire,
    "purge": _plan_purge,
    "dedup": _plan_dedup,
    "supersede": _plan_supersede,
    "merge": _plan_merge,
    "compress": _plan_compress,
}
_NEEDS_VECTORS = ("dedup", "supersede", "merge", "compress")

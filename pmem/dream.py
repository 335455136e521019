"""Consolidation, like sleep: plan what to tidy, let a person review it, then apply it reversibly.

`plan()` reads the store and proposes; it never writes. `apply()` backs the database up, then
applies each accepted proposal in its own transaction (a kill -9 leaves every proposal either
applied with all its events or not at all), and records every event of the run under ONE
operation, so one `pmem undo` takes the whole dream back.

Proposal kinds, in the order they are planned and applied:

- expire    memories past expires_at that no dream has recorded yet: stamped meta["expired_at"]
            (they already left search at expires_at; `pmem restore` brings them back).
- purge     with `--purge` only: expired memories past purge_grace_days are deleted (after the
            automatic backup; the deletion is an event, so `pmem undo` restores them).
- dedup     near-duplicates of the same tier: cosine >= dedup_threshold AND content-word Jaccard
            >= dedup_lexical AND the same numbers AND not one content word swapped for another
            (sister / brother: another fact). One canonical memory stays (most distinct
            content words, then longest, then newest), gaining the union of tags and the earliest
            created_at; the others get merged_into it.
- supersede two rules over non-episodic memories, the older fact getting valid_to / superseded_by
            the newer (MemoryStore.supersede): (1) the extraction's rule (pmem.extract.decide, no
            model judge) for pairs at cosine >= SUPERSEDE_COSINE, e.g. the same statement with a
            different number; (2) "<subject> is|are|was|were|= <value>" or "<subject>: <value>"
            with the same subject (>= 2 content words) and a different short value (<= 6 words).
- merge     archival memories about the same subject (cosine >= merge_threshold, complete linkage,
            at most MERGE_MAX each) written as one memory by the chat model; the text must pass
            the extraction grounding gate against the members, else the proposal is dropped.
- compress  episodic memories older than compress_after_days, grouped by day and then by topic
            (adjacent similarity), summarised by the chat model (grounded) or, when the model is
            unavailable or its summary is not grounded, extractively (members' most informative
            sentences, verbatim). Members get merged_into the summary (episodic tier).

Pinned (core) memories are never touched unless named in `include`. Memories a dream wrote
(derived_from not empty) are not merged or compressed again, which with the rules above makes
a second plan right after an applied one empty.

On a store of INCREMENTAL_FROM live memories and more, a plan after an applied dream reads only
what changed since that dream's plan (events after its mark), what the changed memories resemble,
old facts of the same subject, expired memories and old episodes (`_what_changed`): on 100,000
memories with 1,000 new, 1-4 s instead of ~60 s, with the same proposals (benchmarks/README.md).

Every cosine above is on the scale of the model the vectors come from: the thresholds are that
model's (pmem.thresholds, through MemoryStore.thresholds()); the dedup_threshold and
merge_threshold settings override them when the user sets them.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from . import prompts, secretscan, timeutil
from .errors import PmemError, UsageError
from .extract import decide
from .grounding import check_grounding
from .records import Memory
from .text import WORD, content_stems, jaccard, numbers, speaker_sentences
from .thresholds import MINILM, Thresholds

if TYPE_CHECKING:
    from .store import MemoryStore

KINDS = ("dedup", "merge", "compress", "expire", "supersede", "purge")
DEFAULT_KINDS = ("dedup", "merge", "compress", "expire", "supersede")  # purge only when asked
APPLY_ORDER = ("expire", "purge", "dedup", "supersede", "merge", "compress")

MERGE_MAX = 4           # members of one merge proposal
COMPRESS_MAX = 12       # members of one summary
COMPRESS_TOPIC = MINILM.compress_topic  # 0.35 on MiniLM's scale (each model: pmem.thresholds)
COMPRESS_KEEP = 0.6     # share of a group's tokens an extractive summary may keep
SUBJECT_MIN_WORDS = 2
VALUE_MAX_WORDS = 6

Progress = Callable[[int, int], None]

_COPULA = re.compile(r"^(?P<subject>.+?)\s+(?:is|are|was|were|=)\s+(?P<value>.+)$", re.IGNORECASE)
_COLON = re.compile(r"^(?P<subject>[^:]{2,60}):\s+(?P<value>.+)$")


# -- records ------------------------------------------------------------------------------

@dataclass
class Proposal:
    """One change a dream suggests. `id` is a hash of kind and members: stable across runs."""

    kind: str
    members: list[str]
    reason: str
    result_text: str | None = None
    target: str | None = None  # dedup: the canonical memory; supersede: the newer fact
    score: float | None = None
    details: dict[str, Any] = field(default_factory=dict)
    fingerprints: dict[str, str] = field(default_factory=dict)
    id: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown proposal kind {self.kind!r}")
        if not self.id:
            key = self.kind + "\x00" + "\x00".join(self.members)
            self.id = hashlib.sha1(key.encode("utf-8")).hexdigest()[:12]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if d["score"] is not None:
            d["score"] = round(d["score"], 4)
        return d


@dataclass
class Plan:
    proposals: list[Proposal] = field(default_factory=list)
    created_at: str = ""
    kinds: list[str] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    generator: str | None = None
    notes: list[str] = field(default_factory=list)
    dropped: list[dict[str, Any]] = field(default_factory=list)  # proposals the gate refused
    considered: int = 0
    complete: bool = True
    elapsed_s: float = 0.0
    since: int | None = None  # compared only what changed after this event (None: everything)
    changed: int | None = None  # how many memories had changed since then
    mark: int = 0  # the newest event when the plan was made (what an applied dream has dealt with)
    basis: str = ""  # the model and thresholds its pairs qualified under (_basis)
    undone: int = 0  # operations undone when the plan was made (MemoryStore.set_dream_mark)
    waiting: list[str] = field(default_factory=list)  # merges still waiting for a chat model (_compare_large)
    revisit: list[str] = field(default_factory=list)  # memories a later slice left to the next dream
    through: int | None = None  # stopped before comparing the memories stored after this row
    left: int = 0  # how many memories it had not compared then
    resume: bool = False  # the pair kinds stopped where the next dream can go on (through, revisit)

    def counts(self) -> dict[str, int]:
        out = {k: 0 for k in KINDS}
        for p in self.proposals:
            out[p.kind] += 1
        return out

    def get(self, proposal_id: str) -> Proposal:
        for p in self.proposals:
            if p.id == proposal_id or (len(proposal_id) >= 4 and p.id.startswith(proposal_id)):
                return p
        raise UsageError(f"no proposal {proposal_id!r} in this plan")

    def to_dict(self) -> dict[str, Any]:
        return {
            "created_at": self.created_at,
            "kinds": list(self.kinds),
            "settings": dict(self.settings),
            "generator": self.generator,
            "considered": self.considered,
            "complete": self.complete,
            "elapsed_s": round(self.elapsed_s, 3),
            "since_event": self.since,
            "changed": self.changed,
            "mark_event": self.mark,
            "not_compared": self.left,
            "counts": self.counts(),
            "proposals": [p.to_dict() for p in self.proposals],
            "dropped": list(self.dropped),
            "notes": list(self.notes),
        }


@dataclass
class ApplyResult:
    op_id: str | None = None
    applied: list[str] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    created: dict[str, str] = field(default_factory=dict)  # proposal id -> new memory id
    backup: str | None = None
    complete: bool = True
    elapsed_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["elapsed_s"] = round(self.elapsed_s, 3)
        return d


# -- text helpers -------------------------------------------------------------------------

def _tokens(text: str) -> int:
    from .recall import estimate_tokens

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


def _fingerprint(m: Memory) -> str:
    """What a proposal depends on: text and whether the memory is still active."""
    key = json.dumps([m.text, m.merged_into, m.forgotten_at, m.valid_to, m.expires_at, m.pinned],
                     ensure_ascii=False)
    return hashlib.sha1(key.encode("utf-8")).hexdigest()[:12]


def _parse(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


# -- grounding ----------------------------------------------------------------------------

def grounded(store: "MemoryStore", text: str, sources: list[str]) -> tuple[bool, str]:
    """The extraction's grounding gate (pmem.grounding) for a text a dream wrote from `sources`."""
    g = check_grounding(text, sources, embedder=store.embedder, min_support=float(store.config.extract_min_support),
                        min_similarity=store.thresholds().grounding)
    return bool(g.ok), g.reason


# -- planning -----------------------------------------------------------------------------

class _Budget:
    def __init__(self, max_seconds: float | None):
        self.start = time.monotonic()
        self.deadline = None if max_seconds is None else self.start + max_seconds

    def over(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def elapsed(self) -> float:
        return time.monotonic() - self.start


def _vectors(store: "MemoryStore", memories: list[Memory]):
    """Unit vectors (numpy float32 rows) for `memories`, in order; rows of zeros where missing."""
    import numpy as np

    _, dim = store.vector_model()
    if not memories or not dim:
        return np.zeros((len(memories), 1), dtype=np.float32)
    blobs = store.vectors(m.id for m in memories)
    out = np.zeros((len(memories), dim), dtype=np.float32)
    for i, m in enumerate(memories):
        blob = blobs.get(m.id)
        if blob is not None and len(blob) == dim * 4:
            out[i] = np.frombuffer(blob, dtype="<f4")
    return out


PAIRS_EXACT_MAX = 20_000  # memories above which pairs are found by LSH instead of comparing all


def _pairs(vecs, threshold: float) -> list[tuple[int, int, float]]:
    """(i, j, cosine) with i < j and cosine >= threshold, best first."""
    if len(vecs) > PAIRS_EXACT_MAX:
        return _pairs_lsh(vecs, threshold)
    return _pairs_exact(vecs, threshold)


def _hits(mask):
    """(rows, columns) of the True cells of a 2-d boolean array, in row order: np.nonzero's
    answer, from a 1-d search that is ~14 times faster on a large, mostly False mask."""
    import numpy as np

    return np.divmod(np.flatnonzero(mask), mask.shape[1])


def _pairs_exact(vecs, threshold: float) -> list[tuple[int, int, float]]:
    """Every pair compared, in blocks to bound memory."""
    n = len(vecs)
    out: list[tuple[int, int, float]] = []
    block = max(1, min(1024, 2**26 // max(n, 1)))  # rows per product: at most ~256 MB of float32
    for start in range(0, n, block):
        sims = vecs[start:start + block] @ vecs[start:].T  # the upper triangle only
        rows, cols = _hits(sims >= threshold)
        for r, c in zip(rows.tolist(), cols.tolist()):
            if c > r:
                out.append((start + r, start + c, float(sims[r, c])))
    out.sort(key=lambda p: (-round(p[2], 6), p[0], p[1]))
    return out


LSH_LOW = 2000  # vectors nearest the centre, compared with every vector exactly (see _pairs_lsh)
LSH_LAST: dict[str, Any] = {}  # how the last _pairs_lsh went: space, bits, tables, pairs compared


def _pairs_lsh(vecs, threshold: float, miss: float = 0.001, space: str | None = None) -> list[tuple[int, int, float]]:
    """_pairs without comparing all pairs (100,000 memories: 5e9): random-hyperplane LSH, seeded.

    Two vectors at angle a share a b-bit bucket of one table with probability (1 - a/pi)^b;
    enough tables are used that a pair at the threshold is missed with probability `miss`
    (closer pairs less often), and only pairs sharing a bucket are compared exactly.

    A model whose vectors all lean one way (multilingual-e5-small: unrelated texts at cosine
    ~0.86) puts unrelated pairs in one bucket nearly as often as close ones, and the tables cost
    more than all pairs. Hashing the vectors minus their mean fixes that, with a bound that keeps
    the guarantee: for centred vectors of norms >= r, a pair at cosine t is at centred cosine >=
    1 - (1 - t) / r^2 (law of cosines; the distance between them does not change). The LSH_LOW
    vectors nearest the mean set r and are compared with every vector exactly. Of the two
    spaces and 6-16 bits, the cheapest by expected comparisons (sampled) is used, unless `space`
    ("raw" or "centred") says which; all pairs (one matrix product per block) when that is
    cheaper still, as for e5's thresholds, which sit close to where unrelated pairs are."""
    import numpy as np

    n, dim = vecs.shape
    rng = np.random.default_rng(0)
    sample = rng.choice(n, size=min(n, 4096), replace=False)
    center = vecs[sample].mean(axis=0)
    centred = vecs - center
    norms = np.linalg.norm(centred, axis=1)
    low = np.argsort(norms, kind="stable")[:min(LSH_LOW, n)]
    r = float(norms[low[-1]]) if len(low) < n else 0.0
    a, b = sample[: len(sample) // 2], sample[len(sample) // 2: 2 * (len(sample) // 2)]

    def typical(x) -> float:  # the median cosine of random pairs: where unrelated pairs sit
        xa, xb = x[a], x[b]
        cos = np.sum(xa * xb, axis=1) / np.maximum(np.linalg.norm(xa, axis=1) * np.linalg.norm(xb, axis=1), 1e-12)
        return float(np.median(cos))

    def plan(near_cos: float, far_cos: float) -> tuple[float, int, int]:
        near = 1 - math.acos(max(-1.0, min(1.0, near_cos))) / math.pi
        far = 1 - math.acos(max(-1.0, min(1.0, far_cos))) / math.pi
        best = (math.inf, 0, 0)
        for bits in range(6, 17):
            same = near ** bits
            tables = max(1, math.ceil(math.log(miss) / math.log(1 - same))) if same < 1 else 1
            # pairs compared in small bucket blocks cost ~2x a pair of one large matrix product,
            # and each table hashes, sorts and walks its buckets (~64 pair-equivalents a vector)
            cost = tables * (n * n * far ** bits + 64 * n)
            best = min(best, (cost, bits, tables))
        return best

    raw = plan(threshold, typical(vecs))
    bound = 1 - (1 - threshold) / (r * r) if r > 0 else -1.0
    centre = plan(bound, typical(centred)) if bound > 0 else (math.inf, 0, 0)
    centre = (centre[0] + len(low) * n, centre[1], centre[2])  # the low vectors' exact comparisons
    use_centre = centre[0] < raw[0] if space is None else space == "centred" and bound > 0
    cost, bits, tables = centre if use_centre else raw
    LSH_LAST.clear()
    LSH_LAST.update(space="centred" if use_centre else "raw", bits=bits, tables=tables, compared=0)
    if cost >= n * n / 2 and space is None:
        LSH_LAST.update(space="all pairs", compared=n * (n - 1) // 2)
        return _pairs_exact(vecs, threshold)  # LSH would compare more than all pairs
    hashed = centred if use_centre else vecs
    weights = 1 << np.arange(bits)
    found: dict[tuple[int, int], float] = {}

    def keep(rows, cols, sims, left, right) -> None:
        for x, y in zip(rows.tolist(), cols.tolist()):
            i, j = int(left[x]), int(right[y])
            if i != j:
                found[(min(i, j), max(i, j))] = float(sims[x, y])

    if use_centre:
        step = max(1, min(256, 2**26 // n))
        for start in range(0, len(low), step):
            rows_idx = low[start:start + step]
            sims = vecs[rows_idx] @ vecs.T
            LSH_LAST["compared"] += sims.size
            rows, cols = _hits(sims >= threshold)
            keep(rows, cols, sims, rows_idx, np.arange(n))
    for _ in range(tables):
        codes = ((hashed @ rng.standard_normal((dim, bits)).astype(np.float32)) > 0) @ weights
        order = np.argsort(codes, kind="stable")
        edges = np.flatnonzero(np.diff(codes[order])) + 1
        for group in np.split(order, edges):
            if len(group) < 2:
                continue
            sims = vecs[group] @ vecs[group].T
            LSH_LAST["compared"] += len(group) * (len(group) - 1) // 2
            rows, cols = _hits(np.triu(sims >= threshold, 1))
            keep(rows, cols, sims, group, group)
    out = [(i, j, s) for (i, j), s in found.items()]
    out.sort(key=lambda p: (-round(p[2], 6), p[0], p[1]))
    return out


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


def _union_find(n: int, edges: Iterable[tuple[int, int]]) -> list[list[int]]:
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in edges:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    groups: dict[int, list[int]] = {}
    for i in range(n):
        groups.setdefault(find(i), []).append(i)
    return [g for g in groups.values() if len(g) > 1]


# Pairs at least this close are checked by the extraction's supersede rule. Extraction checks a new
# fact against its few nearest stored ones (and from 0.6); a dream checks every pair, where its
# change-word rule at 0.6-0.8 mostly pairs unrelated facts about one person (measured on LoCoMo).
SUPERSEDE_COSINE = MINILM.supersede  # 0.85 on MiniLM's scale (each model: pmem.thresholds)


def load_generator_quietly(store: "MemoryStore") -> tuple[Any, str | None]:
    """The store's configured chat model, or (None, why not)."""
    from .generate import load_generator

    try:
        return load_generator(settings=store.config), None
    except PmemError as exc:
        return None, str(exc)


@dataclass
class Planning:
    """What every planner reads and writes: one per set of memories a plan reads (the store, or
    on a large one a slice and what it resembles; _Planner).

    Planners run in APPLY_ORDER; each appends its proposals to `result` and adds the memories it
    takes out of the active set to `claimed`, so that a later kind never proposes them again."""

    store: "MemoryStore"
    result: Plan
    kinds: list[str]
    now: str
    budget: _Budget
    expired: list[Memory]  # usable memories past expires_at, sorted by (expires_at, id)
    active: list[Memory]  # usable, not expired, not superseded
    vecs: Any  # unit vectors of `active` (numpy rows), or None when no kind needs them
    index: dict[str, int]  # memory id -> row in `active` / `vecs`
    words: dict[str, set[str]]  # memory id -> content stems
    claimed: set[str]
    generator: Any  # None: load the configured chat model when needed; False: no model
    thresholds: Thresholds = MINILM  # the cosines of the vectors' model, with the user's settings
    # arrays (i, j, cosine), i < j rows of `active`: the pairs to compare, best first, when a
    # slice's scan found them (_neighbours); None: every pair of `active` is compared
    near: Any = None
    _gen_tried: bool = False

    def pairable(self, keep: Callable[[Memory], bool]) -> list[int]:
        """Rows of `active` that a pair kind compares: those that `keep`."""
        return [i for i, m in enumerate(self.active) if keep(m)]

    def pairs(self, rows: list[int], threshold: float) -> list[tuple[int, int, float]]:
        """(i, j, cosine) of the pairs among `rows` of `active` at `threshold` or closer, best first."""
        if self.near is None:  # every row: the vectors as they are, not a copy
            vecs = self.vecs if len(rows) == len(self.active) else self.vecs[rows]
            return [(rows[x], rows[y], s) for x, y, s in _pairs(vecs, threshold)]
        import numpy as np

        i, j, cos = self.near
        keep = np.zeros(len(self.active), dtype=bool)
        keep[rows] = True
        chosen = (cos >= threshold) & keep[i] & keep[j]
        return list(zip(i[chosen].tolist(), j[chosen].tolist(), cos[chosen].tolist()))

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


# Universal quantifiers ("in every editor" / "always in editors") say the same thing in other
# words: they do not make two memories different. Stems, as text.content_stems gives them ("all",
# "each", "any" are stop words there already).
QUANTIFIERS = frozenset({"every", "alway"})


def one_word_swapped(a: set[str], b: set[str]) -> bool:
    """Does each side hold exactly one content word the other lacks? "My sister lives in Porto" /
    "My brother lives in Porto", Monday / Tuesday, Caroline / Melanie: the same frame with another
    value, a different fact however close the vectors (MiniLM put the meeting pair at 0.983,
    multilingual-e5-small the sister pair at 0.973). A missed duplicate costs a line of
    redundancy; a wrong one loses a fact, so dedup leaves such pairs alone."""
    return len(a - b) == 1 and len(b - a) == 1


def _plan_dedup(ctx: Planning) -> None:
    """Near-duplicates of one tier: close vectors, shared words, the same numbers."""
    if ctx.vecs is None:
        return
    active, words = ctx.active, ctx.words
    threshold, lexical = ctx.thresholds.dedup, float(ctx.settings.dedup_lexical)
    edges = []
    sims: dict[tuple[int, int], float] = {}
    for i, j, s in ctx.pairs(list(range(len(active))), threshold):
        a, b = active[i], active[j]
        if a.tier != b.tier or numbers(a.text) != numbers(b.text):
            continue
        wa, wb = words[a.id] - QUANTIFIERS, words[b.id] - QUANTIFIERS
        if jaccard(wa, wb) < lexical or one_word_swapped(wa, wb):
            continue
        edges.append((i, j))
        sims[(i, j)] = s
    groups = _union_find(len(active), edges)
    best: dict[int, float] = {}  # a group's closest pair, by its first member (one pass over the pairs)
    first = {i: g[0] for g in groups for i in g}
    for (i, _), s in sims.items():
        best[first[i]] = max(best.get(first[i], s), s)
    for group in sorted(groups, key=lambda g: active[g[0]].id):
        members = [active[i] for i in group]
        canon = max(members, key=lambda m: _informative_key(m, words[m.id]))
        others = sorted((m for m in members if m.id != canon.id), key=lambda m: (m.created_at, m.id))
        tags = sorted(set().union(*(m.tags for m in members)))
        created = min(m.created_at for m in members)
        ctx.result.proposals.append(Proposal(
            "dedup", [canon.id] + [m.id for m in others],
            f"{len(members)} near-duplicates (cosine up to {best[group[0]]:.3f}); keeping the most informative",
            result_text=canon.text, target=canon.id, score=best[group[0]],
            details={"tags": tags, "created_at": created},
            fingerprints={m.id: _fingerprint(m) for m in members}))
        ctx.claimed.update(m.id for m in others)


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
    result, active, claimed = ctx.result, ctx.active, ctx.claimed
    threshold = ctx.thresholds.merge
    pool = ctx.pairable(lambda m: m.id not in claimed and m.tier == "archival" and not m.derived_from)
    if len(pool) < 2:
        return
    cluster_of: dict[int, int] = {}
    clusters: list[list[int]] = []
    for i, j, _ in ctx.pairs(pool, threshold):  # best pair first; complete linkage
        ci, cj = cluster_of.get(i), cluster_of.get(j)
        if ci is None and cj is None:
            cluster_of[i] = cluster_of[j] = len(clusters)
            clusters.append([i, j])
            continue
        if ci is not None and cj is not None:
            continue
        c, new = (ci, j) if ci is not None else (cj, i)
        members = clusters[c]
        if len(members) >= MERGE_MAX:
            continue
        if all(ctx.cosine(x, new) >= threshold for x in members):
            members.append(new)
            cluster_of[new] = c
    for members in sorted(clusters, key=lambda c: min(active[i].id for i in c)):
        if ctx.budget.over():
            result.complete = False
            result.notes.append("time limit reached while planning merges")
            return
        ms = sorted((active[i] for i in members), key=lambda m: (m.created_at, m.id))
        score = min(ctx.cosine(a, b) for a in members for b in members if a < b)
        gen = ctx.writer()
        ids = [m.id for m in ms]
        if gen is None:
            result.dropped.append({"kind": "merge", "members": ids, "reason": "no chat model to write the merge"})
            continue
        text, why = _model_text(gen, "merge", [m.text for m in ms])
        if text is None:
            result.dropped.append({"kind": "merge", "members": ids, "reason": why})
            continue
        ok, why = grounded(ctx.store, text, [m.text for m in ms])
        if not ok:
            result.dropped.append({"kind": "merge", "members": ids, "reason": f"not grounded: {why}",
                                   "text": text})
            continue
        result.proposals.append(Proposal(
            "merge", ids, f"{len(ms)} related memories (cosine >= {score:.3f}) written as one by "
            f"{getattr(gen, 'name', 'the chat model')}; grounded",
            result_text=text, score=score,
            details={"tags": sorted(set().union(*(m.tags for m in ms))), "tier": "archival",
                     "created_at": ms[0].created_at},
            fingerprints={m.id: _fingerprint(m) for m in ms}))
        claimed.update(ids)


def _model_text(gen, kind: str, texts: list[str]) -> tuple[str | None, str]:
    try:
        out = gen.generate_json(prompts.dream_messages(kind, texts), prompts.DREAM_SCHEMA, max_tokens=256)
    except PmemError as exc:
        return None, f"the chat model failed: {exc}"
    text = " ".join(str((out or {}).get("text", "")).split())
    if not text:
        return None, "the chat model wrote nothing"
    return text, ""


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
    for ms in _compress_groups(ctx, days):
        if ctx.budget.over():
            result.complete = False
            result.notes.append("time limit reached while planning compression")
            return
        ids = [m.id for m in ms]
        texts = [m.text for m in ms]
        day = ms[0].created_at[:10]
        before = sum(_tokens(t) for t in texts)
        gen = ctx.writer()
        text, how = None, ""
        if gen is not None:
            text, why = _model_text(gen, "compress", texts)
            if text is not None:
                ok, why = grounded(ctx.store, text, texts)
                if ok and _tokens(text) <= COMPRESS_KEEP * before:
                    how = f"summary by {getattr(gen, 'name', 'the chat model')}, grounded"
                else:
                    text = None
                    why = why if not ok else f"the model's summary kept over {COMPRESS_KEEP:.0%} of the tokens"
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


INCREMENTAL_FROM = PAIRS_EXACT_MAX  # live memories from which a dream compares a slice at a time
PAIR_KINDS = ("dedup", "supersede", "merge")  # the kinds that compare memories with each other
PARTNER_BLOCK = 16384  # stored vectors per block when looking for what resembles a slice
SLICE = PAIRS_EXACT_MAX  # memories never compared yet that one slice of a large store's dream takes
READ_MAX = 3 * SLICE  # memories a slice's planners read at a time: a part of it and what resembles that
# What the pair kinds decide on, and whether a memory takes part at all; ("valid_from",
# "created_at"): the date a fact holds from, which orders supersede. A memory whose events since
# the last dream changed none of these (its tags or meta; a newer fact's valid_from set to its own
# date by a supersede) is not compared again: its pairs stay as the last plan decided them, and a
# new memory meets it from its own side.
COMPARED_FIELDS = ("text", "tier", "pinned", "merged_into", "forgotten_at", "superseded_by", "valid_to",
                   "expires_at", ("valid_from", "created_at"))


def _neighbours(store: "MemoryStore", chunk: dict[int, Memory], threshold: float, upto: int | None = None,
                budget: _Budget | None = None):
    """Arrays (row of a memory of `chunk`, row of a stored memory, cosine), in the order of the
    first, for every stored vector (of rows up to `upto`) at cosine >= `threshold` to a vector
    of `chunk` (row number -> memory); a pair of two memories of `chunk` once, and no memory
    with itself. Every vector is read once, a block at a time, so the cost is (chunk x store),
    not (store x store), and a block is all that is held. None: `budget` ran out first."""
    import numpy as np

    _, dim = store.vector_model()
    seqs = np.array(sorted(chunk), dtype=np.int64)
    new = _vectors(store, [chunk[int(q)] for q in seqs])
    kept = np.flatnonzero(np.any(new != 0, axis=1))
    new, seqs = new[kept], seqs[kept]
    parts: list[tuple[Any, Any, Any]] = [(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32))]
    if not dim or not len(new):
        return parts[0]
    # One product and one mask, reused: a fresh 64 MB product each step was page-faulted in
    # again, and a 2-d np.nonzero of the mask cost as much as the product (a 1-d one is ~14
    # times faster). A probe, 20,000 x 16,384 vectors: 1.55-1.62 s -> 0.84-0.92 s (the product
    # alone 0.77 s).
    product = np.empty(1024 * PARTNER_BLOCK, dtype=np.float32)
    mask = np.empty(1024 * PARTNER_BLOCK, dtype=bool)
    for block_seqs, blob in store.vectors.blocks(PARTNER_BLOCK, upto):
        if budget is not None and budget.over():
            return None
        block = np.frombuffer(blob, dtype="<f4").reshape(-1, dim)
        rows = np.array(block_seqs, dtype=np.int64)
        in_chunk = np.isin(rows, seqs)
        for start in range(0, len(new), 1024):
            part = new[start:start + 1024]
            shape = (len(part), len(block))
            sims = np.matmul(part, block.T, out=product[:shape[0] * shape[1]].reshape(shape))
            hit = np.greater_equal(sims, threshold - 1e-6, out=mask[:shape[0] * shape[1]].reshape(shape))
            x, y = _hits(hit)
            mine, theirs = seqs[start + x], rows[y]
            once = (theirs < mine) | ~in_chunk[y]  # two of the chunk: the later with the earlier
            parts.append((mine[once], theirs[once], sims[x[once], y[once]]))
    mine, theirs, cos = (np.concatenate(column) for column in zip(*parts))
    order = np.argsort(mine, kind="stable")
    return mine[order], theirs[order], cos[order]


def _basis(store: "MemoryStore", thresholds: Thresholds) -> str:
    """What decides which pairs qualify and which merges are grounded: the vectors' model and
    the thresholds. A mark recorded under another basis (a reindex, a changed setting) is not
    used: every pair is compared again."""
    return json.dumps([*store.vector_model(), thresholds.dedup, thresholds.supersede, thresholds.merge,
                       float(store.config.dedup_lexical), thresholds.grounding,
                       float(store.config.extract_min_support)])


class _Planner:
    """One plan's planners over one set of memories at a time (Planning), sharing what they
    claim, the memories read, and the chat model once loaded: a small store is one set, a
    large one a slice at a time."""

    def __init__(self, store: "MemoryStore", result: Plan, kinds: list[str], now: str, budget: _Budget,
                 generator: Any, thresholds: Thresholds, included: set[str]):
        self.store, self.result, self.kinds, self.now, self.budget = store, result, kinds, now, budget
        self.generator, self.thresholds, self.included = generator, thresholds, included
        self.claimed: set[str] = set()  # memories that leave the active set in this plan
        self.considered: set[str] = set()

    def usable(self, m: Memory) -> bool:
        """Not forgotten or merged, and not pinned unless `include` names it."""
        return m.forgotten_at is None and m.merged_into is None and (not m.pinned or m.id in self.included)

    def comparable(self, m: Memory) -> bool:
        """Usable, and neither expired nor superseded: one the pair kinds compare."""
        return self.usable(m) and not m.is_expired(self.now) and not m.is_superseded(self.now)

    def run(self, memories: Iterable[Memory], which: Iterable[str],
            near: tuple[dict[int, str], Any] | None = None) -> None:
        """The planners of `which` (those of this plan's kinds, in APPLY_ORDER) over `memories`;
        `near`: (row number -> id, the arrays of pairs of row numbers to compare: _neighbours),
        or None to compare every pair."""
        which = [k for k in APPLY_ORDER if k in which and k in self.kinds]
        now, claimed = self.now, self.claimed
        usable = [m for m in memories if self.usable(m)]
        self.considered.update(m.id for m in usable)
        expired = sorted((m for m in usable if m.id not in claimed and m.is_expired(now)),
                         key=lambda m: (m.expires_at, m.id))
        claimed.update(m.id for m in expired)
        active = [m for m in usable if m.id not in claimed and not m.is_superseded(now)]
        needs_vectors = any(k in which for k in _NEEDS_VECTORS)
        ctx = Planning(
            store=self.store, result=self.result, kinds=self.kinds, now=now, budget=self.budget,
            expired=expired, active=active, vecs=_vectors(self.store, active) if needs_vectors and active else None,
            index={m.id: i for i, m in enumerate(active)}, words=_Stems(active),
            claimed=claimed, generator=self.generator, thresholds=self.thresholds)
        if near is not None:
            import numpy as np

            ids, (a, b, cos) = near
            seqs = np.array(sorted(ids) or [-1], dtype=np.int64)  # never empty, for rows_of's lookup
            row = np.array([ctx.index.get(ids.get(q, ""), -1) for q in seqs.tolist()], dtype=np.int64)

            def rows_of(qs):  # row numbers -> rows of `active` (-1: not there)
                at = np.minimum(np.searchsorted(seqs, qs), len(seqs) - 1)
                return np.where(seqs[at] == qs, row[at], -1)

            ia, ib = rows_of(a), rows_of(b)
            both = (ia >= 0) & (ib >= 0)
            i, j, cos = np.minimum(ia, ib)[both], np.maximum(ia, ib)[both], cos[both]
            order = np.lexsort((j, i, -np.round(cos.astype(np.float64), 6)))  # best first
            ctx.near = (i[order], j[order], cos[order])
        for kind in which:
            PLANNERS[kind](ctx)
        if ctx._gen_tried:  # loaded (or found missing) once for the whole plan
            self.generator = ctx.generator if ctx.generator is not None else False


def _compare_large(planner: _Planner, live: int, full: bool, progress: Progress | None) -> None:
    """The pair kinds on a large store, a slice at a time, each slice with the memories it
    resembles (within the lowest threshold of the pair kinds) and old facts of the same subject,
    so that a plan holds a slice rather than the store:

    1. once a dream has been applied (store.dream_mark, under this basis), the memories changed
       since: with those of proposals the last dream skipped or left for the next, of merges it
       dropped for want of a working chat model unless the plan uses none, and the pinned ones
       named in `include`; each with the memories compared so far (up to the mark's `through`);
    2. memories never compared yet (a first dream, --full, another basis, or a quarter of the
       store changed), SLICE at a time in storage order, each slice with the earlier memories it
       resembles, until the time limit. The plan then says where they start (Plan.through), and
       the next dream goes on from there.

    Memories a proposal of an earlier slice holds are left to the next dream (Plan.revisit)."""
    import numpy as np

    store, result, budget, kinds = planner.store, planner.result, planner.budget, planner.kinds
    pairs = [k for k in PAIR_KINDS if k in kinds]
    thresholds = planner.thresholds
    lowest = min({"dedup": thresholds.dedup, "supersede": thresholds.supersede, "merge": thresholds.merge}[k]
                 for k in pairs)
    touched: set[str] = set()
    revisit: set[str] = set()

    def compare(chunk: dict[int, Memory], upto: int | None) -> bool:
        """Plan the pairs of `chunk` (row number -> memory) with each other and with the stored
        memories of rows up to `upto`, in pieces that read at most READ_MAX memories (a piece
        of the chunk and what resembles it); False when the time limit cut it short."""
        near = _neighbours(store, chunk, lowest, upto, budget)
        if near is None:
            result.complete = False
            result.notes.append("time limit reached while comparing memories")
            return False
        members, theirs = near[0], near[1]
        # a piece is a run of the chunk in row order, and its pairs a run of `near`
        piece: list[int] = []
        partners: set[int] = set()
        for q in sorted(chunk):
            lo, hi = np.searchsorted(members, [q, q + 1])
            mine = set(theirs[lo:hi].tolist())
            if piece and len(piece) + len(partners) + len(mine - partners) > READ_MAX:
                if not plan_piece(chunk, piece, partners, near, upto):
                    return False
                piece, partners = [], set()
            piece.append(q)
            partners |= mine
        return plan_piece(chunk, piece, partners, near, upto) if piece else result.complete

    def plan_piece(chunk: dict[int, Memory], piece: list[int], partners: set[int], near, upto: int | None) -> bool:
        rows = {q: chunk[q] for q in piece}
        rows.update((q, chunk[q]) for q in partners if q in chunk)
        rows.update(store.memories_by_seq(partners - rows.keys()))
        found = {m.id: m for m in rows.values()}
        if "supersede" in kinds:  # the same subject with another value: not always close in meaning
            subjects = {sv[0] for q in piece if rows[q].tier != "episodic" and (sv := subject_value(rows[q].text))}
            for subject in sorted(subjects):
                found.update((m.id, m) for m in store.facts_starting_with(re.findall(r"\w+", subject), upto))
        revisit.update(found.keys() & touched)
        first = len(result.proposals)
        lo, hi = np.searchsorted(near[0], [piece[0], piece[-1] + 1])
        planner.run(sorted((m for i, m in found.items() if i not in touched), key=lambda m: m.id), pairs,
                    near=({q: m.id for q, m in rows.items()}, tuple(column[lo:hi] for column in near)))
        touched.update(i for p in result.proposals[first:] for i in p.members)
        return result.complete

    mark = None if full else store.dream_mark()
    if mark is not None and mark.get("basis") != result.basis:
        mark = None  # recorded under another model or thresholds: every pair again
    changed: dict[str, Memory] = {}
    if mark is not None:
        changed = {m.id: m for m in store.changed_since(int(mark["event"]), COMPARED_FIELDS)
                   if planner.comparable(m)}
        # Merges dropped for want of a working chat model wait for a plan that may use one.
        waiting = list(mark.get("waiting", ()))
        if planner.generator is False:
            result.waiting, waiting = waiting, []
        for m in store.get_many([*mark.get("revisit", ()), *waiting, *planner.included]):
            if planner.comparable(m):
                changed[m.id] = m
        if 4 * len(changed) > live:
            mark = None
    through: int | None = 0
    ordered: list[tuple[int, Memory]] = []
    if mark is not None:
        result.since, result.changed = int(mark["event"]), len(changed)
        through = mark.get("through")  # absent: every memory was compared
        if through is not None and (not isinstance(through, int) or isinstance(through, bool)):
            through = 0  # not in this form: compare them all
        seq = store.storage_order(changed)
        ordered = sorted((seq[i], m) for i, m in changed.items() if i in seq)
    total = store.count_live_after(through) if through is not None else 0
    done, stopped = 0, False
    for start in range(0, len(ordered), SLICE):
        # with the memories compared so far: the others meet what changed when their slice comes
        if not compare(dict(ordered[start:start + SLICE]), through):
            revisit.update(m.id for _, m in ordered[start:])  # what changed and was not compared: next time
            stopped = True
            break
    while not stopped and through is not None and not budget.over():
        window = store.live_after(through, SLICE)
        if not window:
            through = None
            break
        if not compare({q: m for q, m in window if planner.comparable(m)}, window[-1][0]):
            break
        through, done = window[-1][0], done + len(window)
        if progress:
            progress(done, total)
    result.revisit, result.resume = sorted(revisit), True
    # a merge dropped in one slice may be met again in a later one
    result.dropped = list({(d["kind"], tuple(d.get("members", ()))): d for d in result.dropped}.values())
    if stopped or through is not None:
        result.complete, result.through, result.left = False, through, total - done
    if through is not None:
        result.notes.append(f"{total - done:,} memories not compared yet: a large store is compared a slice "
                            f"at a time, and the next dream goes on from where this one stopped")


def plan(store: "MemoryStore", *, only: set[str] | None = None, now: str | None = None, generator=None,
         max_seconds: float | None = None, include: Iterable[str] = (), full: bool = False,
         progress: Progress | None = None) -> Plan:
    """Propose, never write.

    A store of INCREMENTAL_FROM live memories and more is compared a slice at a time
    (_compare_large): once a dream has been applied, what changed since (with everything it
    resembles), so that the cost follows the change, not the store; and memories never compared
    yet, SLICE at a time, until the time limit (the next dream goes on from there). Proposals a
    person turned down come back only when a memory like them changes; `full` compares
    everything, as a smaller store always does.

    Args:
        store: the store to read (its settings give the thresholds).
        only: the kinds to plan (default DEFAULT_KINDS; purge only when named).
        now: the time to plan at (ISO 8601; default the store's clock).
        generator: the chat model that writes merges and summaries; None loads the store's
            configured one when text must be written, False uses no model.
        max_seconds: stop planning after this long (the plan is then marked incomplete).
        include: ids of pinned memories a dream may change.
        full: compare every memory, even where only what changed would be.
        progress: called with (memories compared, memories to compare) after each slice of
            memories never compared yet.

    Returns:
        The Plan. Raises UsageError for an unknown kind, NotFound / AmbiguousId for `include`.
    """
    kinds = list(DEFAULT_KINDS) if only is None else [k for k in KINDS if k in set(only)]
    unknown = set(only or ()) - set(KINDS)
    if unknown:
        raise UsageError(f"unknown dream kind {sorted(unknown)[0]!r}: use {', '.join(KINDS)}")
    budget = _Budget(max_seconds)
    cfg = store.config
    now = now or store.clock()
    included = {store.resolve(i) for i in include}
    thresholds = store.thresholds()
    result = Plan(created_at=now, kinds=kinds, settings={
        "dedup_threshold": thresholds.dedup, "dedup_lexical": float(cfg.dedup_lexical),
        "merge_threshold": thresholds.merge, "compress_after_days": int(cfg.compress_after_days),
        "purge_grace_days": int(cfg.purge_grace_days)})

    from .store import Filter

    result.mark, result.basis, result.undone = store.event_mark(), _basis(store, thresholds), store.undone_count()
    planner = _Planner(store, result, kinds, now, budget, generator, thresholds, included)
    live = store.count(Filter.live())
    if live < INCREMENTAL_FROM:
        planner.run(store.list_memories(Filter.everything(), sort="id", limit=None), kinds)
    else:
        planner.run(store.expired_live(now), ("expire", "purge"))
        if any(k in kinds for k in PAIR_KINDS):
            _compare_large(planner, live, full, progress)
        if "compress" in kinds:  # old episodes no dream wrote, read until compressed
            cutoff = timeutil.iso(_parse(now) - timedelta(days=int(cfg.compress_after_days)))
            old = store.list_memories(Filter(tiers=("episodic",), until=cutoff, pinned=False, include_expired=True,
                                    include_superseded=True), limit=None)
            planner.run(sorted((m for m in old if not m.derived_from), key=lambda m: m.id), ("compress",))
    result.considered = len(planner.considered)
    result.elapsed_s = budget.elapsed()
    return result


# -- applying -----------------------------------------------------------------------------

@contextmanager
def _joined(store: "MemoryStore", op_id: str, summary: str) -> Iterator[None]:
    """One transaction whose events belong to the dream's single operation `op_id`."""
    with store.operation("dream", summary, op_id=op_id):
        yield


def _stale(store: "MemoryStore", p: Proposal) -> str | None:
    current = {m.id: m for m in store.get_many(p.members)}
    for mid in p.members:
        m = current.get(mid)
        if m is None:
            return f"memory {mid} no longer exists"
        want = p.fingerprints.get(mid)
        if want is not None and _fingerprint(m) != want:
            return f"memory {mid} changed since the plan"
    return None


def _apply_one(store: "MemoryStore", p: Proposal, result: ApplyResult) -> None:
    ms = {m.id: m for m in store.get_many(p.members)}
    if p.kind == "expire":
        m = ms[p.members[0]]
        store.set_fields(m.id, "expire", meta={**m.meta, "expired_at": m.expires_at})
    elif p.kind == "purge":
        store.delete(ms[p.members[0]].id, action="purge")
    elif p.kind == "dedup":
        canon = ms[p.target]
        members = list(ms.values())
        tags = sorted(set().union(*(m.tags for m in members)))
        created = min(m.created_at for m in members)
        store.set_fields(canon.id, "dedup", tags=tags, created_at=created)
        for mid in p.members:
            if mid != canon.id:
                store.set_fields(mid, "dedup", merged_into=canon.id)
    elif p.kind == "supersede":
        store.supersede(p.members[0], p.members[1])
    elif p.kind in ("merge", "compress"):
        members = [ms[i] for i in p.members]
        threads = {m.thread for m in members}
        place = min(m.thread_pos or 0 for m in members) if len(threads) == 1 and None not in threads else None
        new = store.new_memory(
            p.result_text or "", tags=sorted(set().union(*(m.tags for m in members))),
            tier=p.details.get("tier", "archival" if p.kind == "merge" else "episodic"),
            created_at=min(m.created_at for m in members), derived_from=p.members,
            source="pmem dream", meta={"dream": p.kind, "proposal": p.id},
            thread=threads.pop() if place is not None else None, thread_pos=place)  # stands for its members' span
        new = store.insert([new], kind="dream", summary=f"dream {p.kind}", keep_ids=False,
                           allow_secret=_secrets_already_stored(new.text, members))[0]
        for m in members:
            store.set_fields(m.id, p.kind, merged_into=new.id)
        result.created[p.id] = new.id
    else:  # pragma: no cover - guarded by Proposal
        raise ValueError(p.kind)


def _secrets_already_stored(text: str, members: list[Memory]) -> bool:
    """Every machine secret in `text` is held verbatim by a member: stored with its owner's
    permission (`--allow-secret`), so a merge or summary repeating it stores nothing new. A secret
    no member holds (one the model wrote) is still refused."""
    return all(any(text[s.start:s.end] in m.text for m in members) for s in secretscan.find_secrets(text))


def apply(store: "MemoryStore", plan: Plan, *, accept: set[str] | None = None, progress: Progress | None = None,
          backup: bool = True, max_seconds: float | None = None) -> ApplyResult:
    """Apply the accepted proposals (all by default), each in its own transaction, all under one
    undoable operation. A proposal whose members changed since the plan is skipped."""
    import secrets

    budget = _Budget(max_seconds)
    result = ApplyResult()
    chosen = [p for p in plan.proposals if accept is None or p.id in accept]
    chosen.sort(key=lambda p: APPLY_ORDER.index(p.kind))
    if not chosen:
        _dealt_with(store, plan, result)
        result.elapsed_s = budget.elapsed()
        return result
    if backup:
        from .backup import backup_database

        result.backup = str(backup_database(store, label="dream"))
    counts: dict[str, int] = {}
    for p in chosen:
        counts[p.kind] = counts.get(p.kind, 0) + 1
    summary = "dream: " + ", ".join(f"{n} {k}" for k, n in counts.items())
    result.op_id = secrets.token_hex(4)
    total = len(chosen)
    if progress:
        progress(0, total)
    for done, p in enumerate(chosen, start=1):
        if budget.over():
            result.complete = False
            result.skipped.extend({"id": q.id, "reason": "time limit"} for q in chosen[done - 1:])
            break
        try:  # a merge's or summary's text is embedded before its write transaction starts
            with store.prepared_vectors([(p.result_text or "").strip()]), _joined(store, result.op_id, summary):
                why = _stale(store, p)
                if why is None:
                    _apply_one(store, p, result)
        except PmemError as exc:  # rolled back: this proposal is not applied, the others go on
            why = f"failed: {exc}"
            result.created.pop(p.id, None)
        if why is None:
            result.applied.append(p.id)
        else:
            result.skipped.append({"id": p.id, "reason": why})
        if progress:
            progress(done, total)
    if not result.applied:
        result.op_id = None
    _dealt_with(store, plan, result)
    result.elapsed_s = budget.elapsed()
    return result


def _dealt_with(store: "MemoryStore", plan: Plan, result: ApplyResult) -> None:
    """After a dream that planned every pair kind to the end (or on a large store, to where the
    time limit stopped it), the next dream of a large store compares only what changes after the
    plan's mark (what a person did not accept was turned down), and the memories never compared
    from where the plan stopped. Looked at again then: the members of proposals skipped (changed
    since the plan, failed, or left by the time limit), those a later slice left to the next
    dream, changed memories the time limit left, and of merges dropped for want of a working
    chat model (once a plan may use one). A merge dropped as not grounded would be dropped again
    while its members, the model and the settings stay as they are. Best effort: the dream is
    committed, and a mark not recorded only means more to compare."""
    if not (plan.mark and (plan.complete or plan.resume) and set(PAIR_KINDS) <= set(plan.kinds)):
        return
    skipped = {s["id"] for s in result.skipped}
    revisit = {m for p in plan.proposals if p.id in skipped for m in p.members} | set(plan.revisit)
    waiting = set(plan.waiting)
    waiting.update(m for d in plan.dropped if not d["reason"].startswith("not grounded") for m in d.get("members", ()))
    mark: dict[str, Any] = {"event": plan.mark, "basis": plan.basis, "revisit": sorted(revisit),
                            "waiting": sorted(waiting)}
    if plan.through is not None:
        mark["through"] = plan.through
    try:
        store.set_dream_mark(mark, undone=plan.undone)
    except PmemError:
        pass

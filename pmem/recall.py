"""Context for other LLMs: core memories first, then the most relevant (or most recent) others,
packed under a token budget, rendered as Markdown, XML, JSON or plain text.

What a block carries into another model's prompt (README, "Output"): memory text, tags and the
query go through `display.prompt_safe()` in every format, JSON included. Control characters
(except newline and tab) and invisible format characters (bidi overrides and isolates,
zero-width characters, Unicode tag characters) are left out: they can hide instructions from the
person who reads the block before it is sent. Everything else is kept as stored; the database
itself is never changed (`pmem show` and `pmem export` still give the stored text).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING

from . import ownblocks
from .display import json_dumps, prompt_safe
from .errors import UsageError
from .ranking.profile import DEFAULT
from .records import Memory

if TYPE_CHECKING:
    from .service import MemoryStore
    from .store import Filter

FORMATS = ("md", "xml", "json", "text")
NEIGHBOURS = 1  # default recall_neighbours: thread members on each side that come with a recalled one
# Only the best few matches bring neighbours: on LoCoMo (docs/decisions/0002-threads-keyword-window.md) neighbours
# for every match spent the budget on context and left evidence out (0.882 of questions with their
# evidence in the block, against 0.911 with none); for the best three it stayed at 0.911. They
# come after every match that fits (docs/decisions/0020-recall-block-budget.md).
NEIGHBOUR_MATCHES = 3
_WORD = re.compile(r"\w+|[^\w\s]", re.UNICODE)


def escape(text: str) -> str:
    """XML text escaping (xml.sax.saxutils would pull in urllib at import time)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def quoteattr(text: str) -> str:
    return '"' + escape(text).replace('"', "&quot;").replace("\n", "&#10;") + '"'


def estimate_tokens(text: str) -> int:
    """Tokens an LLM tokenizer will need for `text`, erring high.

    The larger of two common rules: one token per word or punctuation mark, times 1.2 for words
    split into pieces, and one token per 3.5 characters (which covers digits, ids and non-English
    text). tests/test_recall.py checks it never undercounts the real WordPiece tokenizer of the
    embedding model on the benchmark sentences, so a budget is a ceiling, not a wish.
    """
    if not text:
        return 0
    pieces = len(_WORD.findall(text))
    return max(math.ceil(pieces * 1.2), math.ceil(len(text) / 3.5))


@lru_cache(maxsize=4096)
def _line_cost(line: str) -> int:
    return estimate_tokens(line + "\n")


def _cost(text: str) -> int:
    """An upper bound of estimate_tokens(text), summed line by line so packing re-measures only
    new lines: each rule in estimate_tokens is subadditive over lines (words never span a newline)."""
    return sum(_line_cost(line) for line in text.split("\n"))


@dataclass
class Recalled:
    """What `recall()` chose: the core memories and the relevant others that fit `budget`
    tokens (`tokens` used, `left_out` that did not fit), with each relevant memory's search
    score. Turn it into text with `render()`."""

    query: str | None
    budget: int
    core: list[Memory] = field(default_factory=list)
    relevant: list[Memory] = field(default_factory=list)
    scores: dict[str, float] = field(default_factory=dict)
    tokens: int = 0
    left_out: int = 0
    # id -> the id of the recalled memory it came with, for thread neighbours included as context
    neighbour_of: dict[str, str] = field(default_factory=dict)
    # Whether any memory is stored at all (not forgotten or merged, in any tier or scope); set by
    # recall() when it chose nothing, so an empty block says which is true (None: not checked).
    stored: bool | None = None

    def memories(self) -> list[Memory]:
        return self.core + self.relevant


def _day(m: Memory) -> str:
    return (m.valid_from or m.created_at)[:10]


def _line(m: Memory, fmt: str) -> str:
    text = prompt_safe(m.text)
    tags = [prompt_safe(t) for t in m.tags]
    if fmt == "xml":
        attr = f" tags={quoteattr(','.join(tags))}" if tags else ""
        return f'<memory id="{m.id}" date="{_day(m)}"{attr}>{escape(text)}</memory>'
    if fmt == "text":
        return f"{_day(m)} [{m.id}] {text}"
    hashtags = " " + " ".join("#" + t for t in tags) if tags else ""
    return f"- [{_day(m)} · {m.id}] {text}{hashtags}"


def recall(store: "MemoryStore", query: str | None = None, *, budget: int | None = None,
           flt: "Filter | None" = None, fmt: str = "md", candidates: int = 60,
           min_similarity: float | None = None, neighbours: int | None = None,
           min_score: float | None = None) -> Recalled:
    """Memories for another LLM's context: pinned core memories first, then the memories most
    relevant to `query` (or the most recent without one), packed under a token budget.

    Args:
        store: the store to read; recalled memories count as accessed.
        query: what the context is for; None or blank for the most recent memories.
        budget: tokens the rendered block may take (default: the store's `recall_budget`).
        flt: which memories to consider (default: active ones).
        fmt: the format whose size is measured: md, xml, json (measured as md) or text.
        candidates: how many search results (or recent memories) to consider.
        min_score: a meaning-only match (no query word) whose search `score` (absolute, 0..1)
            is below this is left out as noise (default: the `recall_min_score` setting, 0.02:
            what scores less is below the recall cut-off of the model the vectors come from,
            pmem.models.thresholds); keyword matches always stay.
        min_similarity: instead of min_score, leave out only meaning-only matches whose cosine
            is below this (every keyword match stays).
        neighbours: thread members on each side that each of the NEIGHBOUR_MATCHES best matches
            brings, nearest first, in the budget the matches leave (default: the
            `recall_neighbours` setting); a match and its neighbours are shown as one block in
            thread order, each memory once.

    Returns:
        A Recalled. Raises UsageError for an unknown format, a budget below 1 or negative
        neighbours, and whatever search raises (ModelError when the embedding model cannot be
        loaded).
    """
    from .search import search
    from .store import Filter

    if fmt not in FORMATS:
        raise UsageError(f"unknown format {fmt!r}: use {', '.join(FORMATS)}")
    budget = int(store.config.recall_budget if budget is None else budget)
    if budget <= 0:
        raise UsageError("--budget must be a positive number of tokens")
    if neighbours is None:
        neighbours = getattr(store.config, "recall_neighbours", NEIGHBOURS)
    neighbours = int(neighbours)
    if neighbours < 0:
        raise UsageError("neighbours must be 0 or more")
    flt = flt or Filter()
    query = (query or "").strip() or None
    result = Recalled(query=query, budget=budget)

    core = store.list_memories(replace(flt, pinned=True, tiers=("core",)), sort="created", reverse=True, limit=None)
    others_flt = replace(flt, pinned=False, tiers=tuple(t for t in flt.tiers if t != "core") or ("archival",))
    if query:
        hits = search(store, query, others_flt, limit=candidates)
        # Meaning-only matches far from the query are noise in a context block, not memory. A
        # keyword match stays however it scores: in a small store a word held by half the
        # memories weighs almost nothing in BM25, yet it is what was asked for.
        if min_similarity is None:
            if min_score is None:
                min_score = float(getattr(store.config, "recall_min_score", DEFAULT.recall_min_score))
            hits = [h for h in hits if h.keyword_rank is not None or h.score >= min_score]
        else:
            hits = [h for h in hits if h.keyword_rank is not None
                    or (h.distance is not None and 1.0 - h.distance >= min_similarity)]
        others = [h.memory for h in hits]
        result.scores = {h.memory.id: h.score for h in hits}
    else:
        others = store.list_memories(others_flt, sort="created", limit=candidates)

    # Pack greedily, measuring the rendered block itself, so the budget holds for every
    # header and separator too. JSON is for programs; it is packed by its Markdown size.
    measure = "md" if fmt == "json" else fmt
    used = _cost(render(result, measure))

    def fits(bucket: list[Memory], m: Memory) -> bool:
        nonlocal used
        # Once the block holds a memory, adding one only adds lines (its own, perhaps a heading):
        # a line past what is left cannot fit, and is refused without rendering the block again
        # (with 2,000 core memories at 1,000,000, rendering per candidate was most of `pmem
        # recall`'s 0.5 s).
        if result.core or result.relevant:
            line = _line(m, measure)
            # _line_cost is at least one token per 3.5 characters (newline included): that bound
            # refuses most without counting words.
            if used + math.ceil((len(line) + 1) / 3.5) > budget or used + _line_cost(line) > budget:
                return False
        bucket.append(m)
        cost = _cost(render(result, measure))
        if cost > budget:
            bucket.pop()
            return False
        used = cost
        return True

    for m in core:
        if not fits(result.core, m):
            result.left_out += 1
    included = {m.id for m in result.core}
    best: list[Memory] = []  # the best matches in the block that bring neighbours
    for rank, m in enumerate(others):
        if m.id in included:
            continue
        if not fits(result.relevant, m):
            result.left_out += 1
            continue
        included.add(m.id)
        if m.thread is not None and rank < NEIGHBOUR_MATCHES:
            best.append(m)
    # Neighbours get what the matches leave, never a match's place: the keyword index already
    # ranks a turn by its neighbours' words, so the neighbours worth reading rank as matches, and
    # on LoCoMo those that did not never held the evidence
    # (docs/decisions/0020-recall-block-budget.md). In a store the matches do not fill, they still come.
    came_with: dict[str, str] = {}  # neighbour -> the match it came with, for grouping blocks
    for m in best if query and neighbours else ():
        before, after = store.thread_neighbours(m, neighbours, neighbours, others_flt)
        for n in _nearest_first(before, after):
            if n.id not in included and fits(result.relevant, n):
                included.add(n.id)
                result.neighbour_of[n.id] = came_with[n.id] = m.id
    if came_with:
        result.relevant = _blocks(result.relevant, came_with)
    result.tokens = used
    if not result.core and not result.relevant:
        result.stored = bool(store.list_memories(Filter.live(), limit=1))
    store.touch(m.id for m in result.memories())
    return result


def _nearest_first(before: list[Memory], after: list[Memory]) -> list[Memory]:
    """Neighbours in the order they join: the one just before, the one just after, and outwards."""
    out = []
    for i in range(max(len(before), len(after))):
        if i < len(before):
            out.append(before[-1 - i])
        if i < len(after):
            out.append(after[i])
    return out


def _blocks(memories: list[Memory], came_with: dict[str, str]) -> list[Memory]:
    """Group a thread's members into blocks in thread order, each placed where its first member
    was recalled: a memory joins the blocks of its thread that it touches (positions at most one
    apart), a neighbour also the block of the match it came with, and the blocks it bridges merge.
    Neighbours are recalled after every match, so a neighbour can bridge two matches' blocks."""
    blocks: list[list[Memory]] = []
    block_of: dict[str, list[Memory]] = {}
    for m in memories:
        joins: list[list[Memory]] = []
        if m.id in came_with and came_with[m.id] in block_of:
            joins.append(block_of[came_with[m.id]])
        if m.thread is not None:
            pos = m.thread_pos or 0
            joins += [b for b in blocks if b[0].thread == m.thread and not any(b is j for j in joins)
                      and min(x.thread_pos or 0 for x in b) - 1 <= pos <= max(x.thread_pos or 0 for x in b) + 1]
        if not joins:
            joins = [[]]
            blocks.append(joins[0])
        joins.sort(key=lambda b: next(i for i, x in enumerate(blocks) if x is b))
        first = joins[0]
        first.append(m)
        for other in joins[1:]:  # m bridges blocks: the later ones join the first
            first.extend(other)
            blocks[:] = [b for b in blocks if b is not other]
        for x in first:
            block_of[x.id] = first
    for block in blocks:
        block.sort(key=lambda x: (x.thread_pos or 0, x.created_at, x.id))
    return [m for block in blocks for m in block]


def render(r: Recalled, fmt: str = "md") -> str:
    """`_render`'s block, between pmem's own markers (pmem.ownblocks) when it holds memories,
    so that wherever it comes back (a chat a host stored, a prompt) it is told apart from the
    user's words; JSON, which is for programs, is left as it is."""
    block = _render(r, fmt)
    return ownblocks.mark(block) if fmt != "json" and (r.core or r.relevant) else block


def _render(r: Recalled, fmt: str = "md") -> str:
    """The recalled memories as one block of text: "md" (Markdown headings and bullets), "xml"
    (<memories> with escaped text), "json" (stable keys) or "text" (one memory per line); a
    format that is not one of these renders as Markdown. Raises nothing.

    Every string from a memory or the query is `prompt_safe()` (see the module docstring): no
    control or invisible format character reaches the prompt."""
    query_text = prompt_safe(r.query) if r.query else None
    if fmt == "json":
        return json_dumps(prompt_safe({
            "query": r.query, "budget": r.budget, "tokens": r.tokens, "left_out": r.left_out,
            "core": [m.to_dict() for m in r.core],
            "relevant": [{**m.to_dict(), "score": round(r.scores.get(m.id, 0.0), 6),
                          "neighbour_of": r.neighbour_of.get(m.id)} for m in r.relevant],
        }), indent=2)
    if fmt == "xml":
        query = f" query={quoteattr(query_text)}" if query_text else ""
        lines = [f"<memories{query}>"]
        if r.core:
            lines += ["<core>", *(_line(m, fmt) for m in r.core), "</core>"]
        if r.relevant:
            lines += ["<relevant>", *(_line(m, fmt) for m in r.relevant), "</relevant>"]
        lines.append("</memories>")
        return "\n".join(lines)
    if fmt == "text":
        return "\n".join(_line(m, fmt) for m in r.memories())
    lines = ["# What I remember (pmem)"]
    if r.core:
        lines += ["", "## Core", *(_line(m, fmt) for m in r.core)]
    if r.relevant:
        lines += ["", "## Relevant" + (f" to: {query_text}" if query_text else " (most recent)"),
                  *(_line(m, fmt) for m in r.relevant)]
    if not r.core and not r.relevant:
        lines += ["", _nothing(r, query_text)]
    return "\n".join(lines)


def _nothing(r: Recalled, query_text: str | None) -> str:
    """What an empty block says: why it is empty, in words a model will not misread (an agent
    told "nothing stored yet" while memories exist may tell the person so)."""
    if r.left_out:
        return f"(none of the {r.left_out} memories found fits in {r.budget} tokens)"
    if r.stored is False:
        return "(nothing stored yet)"
    if query_text:
        return f"(no stored memory is relevant to: {query_text})"
    return "(no memories to recall here)"

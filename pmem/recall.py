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

from .display import json_dumps, prompt_safe
from .errors import UsageError
from .records import Memory

if TYPE_CHECKING:
    from .store import Filter, MemoryStore

FORMATS = ("md", "xml", "json", "text")
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

    def memories(self) -> list[Memory]:
        return self.core + self.relevant


def _day(m: Memory) -> str:
    return (m.valid_from or m.created_at)[:10]


def _clean(value):
    """Strings anywhere in a JSON value, made prompt-safe (keys too)."""
    if isinstance(value, str):
        return prompt_safe(value)
    if isinstance(value, dict):
        return {_clean(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


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
           min_similarity: float = 0.2) -> Recalled:
    """Memories for another LLM's context: pinned core memories first, then the memories most
    relevant to `query` (or the most recent without one), packed under a token budget.

    Args:
        store: the store to read; recalled memories count as accessed.
        query: what the context is for; None or blank for the most recent memories.
        budget: tokens the rendered block may take (default: the store's `recall_budget`).
        flt: which memories to consider (default: active ones).
        fmt: the format whose size is measured: md, xml, json (measured as md) or text.
        candidates: how many search results (or recent memories) to consider.
        min_similarity: cosine below which a meaning-only match is left out as noise.

    Returns:
        A Recalled. Raises UsageError for an unknown format or a budget below 1, and whatever
        search raises (ModelError when the embedding model cannot be loaded).
    """
    from .search import search
    from .store import Filter

    if fmt not in FORMATS:
        raise UsageError(f"unknown format {fmt!r}: use {', '.join(FORMATS)}")
    budget = int(store.config.recall_budget if budget is None else budget)
    if budget <= 0:
        raise UsageError("--budget must be a positive number of tokens")
    flt = flt or Filter()
    query = (query or "").strip() or None
    result = Recalled(query=query, budget=budget)

    core = store.list(replace(flt, pinned=True, tiers=("core",)), sort="created", reverse=True, limit=None)
    others_flt = replace(flt, pinned=False, tiers=tuple(t for t in flt.tiers if t != "core") or ("archival",))
    if query:
        hits = search(store, query, others_flt, limit=candidates)
        # Meaning-only matches far from the query are noise in a context block, not memory.
        hits = [h for h in hits if h.keyword_rank is not None
                or (h.distance is not None and 1.0 - h.distance >= min_similarity)]
        others = [h.memory for h in hits]
        result.scores = {h.memory.id: h.score for h in hits}
    else:
        others = store.list(others_flt, sort="created", limit=candidates)

    # Pack greedily, measuring the rendered block itself, so the budget holds for every
    # header and separator too. JSON is for programs; it is packed by its Markdown size.
    measure = "md" if fmt == "json" else fmt
    used = _cost(render(result, measure))
    for bucket, items in ((result.core, core), (result.relevant, others)):
        for m in items:
            bucket.append(m)
            cost = _cost(render(result, measure))
            if cost > budget:
                bucket.pop()
                result.left_out += 1
                continue
            used = cost
    result.tokens = used
    store.touch(m.id for m in result.memories())
    return result


def render(r: Recalled, fmt: str = "md") -> str:
    """The recalled memories as one block of text: "md" (Markdown headings and bullets), "xml"
    (<memories> with escaped text), "json" (stable keys) or "text" (one memory per line); a
    format that is not one of these renders as Markdown. Raises nothing.

    Every string from a memory or the query is `prompt_safe()` (see the module docstring): no
    control or invisible format character reaches the prompt."""
    query_text = prompt_safe(r.query) if r.query else None
    if fmt == "json":
        return json_dumps(_clean({
            "query": r.query, "budget": r.budget, "tokens": r.tokens, "left_out": r.left_out,
            "core": [m.to_dict() for m in r.core],
            "relevant": [{**m.to_dict(), "score": round(r.scores.get(m.id, 0.0), 6)} for m in r.relevant],
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
        lines += ["", "(nothing stored yet)"]
    return "\n".join(lines)

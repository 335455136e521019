"""The memory actions an agent gets, shared by the MCP server and the llm toolbox.

Each one validates its arguments, retries a busy database instead of failing, and bounds what
it returns: MCP clients reject tool results over about 25,000 tokens, and a memory tool that dumps
the whole store into the context is a defect, not a feature. Results are plain dicts (JSON-ready).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import DatabaseError, UsageError

if TYPE_CHECKING:
    from ..store import Filter, MemoryStore

T = TypeVar("T")

MAX_RESULT_CHARS = 24_000  # about 7,000 tokens by pmem's estimate: far under the clients' limit
MAX_SEARCH_LIMIT = 50
MAX_RECALL_BUDGET = 6_000  # tokens
MAX_QUERY_CHARS = 2_000  # a longer query is cut; it would not search better
SNIPPET_CHARS = 1_500  # a search result shows this much of a memory; `recall` or `pmem show` the rest
MAX_TAGS = 20
_TAG = re.compile(r"^[^\s\x00-\x1f]{1,64}$")
_SOURCE = re.compile(r"[^A-Za-z0-9._:@/+-]+")


def client_source(prefix: str, name: str | None) -> str:
    """`mcp:claude-code`: which tool wrote a memory, from a name the client chose (sanitised)."""
    clean = _SOURCE.sub("-", (name or "").strip().lower()).strip("-")[:40]
    return f"{prefix}:{clean or 'unknown'}"


def retry_busy(fn: Callable[[], T], attempts: int = 4, pause: float = 0.25) -> T:
    """Run `fn`, retrying while another process holds the write lock.

    The connection already waits 5 s for a lock; this covers a longer write (an import, a dream)
    so that "database is locked" reaches an agent only after about half a minute of trying."""
    for attempt in range(attempts):
        try:
            return fn()
        except DatabaseError as exc:
            if "locked" not in str(exc) or attempt == attempts - 1:
                raise
            time.sleep(pause * (2 ** attempt))
    raise AssertionError("unreachable")


def _query(text: Any) -> str:
    if not isinstance(text, str) or not text.strip():
        raise UsageError("the query is empty")
    return text.strip()[:MAX_QUERY_CHARS]


def _tags(tags: Any) -> list[str]:
    if tags is None:
        return []
    if isinstance(tags, str):
        tags = [t for t in re.split(r"[,\s]+", tags) if t]
    if not isinstance(tags, (list, tuple)) or len(tags) > MAX_TAGS:
        raise UsageError(f"tags must be a list of at most {MAX_TAGS} words")
    for t in tags:
        if not isinstance(t, str) or not _TAG.match(t):
            raise UsageError(f"bad tag {str(t)[:40]!r}: a tag is one word of at most 64 characters")
    return list(tags)


def _clip(text: str, limit: int) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    return text[:limit - 1] + "…", True


def memory_summary(m, *, snippet: int = SNIPPET_CHARS, score: float | None = None) -> dict[str, Any]:
    text, clipped = _clip(m.text, snippet)
    d: dict[str, Any] = {"id": m.id, "text": text, "tier": m.tier, "tags": list(m.tags),
                         "created_at": m.created_at, "source": m.source}
    if getattr(m, "scope", None):
        d["scope"] = m.scope
    if clipped:
        d["truncated"] = True
    if score is not None:
        d["score"] = round(score, 4)
    return d


def bounded_json(payload: dict[str, Any], list_key: str | None = None,
                 limit: int = MAX_RESULT_CHARS) -> str:
    """JSON text no longer than `limit` characters: items of `list_key` are dropped from the end
    (and counted in `left_out`) until it fits."""
    text = json.dumps(payload, ensure_ascii=False)
    if len(text) <= limit or not list_key:
        return text if len(text) <= limit else text[:limit]
    items = list(payload[list_key])
    left = payload.get("left_out", 0)
    while items and len(text) > limit:
        items.pop()
        left += 1
        text = json.dumps({**payload, list_key: items, "left_out": left}, ensure_ascii=False)
    return text


def _base_filter(flt: Filter | None) -> Filter:
    from ..store import Filter

    return flt if flt is not None else Filter()


def search(store: MemoryStore, query: str, *, limit: int = 10, tags: Any = None,
           flt: Filter | None = None) -> dict[str, Any]:
    from ..search import search as run_search

    q = _query(query)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise UsageError("limit must be a positive whole number")
    limit = min(limit, MAX_SEARCH_LIMIT)
    f = replace(_base_filter(flt), tags=tuple(_tags(tags)))
    hits = retry_busy(lambda: run_search(store, q, f, limit=limit))
    return {"query": q, "results": [memory_summary(h.memory, score=h.score) for h in hits]}


def recall(store: MemoryStore, query: str | None = None, *, budget: int | None = None,
           flt: Filter | None = None) -> str:
    """A Markdown context block: core memories, then the most relevant, within `budget` tokens."""
    from ..recall import recall as run_recall
    from ..recall import render

    q = _query(query) if query is not None and str(query).strip() else None
    if budget is None:
        budget = min(int(store.config.recall_budget), MAX_RECALL_BUDGET)
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1:
        raise UsageError("budget must be a positive number of tokens")
    budget = min(budget, MAX_RECALL_BUDGET)
    result = retry_busy(lambda: run_recall(store, q, budget=budget, flt=_base_filter(flt)))
    text, _ = _clip(render(result, "md"), MAX_RESULT_CHARS)
    return text


def remember(store: MemoryStore, text: str, *, tags: Any = None, pin: bool = False,
             source: str | None = None, extract: bool = False, scope: str | None = None) -> dict[str, Any]:
    """Store `text`. With `extract`, the local chat model pulls facts out of it; the text itself is
    kept as their source (episodic), so every fact can be traced back."""
    if not isinstance(text, str) or not text.strip():
        raise UsageError("nothing to remember: the text is empty")
    tag_list = _tags(tags)
    kw: dict[str, Any] = {}
    if scope is not None:
        kw["scope"] = scope
    if extract:
        from ..extract import extract as run_extract

        # extract() stores facts globally for now (it takes no scope).
        result = retry_busy(lambda: run_extract(store, text, tags=tag_list, source=source))
        facts = [{"id": f.id, "text": _clip(f.text, SNIPPET_CHARS)[0], "action": f.action}
                 for f in result.facts]
        return json.loads(bounded_json({"extracted": True, "operation": result.run,
                                        "source_ids": result.source_ids, "facts": facts}, "facts"))
    memory, created = retry_busy(lambda: store.add(text, tags=tag_list, pinned=bool(pin), source=source, **kw))
    return {"created": created, "memory": memory_summary(memory),
            **({} if created else {"note": "an identical memory was already stored"})}


def forget(store: MemoryStore, memory_id: str) -> dict[str, Any]:
    m = retry_busy(lambda: store.forget(_id(memory_id)))
    return {"forgotten": m.id, "text": _clip(m.text, 200)[0],
            "undo": f"pmem undo (or restore it: pmem restore {m.id})"}


def pin(store: MemoryStore, memory_id: str) -> dict[str, Any]:
    m = retry_busy(lambda: store.pin(_id(memory_id)))
    return {"pinned": m.id, "memory": memory_summary(m)}


def update(store: MemoryStore, memory_id: str, text: str, *, source: str | None = None) -> dict[str, Any]:
    """A correction: a new memory that supersedes the old one. The old one stays in the history
    (`pmem history`, `search --as-of`), so nothing is lost."""
    if not isinstance(text, str) or not text.strip():
        raise UsageError("the corrected text is empty")
    old = store.get(_id(memory_id))
    if old.text == text.strip():
        return {"updated": False, "memory": memory_summary(old), "note": "the text is unchanged"}

    def run():
        with store.operation("update", f"update {old.id}"):
            kw: dict[str, Any] = {"tags": old.tags, "tier": old.tier, "pinned": old.pinned,
                                  "source": source or old.source, "allow_duplicate": True}
            if getattr(old, "scope", None) is not None:
                kw["scope"] = old.scope
            new, _ = store.add(text, **kw)
            store.supersede(old.id, new.id)
            return new

    new = retry_busy(run)
    return {"updated": True, "memory": memory_summary(new), "supersedes": old.id}


def _id(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise UsageError("a memory id is needed (as shown by search)")
    return value.strip()[:40]

"""The memory actions an agent gets, shared by the MCP server and the llm toolbox.

Each one validates its arguments, waits a bounded time for a busy database, and bounds what it
returns: MCP clients reject tool results over about 25,000 tokens, and a memory tool that dumps
the whole store into the context is a defect, not a feature. Results are plain dicts (JSON-ready);
`bounded_json` turns one into the text a model reads, through `display.prompt_safe`.

Ids an agent gives must be at least SAFE_PREFIX (4) characters, as git asks: a model that writes
`forget {"id": "1"}` names no memory in particular.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from ..display import prompt_safe
from ..errors import DatabaseError, UsageError

if TYPE_CHECKING:
    from ..records import Memory
    from ..service import MemoryStore
    from ..store import Filter

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


# Seconds one call waits in all for another process's write lock (an import, a dream) before it
# answers "locked, try again": within a hook's 4 s, so an agent never stalls on pmem for longer
# (docs/decisions/0010-mcp-locked-database.md: 21.8 s before).
LOCK_WAIT = 3.5
READ_WAIT = 0.2  # seconds a read waits at a time: in WAL only its best-effort `touch` can wait at all
_deadline: ContextVar[float | None] = ContextVar("pmem_lock_deadline", default=None)


@contextmanager
def lock_deadline(seconds: float = LOCK_WAIT) -> Iterator[None]:
    """Everything inside waits for a busy database until one deadline, `seconds` from now, in all
    (the MCP server opens the store and runs a tool under one)."""
    token = _deadline.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _deadline.reset(token)


def time_left() -> float:
    """Seconds left before the current deadline (LOCK_WAIT when there is none)."""
    end = _deadline.get()
    return LOCK_WAIT if end is None else end - time.monotonic()


def retry_busy(fn: Callable[[], T], store: MemoryStore | None = None, *, read: bool = False,
               pause: float = 0.1) -> T:
    """Run `fn`, retrying while another process holds the write lock, until the deadline
    (`lock_deadline`, else LOCK_WAIT from now); then "database is locked" reaches the agent.

    With `store`, SQLite's own wait for the lock (its busy timeout) is cut to what is left (to
    READ_WAIT for a `read`, which needs no lock but may count an access), so the deadline holds."""
    end = time.monotonic() + time_left()
    while True:
        left = end - time.monotonic()
        try:
            if store is None:
                return fn()
            with store.busy_wait(min(left, READ_WAIT) if read else left):
                return fn()
        except DatabaseError as exc:
            if "locked" not in str(exc) or time.monotonic() + pause >= end:
                raise
            time.sleep(pause)


def after_write(store: MemoryStore) -> None:
    """What follows an agent's write, as it follows a write command: the fill, if the write stored
    vectors made in int8 (`remember` with extract: pmem.store.refine); under `sync_auto = on`, a
    background `pmem sync` (pmem/autosync.py; it never raises)."""
    from ..store import refine

    if str(store.path) in refine.MARKED:
        from .. import fill

        fill.kick(store.path, scan=False, by="command")
    if store.config.sync_auto == "on":
        from .. import autosync

        autosync.kick(store.path)


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
    """The JSON text a model reads: every string through `prompt_safe` (no control or invisible
    character), no longer than `limit` characters: items of `list_key` are dropped from the end
    (and counted in `left_out`) until it fits."""
    payload = prompt_safe(payload)
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
    hits = retry_busy(lambda: run_search(store, q, f, limit=limit), store, read=True)
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
    result = retry_busy(lambda: run_recall(store, q, budget=budget, flt=_base_filter(flt)), store, read=True)
    text, _ = _clip(render(result, "md"), MAX_RESULT_CHARS)  # render() is prompt-safe
    return text


def remember(store: MemoryStore, text: str, *, tags: Any = None, pin: bool = False,
             source: str | None = None, extract: bool = False, scope: str | None = None) -> dict[str, Any]:
    """Store `text` in `scope` (None: global). With `extract`, the local chat model pulls facts out
    of it; the text itself is kept as their source (episodic), so every fact can be traced back.

    Text already stored comes back with created=False, and the caller's `pin` and `tags` are
    applied to it (one undoable operation): remembering is idempotent, the intent is not lost.
    A stored copy that is no longer current (superseded, expired) does not count: the text is
    stored again."""
    if not isinstance(text, str) or not text.strip():
        raise UsageError("nothing to remember: the text is empty")
    tag_list = _tags(tags)
    if extract:
        from ..extract import extract as run_extract

        result = retry_busy(lambda: run_extract(store, text, tags=tag_list, source=source, scope=scope), store)
        facts = [{"id": f.id, "text": _clip(f.text, SNIPPET_CHARS)[0], "action": f.action}
                 for f in result.facts]
        return json.loads(bounded_json({"extracted": True, "operation": result.run,
                                        "source_ids": result.source_ids, "facts": facts}, "facts"))

    def add(again: bool = False) -> tuple[Memory, bool]:
        return store.add(text, tags=tag_list, pinned=bool(pin), source=source, scope=scope, allow_duplicate=again)

    memory, created = retry_busy(add, store)
    if not created and memory.status(store.clock()) != "active":  # true again: stored again
        memory, created = retry_busy(lambda: add(again=True), store)
    if created:
        return {"created": True, "memory": memory_summary(memory)}
    memory, applied = retry_busy(lambda: _apply_intent(store, memory, pin=bool(pin), tags=tag_list), store)
    note = "an identical memory was already stored" + (f"; {' and '.join(applied)} it" if applied else "")
    return {"created": False, "memory": memory_summary(memory), "note": note}


def _apply_intent(store: MemoryStore, memory: Memory, *, pin: bool, tags: list[str]) -> tuple[Memory, list[str]]:
    """Pin and tag a memory that was already stored, as one operation; what was done, in words."""
    missing = [t for t in tags if t not in memory.tags]
    if not missing and (memory.pinned or not pin):
        return memory, []
    done = []
    with store.operation("remember", f"remember {memory.id}"):
        if missing:
            memory = store.edit(memory.id, add_tags=missing)
            done.append("tagged")
        if pin and not memory.pinned:
            memory = store.pin(memory.id)
            done.append("pinned")
    return memory, done


def forget(store: MemoryStore, memory_id: str) -> dict[str, Any]:
    full = _full_id(store, memory_id)
    m = retry_busy(lambda: store.forget(full), store)
    return {"forgotten": m.id, "text": _clip(m.text, 200)[0],
            "undo": f"pmem undo (or restore it: pmem restore {m.id})"}


def pin(store: MemoryStore, memory_id: str) -> dict[str, Any]:
    """Pin a memory; one that is forgotten, merged, superseded or expired is refused (UsageError)."""
    full = _full_id(store, memory_id)
    m = retry_busy(lambda: store.pin(full), store)
    return {"pinned": m.id, "memory": memory_summary(m)}


def update(store: MemoryStore, memory_id: str, text: str, *, source: str | None = None) -> dict[str, Any]:
    """A correction: a new memory that supersedes the old one. The old one stays in the history
    (`pmem history`, `search --as-of`), so nothing is lost.

    A memory that was already superseded is corrected in its current version (its
    `superseded_by`, followed to the end), so a stale id never forks a fact into two current
    versions; a retried call whose text is already the current version changes nothing. A
    forgotten or merged memory is refused: correcting it would bring it back."""
    if not isinstance(text, str) or not text.strip():
        raise UsageError("the corrected text is empty")
    text = text.strip()
    full = _full_id(store, memory_id)
    asked = store.get(full)
    head = _current(store, asked)
    if head.text == text:  # a retry, or nothing to correct: answered without embedding
        return _unchanged(asked, head)

    def run() -> tuple[Memory, Memory] | dict[str, Any]:
        # The chain is read again under the write lock: another call may have corrected it meanwhile.
        with store.operation("update", f"update {full}"):
            head = _current(store, store.get(full))
            if head.text == text:
                return _unchanged(asked, head)
            kw: dict[str, Any] = {"tags": head.tags, "tier": head.tier, "pinned": head.pinned,
                                  "source": source or head.source, "allow_duplicate": True, "scope": head.scope}
            new, _ = store.add(text, **kw)
            store.supersede(head.id, new.id)
            return new, head

    def attempt() -> tuple[Memory, Memory] | dict[str, Any]:
        with store.prepared_vectors([text]):  # the model runs before the write lock is taken
            return run()

    done = retry_busy(attempt, store)
    if isinstance(done, dict):
        return done
    new, head = done
    out = {"updated": True, "memory": memory_summary(new), "supersedes": head.id}
    if head.id != asked.id:
        out["note"] = f"{asked.id} was already superseded by {head.id}: the correction replaces {head.id}"
    return out


def _current(store: MemoryStore, memory: Memory) -> Memory:
    """The current version of `memory`: its superseded_by chain followed to the end, refused
    (UsageError) when that is forgotten or merged."""
    from ..errors import NotFound

    seen = {memory.id}
    m = memory
    while m.superseded_by and m.superseded_by not in seen:
        try:
            m = store.get(m.superseded_by)
        except NotFound:  # the newer version was erased (purge): this is the last one left
            break
        seen.add(m.id)
    of = "" if m.id == memory.id else f" (the current version of {memory.id})"
    if m.forgotten_at:
        raise UsageError(f"memory {m.id}{of} is forgotten: restore it first (pmem restore {m.id}), "
                         "or remember the text as a new memory")
    if m.merged_into:
        raise UsageError(f"memory {m.id}{of} was merged into {m.merged_into}: update that one")
    return m


def _unchanged(asked: Memory, head: Memory) -> dict[str, Any]:
    note = ("the text is unchanged" if head.id == asked.id
            else f"already corrected: {head.id} has this text and supersedes {asked.id}")
    return {"updated": False, "memory": memory_summary(head), "note": note}


def _full_id(store: MemoryStore, value: Any) -> str:
    """The full id of what an agent named: at least SAFE_PREFIX characters, or a whole id."""
    from ..store import SAFE_PREFIX

    return store.resolve(_id(value), min_prefix=SAFE_PREFIX)


def _id(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise UsageError("a memory id is needed (as shown by search)")
    return value.strip()[:40]

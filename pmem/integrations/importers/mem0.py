"""mem0 and OpenMemory exports.

- mem0 (`Memory.get_all()`, the platform's `client.get_all()`): a list, or `{"results": [...]}`,
  of `{"id", "memory", "user_id", "agent_id", "categories", "metadata", "created_at",
  "updated_at"}`. The platform's v3 memories add `session_id` (the run), `expiration_date`
  (YYYY-MM-DD, after which mem0 hides the memory) and `replaced_by` (the id of the memory that
  superseded this one).
- the mem0 CLI's `mem0 list -o json` (and `--agent`): `{"status", "command", "count", "scope":
  {"user_id", ...}, "data": [...]}`, its memories cut to `id`, `memory`, `created_at`,
  `categories` and `expiration_date`; the user is the scope's.
- OpenMemory's backup (`POST /api/v1/backup/export`, a zip): `memories.json` with `user`,
  `categories` (`id`, `name`) and `memories` (`id`, `content`, `state`, `category_ids`,
  `created_at`, `updated_at`, `metadata`), and `memories.jsonl.gz`, one
  `{"id", "content", "state", "app", "categories", "created_at", "updated_at"}` per line.

The memory text, its user, categories as tags and both dates are kept; deleted memories are not
imported. Ids come from the export's own memory ids, so the two files of one backup agree.
`expiration_date` becomes `expires_at` (the start of the next day, UTC: the date itself is
still shown). A memory with `replaced_by` is kept as history, not as a current fact: it is
imported superseded (`valid_to` the replacement's `created_at` when the replacement is in the
same file, else its own `updated_at`; `superseded_by` the replacement's pmem id when it is
there), so search and recall leave it out as mem0 does, and `pmem history` still shows it.
`session_id` and the replacement's mem0 id are kept in meta.

Bad records: a memory that is no object, or whose text, `id` or `state` has the wrong type, is
left out and counted (as a line that is not JSON is); its user, categories, metadata and dates of
the wrong type are read as absent.
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import date, timedelta
from typing import Any, Iterator

from ... import timeutil
from ...errors import UsageError
from ...records import Memory
from .base import BadRecord, Entry, ident, kind_of, make_memory, need, optional, slug, split_text, stable_id, when

NAME = "mem0"
DESCRIPTION = "mem0 / OpenMemory export (get_all JSON, memories.json, memories.jsonl[.gz])"
FILES = re.compile(r"\.(json|jsonl|jsonl\.gz)$")
KIND = "memory"


def accepts(name: str) -> bool:
    return bool(FILES.search(name))


_CLI_ENVELOPE = re.compile(rb'"command"\s*:\s*"(list|search)"')  # the mem0 CLI's --output json


def _looks_like_memory(chunk: bytes) -> bool:
    """mem0's `memory` field, or OpenMemory's `content` next to its `state` or categories."""
    if b'"memory":' in chunk or b'"memory" :' in chunk:
        return True
    return b'"content"' in chunk and any(k in chunk for k in (b'"categories"', b'"category_ids"', b'"state"'))


def sniff(name: str, head: bytes) -> bool:
    if name.endswith("memories.jsonl.gz"):
        return True
    s = head.lstrip()
    if b'"mapping"' in head or b'"chat_messages"' in head or b'"entityType"' in head:
        return False
    if s[:1] == b"{" and _CLI_ENVELOPE.search(head) and not name.endswith((".jsonl", ".jsonl.gz")):
        return True
    if s.startswith(b"{") and b"\n" in s and not s.startswith(b"{\n"):
        line = s.split(b"\n", 1)[0]  # JSONL: the first record decides
        return _looks_like_memory(line) and b'"text"' not in line and b'"sessionId"' not in line
    return s[:1] in (b"[", b"{") and _looks_like_memory(head)


def _records(entry: Entry) -> tuple[list[tuple[str, Any]], dict[str, Any]]:
    """(where, item) for each memory record, and what the file says about all of them (user,
    category names)."""
    if entry.name.endswith((".jsonl", ".jsonl.gz")):
        return [(f"line {n}", obj) for n, obj in entry.read_jsonl()], {}
    data = entry.read_json()
    context: dict[str, Any] = {}
    if isinstance(data, dict) and "command" in data and data.get("status") == "error":
        error = optional(data, "error", str) or "no reason given"
        raise UsageError(f"{entry.name}: the mem0 CLI reported an error, not memories: {error[:200]}")
    if isinstance(data, dict) and isinstance(data.get("data"), list) and "command" in data:
        scope = optional(data, "scope", dict) or {}  # the mem0 CLI's JSON envelope
        context["user"] = optional(scope, "user_id", str)
        data = data["data"]
    if isinstance(data, dict):
        user = optional(data, "user", dict)
        if user:
            context["user"] = next((u for u in (user.get(k) for k in ("user_id", "name", "id"))
                                    if isinstance(u, str) and u), None)
        cats = optional(data, "categories", list) or []
        context["categories"] = {str(c["id"]): c["name"] for c in cats if isinstance(c, dict)
                                 and isinstance(c.get("id"), (str, int)) and isinstance(c.get("name"), str)}
        items = data.get("results", data.get("memories"))
    else:
        items = data
    if not isinstance(items, list):
        raise UsageError(f"{entry.name}: expected a list of mem0 memories (or 'results'/'memories')")
    return [(f"memory {n}", m) for n, m in enumerate(items, start=1)], context


def _categories(item: dict[str, Any], cat_names: dict[str, str]) -> list[str]:
    """Category names: `categories` (names, or one name) and `category_ids` (OpenMemory's),
    whatever of them is text; a list of the wrong type is read as absent."""
    categories = item.get("categories")
    if isinstance(categories, str):
        categories = [categories]
    names = [c for c in categories if isinstance(c, str)] if isinstance(categories, list) else []
    ids = item.get("category_ids")
    if isinstance(ids, list):
        names += [cat_names[str(c)] for c in ids if isinstance(c, (str, int)) and cat_names.get(str(c))]
    return names


def _memories(item: Any, context: dict[str, Any]) -> list[Memory]:
    if not isinstance(item, dict):
        raise BadRecord(f"is {kind_of(item)}, not an object")
    field = next((k for k in ("memory", "content", "text") if k in item), "memory")
    text = need(item, field, str)
    if text is None:
        raise BadRecord(f"no text ({field!r})")
    if not text.strip():
        return []
    state = need(item, "state", str)
    if state == "deleted" or item.get("deleted_at"):
        return []
    user = optional(item, "user_id", str) if "memory" in item else None
    user = user or context.get("user") or optional(item, "user_id", str)
    categories = _categories(item, context.get("categories", {}))
    meta: dict[str, Any] = {"kind": "memory", "format": NAME}
    for key in ("id", "agent_id", "run_id", "session_id", "app_id", "app", "hash", "state"):
        value = optional(item, key, str, int)
        if value not in (None, ""):
            meta["mem0_" + key if key == "id" else key] = value
    if user:
        meta["user"] = user
    metadata = optional(item, "metadata", dict)
    if metadata:
        meta["metadata"] = metadata
    if categories:
        meta["categories"] = categories
    key = ident(item.get("id"), "'id'") or stable_id(text)
    dates = [when(optional(item, k, str, int, float)) for k in ("created_at", "createdAt", "updated_at", "updatedAt")]
    created = dates[0] or dates[1]
    updated = dates[2] or dates[3] or created
    replaced_by = ident(optional(item, "replaced_by", str, int), "'replaced_by'")
    if replaced_by:
        meta["mem0_replaced_by"] = replaced_by
    expires = _expires(optional(item, "expiration_date", str))
    parts = split_text(text)
    return [replace(make_memory(id=stable_id(NAME, key, k if len(parts) > 1 else ""), text=part,
                                tags={NAME, *(slug(c) for c in categories)} - {""},
                                source=f"{NAME}:{user}" if user else NAME, meta=meta, created_at=created,
                                updated_at=updated), expires_at=expires)
            for k, part in enumerate(parts)]


def _expires(value: str | None) -> str | None:
    """mem0's `expiration_date` (a day, after which the memory is hidden) as pmem's `expires_at`:
    the start of the next day, UTC. A full time is read as it is."""
    if not value:
        return None
    try:
        day = date.fromisoformat(value.strip())
    except ValueError:
        return when(value)
    try:
        return f"{day + timedelta(days=1)}T00:00:00Z"
    except OverflowError:
        return None


def _superseded(memories: list[Memory]) -> list[Memory]:
    """Memories mem0 replaced, as history: superseded by their replacement (when it is in the
    file) from when it was made, else from their own last update."""
    by_mem0 = {str(m.meta["mem0_id"]): m for m in memories if m.meta.get("mem0_id") is not None}
    out = []
    for m in memories:
        later = m.meta.get("mem0_replaced_by")
        if not later:
            out.append(m)
            continue
        new = by_mem0.get(later)
        at = (new.created_at if new is not None else None) or m.updated_at or m.created_at or timeutil.now_iso()
        out.append(replace(m, valid_to=at, superseded_by=new.id if new is not None and new.id != m.id else None))
    return out


def read(entry: Entry) -> Iterator[Memory]:
    items, context = _records(entry)
    memories: list[Memory] = []
    for where, item in items:
        try:
            memories.extend(_memories(item, context))
        except BadRecord as exc:
            entry.skip(where, str(exc))
    if not memories and items and not entry.skips.count:
        entry.nothing = f"{len(items)} memories read, each deleted or without text"
    yield from _superseded(memories)

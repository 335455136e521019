"""mem0 and OpenMemory exports.

- mem0 (`Memory.get_all()`, the platform's `client.get_all()`): a list, or `{"results": [...]}`,
  of `{"id", "memory", "user_id", "agent_id", "categories", "metadata", "created_at",
  "updated_at"}`.
- OpenMemory's backup (`POST /api/v1/backup/export`, a zip): `memories.json` with `user`,
  `categories` (`id`, `name`) and `memories` (`id`, `content`, `state`, `category_ids`,
  `created_at`, `updated_at`, `metadata`), and `memories.jsonl.gz`, one
  `{"id", "content", "state", "app", "categories", "created_at", "updated_at"}` per line.

The memory text, its user, categories as tags and both dates are kept; deleted memories are not
imported. Ids come from the export's own memory ids, so the two files of one backup agree.

Bad records: a memory that is no object, or whose text, `id` or `state` has the wrong type, is
left out and counted (as a line that is not JSON is); its user, categories, metadata and dates of
the wrong type are read as absent.
"""

from __future__ import annotations

import re
from typing import Any, Iterator

from ...errors import UsageError
from ...records import Memory
from .base import BadRecord, Entry, ident, kind_of, make_memory, need, optional, slug, split_text, stable_id, when

NAME = "mem0"
DESCRIPTION = "mem0 / OpenMemory export (get_all JSON, memories.json, memories.jsonl[.gz])"
FILES = re.compile(r"\.(json|jsonl|jsonl\.gz)$")
KIND = "memory"


def accepts(name: str) -> bool:
    return bool(FILES.search(name))


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
    for key in ("id", "agent_id", "run_id", "app_id", "app", "hash", "state"):
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
    parts = split_text(text)
    return [make_memory(id=stable_id(NAME, key, k if len(parts) > 1 else ""), text=part,
                        tags={NAME, *(slug(c) for c in categories)} - {""},
                        source=f"{NAME}:{user}" if user else NAME, meta=meta, created_at=created, updated_at=updated)
            for k, part in enumerate(parts)]


def read(entry: Entry) -> Iterator[Memory]:
    items, context = _records(entry)
    for where, item in items:
        try:
            yield from _memories(item, context)
        except BadRecord as exc:
            entry.skip(where, str(exc))

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
"""

from __future__ import annotations

import re
from typing import Any, Iterator

from ...errors import UsageError
from ...records import Memory
from .base import Entry, make_memory, slug, split_text, stable_id, when

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


def _records(entry: Entry) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The memory objects and what the file says about all of them (user, category names)."""
    if entry.name.endswith((".jsonl", ".jsonl.gz")):
        return [obj for _, obj in entry.read_jsonl() if isinstance(obj, dict)], {}
    data = entry.read_json()
    context: dict[str, Any] = {}
    if isinstance(data, dict):
        user = data.get("user")
        if isinstance(user, dict):
            context["user"] = user.get("user_id") or user.get("name") or user.get("id")
        cats = data.get("categories")
        if isinstance(cats, list):
            context["categories"] = {str(c.get("id")): c.get("name") for c in cats if isinstance(c, dict)}
        items = data.get("results", data.get("memories"))
    else:
        items = data
    if not isinstance(items, list):
        raise UsageError(f"{entry.name}: expected a list of mem0 memories (or 'results'/'memories')")
    return [m for m in items if isinstance(m, dict)], context


def read(entry: Entry) -> Iterator[Memory]:
    items, context = _records(entry)
    cat_names = context.get("categories", {})
    for item in items:
        text = item.get("memory", item.get("content", item.get("text")))
        if not isinstance(text, str) or not text.strip():
            continue
        state = item.get("state")
        if state == "deleted" or item.get("deleted_at"):
            continue
        user = item.get("user_id") if "memory" in item else None
        user = user or context.get("user") or item.get("user_id")
        categories = item.get("categories") or []
        if isinstance(categories, str):
            categories = [categories]
        categories = [c for c in categories if isinstance(c, str)]
        categories += [cat_names[c] for c in item.get("category_ids") or [] if cat_names.get(c)]
        meta: dict[str, Any] = {"kind": "memory", "format": NAME}
        for key in ("id", "agent_id", "run_id", "app_id", "app", "hash", "state"):
            if item.get(key):
                meta["mem0_" + key if key == "id" else key] = item[key]
        if user:
            meta["user"] = user
        if isinstance(item.get("metadata"), dict) and item["metadata"]:
            meta["metadata"] = item["metadata"]
        if categories:
            meta["categories"] = categories
        key = item.get("id") or stable_id(text)
        created = when(item.get("created_at") or item.get("createdAt"))
        updated = when(item.get("updated_at") or item.get("updatedAt")) or created
        parts = split_text(text)
        for k, part in enumerate(parts):
            yield make_memory(
                id=stable_id(NAME, key, k if len(parts) > 1 else ""), text=part,
                tags={NAME, *(slug(c) for c in categories)} - {""},
                source=f"{NAME}:{user}" if user else NAME, meta=meta, created_at=created, updated_at=updated)

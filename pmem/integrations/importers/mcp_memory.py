"""The reference MCP memory server's knowledge graph (`memory.jsonl`, `MEMORY_FILE_PATH`).

One JSON object per line: `{"type": "entity", "name", "entityType", "observations": [...]}` or
`{"type": "relation", "from", "to", "relationType"}` (the `read_graph` tool's
`{"entities": [...], "relations": [...]}` is read too). Each observation becomes a memory tagged
with its entity ("Alice: speaks Spanish"); each relation becomes a sentence ("Alice works at
Acme") tagged with both entities, since pmem links memories, not names. The file holds no dates,
so memories are dated by the file's modification time.
"""

from __future__ import annotations

import re
from typing import Any, Iterator

from ...errors import UsageError
from ...records import Memory
from .base import Entry, make_memory, slug, stable_id

NAME = "mcp-memory"
DESCRIPTION = "MCP memory server knowledge graph (memory.jsonl: entities, relations)"
FILES = re.compile(r"\.(jsonl|json)$")
KIND = "observation"


def accepts(name: str) -> bool:
    return bool(FILES.search(name))


def sniff(name: str, head: bytes) -> bool:
    first = head.lstrip()[:4096]
    if first.startswith(b"{") and (b'"type":"entity"' in first or b'"type": "entity"' in first
                                   or b'"type":"relation"' in first or b'"type": "relation"' in first):
        return b'"entityType"' in first or b'"relationType"' in first
    return b'"entities"' in head and b'"relations"' in head and b'"entityType"' in head


def _objects(entry: Entry) -> Iterator[dict[str, Any]]:
    text = entry.read_text().strip()
    if text.startswith("{") and text.endswith("}") and "\n" in text and '"entities"' in text[:200]:
        data = entry.read_json()
        for e in data.get("entities") or []:
            yield {"type": "entity", **e}
        for r in data.get("relations") or []:
            yield {"type": "relation", **r}
        return
    for _, obj in entry.read_jsonl():
        if isinstance(obj, dict):
            yield obj


def _words(relation: str) -> str:
    return " ".join(re.sub(r"(?<=[a-z])(?=[A-Z])", " ", relation).replace("_", " ").replace("-", " ").split()).lower()


def read(entry: Entry) -> Iterator[Memory]:
    at = entry.mtime
    for obj in _objects(entry):
        kind = obj.get("type")
        if kind == "entity":
            name, etype = obj.get("name"), obj.get("entityType")
            if not isinstance(name, str) or not name.strip():
                continue
            observations = obj.get("observations") or []
            if not isinstance(observations, list):
                raise UsageError(f"{entry.name}: entity {name!r}: 'observations' must be a list")
            for obs in observations:
                if not isinstance(obs, str) or not obs.strip():
                    continue
                tags = {NAME, slug(name)} | ({slug(etype)} if isinstance(etype, str) and etype.strip() else set())
                yield make_memory(
                    id=stable_id(NAME, name, obs), text=f"{name}: {obs.strip()}", tags=tags - {""},
                    source=f"{NAME}:{name}", created_at=at,
                    meta={"kind": "observation", "format": NAME, "entity": name, "entity_type": etype})
        elif kind == "relation":
            a, b, rel = obj.get("from"), obj.get("to"), obj.get("relationType")
            if not all(isinstance(x, str) and x.strip() for x in (a, b, rel)):
                continue
            yield make_memory(
                id=stable_id(NAME, a, rel, b), text=f"{a} {_words(rel)} {b}",
                tags={NAME, slug(a), slug(b)} - {""}, source=f"{NAME}:{a}", created_at=at,
                meta={"kind": "relation", "format": NAME, "from": a, "to": b, "relation": rel})

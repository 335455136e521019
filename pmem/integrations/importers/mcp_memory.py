"""The reference MCP memory server's knowledge graph (`memory.jsonl`, `MEMORY_FILE_PATH`).

One JSON object per line: `{"type": "entity", "name", "entityType", "observations": [...]}` or
`{"type": "relation", "from", "to", "relationType"}`, entities first, no newline after the last
line (what server-memory 2026.8.31 writes; tests/integrations/importers/test_mcp_memory_server.py
runs it). The `read_graph` tool's `{"entities": [...], "relations": [...]}` is read too. The server
takes MEMORY_FILE_PATH as it is, so the file may be named anything: a name with no extension
("memory") is recognised by its content as .jsonl and .json are. Each observation becomes a memory tagged
with its entity ("Alice: speaks Spanish"); each relation becomes a sentence ("Alice works at
Acme") tagged with both entities, since pmem links memories, not names. The file holds no dates,
so memories are dated by the file's modification time.

Bad records: a line that is not JSON or not an object, an entity whose `name` or `observations`
(or one of them) has the wrong type, or a relation whose `from`, `to` or `relationType` is not
text, is left out and counted; an `entityType` of the wrong type is read as absent. A read_graph
file whose `entities` or `relations` is no list is refused.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterator

from ...errors import UsageError
from ...records import Memory
from .base import BadRecord, Entry, kind_of, make_memory, named, need, optional, slug, split_text, stable_id

NAME = "mcp-memory"
DESCRIPTION = "MCP memory server knowledge graph (memory.jsonl: entities, relations)"
FILES = re.compile(r"\.(jsonl|json)$")
NO_SUFFIX = re.compile(r"(^|/)[^./][^./]*$")  # "memory", "graphs/work": a MEMORY_FILE_PATH with no extension
KIND = "observation"


def accepts(name: str) -> bool:
    return bool(FILES.search(name) or NO_SUFFIX.search(name))


def sniff(name: str, head: bytes) -> bool:
    first = head.lstrip()[:4096]
    if first.startswith(b"{") and (b'"type":"entity"' in first or b'"type": "entity"' in first
                                   or b'"type":"relation"' in first or b'"type": "relation"' in first):
        return b'"entityType"' in first or b'"relationType"' in first
    return b'"entities"' in head and b'"relations"' in head and b'"entityType"' in head


def _objects(entry: Entry) -> Iterator[tuple[str, Any]]:
    """(where, object) for each entity and relation: the lines of memory.jsonl, or read_graph's
    `{"entities": [...], "relations": [...]}`."""
    text = entry.read_text().strip()
    if text.startswith("{"):
        # read_graph's one object, pretty-printed or not; memory.jsonl's lines fail to parse as one
        # value (or parse as its only entity), whatever names and types its entities have
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            data = None
        if isinstance(data, dict) and "type" not in data and "entities" in data:
            for key, kind in (("entities", "entity"), ("relations", "relation")):
                items = data.get(key) or []
                if not isinstance(items, list):
                    raise UsageError(f"{entry.name}: {key!r} is {kind_of(items)}, not a list")
                for n, item in enumerate(items, start=1):
                    yield f"{kind} {n}", ({**item, "type": kind} if isinstance(item, dict) else item)
            return
    for n, obj in entry.read_jsonl():
        yield f"line {n}", obj


def _words(relation: str) -> str:
    return " ".join(re.sub(r"(?<=[a-z])(?=[A-Z])", " ", relation).replace("_", " ").replace("-", " ").split()).lower()


def _memories(obj: Any, at: str | None) -> Iterator[Memory]:
    if not isinstance(obj, dict):
        raise BadRecord(f"is {kind_of(obj)}, not an object")
    kind = need(obj, "type", str)
    if kind == "entity":
        name, etype = need(obj, "name", str), optional(obj, "entityType", str)
        if not name or not name.strip():
            raise BadRecord("an entity without a name")
        observations = need(obj, "observations", list) or []
        bad = [o for o in observations if not isinstance(o, str)]
        if bad:
            raise BadRecord(f"entity {named(name, '?')}: an observation is {kind_of(bad[0])}, not a string")
        tags = {NAME, slug(name)} | ({slug(etype)} if etype and etype.strip() else set())
        for obs in observations:
            if not obs.strip():
                continue
            parts = split_text(f"{name}: {obs.strip()}")
            for k, part in enumerate(parts):
                yield make_memory(
                    id=stable_id(NAME, name, obs, *((k,) if len(parts) > 1 else ())), text=part,
                    tags=tags - {""}, source=f"{NAME}:{name}", created_at=at,
                    meta={"kind": "observation", "format": NAME, "entity": name, "entity_type": etype})
    elif kind == "relation":
        a, b, rel = need(obj, "from", str), need(obj, "to", str), need(obj, "relationType", str)
        if not (a and a.strip() and b and b.strip() and rel and rel.strip()):
            raise BadRecord("a relation needs 'from', 'to' and 'relationType'")
        for k, part in enumerate(parts := split_text(f"{a} {_words(rel)} {b}")):
            yield make_memory(
                id=stable_id(NAME, a, rel, b, *((k,) if len(parts) > 1 else ())), text=part,
                tags={NAME, slug(a), slug(b)} - {""}, source=f"{NAME}:{a}", created_at=at,
                meta={"kind": "relation", "format": NAME, "from": a, "to": b, "relation": rel})


def read(entry: Entry) -> Iterator[Memory]:
    for where, obj in _objects(entry):
        try:
            memories = list(_memories(obj, entry.mtime))
        except BadRecord as exc:
            entry.skip(where, str(exc))
            continue
        yield from memories

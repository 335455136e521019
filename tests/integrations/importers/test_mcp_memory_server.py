"""The reference MCP memory server (npm @modelcontextprotocol/server-memory 2026.8.31) writes the
file pmem imports: the test drives the real server over stdio with the MCP SDK's own client, then
imports what it wrote, with the library and with `pmem import` into a real store.

The server is found through PMEM_TEST_MCP_MEMORY_SERVER (its `mcp-server-memory` or dist/index.js),
`mcp-server-memory` on PATH, or where .ci/run installs it:
    npm install --prefix "${XDG_CACHE_HOME:-$HOME/.cache}/pmem-ci/server-memory-2026.8.31" \\
        @modelcontextprotocol/server-memory@2026.8.31
The tests skip, saying so, where node or the package is missing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp.client.stdio", reason='the MCP SDK is an extra: pip install ".[mcp]"')

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from pmem.integrations.importers import load

ROOT = Path(__file__).resolve().parents[3]
VERSION = "2026.8.31"


def _server_script() -> Path | None:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    candidates = [os.environ.get("PMEM_TEST_MCP_MEMORY_SERVER"), shutil.which("mcp-server-memory"),
                  cache / "pmem-ci" / f"server-memory-{VERSION}" / "node_modules" / ".bin" / "mcp-server-memory"]
    for c in candidates:
        if c and Path(c).is_file():
            return Path(c).resolve()  # npm's .bin link to dist/index.js
    return None


NODE = shutil.which("node")
SERVER = _server_script()
pytestmark = pytest.mark.skipif(
    NODE is None or SERVER is None,
    reason=f"node or @modelcontextprotocol/server-memory is missing (.ci/run installs it: npm install --prefix "
           f"~/.cache/pmem-ci/server-memory-{VERSION} @modelcontextprotocol/server-memory@{VERSION})")


def server(memory_file: Path, calls: list[tuple[str, dict]]) -> list:
    """Start the server with MEMORY_FILE_PATH=memory_file, make the tool calls in order (each must
    succeed), stop it; the calls' results."""
    assert NODE and SERVER
    params = StdioServerParameters(command=NODE, args=[str(SERVER)], cwd=str(memory_file.parent),
                                   env={"MEMORY_FILE_PATH": str(memory_file), "HOME": str(memory_file.parent)})

    async def main():
        out = []
        async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            for name, arguments in calls:
                with anyio.fail_after(20):
                    result = await s.call_tool(name, arguments)
                assert not result.is_error, (name, result.content)
                out.append(result)
        return out

    return anyio.run(main)


def entity(name: str, kind: str, *observations: str) -> dict:
    return {"name": name, "entityType": kind, "observations": list(observations)}


def relation(a: str, rel: str, b: str) -> dict:
    return {"from": a, "to": b, "relationType": rel}


def pmem(db: Path, *args: str) -> dict:
    """The real CLI, in a process of its own, on the store `db`; its --json answer."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PMEM_EMBED_MODEL": "fake-64"}
    r = subprocess.run([sys.executable, "-m", "pmem", "--db", str(db), *args, "--json"], capture_output=True,
                       text=True, timeout=60, env=env)
    assert r.returncode == 0, (args, r.stdout, r.stderr[-2000:])
    return json.loads(r.stdout)


def stored(db: Path) -> dict[str, set[str]]:
    return {m["text"]: set(m["tags"]) for m in pmem(db, "list", "-n", "0")}


ADA, ENGINES, CHARLES, MARY = "Ada Lovelace", "Analytical Engines Ltd", "Charles Babbage", "Mary Somerville"
FIRST = [
    ("create_entities", {"entities": [
        entity(ADA, "person", "Prefers tea to coffee", "Lives in Lisbon", "Owns a cat named Pixel"),
        entity(ENGINES, "organization", "Builds calculating machines"),
        entity(CHARLES, "person", "Designed the difference engine")]}),
    ("create_relations", {"relations": [relation(ADA, "works_at", ENGINES), relation(CHARLES, "founded", ENGINES),
                                        relation(ADA, "knowsWell", CHARLES)]}),
    # the repeated observation is dropped by the server itself
    ("add_observations", {"observations": [{"entityName": ADA, "contents": ["Speaks Portuguese", "Lives in Lisbon"]}]}),
    ("delete_observations", {"deletions": [{"entityName": ADA, "observations": ["Owns a cat named Pixel"]}]}),
    # takes Charles's relations with him
    ("delete_entities", {"entityNames": [CHARLES]}),
]
SECOND = [
    ("add_observations", {"observations": [{"entityName": ADA, "contents": ["Is learning the cello"]}]}),
    ("create_entities", {"entities": [entity(MARY, "person", "Wrote On the Connexion of the Physical Sciences")]}),
    ("create_relations", {"relations": [relation(MARY, "mentors", ADA)]}),
    ("delete_observations", {"deletions": [{"entityName": ADA, "observations": ["Lives in Lisbon"]}]}),
    ("delete_entities", {"entityNames": [ENGINES]}),
]
PERSON_ADA = {"mcp-memory", "ada-lovelace", "person"}


def test_what_the_server_writes_is_imported_and_a_second_import_adds_only_the_new(tmp_path):
    memory = tmp_path / "memory.jsonl"
    server(memory, FIRST)

    # what this version writes: one object per line, entities first, no newline after the last
    raw = memory.read_text()
    assert not raw.endswith("\n")
    lines = [json.loads(line) for line in raw.split("\n")]
    assert lines == [{"type": "entity", "name": ADA, "entityType": "person",
                      "observations": ["Prefers tea to coffee", "Lives in Lisbon", "Speaks Portuguese"]},
                     {"type": "entity", "name": ENGINES, "entityType": "organization",
                      "observations": ["Builds calculating machines"]},
                     {"type": "relation", "from": ADA, "to": ENGINES, "relationType": "works_at"}]

    plan = load(memory)
    assert plan.formats == {"mcp-memory": 1} and plan.skipped_records == 0
    assert [(m.text, set(m.tags)) for m in plan.records] == [
        (f"{ADA}: Prefers tea to coffee", PERSON_ADA), (f"{ADA}: Lives in Lisbon", PERSON_ADA),
        (f"{ADA}: Speaks Portuguese", PERSON_ADA),
        (f"{ENGINES}: Builds calculating machines", {"mcp-memory", "analytical-engines-ltd", "organization"}),
        (f"{ADA} works at {ENGINES}", {"mcp-memory", "ada-lovelace", "analytical-engines-ltd"})]
    assert plan.kinds == {"observation": 4, "relation": 1}
    # a deleted observation, a deleted entity and the relations it took leave nothing
    assert not [m for m in plan.records if "Pixel" in m.text or CHARLES in m.text or "charles-babbage" in m.tags]

    db = tmp_path / "pmem.db"
    first = pmem(db, "import", str(memory))
    assert (first["formats"], first["imported"], first["skipped_existing"]) == ({"mcp-memory": 1}, 5, 0)
    assert stored(db) == {m.text: set(m.tags) for m in plan.records}

    server(memory, SECOND)
    assert [m.text for m in load(memory).records] == [
        f"{ADA}: Prefers tea to coffee", f"{ADA}: Speaks Portuguese", f"{ADA}: Is learning the cello",
        f"{MARY}: Wrote On the Connexion of the Physical Sciences", f"{MARY} mentors {ADA}"]
    second = pmem(db, "import", str(memory))
    assert (second["read"], second["imported"], second["skipped_existing"]) == (5, 3, 2)
    after = stored(db)
    assert set(after) - {m.text for m in plan.records} == {
        f"{ADA}: Is learning the cello", f"{MARY}: Wrote On the Connexion of the Physical Sciences",
        f"{MARY} mentors {ADA}"}
    assert after[f"{MARY} mentors {ADA}"] == {"mcp-memory", "mary-somerville", "ada-lovelace"}
    # an import adds and never deletes: what the server deleted after the first import stays in pmem
    gone = {f"{ADA}: Lives in Lisbon", f"{ENGINES}: Builds calculating machines", f"{ADA} works at {ENGINES}"}
    assert gone <= set(after)
    assert len(after) == 8
    again = pmem(db, "import", str(memory))
    assert (again["imported"], again["skipped_existing"]) == (0, 5)


def test_a_memory_file_path_without_extension_and_read_graphs_answer(tmp_path):
    # MEMORY_FILE_PATH is taken as it is: "graph", no extension. An entity named "entities" makes
    # the file look like read_graph's object to a reader that only glances at it.
    graph = tmp_path / "graph"
    results = server(graph, [
        ("create_entities", {"entities": [entity("entities", "concept", "Things that exist on their own"),
                                          entity("Relations", "concept", "What links the entities")]}),
        ("create_relations", {"relations": [relation("Relations", "connect", "entities")]}),
        ("read_graph", {}),
    ])
    assert graph.is_file() and not list(tmp_path.glob("graph.*"))
    want = ["entities: Things that exist on their own", "Relations: What links the entities",
            "Relations connect entities"]
    plan = load(graph)
    assert plan.formats == {"mcp-memory": 1} and [m.text for m in plan.records] == want

    db = tmp_path / "pmem.db"
    got = pmem(db, "import", str(graph))
    assert (got["formats"], got["imported"]) == ({"mcp-memory": 1}, 3)
    assert set(stored(db)) == set(want)

    # read_graph's answer (pretty-printed {"entities", "relations"}), saved as a file, reads the same
    answer = results[-1].content[0].text
    assert json.loads(answer).keys() == {"entities", "relations"}
    saved = tmp_path / "read_graph.json"
    saved.write_text(answer)
    from_answer = load(saved)
    assert [(m.id, m.text) for m in from_answer.records] == [(m.id, m.text) for m in plan.records]

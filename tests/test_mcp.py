"""`pmem mcp` driven over real stdio by the MCP SDK's own client (ClientSession + stdio_client)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp.client.stdio", reason='the MCP SDK is an extra: pip install ".[mcp]"')

import anyio
from mcp import types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

ROOT = Path(__file__).resolve().parents[1]
TOOLS = {"recall", "search", "remember", "update", "pin", "forget"}


def _params(home: Path, cwd: Path, **env) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "pmem", "mcp"], cwd=str(cwd),
        env={"PMEM_HOME": str(home), "PMEM_EMBED_MODEL": "fake-64", "PYTHONPATH": str(ROOT),
             "PMEM_MODELS_DIR": os.environ.get("PMEM_MODELS_DIR", ""), **env})


def _session(params: StdioServerParameters, body, client: str = "test-client"):
    async def main():
        info = types.Implementation(name=client, version="1")
        async with stdio_client(params) as (read, write), ClientSession(read, write, client_info=info) as s:
            await s.initialize()
            return await body(s)
    return anyio.run(main)


def _text(result) -> str:
    assert result.content and result.content[0].type == "text"
    return result.content[0].text


@pytest.fixture
def project(tmp_path):
    p = tmp_path / "proj"
    (p / ".git").mkdir(parents=True)
    return p


def test_tools_listed_with_descriptions_and_annotations(pmem_home, project):
    async def body(s):
        return (await s.list_tools()).tools

    tools = {t.name: t for t in _session(_params(pmem_home, project), body)}
    assert set(tools) == TOOLS
    for t in tools.values():
        assert t.description and len(t.description) > 40
        assert t.annotations is not None
    assert tools["recall"].annotations.read_only_hint is True
    assert tools["search"].annotations.read_only_hint is True
    assert tools["forget"].annotations.destructive_hint is True
    assert tools["remember"].annotations.read_only_hint is False
    assert tools["remember"].annotations.destructive_hint is False


def test_every_tool_round_trip(pmem_home, project, tmp_path):
    async def body(s):
        out = {}
        r = await s.call_tool("remember", {"text": "I moved to Lisbon in May", "tags": ["home"], "project": True})
        assert not r.is_error, _text(r)
        out["remember"] = json.loads(_text(r))
        mid = out["remember"]["memory"]["id"]
        again = json.loads(_text(await s.call_tool("remember", {"text": "I moved to Lisbon in May"})))
        out["again"] = again
        out["search"] = json.loads(_text(await s.call_tool("search", {"query": "Lisbon"})))
        out["pin"] = json.loads(_text(await s.call_tool("pin", {"id": mid})))
        r = await s.call_tool("update", {"id": mid, "text": "I moved to Porto in June"})
        assert not r.is_error, _text(r)
        out["update"] = json.loads(_text(r))
        out["recall"] = _text(await s.call_tool("recall", {"topic": "where do I live"}))
        out["forget"] = json.loads(_text(await s.call_tool("forget", {"id": out["update"]["memory"]["id"]})))
        out["personal"] = json.loads(_text(await s.call_tool("remember", {"text": "I am vegetarian"})))
        out["after"] = json.loads(_text(await s.call_tool("search", {"query": "Porto"})))
        return out

    out = _session(_params(pmem_home, project), body, client="Claude Code")
    mem = out["remember"]["memory"]
    assert out["remember"]["created"] is True and mem["source"] == "mcp:claude-code"
    assert mem["scope"] == str(project.resolve())
    assert out["again"]["created"] is False
    assert [h["id"] for h in out["search"]["results"]] == [mem["id"]]
    assert out["pin"]["memory"]["tier"] == "core"
    assert out["update"]["supersedes"] == mem["id"]
    assert "Porto" in out["recall"] and "Lisbon" not in out["recall"]
    assert out["forget"]["forgotten"] == out["update"]["memory"]["id"]
    assert out["forget"]["forgotten"] not in {h["id"] for h in out["after"]["results"]}
    assert "scope" not in out["personal"]["memory"]  # without project: true, a memory is global

    # Every change is in the database as an undoable event, with history kept.
    from pmem.store import Filter, MemoryStore

    with MemoryStore(pmem_home / "pmem.db") as store:
        old = store.get(mem["id"])
        assert old.superseded_by == out["update"]["memory"]["id"]
        assert [e.action for e, _ in store.history(old.id)][:2] == ["add", "pin"]
        assert [m.text for m in store.list_memories(Filter(scope="global"))] == ["I am vegetarian"]
        store.undo()  # the last remember
        store.undo()  # the forget
        assert store.get(old.superseded_by).forgotten_at is None
        assert store.get(old.superseded_by).scope == str(project.resolve())  # the correction keeps it


def test_bad_arguments_are_tool_errors_and_the_server_keeps_serving(pmem_home, project):
    async def body(s):
        results = [
            await s.call_tool("search", {"query": 5}),
            await s.call_tool("search", {}),
            await s.call_tool("search", {"query": "   "}),
            await s.call_tool("search", {"query": "x", "limit": -3}),
            await s.call_tool("forget", {"id": "zzzzzzzz"}),
            await s.call_tool("pin", {"id": "'; DROP TABLE memories; --"}),
            await s.call_tool("remember", {"text": ""}),
            await s.call_tool("remember", {"text": "ok", "tags": ["two words"]}),
            await s.call_tool("nonexistent", {}),
        ]
        ok = await s.call_tool("remember", {"text": "still alive"})
        return results, ok

    results, ok = _session(_params(pmem_home, project), body)
    for r in results:
        assert r.is_error
        assert "Traceback" not in _text(r)
    assert "no memory with id" in _text(results[4])
    assert not ok.is_error


def test_huge_arguments_are_refused_or_bounded(pmem_home, project):
    async def body(s):
        huge = await s.call_tool("remember", {"text": "word " * 60_000})
        long_query = await s.call_tool("search", {"query": "lisbon " * 50_000})
        for i in range(60):
            await s.call_tool("remember", {"text": f"note {i}: " + "lisbon café " * 800})
        big = await s.call_tool("search", {"query": "lisbon", "limit": 1000})
        block = await s.call_tool("recall", {"topic": "lisbon", "budget": 10_000_000})
        return huge, long_query, big, block

    huge, long_query, big, block = _session(_params(pmem_home, project), body)
    assert huge.is_error and "limit" in _text(huge)
    assert not long_query.is_error
    payload = json.loads(_text(big))
    assert len(_text(big)) <= 24_000 and 0 < len(payload["results"]) <= 50
    assert payload.get("left_out", 0) > 0 or len(payload["results"]) == 50
    assert all(len(r["text"]) <= 1_500 for r in payload["results"])
    assert not block.is_error and len(_text(block)) <= 24_000


def test_initialize_does_not_load_a_model(pmem_home, project, tmp_path):
    """A broken model setting still lets the client connect fast; only the call that needs a
    vector fails, with a one-line message, and the server keeps serving."""
    params = _params(pmem_home, project, PMEM_EMBED_MODEL=str(tmp_path / "missing.gguf"))

    async def body(s):
        tools = await s.list_tools()
        bad = await s.call_tool("remember", {"text": "needs a vector"})
        fine = await s.call_tool("recall", {})
        return tools, bad, fine

    started = time.perf_counter()
    tools, bad, fine = _session(params, body)
    assert len(tools.tools) == 6
    assert bad.is_error and "missing.gguf" in _text(bad)
    assert not fine.is_error and "nothing stored yet" in _text(fine)
    assert time.perf_counter() - started < 30


def test_writes_while_the_cli_holds_the_lock(pmem_home, project):
    """Another writer holds the lock for 6.5 s, past SQLite's 5 s busy timeout: the server retries
    and its write lands, and "database is locked" never reaches the client."""
    from pmem import db

    db_path = pmem_home / "pmem.db"
    from pmem.store import MemoryStore

    MemoryStore(db_path).close()
    release = threading.Event()
    held = threading.Event()

    def hold():
        conn = db.connect(db_path)
        conn.execute("BEGIN IMMEDIATE")
        held.set()
        release.wait(10)
        time.sleep(6.5)
        conn.execute("COMMIT")
        conn.close()

    t = threading.Thread(target=hold)

    async def body(s):
        t.start()
        held.wait(5)
        release.set()
        return await s.call_tool("remember", {"text": "written while locked"})

    r = _session(_params(pmem_home, project), body)
    t.join()
    assert not r.is_error, _text(r)
    assert "database" not in _text(r)
    assert json.loads(_text(r))["created"] is True


def test_a_client_that_disconnects_leaves_no_server_behind(pmem_home, project):
    """Kill the connection mid-session (stdin closes): the server exits by itself, cleanly."""
    env = {**os.environ, "PMEM_HOME": str(pmem_home), "PMEM_EMBED_MODEL": "fake-64", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "pmem", "mcp"], cwd=project, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "raw", "version": "0"}}}
    proc.stdin.write((json.dumps(init) + "\n").encode())
    proc.stdin.flush()
    line = proc.stdout.readline()
    assert json.loads(line)["id"] == 1  # initialize answered
    proc.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
    proc.stdin.write(b'{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "remember", '
                     b'"arguments": {"text": "half a conversation"}}}\n')
    proc.stdin.flush()
    proc.stdin.close()  # the client goes away without waiting for the answer
    try:
        rc = proc.wait(20)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = proc.stderr.read().decode()
    assert rc == 0, err
    assert "Traceback" not in err


def test_missing_sdk_names_the_extra(pmem_home, tmp_path):
    """Without the SDK, `pmem mcp` says in one line what to install (exit 1)."""
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\nclass _Block:\n    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'mcp' or name.startswith('mcp.'):\n            raise ImportError('blocked')\n"
        "sys.meta_path.insert(0, _Block())\n")
    env = {**os.environ, "PMEM_HOME": str(pmem_home), "PYTHONPATH": f"{blocker}{os.pathsep}{ROOT}"}
    r = subprocess.run([sys.executable, "-m", "pmem", "mcp"], check=False, env=env, capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=60)
    assert r.returncode == 1
    assert 'pip install "pmem[mcp]"' in r.stderr
    assert r.stderr.startswith("pmem: error:") and "Traceback" not in r.stderr


@pytest.mark.model
def test_remember_with_extract_keeps_the_source(pmem_home, project):
    """The real models: `remember(extract=True)` stores the text as the source of its facts."""
    params = _params(pmem_home, project, PMEM_EMBED_MODEL="all-MiniLM-L6-v2",
                     PMEM_MODELS_DIR=os.environ.get("PMEM_MODELS_DIR", ""))

    async def body(s):
        return await s.call_tool("remember", {
            "text": "I moved to Lisbon in May 2024. My sister Ana is a nurse in Porto.", "extract": True},
            read_timeout_seconds=300)

    r = _session(params, body, client="cursor")
    assert not r.is_error, _text(r)
    data = json.loads(_text(r))
    assert data["extracted"] is True and data["source_ids"]
    from pmem.store import MemoryStore

    with MemoryStore(pmem_home / "pmem.db") as store:
        source = store.get(data["source_ids"][0])
        assert "Lisbon" in source.text and source.tier == "episodic" and source.source == "mcp:cursor"
        for fact in data["facts"]:
            if fact["id"]:
                assert source.id in store.get(fact["id"]).derived_from

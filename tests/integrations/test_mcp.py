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
from mcp import MCPError, types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

ROOT = Path(__file__).resolve().parents[2]
TOOLS = {"recall", "search", "remember", "update", "pin", "forget"}


def _params(home: Path, cwd: Path, **env) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "pmem", "mcp"], cwd=str(cwd),
        env={"PMEM_HOME": str(home), "PMEM_EMBED_MODEL": "fake-64", "PYTHONPATH": str(ROOT), "PMEM_SERVER": "never",
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
    from pmem.service import MemoryStore
    from pmem.store import Filter

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


@pytest.mark.slow
def test_a_locked_database_answers_within_the_hook_bound(pmem_home, project, fake_config):
    """Another process holds the write lock: the first call (which opens the store too) answers
    within the hook's bound (about 4 s) with an error that says so, where it took 21.8 s; a read
    answers at once; after the lock, the same call succeeds; a lock shorter than the bound is waited out."""
    from pmem import db
    from pmem.service import MemoryStore

    db_path = pmem_home / "pmem.db"
    with MemoryStore(db_path, config=fake_config) as store:
        store.add("the deploy key lives in the vault")

    def hold(release: threading.Event, held: threading.Event, at_least: float = 0.0) -> None:
        conn = db.connect(db_path)
        conn.execute("BEGIN IMMEDIATE")
        held.set()
        release.wait(30)
        time.sleep(at_least)
        conn.execute("COMMIT")
        conn.close()

    async def timed(s, tool, args):
        started = time.perf_counter()
        r = await s.call_tool(tool, args)
        return r, time.perf_counter() - started

    async def body(s):
        try:  # only the SDK answers this (tools/list may come before it): the times are the lock's
            await s.get_prompt("none")
        except MCPError:
            pass
        release, held = threading.Event(), threading.Event()
        t = threading.Thread(target=hold, args=(release, held))
        t.start()
        held.wait(5)
        try:
            locked = await timed(s, "remember", {"text": "written while locked"})
            read = await timed(s, "recall", {"topic": "deploy key"})
        finally:
            release.set()
            t.join()
        after = await s.call_tool("remember", {"text": "written while locked"})
        release, held = threading.Event(), threading.Event()
        t = threading.Thread(target=hold, args=(release, held, 1.0))
        t.start()
        held.wait(5)
        release.set()  # committed about 1 s from now
        short = await s.call_tool("remember", {"text": "written after a short lock"})
        t.join()
        return locked, read, after, short

    (locked, locked_s), (read, read_s), after, short = _session(_params(pmem_home, project), body)
    assert locked.is_error and "locked" in _text(locked) and "try again" in _text(locked)
    assert locked_s < 4.5, f"{locked_s:.1f} s"
    assert not read.is_error and "deploy key" in _text(read) and read_s < 3.0, f"{read_s:.1f} s"
    assert not after.is_error and json.loads(_text(after))["created"] is True
    assert not short.is_error, _text(short)
    assert json.loads(_text(short))["created"] is True


@pytest.mark.slow
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
    assert 'pip install "pmem-cli[mcp]"' in r.stderr
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
    from pmem.service import MemoryStore

    with MemoryStore(pmem_home / "pmem.db") as store:
        source = store.get(data["source_ids"][0])
        assert "Lisbon" in source.text and source.tier == "episodic" and source.source == "mcp:cursor"
        for fact in data["facts"]:
            if fact["id"]:
                assert source.id in store.get(fact["id"]).derived_from


# -- what an agent may change -------------------------------------------------------------------


def _seed(home: Path, config, ids: dict[str, str]) -> None:
    from pmem.service import MemoryStore

    with MemoryStore(home / "pmem.db", config=config) as store:
        store.insert([store.new_memory(text, memory_id=mid) for mid, text in ids.items()])


def test_ids_from_an_agent_need_four_characters(pmem_home, project, fake_config):
    """forget {"id": "1"} forgot whichever memory was the only one to match: a prefix shorter than
    4 (git's minimum) is refused unless it is a whole id, and an ambiguous one says what it matched."""
    _seed(pmem_home, fake_config, {"abcd1234": "Dana approves deploys", "abcd5678": "The cabin has no wifi",
                                   "b1234567": "I am vegetarian", "ef": "An imported memory with a short id"})

    async def body(s):
        calls = [("forget", {"id": "b"}), ("forget", {"id": "b12"}), ("pin", {"id": "b1"}),
                 ("update", {"id": "b12", "text": "I eat fish now"}), ("forget", {"id": "abcd"}),
                 ("pin", {"id": "ef"}), ("forget", {"id": "B123"})]
        return [await s.call_tool(name, args) for name, args in calls]

    short, short3, pin_short, update_short, ambiguous, whole, enough = _session(_params(pmem_home, project), body)
    for r in (short, short3, pin_short, update_short):
        assert r.is_error and "at least 4 characters" in _text(r), _text(r)
    assert ambiguous.is_error and "abcd1234" in _text(ambiguous) and "abcd5678" in _text(ambiguous)
    assert not whole.is_error and json.loads(_text(whole))["pinned"] == "ef"
    assert not enough.is_error and json.loads(_text(enough))["forgotten"] == "b1234567"
    from pmem.service import MemoryStore
    from pmem.store import Filter

    with MemoryStore(pmem_home / "pmem.db", config=fake_config) as store:
        forgotten = [m.id for m in store.list_memories(Filter.everything()) if m.forgotten]
        assert forgotten == ["b1234567"]  # the one named with 4 characters, nothing else
        assert len(store.list_memories(Filter.everything())) == 4  # the refused update stored nothing


def test_update_follows_the_current_version_and_a_retry_stores_nothing(pmem_home, project, fake_config):
    """update(id) twice, or with an id already superseded, left two current versions superseding
    one memory: now a stale id corrects the current version, and a retried call is idempotent."""
    async def body(s):
        first = json.loads(_text(await s.call_tool("remember", {"text": "My favourite colour is green"})))
        green = first["memory"]["id"]
        blue = json.loads(_text(await s.call_tool("update", {"id": green, "text": "My favourite colour is blue"})))
        retry = json.loads(_text(await s.call_tool("update", {"id": green, "text": "My favourite colour is blue"})))
        red = json.loads(_text(await s.call_tool("update", {"id": green, "text": "My favourite colour is red"})))
        found = json.loads(_text(await s.call_tool("search", {"query": "favourite colour"})))
        return green, blue, retry, red, found

    green, blue, retry, red, found = _session(_params(pmem_home, project), body)
    assert blue["updated"] is True and blue["supersedes"] == green
    assert retry["updated"] is False and retry["memory"]["id"] == blue["memory"]["id"]
    assert red["updated"] is True and red["supersedes"] == blue["memory"]["id"] and green in red["note"]
    assert [r["text"] for r in found["results"]] == ["My favourite colour is red"]
    from pmem.service import MemoryStore
    from pmem.store import Filter

    with MemoryStore(pmem_home / "pmem.db", config=fake_config) as store:
        assert len(store.list_memories(Filter.everything())) == 3  # green, blue, red: the retry stored nothing
        assert store.get(green).superseded_by == blue["memory"]["id"]
        assert store.get(blue["memory"]["id"]).superseded_by == red["memory"]["id"]
        current = [m.text for m in store.list_memories(Filter()) if "colour" in m.text]
        assert current == ["My favourite colour is red"]  # one current version, no fork


def test_concurrent_updates_of_one_memory_never_fork_it(pmem_home, fake_config):
    """Two agents correct the same memory at the same moment (each with its own connection): the
    chain is re-read under the write lock, so one correction follows the other."""
    from pmem.integrations import actions
    from pmem.service import MemoryStore
    from pmem.store import Filter

    path = pmem_home / "pmem.db"
    with MemoryStore(path, config=fake_config) as store:
        mid = store.add("The standup is at 9")[0].id
    barrier = threading.Barrier(4)
    results: list = []

    def correct(text: str) -> None:
        with MemoryStore(path, config=fake_config) as store:
            barrier.wait()
            results.append(actions.update(store, mid, text))

    threads = [threading.Thread(target=correct, args=(t,)) for t in
               ("The standup is at 10", "The standup is at 10", "The standup is at 11", "The standup is at 10")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with MemoryStore(path, config=fake_config) as store:
        everything = store.list_memories(Filter.everything())
        current = [m for m in everything if m.valid_to is None]
        assert len(current) == 1, [m.text for m in current]
        superseding = [m.superseded_by for m in everything if m.superseded_by]
        assert len(superseding) == len(set(superseding)) == len(everything) - 1  # a chain
        assert len(everything) == 1 + sum(r["updated"] for r in results)
        by_id = {m.id: m for m in everything}
        chain = [by_id[mid]]
        while chain[-1].superseded_by:
            chain.append(by_id[chain[-1].superseded_by])
        assert len(chain) == len(everything)  # every version on one line
        texts = [m.text for m in chain]
        assert all(a != b for a, b in zip(texts, texts[1:])), texts  # a repeated call stored nothing


def test_remember_of_stored_text_applies_pin_and_tags(pmem_home, project, fake_config):
    """remember(pin, tags) of text already stored returned created:false and did nothing: now the
    caller's pin and tags land on the existing memory, as events one undo takes back."""
    async def body(s):
        first = json.loads(_text(await s.call_tool("remember", {"text": "I drink oat milk"})))
        again = json.loads(_text(await s.call_tool(
            "remember", {"text": "I drink oat milk", "pin": True, "tags": ["food", "coffee"]})))
        recalled = _text(await s.call_tool("recall", {"topic": "weekend plans"}))
        return first, again, recalled

    first, again, recalled = _session(_params(pmem_home, project), body)
    mid = first["memory"]["id"]
    assert again["created"] is False and again["memory"]["id"] == mid
    assert again["memory"]["tier"] == "core" and set(again["memory"]["tags"]) == {"food", "coffee"}
    assert "pinned" in again["note"] and "tagged" in again["note"]
    assert "oat milk" in recalled  # core now: recalled whatever the topic
    from pmem.service import MemoryStore

    with MemoryStore(pmem_home / "pmem.db", config=fake_config) as store:
        assert [e.action for e, _ in store.history(mid)] == ["add", "retag", "pin"]
        store.undo()
        m = store.get(mid)
        assert not m.pinned and m.tags == []


def test_a_forgotten_memory_cannot_be_pinned_or_updated(pmem_home, project, fake_config):
    """pin of a forgotten id said "pinned" (never recalled); update brought it back as a new core
    memory. Both are refused, saying how to bring it back."""
    async def body(s):
        mid = json.loads(_text(await s.call_tool("remember", {"text": "My old phone number", "pin": True})))
        mid = mid["memory"]["id"]
        await s.call_tool("forget", {"id": mid})
        pin = await s.call_tool("pin", {"id": mid})
        update = await s.call_tool("update", {"id": mid, "text": "My new phone number"})
        recalled = _text(await s.call_tool("recall", {}))
        return mid, pin, update, recalled

    mid, pin, update, recalled = _session(_params(pmem_home, project), body)
    for r in (pin, update):
        assert r.is_error and "forgotten" in _text(r) and f"pmem restore {mid}" in _text(r), _text(r)
    assert "phone number" not in recalled
    from pmem.service import MemoryStore
    from pmem.store import Filter

    with MemoryStore(pmem_home / "pmem.db", config=fake_config) as store:
        assert [m.id for m in store.list_memories(Filter.everything())] == [mid]  # no new memory
        assert store.get(mid).forgotten


def test_recall_says_what_is_true_when_nothing_matches(pmem_home, project, fake_config):
    """recall said "(nothing stored yet)" with memories stored that matched nothing."""
    async def empty(s):
        return _text(await s.call_tool("recall", {"topic": "dinner"}))

    assert "(nothing stored yet)" in _session(_params(pmem_home, project), empty)
    from pmem.service import MemoryStore

    with MemoryStore(pmem_home / "pmem.db", config=fake_config) as store:
        store.add("A conversation we had", tier="episodic")  # stored, but not what recall offers

    async def body(s):
        return (_text(await s.call_tool("recall", {"topic": "dinner"})),
                _text(await s.call_tool("recall", {})))

    topic, recent = _session(_params(pmem_home, project), body)
    assert "nothing stored yet" not in topic and "no stored memory is relevant to: dinner" in topic
    assert "nothing stored yet" not in recent and "no memories to recall" in recent


@pytest.mark.model
def test_remember_with_extract_in_the_project_keeps_facts_there(pmem_home, project):
    """The real models: `remember(extract=True, project=True)` stored its facts globally; now the
    source and every fact belong to the project, as the tool says."""
    params = _params(pmem_home, project, PMEM_EMBED_MODEL="all-MiniLM-L6-v2",
                     PMEM_MODELS_DIR=os.environ.get("PMEM_MODELS_DIR", ""))

    async def body(s):
        return await s.call_tool("remember", {
            "text": "The tests run with make check. The staging server is called pluto.", "extract": True,
            "project": True}, read_timeout_seconds=300)

    r = _session(params, body, client="cursor")
    assert not r.is_error, _text(r)
    data = json.loads(_text(r))
    from pmem.service import MemoryStore
    from pmem.store import Filter

    with MemoryStore(pmem_home / "pmem.db") as store:
        ids = data["source_ids"] + [f["id"] for f in data["facts"] if f["id"]]
        assert len(ids) > len(data["source_ids"])  # facts were found
        assert {store.get(i).scope for i in ids} == {str(project.resolve())}
        assert store.list_memories(Filter(scope="global"), limit=None) == []


def test_writing_tools_start_the_background_sync_and_reading_ones_do_not(pmem_home, monkeypatch):
    """sync_auto = on: a memory an agent stores through MCP travels like one stored by
    `pmem add`, so each writing tool kicks the background sync (autosync.kick) and no reading
    one does; with the setting off, none does."""
    from pmem import autosync
    from pmem.config import load
    from pmem.integrations import actions
    from pmem.integrations.mcp_server import Backend
    from pmem.service import MemoryStore

    monkeypatch.setenv("PMEM_EMBED_MODEL", "fake-64")
    kicked: list = []
    monkeypatch.setattr(autosync, "kick", lambda db: kicked.append(Path(db)) or True)
    path = pmem_home / "pmem.db"
    for setting, expected in (("on", 1), ("off", 0)):
        monkeypatch.setenv("PMEM_SYNC_AUTO", setting)
        kicked.clear()
        backend = Backend(lambda: MemoryStore(path, config=load()))
        text = f"The standup is at 9 ({setting})"
        mid = backend.run(lambda s, t=text: actions.remember(s, t), writes=True)["memory"]["id"]
        assert kicked == [path] * expected
        backend.run(lambda s: s.list_memories())
        backend.run(lambda s, m=mid: actions.pin(s, m), writes=True)
        assert kicked == [path] * (2 * expected)
        backend.close()

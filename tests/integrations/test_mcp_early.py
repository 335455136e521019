"""`pmem mcp` answers `tools/list`, `ping` and the empty lists before the MCP SDK has loaded, with
the SDK's own bytes, and leaves everything else to the SDK, in order: each case is compared with
pmem's tools on the SDK's server alone."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp.server.mcpserver", reason='the MCP SDK is an extra: pip install ".[mcp]"')

import anyio
from mcp import types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from pmem.integrations import mcp_early, mcp_server

ROOT = Path(__file__).resolve().parents[2]
TOOLS = {"recall", "search", "remember", "update", "pin", "forget"}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def _initialize(version: str = "2025-06-18", mid: int | str = 1, capabilities: dict | None = None,
                client: dict | None = None) -> dict:
    return {"jsonrpc": "2.0", "id": mid, "method": "initialize", "params": {
        "protocolVersion": version, "capabilities": {} if capabilities is None else capabilities,
        "clientInfo": client or {"name": "t", "version": "1"}}}


def _request(mid: int | str, method: str, **params) -> dict:
    return {"jsonrpc": "2.0", "id": mid, "method": method, **({"params": params} if params else {})}


def _env(home: Path, **extra) -> dict:
    return {**os.environ, "PMEM_HOME": str(home), "PMEM_EMBED_MODEL": "fake-64", "PMEM_SERVER": "never",
            "PYTHONPATH": str(ROOT), **extra}


class _Raw:
    """`pmem mcp` over raw lines, to see its exact bytes."""

    def __init__(self, home: Path, cwd: Path, **env):
        self.proc = subprocess.Popen([sys.executable, "-m", "pmem", "mcp"], cwd=cwd, env=_env(home, **env),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.buf = b""

    def send(self, *messages: dict | bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"".join(m if isinstance(m, bytes) else mcp_early.compact(m) for m in messages))
        self.proc.stdin.flush()

    def line(self, timeout: float = 120) -> bytes:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self.buf:
                assert sel.select(timeout), f"no reply in {timeout:g} s"
                data = os.read(fd, 1 << 16)
                assert data, "the server left"
                self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return line + b"\n"

    def rest(self) -> list[bytes]:
        """Close stdin; every line the server still writes before it exits."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        rest = self.buf + self.proc.stdout.read()
        self.buf = b""
        assert self.proc.wait(60) == 0
        return rest.splitlines(keepends=True)

    def close(self) -> str:
        if self.proc.poll() is None:
            if self.proc.stdin and not self.proc.stdin.closed:
                self.proc.stdin.close()
            try:
                self.proc.wait(60)
            finally:
                if self.proc.poll() is None:
                    self.proc.kill()
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode()


# -- the kept answers ---------------------------------------------------------------------------


def test_the_kept_answers_are_what_the_installed_sdk_serves():
    """mcp_early.json is regenerated from the SDK and compared, like man/: a changed docstring,
    argument or annotation of a tool, or another SDK, makes it stale. Under an SDK newer than the
    file's (a fresh install picks the newest), the file is not used at all (the next test), and
    pmem makes its answers once for that SDK (the test after it): nothing to compare then."""
    made = json.loads(mcp_early.FILE.read_text(encoding="utf-8"))["made_with"]
    if made != mcp_early.installed():
        pytest.skip(f"mcp_early.json was made with {made}, this is {mcp_early.installed()}: "
                    "regenerate it with python -m pmem.integrations.mcp_server --early")
    assert mcp_early.FILE.read_text(encoding="utf-8") == mcp_early.text(mcp_early.generate(mcp_server.sdk_session)), \
        "stale: run python -m pmem.integrations.mcp_server --early"
    assert mcp_early.answers() is not None  # made with this SDK: the early path is on in these tests
    listed = mcp_early.answers()["2025-11-25"]["tools/list"]["tools"]
    assert {t["name"] for t in listed} == TOOLS


def _made_elsewhere(tmp_path: Path) -> Path:
    kept = json.loads(mcp_early.FILE.read_text(encoding="utf-8"))
    kept["made_with"]["pydantic"] = "0.0.1"
    other = tmp_path / "mcp_early.json"
    other.write_text(json.dumps(kept))
    return other


def test_answers_made_with_another_sdk_are_not_used(pmem_home, tmp_path):
    assert mcp_early.answers(_made_elsewhere(tmp_path)) is None


def test_under_another_sdk_the_answers_are_generated_for_the_next_start(pmem_home, tmp_path):
    other = _made_elsewhere(tmp_path)
    mcp_early.remember(mcp_server.sdk_session)
    cached = mcp_early.cache_path()
    assert cached.parent == pmem_home and cached.stat().st_mode & 0o777 == 0o600
    assert mcp_early.answers(other) == mcp_early.generate(mcp_server.sdk_session)["answers"]
    stale = json.loads(cached.read_text(encoding="utf-8"))
    stale["source"] = "0" * 64  # made from other tools than these
    cached.write_text(json.dumps(stale))
    assert mcp_early.answers(other) is None


@pytest.mark.parametrize("version", mcp_server.EARLY_VERSIONS)
@pytest.mark.parametrize("capabilities,client", [
    ({}, None),
    ({"roots": {"listChanged": True}, "sampling": {}, "elicitation": {}}, None),  # the SDK's own client
    ({"roots": {}, "elicitation": {"form": {}, "url": {}}, "sampling": {"context": {}, "tools": {}}}, None),
    ({"experimental": {"x": {"anything": [1, "two"]}}}, {"name": "codex-mcp-client", "title": "Codex",
                                                         "version": "0.63.0"}),
])
def test_the_early_handshake_is_the_sdks_bytes(version, capabilities, client):
    message = _initialize(version, mid="abc", capabilities=capabilities, client=client)
    reply = mcp_server.early_reply(message)
    assert reply is not None
    assert mcp_early.compact(reply) == mcp_server.sdk_session([message])[0]


@pytest.mark.parametrize("capabilities,client", [
    ({"roots": 5}, None),
    ({"sampling": []}, None),
    ({"roots": {"listChanged": 5}}, None),
    ({}, {"name": "t", "version": 1}),
    ({}, {"name": "t", "version": "1", "title": ["x"]}),
])
def test_a_handshake_the_sdk_refuses_is_left_to_it(capabilities, client):
    message = _initialize(mid=3, capabilities=capabilities, client=client)
    assert "error" in json.loads(mcp_server.sdk_session([message])[0])
    assert mcp_server.early_reply(message) is None


# -- whole sessions -----------------------------------------------------------------------------


def test_the_early_tool_list_is_the_sdks_bytes_in_one_session(pmem_home, tmp_path, sdk_hold):
    """One session: `tools/list` while the SDK cannot load, then again once the SDK serves (after
    a `tools/call`, which only the SDK answers): the same bytes, and the SDK-only session's."""
    gate, path = sdk_hold
    raw = _Raw(pmem_home, tmp_path, PYTHONPATH=path)
    try:
        raw.send(_initialize("2025-11-25"))
        hello = raw.line(60)
        raw.send(INITIALIZED, _request(2, "tools/list"))
        early = raw.line(30)  # never comes if tools/list waits for the SDK
        assert json.loads(early)["id"] == 2
        gate.touch()
        raw.send(_request(3, "tools/call", name="recall", arguments={}))
        assert json.loads(raw.line())["id"] == 3
        raw.send(_request(4, "tools/list"))
        served = raw.line()
        assert early == served.replace(b'"id":4,', b'"id":2,', 1)
        alone = mcp_server.sdk_session([_initialize("2025-11-25"), INITIALIZED, _request(2, "tools/list")])
        assert [hello, early] == alone
    finally:
        gate.touch()
        err = raw.close()
    assert "Traceback" not in err


def test_a_client_that_only_lists_the_tools_leaves_before_the_sdk_loads(pmem_home, tmp_path, sdk_hold):
    """Everything it asked was answered early: the process exits without the SDK (its gate never opens)."""
    gate, path = sdk_hold
    raw = _Raw(pmem_home, tmp_path, PYTHONPATH=path)
    try:
        raw.send(_initialize(), INITIALIZED, _request(2, "tools/list"), _request(3, "ping"))
        assert [json.loads(raw.line(60))["id"] for _ in range(3)] == [1, 2, 3]
        assert raw.proc.stdin is not None
        raw.proc.stdin.close()
        assert raw.proc.wait(30) == 0
    finally:
        gate.touch()
        err = raw.close()
    assert "Traceback" not in err


def test_a_client_that_lists_before_the_sdk_loads_can_call_the_tools(pmem_home, tmp_path, sdk_hold):
    """With the SDK's own client: `initialize` and `list_tools` answered while the SDK's import is
    held, then, once it may load, tool calls served by it."""
    gate, path = sdk_hold
    params = StdioServerParameters(command=sys.executable, args=["-m", "pmem", "mcp"], cwd=str(tmp_path),
                                   env={"PMEM_HOME": str(pmem_home), "PMEM_EMBED_MODEL": "fake-64",
                                        "PMEM_SERVER": "never", "PYTHONPATH": path,
                                        "PMEM_MODELS_DIR": os.environ.get("PMEM_MODELS_DIR", "")})

    async def main():
        info = types.Implementation(name="early-client", version="1")
        async with stdio_client(params) as (read, write), ClientSession(read, write, client_info=info) as s:
            with anyio.fail_after(30):
                await s.initialize()
                tools = (await s.list_tools()).tools
            gate.touch()
            stored = await s.call_tool("remember", {"text": "the cabin wifi password is hunter2"})
            found = await s.call_tool("search", {"query": "cabin wifi"})
            return tools, stored, found

    try:
        tools, stored, found = anyio.run(main)
    finally:
        gate.touch()
    assert {t.name for t in tools} == TOOLS
    assert tools[0].input_schema["properties"]["topic"]["type"] == "string"
    assert not stored.is_error and not found.is_error
    assert "hunter2" in found.content[0].text


def _hello(version: str = "2025-06-18", mid: int | str = 1) -> bytes:
    return mcp_early.compact(_initialize(version, mid))


# Sessions that must go exactly as on the SDK alone, each sent while the SDK's import is held, with
# how many replies come before it may load: what the early path answers, and where it leaves the
# rest (that message and everything after it) to the SDK.
SESSIONS = {
    "lists and ping": (7, [_hello(), INITIALIZED, _request(2, "tools/list"), _request("p", "ping"),
                           _request(4, "prompts/list"), _request(5, "resources/list"),
                           _request(6, "resources/templates/list"), _request(7, "tools/list")]),
    "before initialized, params null and {}": (4, [
        _hello(), b'{"jsonrpc":"2.0","id":2,"method":"tools/list","params":null}\n',
        b'{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{}}\n', INITIALIZED, _request(4, "ping")]),
    "the 2024 version": (2, [_hello("2024-11-05", "a"), INITIALIZED, _request("b", "tools/list")]),
    "a pagination cursor": (1, [_hello(), INITIALIZED, _request(2, "tools/list", cursor="abc"),
                                _request(3, "tools/list")]),
    "a version pmem does not list": (0, [_hello("2099-01-01"), INITIALIZED, _request(2, "tools/list")]),
    "tools/list before initialize": (0, [_request(1, "tools/list"), _hello(mid=2), _request(3, "tools/list")]),
    "a refused handshake": (0, [mcp_early.compact(_initialize(capabilities={"roots": 5})), _request(2, "tools/list")]),
    "batched": (1, [_hello(), INITIALIZED, b'[{"jsonrpc":"2.0","id":2,"method":"tools/list"}]\n',
                    _request(3, "tools/list")]),
    "garbled": (1, [_hello(), INITIALIZED, b"hello\n", b"\xff\xfe{}\n", _request(2, "tools/list"),
                    b'{"jsonrpc":"2.0","id":3,"method":"tools/list"\n', _request(4, "ping")]),
    "odd ids, keys and params": (1, [
        _hello(), INITIALIZED, b'{"jsonrpc":"2.0","id":2.0,"method":"tools/list"}\n',
        b'{"jsonrpc":"2.0","id":3,"id":4,"method":"ping"}\n', b'{"jsonrpc":"2.0","id":"\\u00e9","method":"ping"}\n',
        b'{"jsonrpc":"2.0","id":12345678901234567890,"method":"ping"}\n',
        b'{"jsonrpc":"2.0","id":5,"method":"ping","extra":NaN}\n',
        b'{"jsonrpc":"2.0","id":6,"method":"tools/list","params":[]}\n', _request(7, "tools/list")]),
    "a bad notification, unknown methods, a second initialize": (1, [
        _hello(), b'{"jsonrpc":"2.0","method":"notifications/initialized","params":5}\n', _request(2, "tools/list"),
        _request(3, "logging/setLevel", level="debug"), _request(4, "completion/complete"), _hello(mid=5),
        _request(6, "tools/list")]),
}


@pytest.mark.parametrize("name", list(SESSIONS))
@pytest.mark.slow
def test_a_session_goes_as_on_the_sdk_alone(name, pmem_home, tmp_path, sdk_hold):
    early, messages = SESSIONS[name]
    lines = [m if isinstance(m, bytes) else mcp_early.compact(m) for m in messages]
    alone = mcp_server.sdk_session(lines)
    gate, path = sdk_hold
    raw = _Raw(pmem_home, tmp_path, PYTHONPATH=path)
    try:
        raw.send(*lines)
        got = [raw.line(60) for _ in range(early)]
        with pytest.raises(AssertionError, match="no reply"):
            raw.line(0.5)  # nothing more without the SDK
        gate.touch()
        got += [raw.line() for _ in alone[early:]]
        raw.send(_request("last", "ping"))  # anything more would come before its answer
        while not got or not got[-1].startswith(b'{"jsonrpc":"2.0","id":"last"'):
            got.append(raw.line())
        got.pop()
        got += raw.rest()
    finally:
        gate.touch()
        err = raw.close()
    assert sorted(got) == sorted(alone)
    assert "Traceback" not in err

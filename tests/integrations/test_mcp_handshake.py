"""`pmem mcp` answers `initialize` before the MCP SDK has loaded, with the reply the SDK gives, and
loads no model for the handshake or the tool list."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp.server.mcpserver", reason='the MCP SDK is an extra: pip install ".[mcp]"')

from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION

from pmem.integrations import mcp_server  # noqa

ROOT = Path(__file__).resolve().parents[2]


def _initialize(version: str, mid: int | str = 1) -> dict:
    return {"jsonrpc": "2.0", "id": mid, "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}


def _sdk_reply(message: dict) -> dict:
    """What the SDK's own server (pmem's tools on it) answers to `message`, in this process."""
    return json.loads(mcp_server.sdk_session([message])[0])


@pytest.mark.parametrize("version", mcp_server.EARLY_VERSIONS)
def test_the_early_reply_is_the_sdks(version):
    assert version in HANDSHAKE_PROTOCOL_VERSIONS
    message = _initialize(version, mid="abc")
    assert mcp_server.early_reply(message) == _sdk_reply(message)


@pytest.mark.parametrize("message", [
    _initialize("2099-01-01"),  # a version pmem does not list: the SDK negotiates
    {**_initialize("2025-06-18"), "id": True},
    {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}},
    {"jsonrpc": "2.0", "id": 1, "method": "ping"},
    ["not", "an", "object"],
])
def test_anything_else_is_left_to_the_sdk(message):
    assert mcp_server.early_reply(message) is None


def _spawn(home: Path, cwd: Path, **env) -> subprocess.Popen:
    full = {**os.environ, "PMEM_HOME": str(home), "PMEM_EMBED_MODEL": "fake-64", "PMEM_SERVER": "never",
            "PYTHONPATH": str(ROOT), **env}
    return subprocess.Popen([sys.executable, "-m", "pmem", "mcp"], cwd=cwd, env=full, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _send(proc: subprocess.Popen, *messages: dict) -> None:
    assert proc.stdin is not None
    proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in messages))
    proc.stdin.flush()


def _reply(proc: subprocess.Popen, timeout: float = 120) -> dict:
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        assert sel.select(timeout), f"no reply in {timeout:g} s"
    return json.loads(proc.stdout.readline())


def _close(proc: subprocess.Popen) -> str:
    assert proc.stdin is not None and proc.stderr is not None
    proc.stdin.close()
    try:
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.stderr.read().decode()


def test_initialize_is_answered_while_the_sdk_is_still_loading(pmem_home, tmp_path, sdk_hold):
    """The SDK's import is held until the test has its `initialize` reply: a server that imported
    the SDK first would never answer. Then the session goes on, served by the SDK."""
    gate, path = sdk_hold
    proc = _spawn(pmem_home, tmp_path, PYTHONPATH=path)
    try:
        _send(proc, _initialize("2025-06-18"))
        reply = _reply(proc, timeout=60)  # never comes if the server waits for the SDK
        assert reply["id"] == 1 and reply["result"]["serverInfo"]["name"] == "pmem"
        assert reply["result"]["protocolVersion"] == "2025-06-18"
        gate.touch()
        _send(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"},
              {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        listed = _reply(proc)
        assert listed["id"] == 2 and len(listed["result"]["tools"]) == 6  # nothing else came first
    finally:
        gate.touch()
        err = _close(proc)
    assert "Traceback" not in err


@pytest.mark.slow
def test_a_version_pmem_does_not_list_is_negotiated_by_the_sdk(pmem_home, tmp_path):
    proc = _spawn(pmem_home, tmp_path)
    try:
        _send(proc, _initialize("2099-01-01", mid=7))
        reply = _reply(proc)
        assert reply["id"] == 7 and reply["result"]["protocolVersion"] == LATEST_HANDSHAKE_VERSION
        _send(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"},
              {"jsonrpc": "2.0", "id": 8, "method": "tools/list"})
        assert _reply(proc)["id"] == 8
    finally:
        _close(proc)


def _mapped(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


@pytest.mark.model
@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/PID/maps")
@pytest.mark.slow
def test_the_handshake_and_the_tool_list_load_no_model(pmem_home, tmp_path):
    """With the real default model: after `initialize` and `tools/list` neither numpy nor llama.cpp
    nor the model's weights are in the process; the first memory stored maps the weights."""
    from pmem.models.provision import model_file

    weights = Path(str(model_file("multilingual-e5-small")) + ".f32")
    if not weights.exists():
        pytest.skip("the e5 weight cache is written on the model's first load")
    env = {k: v for k, v in os.environ.items() if k != "PMEM_EMBED_MODEL"}
    proc = subprocess.Popen([sys.executable, "-m", "pmem", "mcp"], cwd=tmp_path, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**env, "PYTHONPATH": str(ROOT), "PMEM_SERVER": "never"})
    try:
        _send(proc, _initialize("2025-11-25"))
        assert _reply(proc)["id"] == 1
        _send(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"},
              {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        assert _reply(proc)["id"] == 2
        _send(proc, {"jsonrpc": "2.0", "id": 9, "method": "logging/setLevel", "params": {"level": "info"}})
        assert _reply(proc)["id"] == 9  # only the SDK answers this (tools/list may come before it)
        maps = _mapped(proc.pid)
        assert "pydantic_core" in maps  # the SDK is loaded by now: what follows is not a race
        assert "numpy" not in maps and "llama" not in maps and str(weights) not in maps
        _send(proc, {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                     "params": {"name": "remember", "arguments": {"text": "the cabin wifi is hunter2"}}})
        reply = _reply(proc)
        assert reply["id"] == 3 and not reply["result"].get("isError")
        assert str(weights) in _mapped(proc.pid) and "numpy" in _mapped(proc.pid)
    finally:
        _close(proc)

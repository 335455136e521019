"""The agent hook with `pmem serve` answering: the prompt's memories come through the server, and
the hook's process imports neither numpy nor the model (what a prompt waits for is Python, pmem and
SQLite). With the real default model, served by a real `pmem serve`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from pmem import serve as srv

pytestmark = [pytest.mark.model, pytest.mark.skipif(not srv.SUPPORTED, reason="needs Unix sockets")]
ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("numpy", "llama_cpp", "pmem.embed_e5")


@pytest.fixture
def served(monkeypatch):
    """A short PMEM_HOME (the socket path must fit) with two memories and a server running."""
    home = Path(tempfile.mkdtemp(prefix="pmem-", dir="/tmp"))
    monkeypatch.setenv("PMEM_HOME", str(home))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PMEM_SERVER": "never"}
    env.pop("PMEM_EMBED_MODEL", None)
    for text in ("We go camping at the lake with the kids every August", "The cabin wifi password is hunter2"):
        subprocess.run([sys.executable, "-m", "pmem", "add", text], env=env, check=True, capture_output=True,
                       timeout=300)
    subprocess.run([sys.executable, "-m", "pmem", "serve", "--detach", "--idle", "10m"], env=env, check=True,
                   capture_output=True, timeout=300)
    try:
        yield home, env
    finally:
        srv.stop(home / "pmem.sock", timeout=2.0)
        shutil.rmtree(home, ignore_errors=True)


def _hook(env: dict, server: str) -> tuple[str, set[str]]:
    """The hook's output, and which of HEAVY its process imported (from -X importtime)."""
    prompt = json.dumps({"prompt": "plans for camping with the kids", "session_id": f"s-{server}"})
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "pmem", "hook", "claude-code", "user-prompt"],
                       input=prompt, env={**env, "PMEM_SERVER": server}, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    imported = {line.rsplit("|", 1)[1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    return r.stdout, imported & set(HEAVY)


def test_a_served_hook_imports_neither_numpy_nor_the_model(served):
    home, env = served
    before = srv.status(home / "pmem.sock")
    assert before is not None
    out, heavy = _hook(env, "auto")
    assert "camping at the lake" in out
    assert heavy == set()
    assert srv.status(home / "pmem.sock")["requests"] > before["requests"]  # the vector came from the server
    # the same hook that loads the model itself shows up in the same check
    out, heavy = _hook(env, "never")
    assert "camping at the lake" in out and {"numpy", "pmem.embed_e5"} <= heavy

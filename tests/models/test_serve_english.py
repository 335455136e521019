"""`pmem serve` holds both models a default store searches with: e5, and MiniLM for English
memories' second vectors (pmem/store/english.py), so a served search loads neither."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from pmem.models import serve as srv

pytestmark = pytest.mark.skipif(not srv.SUPPORTED, reason="needs Unix sockets")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def short_home(monkeypatch):
    home = Path(tempfile.mkdtemp(prefix="pmem-", dir="/tmp"))  # a socket path must stay short
    monkeypatch.setenv("PMEM_HOME", str(home))
    yield home
    srv.stop(home / "pmem.sock", timeout=5.0)
    shutil.rmtree(home, ignore_errors=True)


def _pmem(home: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PMEM_HOME": str(home), "PMEM_THREADS": "1", "PMEM_SERVER": "auto", **extra}
    p = subprocess.run([sys.executable, "-m", "pmem", *args], env=env, capture_output=True, text=True,
                       timeout=180, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    return p


def _status(home: Path) -> dict:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        info = srv.status(home / "pmem.sock")
        if info:
            return info
        time.sleep(0.1)
    raise AssertionError("no server answered")


@pytest.mark.model
def test_the_server_holds_minilm_too_and_a_served_search_asks_it_for_both(short_home):
    _pmem(short_home, "add", "Deploys to production need approval from Dana", PMEM_SERVER="never")
    _pmem(short_home, "serve", "--detach")
    info = _status(short_home)
    assert sorted(Path(m).name for m in info["models"]) == ["all-MiniLM-L6-v2.q8_0.gguf",
                                                            "multilingual-e5-small.q4.e5s1"]
    before = info["requests"]
    out = _pmem(short_home, "search", "who signs off on releases", "--limit", "1").stdout
    assert "Dana" in out
    assert srv.status(short_home / "pmem.sock")["requests"] >= before + 2  # e5's and MiniLM's query vectors


@pytest.mark.model
def test_without_the_second_model_the_server_holds_e5_alone(short_home):
    _pmem(short_home, "add", "Deploys to production need approval from Dana", PMEM_SERVER="never",
          PMEM_EMBED_ENGLISH="none")
    _pmem(short_home, "serve", "--detach", PMEM_EMBED_ENGLISH="none")
    assert [Path(m).name for m in _status(short_home)["models"]] == ["multilingual-e5-small.q4.e5s1"]


@pytest.mark.model
def test_a_first_search_finds_what_the_server_it_starts_finds(short_home):
    """A cold search loads e5 and MiniLM itself and starts the server as it ends (serve.START_AFTER):
    the same hits, scores and order as the served search after it and one with `server = never`."""
    for text in ("Deploys to production need approval from Dana", "The cabin wifi password is hunter2",
                 "Dana is vacationing in Portugal in May", "Release notes are written by Sam"):
        _pmem(short_home, "add", text, PMEM_SERVER="never")
    query = ["search", "who signs off on releases", "--json"]
    def hits(out: str) -> list[tuple]:
        return [(h["id"], h["text"], h["score"], h["distance"]) for h in json.loads(out)]

    first = hits(_pmem(short_home, *query).stdout)
    info = _status(short_home)
    assert info["started_by"].startswith("pmem search (pid ")
    served = hits(_pmem(short_home, *query).stdout)
    assert srv.status(short_home / "pmem.sock")["requests"] >= info["requests"] + 2  # both vectors served
    never = hits(_pmem(short_home, *query, PMEM_SERVER="never").stdout)
    assert len(first) == 4 and first[0][1] == "Release notes are written by Sam"
    assert first == served == never

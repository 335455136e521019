"""What a command does with the replies on the server socket: every one is checked, and anything that
is not a pmem server's reply means the command loads its model itself (never a traceback)."""

from __future__ import annotations

import json
import shutil
import socket
import tempfile
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pmem.cli.app import app
from pmem.models import cache as model_cache
from pmem.models import serve as srv
from pmem.models.cache import ModelCache
from pmem.models.embed import FakeEmbedder

pytestmark = pytest.mark.skipif(not srv.SUPPORTED, reason="needs Unix sockets")
runner = CliRunner()


@pytest.fixture
def short_home(monkeypatch):
    home = Path(tempfile.mkdtemp(prefix="pmem-", dir="/tmp"))
    monkeypatch.setenv("PMEM_HOME", str(home))
    yield home
    shutil.rmtree(home, ignore_errors=True)


class Impostor:
    """A listener on pmem's socket that answers every request with `reply(request)` (raw bytes)."""

    def __init__(self, path: Path, reply):
        self.reply = reply
        self.seen: list[dict] = []
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    request = json.loads(conn.makefile("rb").readline())
                    self.seen.append(request)
                    conn.sendall(self.reply(request))
                except OSError:
                    pass

    def close(self):
        self._stop.set()
        self.thread.join(5)
        self.sock.close()


def _line(obj) -> bytes:
    return json.dumps(obj).encode() + b"\n"


BAD_OPEN = [
    {"ok": True},
    {"ok": True, "name": "x", "dim": "abc"},
    {"ok": True, "name": "x", "dim": 0},
    {"ok": True, "name": "x", "dim": -3},
    {"ok": True, "name": "x", "dim": True},
    {"ok": True, "name": "x", "dim": 1.5},
    {"ok": True, "name": 7, "dim": 16},
    {"ok": True, "name": "", "dim": 16},
    {"ok": True, "name": "x", "dim": 16, "query_aware": "yes"},
    {"ok": "yes", "name": "x", "dim": 16},
    [1, 2, 3],
    "a string",
    None,
]


def _store_env(short_home, monkeypatch):
    """Commands embed with a model file that loads as a 16-d fake in this process."""
    model = short_home / "m.gguf"
    model.write_bytes(b"GGUF" + bytes(60))
    monkeypatch.setenv("PMEM_EMBED_MODEL", str(model))
    monkeypatch.setenv("PMEM_SERVER", "auto")
    monkeypatch.setattr("pmem.models.embed.LlamaEmbedder", lambda path, threads=0: FakeEmbedder(16))
    monkeypatch.setattr(model_cache, "PROCESS", ModelCache())  # a command's process: nothing loaded yet
    monkeypatch.setattr(srv, "start_in_background", lambda *a, **k: False)  # this test: no real server
    return model


@pytest.mark.parametrize("reply", BAD_OPEN, ids=[json.dumps(r) for r in BAD_OPEN])
def test_search_with_an_impostor_on_the_socket_loads_the_model_itself(short_home, monkeypatch, reply):
    _store_env(short_home, monkeypatch)
    assert runner.invoke(app, ["add", "The cabin wifi password is hunter2"]).exit_code == 0
    monkeypatch.setattr(model_cache, "PROCESS", ModelCache())  # a command's process: nothing loaded yet
    impostor = Impostor(srv.socket_path(), lambda request: _line(reply))
    try:
        r = runner.invoke(app, ["search", "cabin wifi", "--json"])
        status = runner.invoke(app, ["serve", "--status"])
    finally:
        impostor.close()
    assert any(s.get("op") == "open" for s in impostor.seen)  # it was asked, and not believed
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)[0]["text"] == "The cabin wifi password is hunter2"
    assert status.exit_code == 1 and "Traceback" not in status.output  # not a pmem server's status


BAD_EMBED = [
    _line({"ok": True}),
    _line({"ok": True, "n": "1", "dim": 16}),
    _line({"ok": True, "n": 1, "dim": "abc"}),
    _line({"ok": True, "n": 1, "dim": 16}) + b"\x00" * 8,  # fewer bytes than 1 x 16 floats, then EOF
    _line({"ok": True, "n": 2, "dim": 16}),
    b"[" * 100_000 + b"\n",  # nested too deep for the JSON parser
    b"\xff\xfe not utf-8\n",
]


@pytest.mark.parametrize("embed_reply", BAD_EMBED, ids=range(len(BAD_EMBED)))
def test_a_bad_embed_reply_means_the_local_model(short_home, monkeypatch, embed_reply):
    _store_env(short_home, monkeypatch)

    def reply(request):
        if request.get("op") == "open":
            return _line({"ok": True, "name": "fake-16", "dim": 16, "query_aware": False,
                          "build": srv.build_id()})
        return embed_reply

    impostor = Impostor(srv.socket_path(), reply)
    try:
        remote = srv.connect_embedder(short_home / "m.gguf", fallback=lambda: FakeEmbedder(16))
        assert isinstance(remote, srv.RemoteEmbedder)
        assert remote.embed(["cabin wifi"]) == FakeEmbedder(16).embed(["cabin wifi"])
    finally:
        impostor.close()
    assert [s.get("op") for s in impostor.seen] == ["open", "embed"]


@pytest.mark.parametrize("reply", [{"ok": True}, {"ok": True, "pid": "1", "requests": 0, "started": 0},
                                   {"ok": True, "pid": 5, "requests": 0, "started": "now"}])
def test_doctor_and_status_ignore_an_impostor_status(short_home, reply):
    impostor = Impostor(srv.socket_path(), lambda request: _line(reply))
    try:
        assert srv.status() is None
        r = runner.invoke(app, ["doctor", "--json"])
    finally:
        impostor.close()
    assert "Traceback" not in r.output
    server = {c["name"]: c for c in json.loads(r.stdout)}["server"]
    assert "running (pid" not in server["detail"]

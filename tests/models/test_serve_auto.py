"""`server = auto`: a command that needs the embedding model and finds no server starts one for the
next commands; it leaves when idle; `never` starts nothing; two commands racing give one server; a
server of another build is replaced, and a stopped one costs a command no more than starting cold."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from pmem.models import serve as srv
from pmem.models.cache import ModelCache
from pmem.models.embed import FakeEmbedder, load_embedder

pytestmark = pytest.mark.skipif(not srv.SUPPORTED, reason="needs Unix sockets")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def short_home(monkeypatch):
    home = Path(tempfile.mkdtemp(prefix="pmem-", dir="/tmp"))
    monkeypatch.setenv("PMEM_HOME", str(home))
    yield home
    _stop_servers(home)
    shutil.rmtree(home, ignore_errors=True)


def _servers(home: Path) -> list[int]:
    """Pids of `pmem serve` processes of this user whose PMEM_HOME is `home`."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and b"pmem" in argv and b"serve" in argv and f"PMEM_HOME={home}".encode() in environ:
            pids.append(int(entry.name))
    return pids


def _stop_servers(home: Path) -> None:
    for pid in _servers(home):
        try:
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


def _until(predicate, timeout: float, step: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return predicate()


@pytest.fixture(scope="module")
def minilm_path():
    pytest.importorskip("llama_cpp")
    from pmem.models import provision

    env = os.environ.get("PMEM_TEST_MODELS_DIR")
    models = Path(env) if env else ROOT / ".models-cache"
    return provision.ensure_model("all-MiniLM-L6-v2", models, progress=False)


def _env(home: Path, minilm: Path, **extra: str) -> dict:
    return {**os.environ, "PMEM_HOME": str(home), "PMEM_MODELS_DIR": str(minilm.parent), "PMEM_THREADS": "1",
            "PMEM_EMBED_MODEL": "all-MiniLM-L6-v2", **extra}


def _pmem(env: dict, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pmem", *args], env=env, capture_output=True, text=True,
                          timeout=180, cwd=ROOT, **kwargs)


@pytest.mark.model
@pytest.mark.slow
def test_the_auto_started_server_serves_the_next_command_and_leaves_when_idle(short_home, minilm_path):
    env = _env(short_home, minilm_path, PMEM_SERVER="auto", PMEM_SERVER_IDLE_MINUTES="0.1")  # 6 s
    first = _pmem(env, "add", "The wifi password at the cabin is hunter2")
    assert first.returncode == 0, first.stderr
    info = _until(lambda: srv.status(short_home / "pmem.sock"), 60)
    assert info, (short_home / "serve.log").read_text()
    assert info["started_by"].startswith("pmem add (pid ") and info["idle_limit"] == 6
    shown = _pmem(env, "serve", "--status")
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"^started by\s+pmem add \(pid \d+\), at ", shown.stdout, re.M), shown.stdout
    assert re.search(r"^leaves\s+at .* unless a request comes \(after 0.1 idle minutes\)", shown.stdout, re.M)
    hits = json.loads(_pmem(env, "search", "cabin internet", "--json").stdout)
    assert hits and hits[0]["text"].startswith("The wifi password")
    assert srv.status(short_home / "pmem.sock")["requests"] > info["requests"]  # the search used it
    assert len(_servers(short_home)) == 1
    # Nothing more: it leaves by itself, removing its socket.
    assert _until(lambda: not _servers(short_home) and not (short_home / "pmem.sock").exists(), 40)


@pytest.mark.model
def test_never_starts_nothing(short_home, minilm_path):
    env = _env(short_home, minilm_path, PMEM_SERVER="never")
    assert _pmem(env, "add", "The wifi password at the cabin is hunter2").returncode == 0
    assert _pmem(env, "search", "cabin", "--json").returncode == 0
    time.sleep(1.5)
    assert _servers(short_home) == [] and not (short_home / "pmem.sock").exists()
    assert not (short_home / "serve.log").exists()


@pytest.mark.model
@pytest.mark.slow
def test_two_commands_racing_to_start_one_give_one_server(short_home, minilm_path):
    env = _env(short_home, minilm_path, PMEM_SERVER="auto")
    assert _pmem({**env, "PMEM_SERVER": "never"}, "add", "The wifi password at the cabin is hunter2").returncode == 0
    procs = [subprocess.Popen([sys.executable, "-m", "pmem", "search", "cabin", "--json"], env=env, cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
        assert json.loads(out)[0]["text"].startswith("The wifi password")
    assert _until(lambda: srv.status(short_home / "pmem.sock"), 60)
    log = short_home / "serve.log"
    # every server started leaves but one (the others find it and leave quietly)
    assert _until(lambda: len(_servers(short_home)) == 1, 90), log.read_text()
    time.sleep(1)
    assert len(_servers(short_home)) == 1
    assert srv.status(short_home / "pmem.sock")["pid"] == _servers(short_home)[0]


class Fake(FakeEmbedder):
    def __init__(self, path=None, threads=0):
        super().__init__(16)


def test_a_server_of_another_build_is_stopped_and_replaced_not_used(short_home, tmp_path, monkeypatch):
    old = srv.Server(loader=Fake, build="0.0.1+older")
    old.bind()
    thread = threading.Thread(target=old.serve, daemon=True)
    thread.start()
    started = []
    monkeypatch.setattr(srv, "spawn", lambda argv, log, env=None: started.append(argv))
    srv.drop_deferred()  # nothing put off before this test
    monkeypatch.setattr("pmem.models.provision.resolve_model", lambda spec, kind, models_dir=None: tmp_path / "m.gguf")
    monkeypatch.setattr("pmem.models.embed.LlamaEmbedder", lambda path, threads=0: FakeEmbedder(16))
    try:
        e = load_embedder("some-model", server="auto", cache=ModelCache())
        assert not isinstance(e, srv.RemoteEmbedder)  # this command: its own model, not the old code's
        thread.join(10)
        assert not thread.is_alive()  # told to stop
        srv.launch_deferred()  # as this command ends (serve.START_AFTER)
        assert len(started) == 1 and started[0][0] == "serve"  # and a new one started in its place
    finally:
        old.shutdown()
        thread.join(5)


SERVER_OF_ANOTHER_BUILD = """
import signal, sys
from pmem.models import serve
from pmem.models.embed import load_model_file
server = serve.Server(loader=load_model_file, build="0.0.1+older", threads=1)
server.bind()
server.model(sys.argv[1])
signal.signal(signal.SIGTERM, lambda signum, frame: server.shutdown())
server.serve()
"""


@pytest.mark.model
def test_a_command_replaces_a_server_of_another_build(short_home, minilm_path):
    env = _env(short_home, minilm_path, PMEM_SERVER="auto")
    assert _pmem({**env, "PMEM_SERVER": "never"}, "add", "The wifi password at the cabin is hunter2").returncode == 0
    old = subprocess.Popen([sys.executable, "-c", SERVER_OF_ANOTHER_BUILD, str(minilm_path)], env=env, cwd=ROOT)
    try:
        assert _until(lambda: (srv.status(short_home / "pmem.sock") or {}).get("build") == "0.0.1+older", 60)
        r = _pmem(env, "search", "cabin", "--json")
        assert r.returncode == 0, r.stderr
        assert old.wait(20) == 0  # it was told to stop
        new = _until(lambda: srv.status(short_home / "pmem.sock"), 60)
        assert new and new["build"] == srv.build_id() and new["pid"] != old.pid
    finally:
        if old.poll() is None:
            old.kill()
            old.wait(10)


def test_a_stopped_server_costs_a_command_the_first_wait_not_seconds(short_home, tmp_path, monkeypatch):
    """SIGSTOP a server: a command gives it first_wait() and loads the model itself meanwhile."""
    proc = subprocess.Popen([sys.executable, "-c", SERVER_OF_THIS_BUILD], env=dict(os.environ), cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "serving"
        assert _until(lambda: srv.status(), 20)
        os.kill(proc.pid, signal.SIGSTOP)
        monkeypatch.setattr("pmem.models.provision.resolve_model",
                            lambda spec, kind, models_dir=None: tmp_path / "m.gguf")
        monkeypatch.setattr("pmem.models.embed.LlamaEmbedder", lambda path, threads=0: FakeEmbedder(16))
        started = []
        monkeypatch.setattr(srv, "spawn", lambda argv, log, env=None: started.append(argv))
        srv.drop_deferred()  # nothing put off before this test
        t0 = time.monotonic()
        e = load_embedder("some-model", server="auto", cache=ModelCache())
        waited = time.monotonic() - t0
        assert isinstance(e, FakeEmbedder) and waited < srv.first_wait() + 0.5
        srv.launch_deferred()  # what this command would launch as it ends
        assert started == []  # a stopped server holds the socket: nothing to start beside it
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait(10)


SERVER_OF_THIS_BUILD = """
from pmem.models import serve
from pmem.models.embed import FakeEmbedder
server = serve.Server(loader=lambda path, threads=0: FakeEmbedder(16))
server.bind()
print("serving", flush=True)
server.serve()
"""


@pytest.mark.parametrize("old, new", [("off", "never"), ("start", "auto"), ("auto", "auto"), ("always", "always")])
def test_older_server_values_keep_working(pmem_home, monkeypatch, old, new):
    from pmem import config

    assert config.Settings().server == "auto"  # the default: always warm
    assert config.Settings().with_values(server=old).server == new
    monkeypatch.setenv("PMEM_SERVER", old)
    assert config.load().server == new
    config.set_value("server", old)
    monkeypatch.delenv("PMEM_SERVER")
    assert config.load().server == new

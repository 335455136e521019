"""`pmem serve` with threads = 0 (automatic) gives its models the cores idle at each request, not
only those idle when it started: it lives for hours, and two BLAS threads on a machine where
another process keeps a core busy made each e5 query ~20x slower."""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest

from pmem.models import loading
from pmem.models import serve as srv

pytestmark = pytest.mark.skipif(not srv.SUPPORTED, reason="needs Unix sockets")


class Model:
    name, dim = "counted", 3

    def __init__(self):
        self.threads: list[int] = []

    def use_threads(self, n: int) -> None:
        self.threads.append(n)

    def embed(self, texts, query=False):
        return [[1.0, 0.0, 0.0] for _ in texts]


@pytest.fixture
def serving(monkeypatch):
    """A server on a real socket with one Model; yields (server, model, socket path, set_idle)."""
    idle = {"cores": 2}
    monkeypatch.setattr(loading, "default_threads", lambda samples=loading.BUSY_SAMPLES: idle["cores"])
    folder = Path(tempfile.mkdtemp(prefix="pt-", dir="/tmp"))
    model = Model()
    servers = []

    def make(threads: int):
        server = srv.Server(folder / f"s{threads}.sock", loader=lambda path, threads=0: model, threads=threads)
        server.bind()
        thread = threading.Thread(target=server.serve, daemon=True)
        thread.start()
        servers.append((server, thread))
        return server

    def set_idle(cores: int) -> None:
        idle["cores"] = cores

    yield make, model, set_idle
    for server, thread in servers:
        server.shutdown()
        thread.join(10)
    shutil.rmtree(folder, ignore_errors=True)


def _embed(server) -> None:
    header = srv.call({"op": "embed", "model": "/any/model", "texts": ["a query"], "query": True},
                      path=server.path, timeout=5)
    assert header["ok"] is True, header


def test_an_automatic_server_follows_the_idle_cores_at_each_request(serving):
    make, model, set_idle = serving
    server = make(0)
    _embed(server)
    set_idle(1)  # another process now keeps a core busy
    _embed(server)
    set_idle(2)
    _embed(server)
    assert model.threads == [2, 1, 2]


def test_a_server_given_threads_keeps_them(serving):
    make, model, set_idle = serving
    server = make(2)
    set_idle(1)
    _embed(server)
    assert model.threads == []  # the count the person chose stays


@pytest.mark.model
def test_e5_changes_its_blas_threads_between_passes(tmp_path):
    from pmem.models import provision
    from pmem.models.e5 import E5Embedder

    path = provision.model_file("multilingual-e5-small")
    if not path.exists():
        pytest.skip("multilingual-e5-small is not provisioned")
    model = E5Embedder(path, threads=2)
    before = model.embed(["camping with the kids"], query=True)
    model.use_threads(1)
    assert model.threads == 1
    started = time.perf_counter()
    after = model.embed(["camping with the kids"], query=True)
    assert time.perf_counter() - started < 30
    # the same vector on one thread (up to the order BLAS adds in)
    assert max(abs(a - b) for a, b in zip(after[0], before[0])) < 1e-5

"""Shared fixtures. Every test runs with its own PMEM_HOME: no test touches the real home or database.

Test doubles live in fakes.py; test modules import from these two and never from one another."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


@pytest.fixture(autouse=True)
def pmem_home(tmp_path, monkeypatch):
    home = tmp_path / "pmem-home"
    monkeypatch.setenv("PMEM_HOME", str(home))
    for var in list(os.environ):
        if var.startswith("PMEM_") and var not in ("PMEM_HOME", "PMEM_TEST_MODELS_DIR"):
            monkeypatch.delenv(var)
    # Models are large: share one provisioned copy across tests (and CI runs).
    monkeypatch.setenv("PMEM_MODELS_DIR", str(models_dir()))
    # No test starts a background server unless it says so (the default, "auto", would).
    monkeypatch.setenv("PMEM_SERVER", "never")
    monkeypatch.setenv("NO_COLOR", "1")
    # The other tools' own home variables: a test that installs hooks or discovers histories
    # names its fake home, and never reaches a real one a developer's shell has set.
    for var in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "GEMINI_CLI_HOME", "LLM_USER_PATH", "MEMORY_FILE_PATH"):
        monkeypatch.delenv(var, raising=False)
    yield home
    serve = sys.modules.get("pmem.models.serve")
    if serve is not None:  # a server a command in this process put off (serve.START_AFTER) is not started
        serve.drop_deferred()
    if (home / "pmem.sock").exists():  # a server some command started here leaves with its test
        from pmem.models import serve

        serve.stop(home / "pmem.sock", timeout=1.0)


def models_dir() -> Path:
    value = os.environ.get("PMEM_TEST_MODELS_DIR")
    if value:
        return Path(value)
    return ROOT / ".models-cache"


@pytest.fixture
def fake_config(pmem_home, monkeypatch):
    monkeypatch.setenv("PMEM_EMBED_MODEL", "fake-64")
    from pmem.config import load

    return load()


@pytest.fixture
def store(fake_config, tmp_path):
    from pmem.service import MemoryStore

    s = MemoryStore(tmp_path / "test.db", config=fake_config)
    yield s
    s.close()


@pytest.fixture
def sdk_hold(tmp_path) -> tuple[Path, str]:
    """A gate file, and a PYTHONPATH whose sitecustomize holds the MCP SDK's server import until the
    gate exists: whatever a child answers before the test touches the gate, it answered without the SDK."""
    gate = tmp_path / "gate"
    hold = tmp_path / "hold"
    hold.mkdir()
    (hold / "sitecustomize.py").write_text(
        "import os, sys, time\n"
        "class _Hold:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'mcp.server':\n"
        f"            while not os.path.exists({str(gate)!r}):\n"
        "                time.sleep(0.02)\n"
        "        return None\n"
        "sys.meta_path.insert(0, _Hold())\n")
    yield gate, f"{hold}{os.pathsep}{ROOT}"
    gate.touch()  # a child still waiting on it can leave


@pytest.fixture
def spawned():
    """Start `python -c SCRIPT ARGS...` processes, each once it has printed its `ready` line; at the
    end each is continued (a test may have stopped it) and killed."""
    procs: list[subprocess.Popen] = []

    def spawn(script: str, *args: str, ready: str, env: dict | None = None, stderr=None) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", script, *args], env=env, stdout=subprocess.PIPE,
                                stderr=stderr, text=True)
        procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line == ready, proc.stderr.read() if proc.stderr is not None else line
        return proc

    yield spawn
    for proc in procs:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
        proc.wait(10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def schema_before(path, migration: str):
    """A new database at `path` with every migration before `migration` applied, as an older pmem
    left it; returns the open connection (the caller adds rows and closes it)."""
    from pmem import db
    from pmem.store import migrations

    conn = db.connect(path)
    conn.execute("CREATE TABLE _pmem_migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL "
                 "DEFAULT CURRENT_TIMESTAMP)")
    names = [name for name, _ in migrations.MIGRATIONS]
    for index, (name, fn) in enumerate(migrations.MIGRATIONS[:names.index(migration)], start=1):
        fn(conn)
        conn.execute("INSERT INTO _pmem_migrations (name) VALUES (?)", (name,))
        conn.execute(f"PRAGMA user_version = {index}")
    return conn


@pytest.fixture
def model_thresholds(monkeypatch):
    """`model_thresholds(name, thresholds)` registers a profile of the model `name` with these
    cosine thresholds (pmem.models.profiles) for the test only."""
    from dataclasses import replace

    from pmem.models import profiles

    with registered_for_the_test(profiles):
        def register(name, thresholds):
            own = profiles.unregistered(name)
            profiles.register(replace(own, thresholds=thresholds, measured=own.measured | {"thresholds"}))

        yield register


@contextlib.contextmanager
def registered_for_the_test(profiles):
    """What is registered inside is taken back after, and what it replaced is registered again."""
    before = profiles.profiles()
    try:
        yield
    finally:
        for profile in profiles.profiles():
            if profile not in before:
                profiles.unregister(profile)
        for profile in before:
            if profiles.lookup(profile.name) is not profile:
                profiles.register(profile)


@pytest.fixture(scope="session")
def load_benchmark():
    """load_benchmark("harness") -> benchmarks/harness.py as the module `bench_harness` (benchmarks
    are scripts, not a package: their tests load them by file name)."""
    import importlib.util

    def load(name: str):
        spec = importlib.util.spec_from_file_location(f"bench_{name}", Path(__file__).resolve().parents[1]
                                                      / "benchmarks" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[f"bench_{name}"] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
        return module
    return load


@pytest.fixture
def int8ish(monkeypatch):
    """Every FakeEmbedder from now on runs calls of several texts 'in int8' unless told not to
    (use_int8): vectors moved off the exact ones, and a count of such calls, as e5's and MiniLM's
    engines keep (pmem.store.refine). Returns the move."""
    from pmem.models.embed import FakeEmbedder

    exact = FakeEmbedder.embed

    def moved(vector: list[float]) -> list[float]:
        v = list(vector)
        v[0] += 0.05
        n = math.sqrt(sum(x * x for x in v))
        return [x / n for x in v]

    def embed(self, texts, **kw):
        vectors = exact(self, texts)
        if getattr(self, "int8_bulk", True) and len(texts) > 1:
            self.int8_calls = getattr(self, "int8_calls", 0) + 1
            return [moved(v) for v in vectors]
        return vectors

    monkeypatch.setattr(FakeEmbedder, "embed", embed)
    monkeypatch.setattr(FakeEmbedder, "use_int8", lambda self, on: setattr(self, "int8_bulk", bool(on)),
                        raising=False)
    monkeypatch.setattr(FakeEmbedder, "int8_calls", 0, raising=False)
    return moved

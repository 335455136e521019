"""A chat model that kills its process (a llama.cpp build that dies on this CPU) is found by a child
process first: `pmem doctor`, `pmem extract` and `pmem dream` say which model, which signal and the
command that fixes it, in one line, and never die themselves."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pmem.models import generate
from pmem.models.cache import ModelCache

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.model


@pytest.fixture
def chat_model():
    pytest.importorskip("llama_cpp")
    from pmem.models import provision
    from pmem.paths import models_dir

    return provision.ensure_model("SmolLM2-135M-Instruct", models_dir(), progress=False)


@pytest.fixture
def own_models(chat_model, tmp_path, monkeypatch):
    """A models directory of this test's own (the verdicts are cached there), holding the shared
    chat model through a link."""
    models = tmp_path / "models"
    models.mkdir()
    for f in chat_model.parent.iterdir():
        if not f.name.startswith("."):
            (models / f.name).symlink_to(f)
    monkeypatch.setenv("PMEM_MODELS_DIR", str(models))
    return models


def _pmem(*args, stdin: str = "", env: dict | None = None):
    return subprocess.run([sys.executable, "-m", "pmem", *args], input=stdin, capture_output=True, text=True,
                          timeout=300, env={**os.environ, **(env or {})}, cwd=ROOT)


def _one_line_naming_the_crash(stderr: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "SmolLM2-135M-Instruct" in lines[0] and "SIGSEGV" in lines[0]
    assert generate.REBUILD in lines[0]
    assert "Traceback" not in stderr and "Segmentation" not in stderr


def test_extract_with_a_crashing_model_is_one_line_and_exit_1(own_models):
    crash = {"PMEM_TEST_PROBE_SIGNAL": "SIGSEGV"}
    r = _pmem("extract", stdin="I moved to Lisbon in March.\n", env=crash)
    assert r.returncode == 1
    _one_line_naming_the_crash(r.stderr)
    # The verdict is cached beside the model: the next command does not ask a child again.
    checks = own_models / ".runs-here.json"
    assert stat.S_IMODE(checks.stat().st_mode) == 0o600
    (entry,) = json.loads(checks.read_text()).values()
    assert entry == {"signal": "SIGSEGV"}
    t0 = time.monotonic()
    r = _pmem("extract", "--dry-run", stdin="I moved to Lisbon in March.\n", env=crash)
    assert r.returncode == 1
    _one_line_naming_the_crash(r.stderr)
    assert time.monotonic() - t0 < 5


def test_dream_with_a_crashing_model_says_so_and_does_not_die(own_models):
    """Dream needs the chat model to summarise old episodes: it falls back to an extractive summary
    and says why, as for a model that is missing."""
    crash = {"PMEM_TEST_PROBE_SIGNAL": "SIGSEGV", "PMEM_EMBED_MODEL": "fake-64"}
    for i in range(6):
        assert _pmem("add", "--tier", "episodic", "--at", f"2020-01-01 10:0{i}",
                     f"Sunday call {i}: we walked by the river and talked about kayaks", env=crash).returncode == 0
    r = _pmem("dream", "--json", env=crash)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and "Segmentation" not in r.stderr
    plan = json.loads(r.stdout)
    assert [p["kind"] for p in plan["proposals"]] == ["compress"]
    (note,) = plan["notes"]
    assert "SmolLM2-135M-Instruct" in note and "SIGSEGV" in note and generate.REBUILD in note


def test_doctor_runs_the_chat_model_in_a_child(own_models):
    r = _pmem("doctor", "--json", env={"PMEM_TEST_PROBE_SIGNAL": "SIGSEGV"})
    assert r.returncode == 1
    check = {c["name"]: c for c in json.loads(r.stdout)}["chat model runs"]
    assert check["ok"] is False and "SmolLM2-135M-Instruct" in check["detail"] and "SIGSEGV" in check["detail"]
    assert check["fix"] == generate.REBUILD
    healthy = _pmem("doctor", "--json")  # the same model on this machine, for real
    check = {c["name"]: c for c in json.loads(healthy.stdout)}["chat model runs"]
    assert check["ok"] is True, check


def test_a_healthy_model_passes_and_is_asked_once(own_models, chat_model, monkeypatch):
    assert generate.check_runs(chat_model, threads=1, cache=ModelCache()) is True
    fresh = ModelCache()  # a new process: only the file remembers
    monkeypatch.setattr(generate, "probe", lambda *a, **k: pytest.fail("asked a child again"))
    assert generate.check_runs(chat_model, threads=1, cache=fresh) is True
    g = generate.load_generator(str(chat_model), threads=1, cache=fresh)
    assert g.generate_json([{"role": "user", "content": "Is water wet?"}],
                           {"type": "object", "properties": {"yes": {"type": "boolean"}}, "required": ["yes"]},
                           16) is not None


def test_a_rebuilt_llama_cpp_is_asked_again(own_models, chat_model, monkeypatch, tmp_path):
    asked = []
    monkeypatch.setattr(generate, "probe", lambda path, threads=0: asked.append(path) or (True, None))
    build = tmp_path / "site" / "llama_cpp"  # an install of llama-cpp-python of this test's own, never imported
    (build / "lib").mkdir(parents=True)
    (build / "__init__.py").write_text("")
    lib = build / "lib" / "libllama.so"
    lib.write_bytes(b"build 1")
    monkeypatch.delitem(sys.modules, "llama_cpp", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    generate.check_runs(chat_model, cache=ModelCache())
    generate.check_runs(chat_model, cache=ModelCache())  # a second process reads the verdict from the file
    assert len(asked) == 1
    lib.write_bytes(b"build 2, rebuilt")
    generate.check_runs(chat_model, cache=ModelCache())
    assert len(asked) == 2
    assert len(json.loads((own_models / ".runs-here.json").read_text())) == 1  # one verdict per model file
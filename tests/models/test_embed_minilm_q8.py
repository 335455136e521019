"""MiniLM as the second vectors run it (pmem/store/english.py): its Q8_0 copy, made here from the f16
GGUF (provision.quantized_model), a thread count and a pack size per call, and the loads of two
models on two threads at once."""

from __future__ import annotations

import json
import math
import shutil
import threading
from pathlib import Path

import pytest

from pmem.models import embed, provision
from pmem.models.cache import ModelCache
from pmem.models.embed import LlamaEmbedder

REFERENCE = Path(__file__).resolve().parents[2].parent / "shared/data/minilm_reference.json"
TEXTS = ["who signs off on releases", "Deploys to production need approval from Dana",
         "My flight to Tokyo leaves on October 12 from Berlin", "The dog's vet is at Parkside Animal Clinic.",
         "Anna baked sourdough bread last weekend.", "Taxes must be filed by 31 January."]


def _cos(a, b):
    return sum(x * y for x, y in zip(a, b)) / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


@pytest.fixture
def models(tmp_path):
    """A models folder of its own holding MiniLM's f16 file (the copy is written beside it)."""
    f16 = provision.ensure_model("all-MiniLM-L6-v2")
    (tmp_path / "models").mkdir()
    shutil.copyfile(f16, tmp_path / "models" / f16.name)
    return tmp_path / "models"


@pytest.mark.model
def test_the_q8_copy_is_made_beside_the_f16_file_once_and_embeds_as_it_does(models):
    path = provision.quantized_model("all-MiniLM-L6-v2", models)
    assert path == models / "all-MiniLM-L6-v2.q8_0.gguf"
    assert path.stat().st_size < 0.6 * (models / "all-MiniLM-L6-v2.f16.gguf").stat().st_size
    made = path.stat().st_mtime_ns
    assert provision.quantized_model("all-MiniLM-L6-v2", models) == path and path.stat().st_mtime_ns == made
    assert sorted(p.name for p in models.iterdir()) == ["all-MiniLM-L6-v2.f16.gguf", path.name]  # no leftovers
    q8, f16 = LlamaEmbedder(path, threads=1), LlamaEmbedder(models / "all-MiniLM-L6-v2.f16.gguf", threads=1)
    try:
        assert min(_cos(a, b) for a, b in zip(q8.embed(TEXTS), f16.embed(TEXTS))) >= 0.999
        if REFERENCE.exists():  # sentence-transformers' own vectors: f16 >= 0.999 (test_embed.py), Q8_0 0.9984
            items = json.loads(REFERENCE.read_text())["items"]
            got = q8.embed([it["text"] for it in items])
            assert min(_cos(g, it["embedding"]) for g, it in zip(got, items)) >= 0.998
    finally:
        q8.close()
        f16.close()


@pytest.mark.model
def test_a_copy_that_cannot_be_made_leaves_the_f16_file_in_use(models, monkeypatch):
    def refused(src, out):
        raise PermissionError(13, "Permission denied", str(out))  # a read-only models folder

    monkeypatch.setattr("pmem.models.convert.quantize_q8_0", refused)
    assert provision.quantized_model("all-MiniLM-L6-v2", models) == models / "all-MiniLM-L6-v2.f16.gguf"


@pytest.mark.model
@pytest.mark.slow
def test_threads_and_pack_per_call_change_nothing_in_the_vectors(models):
    m = LlamaEmbedder(provision.quantized_model("all-MiniLM-L6-v2", models), threads=2)
    try:
        lib, ctx = m._lib, m._ctx
        usual = m.embed(TEXTS)
        assert lib.llama_n_threads(ctx) == 2
        one = m.embed(TEXTS[:1], threads=1)[0]
        assert lib.llama_n_threads(ctx) == lib.llama_n_threads_batch(ctx) == 1  # the context runs on one
        assert _cos(one, usual[0]) > 0.99999
        packed = m.embed(TEXTS, pack_tokens=32)
        assert lib.llama_n_threads(ctx) == 2  # back to the model's own
        assert all(_cos(a, b) > 0.99999 for a, b in zip(packed, usual))
    finally:
        m.close()


def test_a_model_loading_on_one_thread_does_not_hold_up_another(monkeypatch, tmp_path):
    """MiniLM's load on a thread (a cold English search) must not keep e5 from this one."""
    slow_started, release = threading.Event(), threading.Event()

    def load(path, threads=0):
        if Path(path).name == "slow.gguf":
            slow_started.set()
            release.wait(10)
        return embed.FakeEmbedder(8)

    monkeypatch.setattr(embed, "load_model_file", load)
    monkeypatch.setattr(provision, "resolve_model", lambda spec, kind, models_dir=None: Path(spec))
    cache = ModelCache()
    slow, quick = tmp_path / "slow.gguf", tmp_path / "quick.gguf"
    got: dict[str, object] = {}

    def load_here(path):
        return embed.load_embedder(str(path), threads=1, server="never", cache=cache)

    worker = threading.Thread(target=lambda: got.setdefault("slow", load_here(slow)))
    worker.start()
    try:
        assert slow_started.wait(5)
        other = threading.Thread(target=lambda: got.setdefault("quick", load_here(quick)))
        other.start()
        other.join(3)
        assert "quick" in got and "slow" not in got
    finally:
        release.set()
        worker.join(5)
    assert load_here(slow) is got["slow"]  # each loaded once


@pytest.mark.model
def test_the_embedder_loads_llama_cpps_bindings_alone_and_the_package_completes_on_demand(models):
    """The embedder runs on llama.cpp's C API, without the package's __init__ (the high-level Llama,
    chat formats, jinja2: 0.1 s of a cold English search); the first name asked of the package
    runs it, so the generator (llama_cpp.Llama) works in the same process."""
    import subprocess
    import sys

    path = provision.quantized_model("all-MiniLM-L6-v2", models)
    code = f"""if True:
        import sys
        from pmem.models.embed import LlamaEmbedder
        m = LlamaEmbedder({str(path)!r}, threads=1)
        assert len(m.embed(["a sentence"])[0]) == 384
        assert "llama_cpp.llama" not in sys.modules and "jinja2" not in sys.modules, sorted(sys.modules)
        import llama_cpp
        from llama_cpp import Llama
        assert "llama_cpp.llama" in sys.modules and llama_cpp.Llama is Llama
        assert llama_cpp.llama_cpp.llama_backend_init is llama_cpp.llama_backend_init
        try:
            llama_cpp.no_such_name
        except AttributeError:
            print("ok")
    """
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "ok", out.stderr


def test_two_models_loading_at_once_launch_one_server(monkeypatch, tmp_path):
    """A cold English search loads e5 and MiniLM on two threads, each finding no server: the
    process launches one server for the commands after it, not two."""
    from pmem.models import serve

    launched, both_asked = [], threading.Barrier(2, timeout=5)

    def connect(path, threads, fallback, local):
        both_asked.wait()  # each load has found no server before either launches one
        return embed.FakeEmbedder(8), "none"

    monkeypatch.setattr(serve, "connect", connect)
    monkeypatch.setattr(serve, "start_in_background", lambda *a, **k: launched.append(a) or True)
    monkeypatch.setattr(embed, "load_model_file", lambda path, threads=0: embed.FakeEmbedder(8))
    monkeypatch.setattr(provision, "resolve_model", lambda spec, kind, models_dir=None: Path(spec))
    cache = ModelCache()  # this process: nothing loaded, no server launched yet
    loads = [threading.Thread(target=embed.load_embedder, args=(str(tmp_path / name), None, 1, "auto", 15.0),
                              kwargs={"cache": cache}) for name in ("e5.e5s1", "minilm.gguf")]
    for t in loads:
        t.start()
    for t in loads:
        t.join(10)
    assert len(launched) == 1

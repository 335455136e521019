"""Embedders: the fast fake for unit tests, and the real all-MiniLM-L6-v2 GGUF for truth."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pmem.errors import ModelError
from pmem.models.embed import Embedder, FakeEmbedder, LlamaEmbedder, load_embedder

REFERENCE = Path(__file__).resolve().parents[2].parent / "shared/data/minilm_reference.json"


def _cos(a, b):
    return sum(x * y for x, y in zip(a, b)) / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


# --- fake ---------------------------------------------------------------------------------


def test_fake_embedder_properties():
    e = FakeEmbedder(32)
    assert isinstance(e, Embedder)
    assert (e.name, e.dim) == ("fake-32", 32)
    texts = ["I like green tea", "i LIKE green tea!", "The server IP is 10.0.0.1", ""]
    vecs = e.embed(texts)
    assert len(vecs) == 4 and all(len(v) == 32 for v in vecs)
    assert all(abs(sum(x * x for x in v) - 1) < 1e-9 for v in vecs)
    assert vecs == FakeEmbedder(32).embed(texts)  # deterministic
    assert e.embed([texts[2]])[0] == vecs[2]  # batch == single
    assert _cos(vecs[0], vecs[1]) > _cos(vecs[0], vecs[2])  # shared words score higher
    assert e.embed([]) == []


def test_fake_is_stable_across_processes():
    code = "from pmem.models.embed import FakeEmbedder; print(FakeEmbedder(8).embed(['hello world'])[0])"
    root = Path(__file__).resolve().parents[2]
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root).stdout
            for _ in range(2)}
    assert len(runs) == 1 and str(FakeEmbedder(8).embed(["hello world"])[0]) in runs.pop()


def test_load_embedder_fake_specs():
    assert load_embedder("fake").dim == 64
    assert load_embedder("fake-16").name == "fake-16"


def test_embed_module_does_not_import_llama_cpp():
    code = "import sys, pmem.models.embed; print('llama_cpp' in sys.modules)"
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    assert out.stdout.strip() == "False", out.stderr


# --- errors before llama.cpp is involved ---------------------------------------------------


def test_missing_and_non_gguf_files(tmp_path):
    with pytest.raises(ModelError, match="not found"):
        LlamaEmbedder(tmp_path / "missing.gguf")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a model at all")
    with pytest.raises(ModelError, match="not a GGUF"):
        LlamaEmbedder(bad)


def test_corrupt_gguf_is_a_one_line_model_error(tmp_path, capfd):
    pytest.importorskip("llama_cpp")
    bad = tmp_path / "corrupt.gguf"
    bad.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + os.urandom(64))
    with pytest.raises(ModelError) as info:
        LlamaEmbedder(bad)
    assert "corrupt.gguf" in str(info.value) and "\n" not in str(info.value)
    out, err = capfd.readouterr()
    assert out == "" and err == ""  # llama.cpp's own log is silenced


# --- the real model ---------------------------------------------------------------------


@pytest.fixture(scope="session")
def minilm(tmp_path_factory):
    pytest.importorskip("llama_cpp")
    from pmem.models import provision

    env = os.environ.get("PMEM_TEST_MODELS_DIR")
    models = Path(env) if env else tmp_path_factory.getbasetemp() / "models"
    path = provision.ensure_model("all-MiniLM-L6-v2", models, progress=False)
    return load_embedder(str(path), threads=0)


@pytest.mark.model
def test_minilm_matches_sentence_transformers(minilm):
    if not REFERENCE.exists():
        pytest.skip(f"reference vectors not found at {REFERENCE}")
    items = json.loads(REFERENCE.read_text())["items"]
    assert (minilm.name, minilm.dim) == ("all-MiniLM-L6-v2.f16", 384)
    got = minilm.embed([it["text"] for it in items])
    sims = [_cos(g, it["embedding"]) for g, it in zip(got, items)]
    assert min(sims) >= 0.999, sorted(zip(sims, (it["text"] for it in items)))[:3]


@pytest.mark.model
@pytest.mark.slow
def test_minilm_batch_equals_single(minilm):
    """llama.cpp's packs (a call of many texts runs in int8 unless told: tests/models/test_bert_int8.py)."""
    texts = [f"Caroline: I went to a LGBTQ support group yesterday ({i})" for i in range(40)]
    texts += ["", "a " * 2000, "Melanie painted a sunrise over the lake in 2022."]
    minilm.use_int8(False)
    try:
        batched = minilm.embed(texts)
        for text, vec in zip(texts, batched):
            single = minilm.embed([text])[0]
            # packing changes SIMD summation order slightly; measured max 8.3e-5
            assert max(abs(a - b) for a, b in zip(single, vec)) < 5e-4
            assert _cos(single, vec) > 0.99999
            assert abs(sum(x * x for x in vec) - 1) < 1e-5
        assert minilm.embed(texts) == batched  # same batch twice: bit-identical
    finally:
        minilm.use_int8(True)


@pytest.mark.model
def test_minilm_is_cached_and_semantic(minilm):
    assert load_embedder(str(minilm.path)) is minilm
    a, b, c = minilm.embed(["I adopted a puppy", "We got a new dog", "The invoice is overdue"])
    assert _cos(a, b) > _cos(a, c) + 0.2


@pytest.mark.model
def test_minilm_loads_without_extra_buffer_types(minilm, monkeypatch):
    """Every model pmem runs through llama.cpp loads with its extra buffer types off (the AMX
    kernels of native builds crash on some Xeons): the parameters llama.cpp receives say so."""
    import llama_cpp

    low = llama_cpp.llama_cpp
    seen = []
    real = low.llama_model_load_from_file
    monkeypatch.setattr(low, "llama_model_load_from_file",
                        lambda path, params: seen.append(params.use_extra_bufts) or real(path, params))
    e = LlamaEmbedder(minilm.path, threads=1)
    try:
        assert seen and all(v is False for v in seen)
        assert len(e.embed(["a sentence"])[0]) == 384
    finally:
        e.close()

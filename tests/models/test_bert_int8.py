"""MiniLM's calls of many texts through its int8 graph (pmem.models.bert_int8, decision 0070).

The real all-MiniLM-L6-v2 GGUF (its Q8_0 copy, as English memories' second vectors use it),
against llama.cpp embedding the same texts: what runs where, how near, and what is cached.
"""

from __future__ import annotations

import json
import shutil
import stat
import struct
from pathlib import Path

import numpy as np
import pytest

from pmem.models import bert_int8, e5_int8, provision
from pmem.models.embed import BULK_TOKENS, LlamaEmbedder

pytest.importorskip("onnxruntime")
REFERENCE = Path(__file__).resolve().parents[2].parent / "shared/data/minilm_reference.json"
pytestmark = pytest.mark.model

SENTENCES = ["I adopted a rescue dog named Pepper last weekend.", "The quarterly report is due on March 31.",
             "We drove from Denver to Seattle over eleven days.", "Remind me to call the dentist on Tuesday.",
             "My sister lives in Valencia with her two kids.",
             "The build fails because the cache key ignores the lock file.",
             "Caroline wants to go hiking in June.", "Thanks! That sounds amazing, how long have you been painting?"]
TEXTS = [f"{s} ({i})" for i in range(12) for s in SENTENCES]  # 96 texts, past BULK_TOKENS


@pytest.fixture
def minilm(tmp_path):
    """MiniLM's Q8_0 copy in a folder of its own (the `.int8` file is written beside it)."""
    f16 = provision.ensure_model("all-MiniLM-L6-v2")
    (tmp_path / "models").mkdir()
    shutil.copyfile(f16, tmp_path / "models" / f16.name)
    return provision.quantized_model("all-MiniLM-L6-v2", tmp_path / "models")


def _llama(path: Path) -> LlamaEmbedder:
    e = LlamaEmbedder(path, threads=1)
    e.use_int8(False)
    return e


def test_many_texts_run_in_int8_near_llama_cpps_vectors(minilm):
    want = np.array(_llama(minilm).embed(TEXTS))
    e = LlamaEmbedder(minilm, threads=1)
    assert sum(len(e.tokenize(t)) for t in TEXTS) >= BULK_TOKENS
    got = np.array(e.embed(TEXTS))
    assert isinstance(e.int8_layers, bert_int8.BertInt8)  # the graph ran, not llama.cpp
    cos = (got * want).sum(axis=1)
    assert cos.min() >= 0.998 and cos.mean() >= 0.999 and not np.allclose(got, want, atol=1e-5), cos.min()
    assert np.allclose(np.linalg.norm(got, axis=1), 1, atol=1e-5)
    # each text keeps its place whatever the packs' order, and what a search ranks stays
    assert ((np.array(e.embed(TEXTS[::-1]))[::-1] * got).sum(axis=1)).min() > 0.9999
    sim_w, sim_g = want @ want.T, got @ got.T
    np.fill_diagonal(sim_w, -1)
    np.fill_diagonal(sim_g, -1)
    assert (sim_w.argmax(axis=1) == sim_g.argmax(axis=1)).mean() >= 0.95


def test_int8_is_as_near_sentence_transformers_as_llama_cpp(minilm):
    if not REFERENCE.exists():
        pytest.skip(f"reference vectors not found at {REFERENCE}")
    items = json.loads(REFERENCE.read_text(encoding="utf-8"))["items"]
    texts = [it["text"] for it in items]
    e = LlamaEmbedder(minilm, threads=1)
    got = np.array(e.embed(texts * 3))[: len(texts)]  # one call past BULK_TOKENS
    assert isinstance(e.int8_layers, bert_int8.BertInt8)
    want = np.array([it["embedding"] for it in items])
    cos = (got * want).sum(axis=1) / np.linalg.norm(want, axis=1)
    assert cos.min() >= 0.998 and cos.mean() >= 0.9994, (cos.min(), cos.mean())  # llama.cpp's Q8_0: 0.9984, 0.9996


def test_a_search_and_short_calls_stay_with_llama_cpp(minilm):
    llama, e = _llama(minilm), LlamaEmbedder(minilm, threads=1)
    assert e.embed(TEXTS[:1]) == llama.embed(TEXTS[:1])
    assert e.embed(TEXTS[:3]) == llama.embed(TEXTS[:3])  # a few texts, under BULK_TOKENS
    assert e.int8_layers is None  # never loaded: a search costs nothing of it
    e.use_int8(False)
    assert e.embed(TEXTS) == llama.embed(TEXTS) and e.int8_layers is None
    assert not minilm.with_name(minilm.name + ".int8").exists()


def test_the_graph_is_cached_privately_and_read_back(minilm, monkeypatch):
    first = LlamaEmbedder(minilm, threads=1).embed(TEXTS)
    cache = minilm.with_name(minilm.name + ".int8")
    head = cache.read_bytes()[:12]
    assert stat.S_IMODE(cache.stat().st_mode) == 0o600
    assert head in (e5_int8.FORMAT + b"BERT", e5_int8.WIDE_FORMAT + b"BERT")  # not e5's graph
    built = []
    real = bert_int8.BertInt8.model
    monkeypatch.setattr(bert_int8.BertInt8, "model", lambda self: built.append(1) or real(self))
    assert LlamaEmbedder(minilm, threads=1).embed(TEXTS) == first and built == []


def test_a_graph_that_misses_llama_cpps_vectors_is_refused_once_and_for_all(minilm, monkeypatch):
    """A GGUF (one of the user's own) whose int8 vectors of the calibration texts are not near
    enough llama.cpp's is refused when its graph is built: llama.cpp embeds every call, and the
    refusal is cached, so no later process builds it again."""
    monkeypatch.setattr(bert_int8, "FIDELITY", (0.99999, 0.9999))  # past what MiniLM's graph reaches
    e = LlamaEmbedder(minilm, threads=1)
    assert e.embed(TEXTS) == _llama(minilm).embed(TEXTS) and e.int8_layers is False
    cache = minilm.with_name(minilm.name + ".int8")
    assert cache.read_bytes().endswith(e5_int8.REFUSED)
    built = []
    monkeypatch.setattr(bert_int8.BertInt8, "model", lambda self: built.append(1) or b"")
    e = LlamaEmbedder(minilm, threads=1)
    assert e.embed(TEXTS) == _llama(minilm).embed(TEXTS) and e.int8_layers is False and built == []


def test_only_a_bert_gguf_with_mean_pooling_is_taken(minilm, tmp_path):
    assert bert_int8.readable(minilm)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF" + b"\0" * 64)
    assert not bert_int8.readable(junk) and not bert_int8.readable(tmp_path / "missing.gguf")
    for cut in (24, 4096, minilm.stat().st_size // 2):  # cut short: in its metadata, its tensors' names, its data
        short = tmp_path / f"short-{cut}.gguf"
        short.write_bytes(minilm.read_bytes()[:cut])
        assert not bert_int8.readable(short)
        with pytest.raises(ValueError):
            bert_int8.read_gguf(short)
    hostile = tmp_path / "hostile.gguf"  # an array of 2**62 strings: refused before a loop of that many
    hostile.write_bytes(b"GGUF" + struct.pack("<IQQQ", 3, 0, 1, 3) + b"key" + struct.pack("<IIQ", 9, 8, 2**62))
    with pytest.raises(ValueError, match="past the file's end"):
        bert_int8.read_gguf(hostile)
    chat = provision.ensure_model("SmolLM2-135M-Instruct")  # a llama GGUF: llama.cpp's alone
    assert not bert_int8.readable(chat)
    with pytest.raises(ValueError, match="not a BERT GGUF"):
        bert_int8.BertInt8(chat, lambda text: [1])
    llama = LlamaEmbedder(chat, threads=1)
    assert not llama.int8_ready() and llama.int8_layers is False  # llama.cpp's alone, nothing cached
    assert not chat.with_name(chat.name + ".int8").exists()

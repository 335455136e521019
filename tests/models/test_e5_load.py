"""The e5 engine's load from its caches: what the first load of a model file checks in its
vocabulary and derives from it (the longest piece, the normalisation table) is kept in the
`.vocab` cache beside it, so the loads after it neither check nor parse again, and a file that
fails the checks never gets a cache."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from pmem.errors import ModelError
from pmem.models import e5 as embed_e5
from pmem.models.e5 import E5Embedder

from .test_e5 import write_tiny_e5s1

TEXTS = ["cats\tdog", "кота", "cat " * 9, "x<s>y"]


def test_a_load_from_the_cache_neither_checks_nor_parses_the_vocabulary(tmp_path, monkeypatch):
    path = tmp_path / "tiny.e5s1"
    write_tiny_e5s1(path)
    first = E5Embedder(path, threads=1)
    want = [first.tokenize(t) for t in TEXTS], first.embed_array(TEXTS)
    assert path.with_name("tiny.e5s1.vocab").exists()
    monkeypatch.setattr(embed_e5, "_check_vocabulary", lambda *a: pytest.fail("checked again"))
    monkeypatch.setattr(embed_e5, "_read_norm", lambda *a: pytest.fail("parsed again"))
    second = E5Embedder(path, threads=1)
    for text in TEXTS:  # the normalisation (a tab is a space) and the pieces the cache brought back
        assert second.tokenizer.normalize(text) == first.tokenizer.normalize(text)
        assert second.tokenizer.pieces(text) == first.tokenizer.pieces(text)
    assert second.tokenizer.normalize("cats\tdog") == first.tokenizer.normalize("cats dog")
    assert [second.tokenize(t) for t in TEXTS] == want[0]
    assert np.array_equal(second.embed_array(TEXTS), want[1])


def test_a_cache_of_another_file_or_format_is_rebuilt(tmp_path, monkeypatch):
    path = tmp_path / "tiny.e5s1"
    write_tiny_e5s1(path)
    want = [E5Embedder(path, threads=1).tokenize(t) for t in TEXTS]
    vocab = path.with_name("tiny.e5s1.vocab")
    real = embed_e5._check_vocabulary
    checked: list[int] = []
    monkeypatch.setattr(embed_e5, "_check_vocabulary", lambda *a: checked.append(1) or real(*a))
    for broken in (b"E5IX1\0\0\0" + vocab.read_bytes()[8:], vocab.read_bytes()[:-3], b""):
        vocab.write_bytes(broken)
        checked.clear()
        assert [E5Embedder(path, threads=1).tokenize(t) for t in TEXTS] == want
        assert checked == [1] and vocab.read_bytes()[:8] == embed_e5.PieceIndex.MAGIC


def test_a_vocabulary_that_fails_its_checks_gets_no_cache(tmp_path):
    path = tmp_path / "tiny.e5s1"
    write_tiny_e5s1(path)
    data = path.read_bytes()
    path.write_bytes(data.replace("\u2581cat".encode(), "ca\u2581t".encode(), 1))  # same length
    with pytest.raises(ModelError, match="holds U\\+2581 past its start"):
        E5Embedder(path, threads=1)
    assert not path.with_name("tiny.e5s1.vocab").exists()
    head = struct.pack("<iI", 1, 9)  # write_tiny_e5s1's table: one entry of 9 bytes, tab -> space
    path.write_bytes(data.replace(head + struct.pack("<IB", 9, 1), head + struct.pack("<IB", 9, 2), 1))
    with pytest.raises(ModelError, match="malformed normalisation table"):
        E5Embedder(path, threads=1)
    assert not path.with_name("tiny.e5s1.vocab").exists()

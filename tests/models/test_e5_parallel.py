"""e5's packs side by side: with several threads, each pack of a call runs whole on one worker
thread with one BLAS thread, and the vectors are those of the packs run one after the other."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest

from pmem.models import e5 as embed_e5
from pmem.models import e5_int8
from pmem.models.e5 import E5Embedder, packs

from .test_e5 import write_tiny_e5s1

TEXTS = ["cat", "dog dogs", "cat " * 9, "кота", "cats dog кота", "dog " * 5, "x cat", "dogs", "cat dog " * 3]


@pytest.fixture(autouse=True)
def float32(monkeypatch):
    """The float32 engine's workers (bulk passages in int8: tests/models/test_e5_int8.py)."""
    monkeypatch.setattr(e5_int8, "enabled", lambda: False)


def meeting(model: E5Embedder, monkeypatch, workers: int) -> set[str]:
    """Make each thread's first pack of `model` wait until `workers` threads are in one (a
    BrokenBarrierError if fewer ever are); returns the names of the threads that ran packs."""
    names: set[str] = set()
    barrier = threading.Barrier(workers, timeout=20)
    forward = model.forward

    def spy(seqs, **kw):
        name = threading.current_thread().name
        if name not in names:
            names.add(name)
            barrier.wait()
        return forward(seqs, **kw)

    monkeypatch.setattr(model, "forward", spy)
    return names


@pytest.fixture
def tiny(tmp_path, monkeypatch) -> E5Embedder:
    path = tmp_path / "tiny.e5s1"
    write_tiny_e5s1(path)
    monkeypatch.setattr(embed_e5, "PACK_TOKENS", 12)  # the tiny texts in many packs
    monkeypatch.setattr(embed_e5, "SPLIT_TOKENS", 0)  # and side by side however few
    return E5Embedder(path, threads=1)


@pytest.mark.parametrize("parts", [1, 2, 3, 4])
def test_packs_cover_every_sequence_once_within_the_bound(parts):
    rng = np.random.default_rng(parts)
    for _ in range(50):
        lengths = rng.integers(3, 520, rng.integers(1, 120)).tolist()
        spans = packs(lengths, parts)
        assert [a for a, _ in spans] == [0, *[b for _, b in spans[:-1]]] and spans[-1][1] == len(lengths)
        assert all(a < b for a, b in spans)
        assert all(sum(lengths[a:b]) <= embed_e5.PACK_TOKENS or b - a == 1 for a, b in spans)
        if parts > 1 and len(lengths) >= parts and sum(lengths) >= embed_e5.SPLIT_TOKENS:
            assert len(spans) >= parts  # every worker has a pack
        elif parts > 1 and sum(lengths) < embed_e5.SPLIT_TOKENS:
            assert len(spans) == 1  # a short call: one pack, as a search


def test_a_short_call_is_one_pack_on_every_blas_thread():
    assert packs([12] * 10, 2) == [(0, 10)]  # ten queries: as a search always ran
    assert packs([embed_e5.SPLIT_TOKENS // 2] * 2, 2) == [(0, 1), (1, 2)]


def test_packs_for_two_workers_are_even():
    lengths = [45] * 64  # a batch of 64 turns: 2,880 tokens
    assert packs(lengths) == [(0, 45), (45, 64)]  # one worker: as full as they go (2,025 + 855)
    two = packs(lengths, 2)
    assert two == [(0, 32), (32, 64)]  # two workers: 1,440 each
    four = packs([45] * 200, 2)  # 9,000 tokens: 5 packs would do, 6 for two workers
    assert len(four) == 6 and max(b - a for a, b in four) - min(b - a for a, b in four) <= 1


def test_workers_give_the_vectors_of_the_same_packs_one_after_the_other(tiny, monkeypatch):
    serial = tiny.embed_array(TEXTS)
    tiny.use_threads(3)
    seen = meeting(tiny, monkeypatch, 3)
    side_by_side = tiny.embed_array(TEXTS)
    assert len(seen) == 3  # the caller and two workers, in packs at once
    assert np.allclose(side_by_side, serial, atol=1e-6)
    real = embed_e5.packs
    monkeypatch.setattr(embed_e5, "packs", lambda lengths, parts=1: real(lengths, 3))
    tiny.parallel = False  # the very packs the workers had, one after the other
    assert np.array_equal(tiny.embed_array(TEXTS), side_by_side)


def test_a_failing_pack_fails_the_call_and_the_next_call_works(tiny, monkeypatch):
    tiny.use_threads(2)
    want = tiny.embed_array(TEXTS)
    forward = tiny.forward
    calls = []

    def broken(seqs, **kw):
        calls.append(1)
        if len(calls) == 2:
            raise MemoryError("no room")
        return forward(seqs, **kw)

    monkeypatch.setattr(tiny, "forward", broken)
    with pytest.raises(MemoryError):
        tiny.embed_array(TEXTS)
    monkeypatch.setattr(tiny, "forward", forward)
    assert np.array_equal(tiny.embed_array(TEXTS), want)
    assert threading.active_count() < 10  # no worker left behind


def test_one_pack_runs_on_the_callers_thread_with_every_blas_thread(tiny, monkeypatch):
    tiny.use_threads(2)
    asked = []
    real = embed_e5.set_blas_threads
    monkeypatch.setattr(embed_e5, "set_blas_threads", lambda n: asked.append(n) or real(n))
    names = []
    forward = tiny.forward
    monkeypatch.setattr(tiny, "forward",
                        lambda seqs, **kw: names.append(threading.current_thread().name) or forward(seqs, **kw))
    tiny.embed_array(["cat"], query=True)  # a search: one short pack
    assert asked == [2] and names == [threading.current_thread().name]
    tiny.embed_array(TEXTS)
    assert asked == [2, 1]  # packs side by side: one BLAS thread each


def test_use_threads_sets_the_workers_of_the_next_call(tiny, monkeypatch):
    forward = tiny.forward
    tiny.use_threads(4)
    names = meeting(tiny, monkeypatch, 4)
    tiny.embed_array(TEXTS)
    assert len(names) == 4
    monkeypatch.setattr(tiny, "forward", forward)
    tiny.use_threads(1)
    names = meeting(tiny, monkeypatch, 1)
    tiny.embed_array(TEXTS)
    assert names == {threading.current_thread().name}


# --- the real model -----------------------------------------------------------------------


@pytest.mark.model
def test_e5_side_by_side_gives_the_serial_engines_vectors():
    from pmem.models import provision

    env = os.environ.get("PMEM_TEST_MODELS_DIR")
    if not env or not (Path(env) / "multilingual-e5-small.q4.e5s1").exists():
        pytest.skip("multilingual-e5-small is not provisioned (PMEM_TEST_MODELS_DIR)")
    path = provision.ensure_model("multilingual-e5-small", Path(env), progress=False)
    texts = [f"{i}: we went camping by the lake with the kids and the dog, week {i % 7}" * (1 + i % 5)
             for i in range(120)]
    model = E5Embedder(path, threads=1)
    serial = model.embed_array(texts)
    model.use_threads(2)
    side_by_side = model.embed_array(texts)
    assert np.abs(side_by_side - serial).max() < 1e-6  # float noise: the packs' rows differ, not the work
    assert (side_by_side * serial).sum(axis=1).min() > 0.99999


def test_a_blas_that_cannot_be_held_to_one_thread_gets_no_workers(tiny, monkeypatch):
    monkeypatch.setattr(embed_e5, "blas_settable", lambda: False)  # a numpy whose BLAS pmem cannot tell
    tiny.use_threads(2)
    names = meeting(tiny, monkeypatch, 1)
    tiny.embed_array(TEXTS)
    assert names == {threading.current_thread().name}

"""Bulk embedding through e5's int8 graph (pmem.models.e5_int8, decision 0070).

The graph is ONNX Runtime's, built from the float32 weights: checked against pmem's float32
engine (tiny synthetic models and the real multilingual-e5-small), for where it runs, what it
caches and what happens without it.
"""

from __future__ import annotations

import os
import platform
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pmem.models import e5_int8
from pmem.models.e5 import SPLIT_TOKENS, E5Embedder

from .test_e5 import write_tiny_e5s1

pytest.importorskip("onnxruntime")

WORDS = ["cat", "dog", "cats", "кота", "dogs", "cat dog", "dog cat cats", "\tcat"]


def _texts(n: int) -> list[str]:
    return [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(1 + i % 3)) for i in range(n)]


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.e5s1"
    write_tiny_e5s1(path)
    return path


def _float32(path: Path) -> E5Embedder:
    return E5Embedder(path, threads=1, int8=False)


def test_bulk_passages_run_in_int8_near_float32(tiny):
    texts = _texts(200)
    want = _float32(tiny).embed_array(texts)
    e = E5Embedder(tiny, threads=2)
    got = e.embed_array(texts)
    assert isinstance(e.int8_layers, e5_int8.Int8Layers)  # the graph ran, not the float32 engine
    cos = (got * want).sum(axis=1)
    assert cos.min() > 0.99 and not np.allclose(got, want, atol=1e-6)  # near, and not the same numbers
    assert np.allclose(np.linalg.norm(got, axis=1), 1, atol=1e-5)
    # the order of the texts is kept, whatever order the packs ran in
    assert ((e.embed_array(texts[::-1])[::-1] * got).sum(axis=1)).min() > 0.995


def test_a_vector_is_the_same_whatever_is_packed_beside_it(tiny):
    """Each token's row has its own scale: a text's int8 vector does not depend on the other texts
    of its call (their order, or which they are), as a scale a pack made it."""
    texts = _texts(300)
    e = E5Embedder(tiny, threads=1)
    alone = e.embed_array(texts[:200])
    others = e.embed_array(texts[200:] + texts[:200][::-1])[100:][::-1]
    assert isinstance(e.int8_layers, e5_int8.Int8Layers)
    assert np.array_equal(alone, others)


def _cpu_flags() -> set[str] | None:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return None
    return next((set(line.split(":", 1)[1].split()) for line in lines if line.startswith("flags")), None)


def test_the_runtime_says_whether_its_products_saturate_as_the_cpu_flags_do():
    """ONNX Runtime multiplies u8 by s8 with VNNI (or AMX) exactly; on x86 with AVX2 and no VNNI,
    in pairs of bytes summed in 16 bits, which saturate. The probe asks the runtime itself."""
    flags = _cpu_flags()
    if platform.machine() != "x86_64" or flags is None:
        pytest.skip("the flags of x86 Linux's /proc/cpuinfo say which kernel ONNX Runtime takes")
    exact = bool(flags & {"avx512_vnni", "avx_vnni", "amx_int8"}) or "avx2" not in flags
    assert e5_int8.saturates() is (not exact)


def _wide(on: bool):
    return lambda: on


def test_uint8_weights_make_the_same_vectors_with_a_cache_of_their_own(tiny, monkeypatch):
    """Where the products saturate the graph takes its weights as uint8 against a zero point of 128:
    the same integers, so the same vectors where nothing saturates; the cache says which it holds."""
    texts = _texts(200)
    saturating = e5_int8.saturates()
    cache = tiny.with_name(tiny.name + ".int8")
    monkeypatch.setattr(e5_int8, "saturates", _wide(False))
    narrow = E5Embedder(tiny, threads=1).embed_array(texts)
    assert cache.read_bytes().startswith(e5_int8.FORMAT)
    monkeypatch.setattr(e5_int8, "saturates", _wide(True))
    e = E5Embedder(tiny, threads=1)
    wide = e.embed_array(texts)
    assert isinstance(e.int8_layers, e5_int8.Int8Layers) and cache.read_bytes().startswith(e5_int8.WIDE_FORMAT)
    if not saturating:
        assert np.abs(wide - narrow).max() < 1e-6
    want = _float32(tiny).embed_array(texts)
    assert ((wide * want).sum(axis=1)).min() > 0.99


QEMU = shutil.which("qemu-x86_64")
_UNDER_QEMU = """
import sys
import numpy as np
from pmem.models import e5_int8
from pmem.models.e5 import E5Embedder
saturates, wide = e5_int8.saturates(), sys.argv[3] == "wide"
e5_int8.saturates = lambda: wide
texts = sys.argv[4].split("\\n")
np.save(sys.argv[2], E5Embedder(sys.argv[1], threads=1).embed_array(texts))
print(saturates)
"""


@pytest.mark.skipif(platform.machine() != "x86_64" or not QEMU,
                    reason="needs QEMU's user-mode emulator (Debian: qemu-user) on x86_64")
def test_on_a_cpu_without_vnni_the_vectors_are_as_exact_as_with_it(tiny, tmp_path):
    """ONNX Runtime's own AVX2 kernels, under QEMU's CPU `max` (AVX2, no VNNI): the probe finds
    that int8 weights saturate, and with uint8 weights the vectors are the ones a CPU with VNNI
    makes; with int8 weights they would be further from float32."""
    texts = _texts(120)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]), *sys.path])}
    got = {}
    for kind in ("wide", "narrow"):
        model = tmp_path / kind / tiny.name  # a cache of each kind's own
        model.parent.mkdir()
        shutil.copy2(tiny, model)
        out = tmp_path / f"{kind}.npy"
        run = subprocess.run([QEMU, "-cpu", "max", sys.executable, "-c", _UNDER_QEMU, str(model), str(out), kind,
                              "\n".join(texts)], env=env, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stderr[-2000:]
        assert run.stdout.split() == ["True"]  # the probe, on the emulated CPU
        got[kind] = np.load(out)
    want = _float32(tiny).embed_array(texts)
    here = E5Embedder(tiny, threads=1).embed_array(texts)  # this CPU's int8 vectors
    err = {k: 1 - (v * want).sum(axis=1) for k, v in got.items()}
    assert np.abs(got["wide"] - here).max() < 1e-4
    assert err["narrow"].mean() > 1.5 * err["wide"].mean()


def test_one_product_quantises_each_row_with_its_own_scale():
    """The graph's product on its own, against numpy: rows a thousand-fold apart in size keep their
    precision (one scale for all would round the smallest to zeros); a row of zeros gives the bias.
    qkv's inputs as a layer norm's (about even around 0), fo's as GELU's (never below -0.17)."""
    import math

    ort = e5_int8.runtime()
    rng = np.random.default_rng(0)
    w, bias = rng.standard_normal((8, 64)).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    base = rng.standard_normal((4, 64))
    gelu = base * 0.5 * (1 + np.vectorize(math.erf)(base / math.sqrt(2)))
    sizes = np.array([[1e-3], [1.0], [1e3], [0.0]])
    for kind, x in (("qkv", base * sizes), ("fo", gelu * sizes)):
        x = x.astype(np.float32)
        g = e5_int8.Graph()
        e5_int8.constants(g)
        y = e5_int8.product(g, "x", w, bias, None, f"l0.{kind}.")
        model = g.model([e5_int8.value_info("x", 1, ["T", 64])], [e5_int8.value_info(y, 1, ["T", 8])])
        got = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        exact = x @ w.T
        err = np.abs(got - bias - exact).max(axis=1)[:3] / np.abs(exact).max(axis=1)[:3]
        assert (err < 0.02).all(), (kind, err)
        assert np.allclose(got[3], bias)


def test_one_text_and_short_calls_stay_float32(tiny):
    f32, e = _float32(tiny), E5Embedder(tiny, threads=1)
    texts = _texts(200)
    long_text = " ".join(texts)  # one text of many windows: a search or an add, never int8
    assert sum(len(s) for s in e.windows(e.tokenize(long_text))) >= SPLIT_TOKENS
    assert np.array_equal(e.embed_array([long_text], query=True), f32.embed_array([long_text], query=True))
    few = texts[:5]
    assert sum(len(s) for t in few for s in e.windows(e.tokenize(t))) < SPLIT_TOKENS
    assert np.array_equal(e.embed_array(few), f32.embed_array(few))
    assert e.int8_layers is None  # never loaded: a search or an add costs nothing of it
    # many texts as queries (the store's symmetric scheme embeds what it stores as queries): int8
    got = e.embed_array(texts, query=True)
    assert isinstance(e.int8_layers, e5_int8.Int8Layers)
    assert ((got * f32.embed_array(texts, query=True)).sum(axis=1)).min() > 0.99


def test_use_int8_false_keeps_float32(tiny):
    texts = _texts(200)
    e = E5Embedder(tiny, threads=1)
    e.use_int8(False)
    assert np.array_equal(e.embed_array(texts), _float32(tiny).embed_array(texts))
    assert e.int8_layers is None and not tiny.with_name(tiny.name + ".int8").exists()


# 200 different texts (a store embeds each text once), 64 a call: past SPLIT_TOKENS each call
LONGER = [" ".join(WORDS[(i >> (3 * k)) % len(WORDS)] for k in range(6)) for i in range(200)]


def _stored(tiny: Path, db: Path, bulk: str, embedder=None) -> np.ndarray:
    """The vectors a store with `embed_bulk = bulk` writes for 200 memories at once (an import)."""
    from pmem import MemoryStore
    from pmem.config import Settings
    from pmem.store.vectors import deserialize

    store = MemoryStore(db, config=Settings().with_values(embed_bulk=bulk),
                        embedder=embedder or E5Embedder(tiny, threads=1))
    try:
        if embedder is None:  # the store's model as any caller gets it (a dream's word vectors too)
            assert store.embedder.int8_bulk == (bulk == "int8")  # type: ignore[attr-defined]
        stored = store.insert([store.new_memory(t) for t in LONGER])
        seqs = dict(store.conn.execute("SELECT id, seq FROM memories").fetchall())
        return np.array([deserialize(store.vectors.get(seqs[m.id])) for m in stored], np.float32)
    finally:
        store.close()


def test_the_setting_embed_bulk_chooses_for_an_import(tiny, tmp_path):
    want = _float32(tiny).embed_array(LONGER)
    exact = _stored(tiny, tmp_path / "f.db", "float32")
    assert np.allclose(exact, want, atol=1e-6)
    fast = _stored(tiny, tmp_path / "i.db", "int8")
    assert not np.allclose(fast, want, atol=1e-6) and ((fast * want).sum(axis=1)).min() > 0.99


def test_float32_bulk_never_asks_the_server_for_several_texts(tiny, tmp_path):
    """A `pmem serve` model runs its calls of several texts in int8: with embed_bulk = float32 a
    store embeds those here, in float32, and the server is asked for none."""
    here = E5Embedder(tiny, threads=1)

    class Served:  # a RemoteEmbedder's face: its name and size, `remote`, and local()
        name, dim, remote, query_aware = here.name, here.dim, True, True

        def embed(self, texts, query=False):
            raise AssertionError(f"the server was asked for {len(texts)} texts")

        def local(self):
            return here

    exact = _stored(tiny, tmp_path / "s.db", "float32", embedder=Served())
    assert np.allclose(exact, _float32(tiny).embed_array(LONGER), atol=1e-6)


def test_without_onnxruntime_float32_as_before(tiny, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` raises ImportError
    e5_int8.runtime.cache_clear()
    try:
        texts = _texts(200)
        assert not e5_int8.enabled()
        assert np.array_equal(E5Embedder(tiny, threads=1).embed_array(texts), _float32(tiny).embed_array(texts))
    finally:
        e5_int8.runtime.cache_clear()  # the next test imports the real one


def test_the_graph_is_cached_privately_and_rebuilt_when_stale_or_broken(tiny, monkeypatch):
    texts = _texts(200)
    first = E5Embedder(tiny, threads=1).embed_array(texts)
    cache = tiny.with_name(tiny.name + ".int8")
    assert cache.exists() and stat.S_IMODE(cache.stat().st_mode) == 0o600
    built = []
    real = E5Embedder.int8_model
    monkeypatch.setattr(E5Embedder, "int8_model", lambda self: built.append(1) or real(self))
    assert np.array_equal(E5Embedder(tiny, threads=1).embed_array(texts), first)
    assert built == []  # read from the cache
    cache.write_bytes(cache.read_bytes()[:200])  # cut short: built again, never believed
    assert np.array_equal(E5Embedder(tiny, threads=1).embed_array(texts), first)
    assert built == [1] and len(cache.read_bytes()) > 200
    write_tiny_e5s1(tiny, seed=3)  # another model under the same name
    os.utime(tiny, ns=(1, 1))
    other = E5Embedder(tiny, threads=1).embed_array(texts)
    assert built == [1, 1] and not np.allclose(other, first, atol=1e-2)


def test_padding_puts_each_token_back_where_it_was():
    lengths = [3, 1, 4]
    pad, unpad, bias = e5_int8.padding(lengths)
    assert pad.shape == (3, 4) and bias.shape == (3, 1, 1, 4)
    rows = np.arange(sum(lengths))
    assert np.array_equal(pad.reshape(-1)[unpad], rows)  # padded, then unpadded: the packed order
    assert (bias.reshape(3, 4) == 0).sum(axis=1).tolist() == lengths
    assert bias.min() <= -1e4


def test_packs_are_cut_where_their_padding_would_waste():
    lengths = sorted([5] * 10 + [6] * 3 + [9, 30, 31, 90])
    spans = e5_int8.unpadded(lengths, 2, len(lengths))
    assert spans[0][0] == 2 and spans[-1][1] == len(lengths)
    assert all(a < b and b == c for (a, b), (c, _) in zip(spans, spans[1:]))  # every sequence once, in order
    for a, b in spans:
        assert b - a == 1 or (b - a) * lengths[b - 1] <= e5_int8.SLACK * sum(lengths[a:b])
    assert spans[0] == (2, 13)  # like lengths stay one pack
    assert (16, 17) in spans  # the long one alone: 4 x 90 padded rows for 160 tokens would waste


def test_a_varint_of_a_negative_int64_takes_ten_bytes():
    assert e5_int8.varint(300) == b"\xac\x02"
    assert len(e5_int8.varint(-1)) == 10 and e5_int8.varint(-1)[-1] == 0x01


# --- the real model ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    from pmem.models import provision

    env = os.environ.get("PMEM_TEST_MODELS_DIR")
    models = Path(env) if env else tmp_path_factory.getbasetemp() / "models"
    return provision.ensure_model("multilingual-e5-small", models, progress=False)


@pytest.mark.model
def test_real_e5_bulk_int8_stays_within_tolerance(real):
    import json

    from .test_e5 import REFERENCE

    if not REFERENCE.exists():
        pytest.skip(f"reference vectors not found at {REFERENCE}")
    ref = json.loads(REFERENCE.read_text(encoding="utf-8"))
    texts = [r["text"] for kind in ("passages", "queries") for r in ref[kind]]  # 12 languages, one windowed
    f32 = E5Embedder(real, int8=False)
    want = f32.embed_array(texts)
    e = E5Embedder(real)
    got = e.embed_array(texts)
    assert isinstance(e.int8_layers, e5_int8.Int8Layers)
    cos = (got * want).sum(axis=1)
    # the reference's bound for every text (the worst: 603 tokens of "x x x"), most far closer
    assert cos.min() >= 0.99 and np.median(cos) >= 0.998, (cos.min(), np.median(cos))
    # what a search ranks: each text's nearest other text is the same under both
    sim_f, sim_q = want @ want.T, got @ got.T
    np.fill_diagonal(sim_f, -1)
    np.fill_diagonal(sim_q, -1)
    assert (sim_f.argmax(axis=1) == sim_q.argmax(axis=1)).all()

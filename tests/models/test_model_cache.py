"""The models a process has loaded are kept in a ModelCache that is passed in: one load per model
and cache, the CLI's process-wide one when none is given, a store's own when it is given one."""

from __future__ import annotations

from pathlib import Path

import pytest

from pmem.config import Settings
from pmem.models import cache as model_cache
from pmem.models import embed, provision
from pmem.models.cache import ModelCache
from pmem.service import MemoryStore


@pytest.fixture
def loads(monkeypatch, tmp_path):
    """Every model file loads as a fake of 16 dimensions; the list says which file loaded when."""
    loaded: list[str] = []

    def load(path, threads=0):
        loaded.append(Path(path).name)
        return embed.FakeEmbedder(16)

    monkeypatch.setattr(embed, "load_model_file", load)
    monkeypatch.setattr(provision, "resolve_model", lambda spec, kind, models_dir=None: Path(spec))
    return loaded


def test_a_model_loads_once_per_cache(loads, tmp_path):
    model = str(tmp_path / "m.gguf")
    first, second = ModelCache(), ModelCache()
    a = embed.load_embedder(model, cache=first)
    assert embed.load_embedder(model, cache=first) is a
    assert loads == ["m.gguf"]
    b = embed.load_embedder(model, cache=second)  # another process, as a test plays it
    assert b is not a and loads == ["m.gguf", "m.gguf"]
    assert first.embedders == {(str(Path(model).resolve()), 0): a}
    assert embed.load_embedder(model, threads=2, cache=first) is not a  # threads are part of the key


def test_without_a_cache_the_process_has_one(loads, tmp_path, monkeypatch):
    process = ModelCache()
    monkeypatch.setattr(model_cache, "PROCESS", process)
    model = str(tmp_path / "m.gguf")
    a = embed.load_embedder(model)
    assert embed.load_model_file_once(model) is a  # `pmem serve`'s loader: the same copy
    assert list(process.embedders.values()) == [a] and loads == ["m.gguf"]
    assert embed.load_embedder(model, cache=ModelCache()) is not a


def test_a_store_loads_into_the_cache_it_was_given(loads, tmp_path):
    mine = ModelCache()
    cfg = Settings(embed_model=str(tmp_path / "m.gguf"), server="never")
    with MemoryStore(tmp_path / "a.db", config=cfg, models=mine) as store:
        loaded = store.embedder
        assert list(mine.embedders.values()) == [loaded]
    with MemoryStore(tmp_path / "b.db", config=cfg, models=mine) as store:
        assert store.embedder is loaded  # the second store: the same model
    assert loads == ["m.gguf"]
    with MemoryStore(tmp_path / "c.db", config=cfg, models=ModelCache()) as store:
        assert store.embedder.dim == 16
    assert loads == ["m.gguf", "m.gguf"]

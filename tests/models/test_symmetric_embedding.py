"""multilingual-e5-small-symmetric: memories embedded as search queries ("query: " on both sides),
a model identity of its own over e5's file. A store of e5's passage vectors keeps searching with
them until `pmem reindex`, which doctor suggests; after it, the store embeds the new way."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from pmem import Memory
from pmem.models.cache import ModelCache
from pmem.models.embed import FakeEmbedder, SymmetricEmbedder
from pmem.models.provision import embed_model_for, memories_as_queries, stored_model
from pmem.models.thresholds import E5_SMALL, E5_SYMMETRIC, for_model
from pmem.search import search
from pmem.service import MemoryStore


class QueryAware(FakeEmbedder):
    """A fake that, as e5, embeds a query otherwise than a passage (its own prefix)."""

    query_aware = True

    def embed(self, texts, query: bool = False):
        return super().embed([("query: " if query else "passage: ") + t for t in texts])


def test_the_wrapper_embeds_memories_as_queries():
    inner = QueryAware(64)
    sym = SymmetricEmbedder(inner, "multilingual-e5-small-symmetric")
    texts = ["The spare key is under the blue flowerpot.", "Dana approves deploys."]
    assert sym.embed(texts) == inner.embed(texts, query=True) == sym.embed(texts, query=True)
    assert sym.embed(texts) != inner.embed(texts)
    assert (sym.name, sym.dim, sym.query_aware) == ("multilingual-e5-small-symmetric", 64, False)


def test_a_store_records_which_scheme_made_its_vectors():
    assert memories_as_queries("multilingual-e5-small-symmetric")
    assert not memories_as_queries("multilingual-e5-small") and not memories_as_queries("all-MiniLM-L6-v2")
    # the two schemes share e5's file; its stem is what the plain model's vectors record
    assert stored_model("multilingual-e5-small.q4") == "multilingual-e5-small"
    assert stored_model("multilingual-e5-small-symmetric") == "multilingual-e5-small-symmetric"
    assert stored_model("all-MiniLM-L6-v2.f16") == "all-MiniLM-L6-v2"
    assert stored_model("somebody-elses.gguf") is None
    from pmem.config import Settings

    assert Settings().embed_model == "multilingual-e5-small-symmetric"  # new stores
    assert embed_model_for(Settings(), "multilingual-e5-small.q4") == "multilingual-e5-small"  # old ones


def test_each_scheme_has_its_own_thresholds():
    assert for_model("multilingual-e5-small-symmetric") is E5_SYMMETRIC
    assert for_model("multilingual-e5-small.q4") is E5_SMALL
    assert E5_SYMMETRIC.score_floor != E5_SMALL.score_floor


# --- the real model ----------------------------------------------------------------------------

MEMORIES = ["Deploys to production need approval from Dana.", "The spare key is under the blue flowerpot.",
            "I'm allergic to penicillin; it gives me hives.", "Grandma's birthday is on 9 August.",
            "The car needs new tyres before the winter.", "Машина стоит на третьем уровне парковки.",
            "The dog's vet is open until 7.", "We try to avoid sugar after eight in the evening."]


@pytest.fixture
def cli(tmp_path, monkeypatch):
    from conftest import models_dir

    from pmem.cli.app import app

    if not (models_dir() / "multilingual-e5-small.q4.e5s1").exists():
        pytest.skip("multilingual-e5-small is not provisioned in PMEM_TEST_MODELS_DIR")
    db = tmp_path / "store.db"
    monkeypatch.setenv("PMEM_DB", str(db))
    monkeypatch.setenv("PMEM_THREADS", "1")
    runner = CliRunner()

    def pmem(*args, code: int = 0):
        r = runner.invoke(app, list(args))
        assert r.exit_code == code, r.output
        return r

    pmem.db = db  # type: ignore[attr-defined]
    return pmem


def _vectors(db) -> dict[str, np.ndarray]:
    with MemoryStore(db) as s:
        rows = s.conn.execute("SELECT m.text, v.embedding FROM memories m JOIN memory_vec v ON v.seq = m.seq")
        return {t: np.frombuffer(b, dtype="<f4") for t, b in rows}


def _vectors_check(db):
    from pmem.config import load
    from pmem.doctor import run_checks

    return [c for c in run_checks(load(), db_override=db) if c.name == "vectors"]


@pytest.mark.model
@pytest.mark.slow
def test_an_old_store_searches_with_its_passage_vectors_until_reindex(cli, monkeypatch):
    from pmem.models.embed import load_embedder

    monkeypatch.setenv("PMEM_EMBED_MODEL", "multilingual-e5-small")  # as the earlier default made it
    for text in MEMORIES:
        cli("add", text)
    monkeypatch.delenv("PMEM_EMBED_MODEL")
    e5 = load_embedder("multilingual-e5-small", threads=1)  # the one the stores load
    passages = _vectors(cli.db)
    want = np.asarray(e5.embed(MEMORIES), np.float32)
    assert np.allclose([passages[t] for t in MEMORIES], want, atol=1e-5)

    # the default is now the symmetric scheme; this store keeps its own until reindexed
    assert json.loads(cli("stats", "--json").stdout)["embed_model"] == "multilingual-e5-small.q4"
    assert json.loads(cli("models", "--json").stdout)["embed_model"] == "multilingual-e5-small"
    hits = json.loads(cli("search", "Who signs off on releases?", "--json", "--mode", "semantic").stdout)
    assert hits[0]["text"].startswith("Deploys to production")
    hits = json.loads(cli("search", "где я оставил машину", "--json").stdout)
    assert hits[0]["text"].startswith("Машина")
    (check,) = _vectors_check(cli.db)
    assert check.ok and check.level == "info" and check.fix == "pmem reindex"
    assert "multilingual-e5-small-symmetric" in check.detail and "other words" in check.detail
    cli("add", "The boiler was serviced in October.")  # a new memory: still a passage vector
    assert np.allclose(_vectors(cli.db)["The boiler was serviced in October."],
                       e5.embed(["The boiler was serviced in October."])[0], atol=1e-5)

    assert "with multilingual-e5-small-symmetric" in cli("reindex").stderr
    assert json.loads(cli("stats", "--json").stdout)["embed_model"] == "multilingual-e5-small-symmetric"
    after = _vectors(cli.db)
    texts = [*MEMORIES, "The boiler was serviced in October."]
    assert np.allclose([after[t] for t in texts], np.asarray(e5.embed(texts, query=True)), atol=1e-5)
    assert not np.allclose(after[MEMORIES[0]], passages[MEMORIES[0]], atol=1e-3)
    hits = json.loads(cli("search", "Who signs off on releases?", "--json").stdout)
    assert hits[0]["text"].startswith("Deploys to production")
    cli("add", "The gutters were cleaned in May.")  # from now on, memories as queries
    assert np.allclose(_vectors(cli.db)["The gutters were cleaned in May."],
                       e5.embed(["The gutters were cleaned in May."], query=True)[0], atol=1e-5)
    assert _vectors_check(cli.db) == []
    with MemoryStore(cli.db) as s:
        assert s.thresholds() == E5_SYMMETRIC


@pytest.mark.model
def test_an_interrupted_reindex_to_the_symmetric_scheme_resumes(cli, monkeypatch):
    from pmem.models.embed import load_embedder

    monkeypatch.setenv("PMEM_EMBED_MODEL", "multilingual-e5-small")
    with MemoryStore(cli.db) as s:
        s.insert([Memory(id="", text=t) for t in MEMORIES])
    monkeypatch.delenv("PMEM_EMBED_MODEL")
    e5 = load_embedder("multilingual-e5-small", threads=1)  # the one the stores load
    embedded: list[int] = []
    real = e5.embed

    def counting(texts, query=False):
        embedded.append(len(texts))
        return real(texts, query=query)

    monkeypatch.setattr(e5, "embed", counting)

    class Stop(Exception):
        pass

    def stop(done, total):
        if done >= 3:
            raise Stop

    with MemoryStore(cli.db) as s:
        with pytest.raises(Stop):
            s.reindex(progress=stop, batch=3)
        assert s.vector_model()[0] == "multilingual-e5-small.q4"  # nothing swapped yet
        assert s.reindex_progress() == ("multilingual-e5-small-symmetric", 3, len(MEMORIES))
        hits = search(s, "Who signs off on releases?", limit=1, mode="semantic")  # the passage vectors still answer
        assert hits[0].memory.text.startswith("Deploys")
    (check,) = _vectors_check(cli.db)
    assert "3 of 8 done" in check.detail
    embedded.clear()
    with MemoryStore(cli.db) as s:
        assert s.reindex(batch=3) == len(MEMORIES)
        assert s.vector_model()[0] == "multilingual-e5-small-symmetric"
    assert sum(embedded) == len(MEMORIES) - 3  # only the rest
    after = _vectors(cli.db)
    assert np.allclose([after[t] for t in MEMORIES], np.asarray(real(MEMORIES, query=True)), atol=1e-5)


@pytest.mark.model
def test_the_symmetric_scheme_through_pmem_serve(monkeypatch):
    """`pmem serve` holds e5's file once for both schemes; a client of the symmetric one asks it
    for query vectors of memories as well as of queries."""
    import shutil
    import tempfile
    import threading
    from pathlib import Path

    from conftest import models_dir

    from pmem.config import Settings
    from pmem.models import provision
    from pmem.models import serve as srv
    from pmem.models.embed import load_model_file
    from pmem.store import deserialize

    if not (models_dir() / "multilingual-e5-small.q4.e5s1").exists():
        pytest.skip("multilingual-e5-small is not provisioned in PMEM_TEST_MODELS_DIR")
    home = Path(tempfile.mkdtemp(prefix="pmem-", dir="/tmp"))  # a socket path short enough
    monkeypatch.setenv("PMEM_HOME", str(home))
    monkeypatch.setattr(srv, "spawn", lambda argv, log, env=None: None)
    path = provision.ensure_model("multilingual-e5-small", progress=False)
    s = srv.Server(threads=1, loader=load_model_file)
    s.bind()
    s.model(str(path))
    thread = threading.Thread(target=s.serve, daemon=True)
    thread.start()
    try:
        local = load_model_file(path, threads=1)
        texts = ["где я припарковал машину", "The dentist moved my appointment to Thursday"]
        with MemoryStore(home / "sym.db", config=Settings(embed_model="multilingual-e5-small-symmetric",
                                                          server="auto", threads=1),
                         models=ModelCache()) as store:
            e = store.embedder
            assert isinstance(e, SymmetricEmbedder) and isinstance(e.inner, srv.RemoteEmbedder) and e.remote
            want = np.asarray(local.embed(texts, query=True))
            for query in (True, False):
                served = np.array([deserialize(b) for b in store.embed(texts, query=query)])
                assert np.abs(served - want).max() < 1e-5
            store.add(texts[1])
            assert store.vector_model()[0] == "multilingual-e5-small-symmetric"
        assert s.requests >= 3
    finally:
        s.shutdown()
        thread.join(10)
        shutil.rmtree(home, ignore_errors=True)

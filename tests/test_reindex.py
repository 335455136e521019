"""`pmem reindex` across models: resumable after an interruption, never mixing two models' vectors."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from pmem.errors import ModelMismatch
from pmem.models.embed import FakeEmbedder
from pmem.search import search
from pmem.service import MemoryStore


class Counting(FakeEmbedder):
    """A fake of another model (its own name and dimension) that counts the texts it embeds."""

    def __init__(self, name: str = "other-model", dim: int = 32):
        super().__init__(dim)
        self.name = name
        self.texts: list[str] = []

    def embed(self, texts):
        self.texts.extend(texts)
        return super().embed(texts)


class Stop(Exception):
    pass


def _fill(path, n: int = 150) -> None:
    with MemoryStore(path, embedder=FakeEmbedder(64)) as s:
        for i in range(n):
            s.add(f"memory number {i} about topic {i % 7}")


def _interrupt_after(calls: int):
    seen = []

    def progress(done, total):
        seen.append((done, total))
        if len(seen) >= calls:
            raise Stop

    return progress, seen


def test_an_interrupted_reindex_resumes_and_embeds_only_the_rest(tmp_path):
    path = tmp_path / "r.db"
    _fill(path)
    first = Counting()
    with MemoryStore(path, embedder=first) as s:
        progress, seen = _interrupt_after(2)
        with pytest.raises(Stop):
            s.reindex(progress=progress, batch=40)
        assert seen == [(40, 150), (80, 150)]
        assert s.vector_model() == ("fake-64", 64)  # the switch has not happened
        assert s.reindex_progress() == ("other-model", 80, 150)
        with pytest.raises(ModelMismatch, match=r"pmem reindex.*resume the interrupted one: 80 of 150"):
            search(s, "topic 3", mode="semantic")  # refused: never the two models' vectors mixed
    assert len(first.texts) == 80
    with MemoryStore(path, embedder=FakeEmbedder(64)) as s:  # the old model still answers meanwhile
        assert len(search(s, "topic 3", mode="semantic", limit=3)) == 3
    again = Counting()
    with MemoryStore(path, embedder=again) as s:
        seen = []
        assert s.reindex(progress=lambda d, t: seen.append((d, t)), batch=40) == 150
        assert seen[0] == (80, 150) and seen[-1] == (150, 150)
        assert s.vector_model() == ("other-model", 32)
        assert s.reindex_progress() is None
        assert s.conn.execute("SELECT count(*) FROM memory_vec").fetchone()[0] == 150
        assert not s.conn.execute("SELECT 1 FROM sqlite_master WHERE name LIKE 'reindex_vec%'").fetchall()
        assert s.setting("reindex_model") is None
        embedded = list(again.texts)
        hits = search(s, "memory number 3 about topic 3", mode="semantic", limit=1)
        assert hits[0].memory.text == "memory number 3 about topic 3"
    # only the 70 not staged before: the first 80 were not embedded again
    texts = {f"memory number {i} about topic {i % 7}" for i in range(150)}
    assert len(embedded) == 70 and set(first.texts) | set(embedded) == texts
    assert not set(first.texts) & set(embedded)


def test_the_resumed_vectors_equal_a_reindex_in_one_go(tmp_path):
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    _fill(a, 50)
    _fill(b, 50)
    with MemoryStore(a, embedder=Counting()) as s:
        with pytest.raises(Stop):
            s.reindex(progress=_interrupt_after(1)[0], batch=16)
        s.reindex(batch=16)
        va = s.conn.execute("SELECT seq, embedding FROM memory_vec ORDER BY seq").fetchall()
    with MemoryStore(b, embedder=Counting()) as s:
        s.reindex()
        vb = s.conn.execute("SELECT seq, embedding FROM memory_vec ORDER BY seq").fetchall()
    assert va == vb


def test_changes_during_the_interruption_are_embedded_again(tmp_path):
    """Memories edited, deleted or added with the old model between the two runs: the staged
    vectors follow the text, never an old text's vector."""
    path = tmp_path / "c.db"
    _fill(path, 30)
    with MemoryStore(path, embedder=Counting()) as s:
        with pytest.raises(Stop):
            s.reindex(progress=_interrupt_after(1)[0], batch=20)
        assert s.reindex_progress() == ("other-model", 20, 30)
    with MemoryStore(path, embedder=FakeEmbedder(64)) as s:  # back on the old model for a while
        ids = [r[0] for r in s.conn.execute("SELECT id FROM memories ORDER BY seq")]
        first = ids[0]  # staged before the interruption
        s.edit(first, text="an edited text about the harbour")
        s.add("a memory added in between")
        s.delete(ids[5])  # staged too
    again = Counting()
    with MemoryStore(path, embedder=again) as s:
        assert s.reindex_progress() == ("other-model", 18, 30)  # the edited and the deleted one left it
        assert s.reindex() == 30  # 30 - 1 deleted + 1 added
        assert "an edited text about the harbour" in again.texts
        assert "a memory added in between" in again.texts
        hits = search(s, "an edited text about the harbour", mode="semantic", limit=1)
        assert hits[0].memory.id == first
        n = s.conn.execute("SELECT count(*) FROM memory_vec").fetchone()[0]
        assert n == s.conn.execute("SELECT count(*) FROM memories").fetchone()[0] == 30


def test_staging_for_another_model_is_thrown_away(tmp_path):
    path = tmp_path / "d.db"
    _fill(path, 30)
    with MemoryStore(path, embedder=Counting("model-a", 32)) as s:
        with pytest.raises(Stop):
            s.reindex(progress=_interrupt_after(1)[0], batch=20)
    b = Counting("model-b", 16)
    with MemoryStore(path, embedder=b) as s:
        assert s.reindex(batch=20) == 30
        assert len(b.texts) == 30 and s.vector_model() == ("model-b", 16)


def test_cli_reindex_interrupted_then_resumed(tmp_path, monkeypatch):
    from pmem.cli.app import app

    db = tmp_path / "cli.db"
    _fill(db, 20)
    monkeypatch.setenv("PMEM_DB", str(db))
    monkeypatch.setenv("PMEM_EMBED_MODEL", "fake-32")
    calls = []
    real = FakeEmbedder.embed

    def flaky(self, texts):
        calls.append(len(texts))
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, texts)

    monkeypatch.setattr(FakeEmbedder, "embed", flaky)
    monkeypatch.setattr(MemoryStore.reindex, "__defaults__", (None, 8))  # small batches
    runner = CliRunner()
    r = runner.invoke(app, ["reindex"])
    assert r.exit_code == 130 and "interrupted" in r.stderr
    r = runner.invoke(app, ["reindex"])
    assert r.exit_code == 0, r.output
    assert "re-embedded 20 memories with fake-32" in r.stderr
    assert calls == [8, 8, 8, 4]  # the first batch was not embedded again


def test_doctor_says_how_far_an_interrupted_reindex_got(tmp_path, monkeypatch):
    from pmem.config import load
    from pmem.doctor import run_checks

    db = tmp_path / "doc.db"
    _fill(db, 30)
    with MemoryStore(db, embedder=Counting("fake-32", 32)) as s:
        with pytest.raises(Stop):
            s.reindex(progress=_interrupt_after(1)[0], batch=20)
    monkeypatch.setenv("PMEM_EMBED_MODEL", "fake-32")
    vectors = [c for c in run_checks(load(), db_override=db) if c.name == "vectors"]
    assert len(vectors) == 1 and not vectors[0].ok
    assert "stored vectors come from fake-64" in vectors[0].detail
    assert "interrupted reindex to fake-32 has 20 of 30 done" in vectors[0].detail


@pytest.mark.model
@pytest.mark.slow
def test_a_store_on_the_old_default_keeps_its_model_until_reindex_moves_it(tmp_path, monkeypatch):
    """multilingual-e5-small(-symmetric) is the default; a store whose vectors come from
    all-MiniLM-L6-v2 (the old default) keeps searching with MiniLM while no model is configured,
    doctor says so, and `pmem reindex` moves it to e5. A model the user configures still wins (and mismatches)."""
    import json

    from conftest import models_dir

    from pmem.cli.app import app
    from pmem.config import load
    from pmem.doctor import run_checks

    if not (models_dir() / "all-MiniLM-L6-v2.f16.gguf").exists():
        pytest.skip("all-MiniLM-L6-v2 is not provisioned in PMEM_TEST_MODELS_DIR")
    pytest.importorskip("llama_cpp")
    db = tmp_path / "old-default.db"
    monkeypatch.setenv("PMEM_DB", str(db))
    monkeypatch.setenv("PMEM_MODELS_DIR", str(models_dir()))
    monkeypatch.setenv("PMEM_SERVER", "off")
    runner = CliRunner()

    def pmem(*args):
        r = runner.invoke(app, list(args))
        assert r.exit_code == 0, r.output
        return r

    monkeypatch.setenv("PMEM_EMBED_MODEL", "all-MiniLM-L6-v2")  # as the earlier default made it
    for text in ("Машина стоит на третьем уровне парковки", "The dentist moved my appointment to Thursday",
                 "My sister lives in Porto"):
        pmem("add", text)
    monkeypatch.delenv("PMEM_EMBED_MODEL")
    assert load().embed_model == "multilingual-e5-small-symmetric"
    hits = json.loads(pmem("search", "dentist appointment", "--json").stdout)
    assert hits[0]["text"].startswith("The dentist")
    assert json.loads(pmem("stats", "--json").stdout)["embed_model"] == "all-MiniLM-L6-v2.f16"
    (check,) = [c for c in run_checks(load(), db_override=db) if c.name == "vectors"]
    assert check.ok and check.level == "info" and "all-MiniLM-L6-v2" in check.detail
    models = json.loads(pmem("models", "--json").stdout)
    assert models["embed_model"] == "all-MiniLM-L6-v2"
    assert {r["name"] for r in models["known"] if r["in_use"]} == {"all-MiniLM-L6-v2", "SmolLM2-135M-Instruct"}

    monkeypatch.setenv("PMEM_EMBED_MODEL", "fake-64")  # a configured model wins: a clear mismatch
    r = runner.invoke(app, ["search", "dentist"])
    assert r.exit_code != 0 and "pmem reindex" in r.stderr
    monkeypatch.delenv("PMEM_EMBED_MODEL")

    assert "with multilingual-e5-small" in pmem("reindex").stderr
    assert json.loads(pmem("stats", "--json").stdout)["embed_model"].startswith("multilingual-e5-small")
    hits = json.loads(pmem("search", "где машина", "--json").stdout)  # Russian, by meaning
    assert hits[0]["text"].startswith("Машина")
    assert [c for c in run_checks(load(), db_override=db) if c.name == "vectors"] == []

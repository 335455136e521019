"""`pmem doctor` on a store whose English memories lack their second vector (pmem/store/english.py):
a store from before the second vectors says so in one line, naming `pmem reindex --missing`, which
fills them and nothing else."""

from __future__ import annotations

import pytest

from pmem import Memory, doctor
from pmem.models.embed import FakeEmbedder
from pmem.service import MemoryStore
from pmem.store import english as en

RUSSIAN = "Моя сестра Лена живёт в Порту и работает архитектором."


class Named(FakeEmbedder):
    """A fake under another model's name: the store treats its vectors as that model's."""

    def __init__(self, name: str, dim: int = 64):
        super().__init__(dim)
        self.name = name

    def embed(self, texts, query: bool = False):
        return super().embed(texts)


def _english_checks(cfg, path):
    return [c for c in doctor.run_checks(cfg, db_override=path) if c.name == "english vectors"]


@pytest.fixture
def cfg(fake_config):
    return fake_config.with_values(embed_model=en.MAIN)


def _store(path, cfg):
    s = MemoryStore(path, config=cfg, embedder=Named(en.MAIN))
    s.vectors.english.embedder = Named(en.MODEL, 32)
    return s


@pytest.mark.slow
def test_doctor_names_reindex_for_english_memories_without_a_second_vector(tmp_path, cfg):
    path = tmp_path / "old.db"
    s = _store(path, cfg)
    s.insert([Memory(id="", text=t) for t in ("The dog's vet is at Parkside Animal Clinic.",
                                             "Taxes must be filed by 31 January.", RUSSIAN)])
    assert _english_checks(cfg, path) == []  # every English memory has its second vector
    s.conn.execute("DELETE FROM memory_vec_en")  # as a store written before them (or MiniLM failed to load)
    s.close()

    (check,) = _english_checks(cfg, path)
    assert check.ok and check.level == "info" and check.fix == "pmem reindex --missing"
    assert check.detail.startswith("2 English memories")  # the Russian one never has one

    s = _store(path, cfg)
    s.reindex()
    s.close()
    assert _english_checks(cfg, path) == []


def test_reindex_missing_fills_the_second_vectors_and_leaves_the_stored_ones(tmp_path, cfg):
    path = tmp_path / "upgrade.db"
    s = _store(path, cfg)
    s.insert([Memory(id="", text=t) for t in ("The dog's vet is at Parkside Animal Clinic.",
                                             "Taxes must be filed by 31 January.", RUSSIAN)])
    before = s.conn.execute("SELECT seq, embedding FROM memory_vec ORDER BY seq").fetchall()
    s.conn.execute("DELETE FROM memory_vec_en")
    assert s.fill_missing() == 2  # the English two; the Russian one never has one
    assert s.conn.execute("SELECT count(*) FROM memory_vec_en").fetchone()[0] == 2
    assert s.conn.execute("SELECT seq, embedding FROM memory_vec ORDER BY seq").fetchall() == before
    assert s.fill_missing() == 0  # nothing left to do
    s.close()
    assert _english_checks(cfg, path) == []


def test_doctor_says_nothing_of_second_vectors_where_they_are_off(tmp_path, cfg):
    path = tmp_path / "off.db"
    s = _store(path, cfg)
    s.insert([Memory(id="", text="Deploys to production need approval from Dana")])
    s.conn.execute("DELETE FROM memory_vec_en")
    s.close()
    assert _english_checks(cfg.with_values(embed_english="none"), path) == []
    assert len(_english_checks(cfg, path)) == 1


def test_the_doctor_command_prints_the_hint(tmp_path, cfg, monkeypatch):
    from typer.testing import CliRunner

    from pmem.cli.app import app

    path = tmp_path / "cli.db"
    s = _store(path, cfg)
    s.insert([Memory(id="", text="Deploys to production need approval from Dana")])
    s.conn.execute("DELETE FROM memory_vec_en")
    s.close()
    monkeypatch.setenv("PMEM_EMBED_MODEL", en.MAIN)
    out = CliRunner().invoke(app, ["--db", str(path), "doctor"]).output
    assert "[info] english vectors: 1 English memories have no second vector" in out
    assert "hint: pmem reindex --missing" in out.split("english vectors", 1)[1]


@pytest.mark.model
def test_the_reindex_command_fills_what_is_missing_with_the_real_minilm(tmp_path, cfg, monkeypatch):
    from typer.testing import CliRunner

    from pmem.cli.app import app

    path = tmp_path / "cli-fill.db"
    s = _store(path, cfg)
    s.insert([Memory(id="", text="Deploys to production need approval from Dana"), Memory(id="", text=RUSSIAN)])
    s.conn.execute("DELETE FROM memory_vec_en")
    before = s.conn.execute("SELECT embedding FROM memory_vec ORDER BY seq").fetchall()
    s.close()
    monkeypatch.setenv("PMEM_EMBED_MODEL", en.MAIN)
    r = CliRunner().invoke(app, ["--db", str(path), "reindex", "--missing"])
    assert r.exit_code == 0, r.output
    assert "embedded 1 missing vectors" in r.output
    s = MemoryStore(path, config=cfg, embedder=Named(en.MAIN))
    try:
        assert s.conn.execute("SELECT count(*) FROM memory_vec_en").fetchone()[0] == 1
        assert s.conn.execute("SELECT embedding FROM memory_vec ORDER BY seq").fetchall() == before
    finally:
        s.close()
    assert _english_checks(cfg, path) == []


def test_doctor_shows_the_background_fill_while_it_runs_and_where_it_stopped(tmp_path, cfg):
    """After an import the fill runs in the background (pmem/fill.py): doctor says how far
    it is instead of naming the command, and names the command with the reason when it failed."""
    import fcntl
    import json
    import os

    from pmem import fill

    path = tmp_path / "filling.db"
    s = _store(path, cfg)
    s.insert([Memory(id="", text=f"note {i} about the garden and its tools") for i in range(3)])
    s.conn.execute("DELETE FROM memory_vec_en")
    s.close()
    fill.state_file(path).write_text(json.dumps({"running": True, "done": 1, "total": 3}))
    lock = os.open(fill.lock_file(path), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        (check,) = _english_checks(cfg, path)
        assert check.detail.endswith("the background fill is running (1 of 3 done)") and not check.fix
    finally:
        os.close(lock)
    fill.state_file(path).write_text(json.dumps({"running": False, "ok": False, "error": "no MiniLM"}))
    (check,) = _english_checks(cfg, path)
    assert check.detail.endswith("the background fill stopped: no MiniLM") and check.fix == "pmem reindex --missing"

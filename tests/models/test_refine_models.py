"""An import as a person runs it, with the real models: `pmem import` stores int8 vectors and
returns; the background fill it starts makes every one of them (e5's and MiniLM's) again in
float32, so the store ends with the vectors of an import under `embed_bulk = float32`
(pmem.store.refine, docs/decisions/0071-int8-then-exact.md)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from pmem import fill

pytestmark = pytest.mark.model
pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parents[2]
TEXTS = [f"{who} {what} on day {day} of the trip to the coast." for day in range(10)
         for who in ("Anna", "Ben", "Chloe", "Dev")
         for what in ("bought fresh bread and cheese", "walked along the river before lunch",
                      "wrote a long letter home about the weather")] + \
    [f"Лена рассказала, что в день {day} они гуляли по старому городу." for day in range(8)]


def imported(home: Path, source: Path, **env: str) -> Path:
    """`pmem import` in a fresh home, then the fill it started, waited for. The database's path."""
    run_env = {**os.environ, "PYTHONPATH": str(ROOT), "PMEM_HOME": str(home), "PMEM_SERVER": "never", **env}
    done = subprocess.run([sys.executable, "-m", "pmem", "import", str(source), "--json"], env=run_env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    db = home / "pmem.db"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        state = fill.last(db) or {}
        if state.get("running") is False and not fill.running(db):
            break
        time.sleep(0.2)
    assert (fill.last(db) or {}).get("ok"), fill.last(db)
    return db


def vectors(db: Path, table: str) -> dict[str, np.ndarray]:
    with sqlite3.connect(db) as conn:
        return {t: np.frombuffer(b, np.float32) for t, b in conn.execute(
            f"SELECT m.text, v.embedding FROM memories m JOIN {table} v ON v.seq = m.seq")}


def marks(db: Path) -> list[tuple[str, int]]:
    with sqlite3.connect(db) as conn:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'refine_vec'").fetchone():
            return []
        return conn.execute("SELECT side, count(*) FROM refine_vec GROUP BY side ORDER BY side").fetchall()


def test_an_import_ends_with_float32_vectors_after_its_fill(tmp_path):
    source = tmp_path / "turns.jsonl"
    source.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS), encoding="utf-8")
    fast = imported(tmp_path / "int8", source)
    exact = imported(tmp_path / "float32", source, PMEM_EMBED_BULK="float32")
    assert marks(fast) == [] and marks(exact) == []
    for table, count in (("memory_vec", len(TEXTS)), ("memory_vec_en", 120)):
        got, want = vectors(fast, table), vectors(exact, table)
        assert len(got) == len(want) == count
        worst = max(float(np.abs(got[t] - want[t]).max()) for t in want)
        assert worst < 1e-5, (table, worst)  # float32's numbers (an int8 vector is ~1e-2 off in places)


def test_int8_only_keeps_int8_vectors_on_both_sides(tmp_path):
    source = tmp_path / "turns.jsonl"
    source.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS), encoding="utf-8")
    kept = imported(tmp_path / "int8-only", source, PMEM_EMBED_BULK="int8-only")
    exact = imported(tmp_path / "float32", source, PMEM_EMBED_BULK="float32")
    assert marks(kept) == []
    for table in ("memory_vec", "memory_vec_en"):  # e5's import pass and MiniLM's fill, both in int8
        got, want = vectors(kept, table), vectors(exact, table)
        assert len(got) == len(want)
        assert min(float(got[t] @ want[t]) for t in want) > 0.995
        assert max(float(np.abs(got[t] - want[t]).max()) for t in want) > 1e-4


def test_the_int8_vectors_are_marked_until_the_fill_runs(tmp_path):
    """The same import, its fill held back (its lock held here): int8 vectors, marked; then the fill."""
    source = tmp_path / "turns.jsonl"
    source.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS), encoding="utf-8")
    home = tmp_path / "home"
    home.mkdir()
    db = home / "pmem.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PMEM_HOME": str(home), "PMEM_SERVER": "never"}
    with fill.one_at_a_time(db):
        done = subprocess.run([sys.executable, "-m", "pmem", "import", str(source), "--json"], env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert marks(db) == [("main", len(TEXTS))]  # e5's int8 pass; MiniLM's are not written yet
        int8 = vectors(db, "memory_vec")
    exact = imported(tmp_path / "float32", source, PMEM_EMBED_BULK="float32")
    want = vectors(exact, "memory_vec")
    cos = [float(int8[t] @ want[t]) for t in want]
    assert min(cos) > 0.999 and max(float(np.abs(int8[t] - want[t]).max()) for t in want) > 1e-4
    deadline = time.monotonic() + 300  # the import's detached fill waited for the lock; now it runs
    while (marks(db) or fill.running(db)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert marks(db) == []
    got = vectors(db, "memory_vec")
    assert max(float(np.abs(got[t] - want[t]).max()) for t in want) < 1e-5

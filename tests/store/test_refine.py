"""Vectors made in int8 are marked where they are written and made again in float32 by the fill
(pmem.store.refine): the store ends with the vectors a float32 run would have stored.

A FakeEmbedder given an int8 mode (conftest's `int8ish`: calls of several texts give a vector
moved off the exact one, and count themselves, as e5's and MiniLM's engines do), on real SQLite files; the real models'
end to end is tests/models/test_refine_models.py."""

from __future__ import annotations

import struct

import pytest

from pmem import fill
from pmem.config import load
from pmem.models.embed import FakeEmbedder
from pmem.service import MemoryStore
from pmem.store import refine

TEXTS = [f"note {i}: the {w} by the river at noon, item {i * 3}" for i, w in
         enumerate(["heron", "willow", "barge", "lock", "weir", "otter", "reed", "kingfisher"] * 9)]


def blob(vector: list[float]) -> bytes:
    return struct.pack(f"<{len(vector)}f", *vector)


def exact_of(text: str) -> bytes:
    return blob(FakeEmbedder(64).embed([text])[0])


def stored(store: MemoryStore) -> dict[str, bytes]:
    return dict(store.conn.execute("SELECT m.text, v.embedding FROM memories m JOIN memory_vec v ON v.seq = m.seq"))


def open_store(tmp_path, fake_config, bulk: str = "int8", name: str = "r.db") -> MemoryStore:
    return MemoryStore(tmp_path / name, config=fake_config.with_values(embed_bulk=bulk))


def test_an_imports_int8_vectors_are_marked_and_the_fill_makes_them_float32(tmp_path, fake_config, int8ish):
    s = open_store(tmp_path, fake_config)
    try:
        with s.bulk_embedding(len(TEXTS)):
            s.insert([s.new_memory(t) for t in TEXTS])
        assert refine.count(s.db, "main") == len(TEXTS) == s.int8_vectors()
        assert all(v != exact_of(t) for t, v in stored(s).items())  # int8's, not float32's
        assert s.fill_missing() == len(TEXTS)
        assert s.int8_vectors() == 0 and s.missing_vectors() == 0
        assert stored(s) == {t: exact_of(t) for t in TEXTS}  # what a float32 import stores, byte for byte
        assert s.fill_missing() == 0  # nothing twice
    finally:
        s.close()


@pytest.mark.parametrize("bulk", ["int8-only", "float32"])
def test_other_settings_mark_nothing(tmp_path, fake_config, int8ish, bulk):
    s = open_store(tmp_path, fake_config, bulk)
    try:
        s.insert([s.new_memory(t) for t in TEXTS])
        assert s.int8_vectors() == 0
        want_exact = bulk == "float32"
        assert all((v == exact_of(t)) == want_exact for t, v in stored(s).items())
        s.fill_missing()
        assert all((v == exact_of(t)) == want_exact for t, v in stored(s).items())  # int8-only keeps int8's
    finally:
        s.close()


def test_one_text_is_float32_and_replaces_a_mark(tmp_path, fake_config, int8ish):
    s = open_store(tmp_path, fake_config)
    try:
        ids = [m.id for m in s.insert([s.new_memory(t) for t in TEXTS[:8]])]
        s.add("a single note added by hand")
        assert s.int8_vectors() == 8
        s.edit(ids[0], text="the first note, reworded by hand")  # its new vector: one text, float32
        s.forget(ids[1])
        s.purge([ids[2]])
        assert s.int8_vectors() == 6  # the edited and the purged rows' marks went with them
        assert s.fill_missing() == 6  # the forgotten one keeps its row and vector (undo): made too
        now = stored(s)
        assert now["the first note, reworded by hand"] == exact_of("the first note, reworded by hand")
        assert now["a single note added by hand"] == exact_of("a single note added by hand")
        assert all(v == exact_of(t) for t, v in now.items())
    finally:
        s.close()


def test_interrupted_the_next_fill_goes_on_and_the_first_batches_stay(tmp_path, fake_config, int8ish):
    s = open_store(tmp_path, fake_config)
    try:
        s.insert([s.new_memory(t) for t in TEXTS])

        def stop(done: int, total: int) -> None:
            if done >= 16:
                raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            s.vectors.refine(progress=stop, batch=8)
        assert s.int8_vectors() == len(TEXTS) - 16  # two committed batches
        assert sum(v == exact_of(t) for t, v in stored(s).items()) == 16
        assert s.fill_missing() == len(TEXTS) - 16
        assert all(v == exact_of(t) for t, v in stored(s).items())
    finally:
        s.close()


def test_a_text_changed_while_it_was_embedded_keeps_its_new_vector(tmp_path, fake_config, int8ish, monkeypatch):
    s = open_store(tmp_path, fake_config)
    other = open_store(tmp_path, fake_config)  # another process's connection to the same file
    try:
        ids = [m.id for m in s.insert([s.new_memory(t) for t in TEXTS[:8]])]
        embed = s.vectors.embed

        def meanwhile(texts, *a, **kw):
            out = embed(texts, *a, **kw)
            other.edit(ids[3], text="rewritten while the fill embedded the old text")
            return out

        monkeypatch.setattr(s.vectors, "embed", meanwhile)
        s.fill_missing()
        now = stored(s)
        assert TEXTS[3] not in now
        assert now["rewritten while the fill embedded the old text"] == \
            exact_of("rewritten while the fill embedded the old text")
        assert s.int8_vectors() == 0 and all(v == exact_of(t) for t, v in now.items())
    finally:
        other.close()
        s.close()


def test_a_reindex_marks_what_it_staged(tmp_path, fake_config, int8ish):
    s = open_store(tmp_path, fake_config, "float32")
    try:
        s.insert([s.new_memory(t) for t in TEXTS])
    finally:
        s.close()
    s = open_store(tmp_path, fake_config)
    try:
        assert s.int8_vectors() == 0
        assert s.reindex() == len(TEXTS)
        assert s.int8_vectors() == len(TEXTS)
        assert all(v != exact_of(t) for t, v in stored(s).items())
        s.fill_missing(scan=False)
        assert s.int8_vectors() == 0 and all(v == exact_of(t) for t, v in stored(s).items())
    finally:
        s.close()


def test_doctor_counts_them_until_the_fill_is_done(tmp_path, fake_config, int8ish, monkeypatch):
    from pmem import doctor

    s = open_store(tmp_path, fake_config)
    try:
        s.insert([s.new_memory(t) for t in TEXTS])
    finally:
        s.close()

    def finding() -> str | None:
        checks = doctor.run_checks(load(), db_override=tmp_path / "r.db")
        return next((c.detail for c in checks if c.name == "int8 vectors"), None)

    assert finding().startswith(f"{len(TEXTS):,} vectors made in int8")
    with fill.one_at_a_time(tmp_path / "r.db"):
        s = open_store(tmp_path, fake_config)
        try:
            fill.embed_missing(s, by="hand")
        finally:
            s.close()
    assert finding() is None


def spawned(monkeypatch) -> list[list[str]]:
    """The detached fills started from now on (their argv; none is really started)."""
    calls: list[list[str]] = []

    class Popen:
        def __init__(self, argv, **kw):
            calls.append(list(argv))

    monkeypatch.setattr(fill.subprocess, "Popen", Popen)
    return calls


def test_pmem_import_starts_one_fill_for_its_int8_vectors(tmp_path, fake_config, int8ish, monkeypatch):
    from typer.testing import CliRunner

    from pmem.cli.app import app

    calls = spawned(monkeypatch)
    data = tmp_path / "turns.jsonl"
    data.write_text("".join(f'{{"text": "{t}"}}\n' for t in TEXTS), encoding="utf-8")
    result = CliRunner().invoke(app, ["import", str(data), "--json"])
    assert result.exit_code == 0, result.output
    assert [a for c in calls for a in c if a.startswith("--by=")] == ["--by=import"]  # not a second at its end
    assert not [p for p in refine.MARKED if p.startswith(str(tmp_path))]


def test_a_command_that_stored_int8_vectors_starts_the_fill_when_it_ends(tmp_path, fake_config, int8ish,
                                                                          monkeypatch):
    import typer
    from typer.testing import CliRunner

    from pmem.cli.common import open_store

    calls = spawned(monkeypatch)
    app = typer.Typer()

    @app.command()
    def write(n: int = 8) -> None:  # a command that embeds several texts at once and starts no fill
        with open_store() as s:
            s.insert([s.new_memory(t) for t in TEXTS[:n]])

    @app.command()
    def other() -> None:
        pass

    assert CliRunner().invoke(app, ["write", "--n", "1"]).exit_code == 0
    assert calls == []  # one text: float32, nothing marked, no fill
    assert CliRunner().invoke(app, ["write"]).exit_code == 0
    assert len(calls) == 1 and "--by=command" in calls[0] and "--no-scan" in calls[0]
    with MemoryStore(calls[0][3], config=fake_config) as s:
        assert s.int8_vectors() == 8


REFINE_KILLED = """
import os, signal, sys
from pmem.config import load
from pmem.service import MemoryStore
store = MemoryStore(sys.argv[1], config=load().with_values(embed_bulk="int8"))
def die(done, total):
    if done >= 16:
        os.kill(os.getpid(), signal.SIGKILL)
store.vectors.refine(progress=die, batch=8)
"""


def test_killed_midway_nothing_is_half_written_and_the_next_fill_finishes(tmp_path, fake_config, int8ish):
    import os
    import signal
    import subprocess
    import sys

    s = open_store(tmp_path, fake_config)
    try:
        s.insert([s.new_memory(t) for t in TEXTS])
    finally:
        s.close()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}  # the child's fake embeds in float32 only
    p = subprocess.run([sys.executable, "-c", REFINE_KILLED, str(tmp_path / "r.db")], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == -signal.SIGKILL, p.stderr
    s = open_store(tmp_path, fake_config)
    try:
        now = stored(s)
        assert s.int8_vectors() == len(TEXTS) - 16  # two committed batches, the third died with it
        assert sum(v == exact_of(t) for t, v in now.items()) == 16 and len(now) == len(TEXTS)
        marked = refine.marked(s.db, "main", range(1, len(TEXTS) + 1))
        seq_text = dict(s.conn.execute("SELECT seq, text FROM memories"))
        assert all((now[seq_text[q]] == exact_of(seq_text[q])) == (q not in marked) for q in seq_text)
        assert s.fill_missing() == len(TEXTS) - 16
        assert s.int8_vectors() == 0 and all(v == exact_of(t) for t, v in stored(s).items())
    finally:
        s.close()


def test_undo_of_an_edit_puts_back_the_int8_vector_marked(tmp_path, fake_config, int8ish):
    s = open_store(tmp_path, fake_config)
    try:
        ids = [m.id for m in s.insert([s.new_memory(t) for t in TEXTS[:8]])]
        s.edit(ids[0], text="reworded by hand, then taken back")
        assert s.int8_vectors() == 7  # the edit's new vector is float32's (one text)
        s.undo()
        assert s.int8_vectors() == 8  # the import's kept vector is back, and it was int8's
        assert stored(s)[TEXTS[0]] != exact_of(TEXTS[0])
        s.fill_missing(scan=False)
        assert s.int8_vectors() == 0 and all(v == exact_of(t) for t, v in stored(s).items())
    finally:
        s.close()


def test_made_again_the_kept_count_stays_true_and_missing_rows_are_filled(tmp_path, fake_config, int8ish):
    """A vector written over another keeps counts['vectors'] (it counted one more each time, so
    `missing` saw none missing); a store from before gets its count set right by m013."""
    s = open_store(tmp_path, fake_config)
    try:
        s.insert([s.new_memory(t) for t in TEXTS])
        s.fill_missing(scan=False)
        first = s.list_memories(limit=1)[0]
        s.edit(first.id, text="an edit writes its vector over the old one")
        assert s.db.counter("vectors") == len(TEXTS)
        s.insert([s.new_memory(f"a synced row without its vector {i}") for i in range(5)], vectors=[None] * 5)
        assert s.missing_vectors() == 5
        assert s.fill_missing(scan=False) == 10  # five embedded (in int8), then those five again
        assert s.missing_vectors() == 0 and s.int8_vectors() == 0
        s.conn.execute("UPDATE counts SET n = n + 40 WHERE key = 'vectors'")  # as the old writes left it
        s.conn.execute("DELETE FROM _pmem_migrations WHERE name = 'm013_recount_vectors'")
    finally:
        s.close()
    s = open_store(tmp_path, fake_config)
    try:
        assert s.db.counter("vectors") == len(TEXTS) + 5
    finally:
        s.close()


def test_a_reindex_in_another_process_while_the_fill_runs_wins(tmp_path, fake_config, int8ish, monkeypatch):
    """The fill embedded a batch with the old model; a reindex swapped every vector to a new one
    meanwhile: the fill writes nothing of the old model's and stops (the reindex's own marks wait)."""
    from pmem.config import load

    s = open_store(tmp_path, fake_config)
    try:
        s.insert([s.new_memory(t) for t in TEXTS])
        embed = s.vectors.embed

        def meanwhile(texts, *a, **kw):
            out = embed(texts, *a, **kw)
            monkeypatch.setenv("PMEM_EMBED_MODEL", "fake-32")
            with MemoryStore(tmp_path / "r.db", config=load().with_values(embed_bulk="int8")) as other:
                other.reindex()
            monkeypatch.setattr(s.vectors, "embed", embed)
            return out

        monkeypatch.setattr(s.vectors, "embed", meanwhile)
        s.vectors.refine(batch=8)
        dims = s.conn.execute("SELECT length(embedding) / 4, count(*) FROM memory_vec GROUP BY 1").fetchall()
        assert dims == [(32, len(TEXTS))] and s.vectors.model() == ("fake-32", 32)
        assert s.int8_vectors() == len(TEXTS)  # the reindex's, for the next fill (with the new model)
    finally:
        s.close()


def test_a_reindex_with_no_int8_call_marks_nothing(tmp_path, fake_config):
    s = open_store(tmp_path, fake_config)  # the plain fake: no int8 engine, as a GGUF model or no onnxruntime
    try:
        s.insert([s.new_memory(t) for t in TEXTS])
        assert s.reindex() == len(TEXTS)
        assert s.int8_vectors() == 0
    finally:
        s.close()


def english_store(tmp_path, fake_config, **settings) -> MemoryStore:
    """A store whose main vectors count as e5's (so English memories get second vectors), both
    models fakes: MiniLM's a 384-d one."""
    from pmem.store import english as en

    main = FakeEmbedder(64)
    main.name = en.MAIN
    s = MemoryStore(tmp_path / "en.db", config=fake_config.with_values(embed_bulk="int8", **settings), embedder=main)
    s.vectors.english.embedder = FakeEmbedder(384)
    return s


def test_english_second_vectors_are_marked_and_made_float32(tmp_path, fake_config, int8ish):
    s = english_store(tmp_path, fake_config)
    try:
        s.insert([s.new_memory(t) for t in TEXTS])
        assert refine.count(s.db, "english") == len(TEXTS) == refine.count(s.db, "main")
        s.fill_missing(scan=False)
        assert s.int8_vectors() == 0
        second = dict(s.conn.execute("SELECT m.text, e.embedding FROM memories m JOIN memory_vec_en e USING (seq)"))
        assert second == {t: blob(FakeEmbedder(384).embed([t])[0]) for t in TEXTS}
    finally:
        s.close()


def test_english_marks_go_when_the_second_vectors_are_off(tmp_path, fake_config, int8ish):
    s = english_store(tmp_path, fake_config)
    try:
        s.insert([s.new_memory(t) for t in TEXTS])
    finally:
        s.close()
    s = english_store(tmp_path, fake_config, embed_english="none")
    try:
        s.fill_missing(scan=False)
        assert refine.count(s.db, "english") == 0 and s.int8_vectors() == 0  # no fill left to start
    finally:
        s.close()


def test_an_agents_write_that_stored_int8_vectors_starts_the_fill(tmp_path, fake_config, int8ish, monkeypatch):
    from pmem.integrations import actions

    calls = spawned(monkeypatch)
    s = open_store(tmp_path, fake_config)
    try:
        actions.after_write(s)
        assert calls == []
        s.insert([s.new_memory(t) for t in TEXTS[:8]])  # as `remember` with extract stores its facts
        actions.after_write(s)
        assert len(calls) == 1 and "--by=command" in calls[0]
        actions.after_write(s)
        assert len(calls) == 1  # started once
    finally:
        s.close()

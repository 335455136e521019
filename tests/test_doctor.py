"""`pmem doctor` on a store: what a dream would give back, what it is doing while it reads."""

from __future__ import annotations

import pytest

from pmem import Memory, db


@pytest.mark.slow
def test_doctor_mentions_free_space_a_dream_would_give_back(store, monkeypatch):
    from pmem import doctor
    from pmem.config import load

    store.insert([Memory(id="", text=f"memory {i} about the orchids") for i in range(50)])
    store.insert([Memory(id="", text=("bulk words of an import " * 60) + str(i)) for i in range(600)])
    store.undo()
    store.checkpoint()
    monkeypatch.setattr(doctor, "UPKEEP_BYTES", 1)
    (check,) = [c for c in doctor.run_checks(load(), db_override=store.path) if c.name == "free space"]
    assert check.ok and check.level == "info" and "pmem dream --apply" in check.fix
    store.upkeep()
    assert [c for c in doctor.run_checks(load(), db_override=store.path) if c.name == "free space"] == []


def test_doctor_says_what_it_does_while_it_reads_the_whole_database(store, monkeypatch):
    """The integrity check reads every page (15 s at 1,000,000 memories): doctor holds its `busy`
    context (the CLI's progress line) around exactly that, naming the file's size."""
    from contextlib import contextmanager

    from pmem import doctor
    from pmem.config import load

    store.add("a memory to check")
    seen: list[str] = []
    connect = db.connect

    def traced(*args, **kw):
        conn = connect(*args, **kw)
        conn.set_trace_callback(lambda sql: seen.append(sql) if "quick_check" in sql else None)
        return conn

    @contextmanager
    def busy(label):
        seen.append(label)
        yield
        seen.append("done")

    monkeypatch.setattr(db, "connect", traced)
    checks = {c.name: c for c in doctor.run_checks(load(), db_override=store.path, busy=busy)}
    assert checks["database"].ok
    mb = f"{store.path.stat().st_size / 1e6:,.0f} MB"
    assert seen == [f"checking the database ({mb})", "PRAGMA quick_check", "done"]


"""Autosync's read-only look at a store's file (pmem/store/glance.py), against real store files:
it agrees with the sync journal on whether there are changes to send, never writes or creates a
file, gives up within its timeout, and loads nothing of pmem but itself."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pmem import MemoryStore
from pmem.hlc import Clock
from pmem.store.glance import Glance
from pmem.store.replication import SyncLog

ROOT = Path(__file__).resolve().parents[2]


def _syncing(store: MemoryStore) -> SyncLog:
    """The store as `pmem sync init` leaves it: sync tables, a device, everything so far sent."""
    j = SyncLog(store)
    j.create_tables()
    with store.transaction():
        j.put("device", "deva")
        j.export_existing(Clock.parse("", "deva"))
    return j


def _glance(path) -> bool:
    with Glance(path) as g:
        return g.changes_to_send()


def test_it_agrees_with_the_sync_journal_on_changes_to_send(store):
    store.add("written before sync was set up")
    assert _glance(store.path) is False  # no sync tables: this database does not sync
    j = _syncing(store)
    assert _glance(store.path) is False and j.pending_events() == 0
    m = store.add("The locker code is 4417")[0]
    assert _glance(store.path) is True and j.pending_events() == 1
    with store.transaction():
        j.put("exported", store.conn.execute("SELECT max(seq) FROM events").fetchone()[0])
    assert _glance(store.path) is False and j.pending_events() == 0
    with store.operation("sync", "applied from another device"):
        store.pin(m.id)  # what another device did is never sent back
    assert _glance(store.path) is False and j.pending_events() == 0
    store.forget(m.id)
    assert _glance(store.path) is True and j.pending_events() == 1


def test_it_never_writes_nor_creates_a_file(store, tmp_path):
    _syncing(store)
    store.add("a change to send")
    store.checkpoint()
    with Glance(store.path) as g:
        assert g.changes_to_send()
        with pytest.raises(Exception, match="readonly"):
            g.conn.execute("DELETE FROM events")
    missing = tmp_path / "nowhere.db"
    assert _glance(missing) is False and not missing.exists()
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database " * 100)
    assert _glance(garbage) is False


def test_a_path_with_uri_characters_is_read_as_that_path(tmp_path, fake_config):
    """'?', '#' and '%' would end or escape the path in an SQLite URI (and the "?mode=ro" after
    it with them: the truncated path would be opened, and created, for writing)."""
    path = tmp_path / "odd ?name#with%20chars.db"
    with MemoryStore(path, config=fake_config) as s:
        _syncing(s)
        s.add("a change to send")
    assert _glance(path) is True
    assert all(p.name.startswith(path.name) for p in tmp_path.iterdir())  # no file "odd " made beside it


def test_a_writer_holding_the_file_costs_it_its_timeout_at_most(store):
    """Another process's exclusive lock (a rollback journal's writer blocks readers): the look
    waits at most its timeout, then says False; the next one, after the lock, sees the change."""
    _syncing(store)
    store.add("a change to send")
    store.conn.execute("PRAGMA journal_mode = DELETE")
    store.close()
    holder = subprocess.Popen([sys.executable, "-c", "import sqlite3, sys, time\n"
                               "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
                               "c.execute('BEGIN EXCLUSIVE'); print('held', flush=True); time.sleep(60)",
                               str(store.path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        start = time.monotonic()
        with Glance(store.path, timeout=0.2) as g:
            assert g.changes_to_send() is False
        assert time.monotonic() - start < 5.0
    finally:
        holder.kill()
        holder.wait()
    assert _glance(store.path) is True


def test_autosync_loads_nothing_of_pmem_but_glance(store):
    """The hot path after every write command: no sqlite-vec, no store, sync or config, while its
    kick reads a real store that syncs (and has nothing to send, so no sync starts)."""
    _syncing(store)
    store.checkpoint()
    Path(str(store.path) + ".sync").mkdir()
    code = ("import sys, json, pmem.autosync as a\n"
            "started = a.kick(sys.argv[1])\n"
            "print(json.dumps([started, a._changes_to_send(sys.argv[1]), sorted(m for m in sys.modules "
            "if m.startswith(('pmem', 'sqlite_vec', 'numpy', 'sqlean')))]))")
    out = subprocess.run([sys.executable, "-c", code, str(store.path)], capture_output=True, text=True,
                         check=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert json.loads(out.stdout) == [False, False, ["pmem", "pmem.autosync", "pmem.store", "pmem.store.glance",
                                                     "pmem.version"]]

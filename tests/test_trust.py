"""Trust: concurrent writers lose nothing, backups are atomic, secrets stay out, purge erases.

Concurrency tests run real processes against one SQLite file (the way users' shells do)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from pmem.store import MemoryStore


def run_workers(db, code: str, n: int = 4) -> list[str]:
    """Start `n` Python processes at once, each running `code` with `store` open on `db` and
    `w` its number; returns their stdout. A failure in any of them fails the test."""
    prelude = textwrap.dedent(f"""
        import sys, time
        from pmem.store import MemoryStore
        store = MemoryStore({str(db)!r})
        w = int(sys.argv[1])
        sys.stdin.read()  # wait for the start signal, so all processes race
    """)
    env = {**os.environ, "PMEM_EMBED_MODEL": "fake-64"}
    procs = [subprocess.Popen([sys.executable, "-c", prelude + textwrap.dedent(code), str(w)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for w in range(n)]
    outs = []
    for p in procs:  # release them together
        p.stdin.close()
        p.stdin = None
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        outs.append(out)
    return outs


@pytest.fixture
def db(store):
    return store.path


def test_concurrent_tag_edits_all_land_and_undo_is_exact(store, db):
    m, _ = store.add("one memory everyone tags")
    run_workers(db, f"""
        for i in range(10):
            store.edit({m.id!r}, add_tags=[f"w{{w}}-{{i}}"])
    """)
    got = store.get(m.id)
    assert len(got.tags) == 40
    events = [e for e, _ in store.history(m.id) if e.action == "retag"]
    assert len(events) == 40
    # Each event's before is the row it changed: the tags grow by one each time.
    assert [len(e.before["tags"]) for e in events] == list(range(40))
    store.undo()
    assert len(store.get(m.id).tags) == 39


def test_concurrent_pin_forget_restore_keep_every_change(store, db):
    ms = [store.add(f"memory number {i}")[0] for i in range(4)]
    ids = [m.id for m in ms]
    run_workers(db, f"""
        ids = {ids!r}
        for i in range(5):
            store.edit(ids[w], add_tags=[f"t{{i}}"])
            store.pin(ids[(w + 1) % 4])
            store.edit(ids[(w + 2) % 4], add_tags=[f"o{{w}}-{{i}}"])
    """)
    for m in store.get_many(ids):
        assert m.pinned and m.tier == "core"
        assert len(m.tags) == 10  # 5 own + 5 from another worker


def test_concurrent_adds_of_the_same_text_store_it_once(store, db):
    run_workers(db, """
        for i in range(10):
            store.add(f"the same note {i}")
    """)
    from pmem.store import Filter

    assert store.count(Filter.everything()) == 10


def test_concurrent_undos_never_revert_one_operation_twice(store, db):
    for i in range(20):
        store.add(f"note to undo {i}")
    outs = run_workers(db, """
        from pmem.errors import NotFound
        for i in range(6):
            try:
                print(store.undo().id)
            except NotFound:
                print("nothing")
    """)
    undone = [line for out in outs for line in out.split() if line != "nothing"]
    assert len(undone) == len(set(undone)) == 20
    assert sum(out.split().count("nothing") for out in outs) == 4
    from pmem.store import Filter

    assert store.count(Filter.everything()) == 0




# -- backups -------------------------------------------------------------------------------

def test_a_backup_killed_mid_write_leaves_no_backup_and_nothing_readable(store, db, tmp_path):
    """A dream killed while writing its backup left a 0-byte 'backup' that counted as one and a
    0644 journal. Now: no file that looks like a backup, nothing readable by others, and the
    next backup cleans up and counts one."""
    import stat

    from pmem.backup import backup_database, list_backups

    for i in range(50):
        store.add(f"something worth backing up {i}")
    backups = tmp_path / "backups"
    code = f"""
        import os
        from pathlib import Path
        from pmem.backup import backup_database

        class Dies:  # the kill lands while pages are being copied
            def __init__(self, conn):
                self.conn = conn
            def backup(self, dest, **kw):
                dest.execute("CREATE TABLE half(x)")
                dest.execute("BEGIN")
                dest.execute("INSERT INTO half VALUES (randomblob(100000))")
                os.kill(os.getpid(), 9)

        store.conn = Dies(store.conn)
        backup_database(store, label="dream", directory=Path({str(backups)!r}))
    """
    prelude = f"from pmem.store import MemoryStore\nstore = MemoryStore({str(db)!r})\n"
    p = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True,
                       env={**os.environ, "PMEM_EMBED_MODEL": "fake-64"})
    assert p.returncode == -9
    assert list_backups(backups) == []
    left = list(backups.rglob("*"))
    assert left  # the kill did leave its partial folder behind
    for path in left:
        mode = stat.S_IMODE(path.stat().st_mode)
        inside_private = any(stat.S_IMODE(d.stat().st_mode) == 0o700 for d in path.parents
                             if d != backups and backups in d.parents)
        assert mode & 0o077 == 0 or inside_private, (path, oct(mode))
    # An empty or truncated file with a backup's name (what older versions left) is no backup.
    (backups / "pmem-20260101T000000Z-dream.db").write_bytes(b"")
    assert list_backups(backups) == []
    made = backup_database(store, label="dream", directory=backups)
    assert list_backups(backups) == [made]
    assert stat.S_IMODE(made.stat().st_mode) == 0o600
    assert not [p for p in backups.iterdir() if p.name.startswith(".partial-")]
    copy = MemoryStore(made, config=store.config)
    assert copy.count() == 50
    copy.close()

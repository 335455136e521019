"""Erasure is a durable job: a purge's rewrite of the remote and its erase on each device are
recorded and retried at every sync until done. A write that fails once, and kill -9 (a real
`pmem sync` process killed at chosen points), leave the state before or one the next sync finishes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from attacker import Net
from test_sync_cli import ROOT, Device

from pmem.sync import keys, transport

KINDS = ["folder", pytest.param("git", marks=pytest.mark.skipif(shutil.which("git") is None, reason="needs git"))]
SECRET = "X1234567"


@pytest.mark.parametrize("kind", KINDS)
def test_a_rewrite_that_failed_once_is_done_at_the_next_sync(tmp_path, fake_config, kind, monkeypatch):
    net = Net(tmp_path, kind, fake_config)
    try:
        net.store("a").add("a's first memory")
        net.init("a")
        net.join("b")
        mid = net.store("a").add(f"My passport number is {SECRET}")[0].id
        net.sync("a")
        net.sync("b")
        net.store("a").purge([mid])
        write = transport.Folder.write
        failed = []

        def unwritable(self, device, seq, blob):  # the remote refuses a write, once (a disk full, a lock)
            if not failed:
                failed.append((device, seq))
                raise OSError(28, "No space left on device")
            return write(self, device, seq, blob)

        monkeypatch.setattr(transport.Folder, "write", unwritable)
        with pytest.raises(OSError):
            net.sync("a")
        monkeypatch.setattr(transport.Folder, "write", write)
        assert failed
        net.everyone()
        assert SECRET not in net.opened()
        for name in "ab":
            assert mid not in net.texts(name) and SECRET.encode() not in net.raw(name)
    finally:
        net.close()


def killed_at_purge(d: Device, *args: str) -> int:
    """`pmem sync` as a process that dies by kill -9 the moment it starts to erase a memory (after
    the sync's transaction committed the tombstone): the store's purge is replaced, in that
    process only, by SIGKILL. Returns the exit status."""
    code = ("import os, signal, sys\n"
            "from pmem.service import MemoryStore\n"
            "MemoryStore.purge = lambda self, ids: os.kill(os.getpid(), signal.SIGKILL)\n"
            "from pmem.cli import main\n"
            f"main({list(args)!r})\n")
    return subprocess.run([sys.executable, "-c", code], env=d.env(), capture_output=True, timeout=120).returncode


@pytest.mark.parametrize("kind", KINDS)
def test_kill_9_between_applying_a_purge_and_erasing_leaves_no_memory_at_the_next_sync(tmp_path, kind):
    key = tmp_path / "k"
    remote = tmp_path / ("r.git" if kind == "git" else "Sync")
    if kind == "git":
        subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    a, b = Device(tmp_path, "a", key), Device(tmp_path, "b", key)
    a.add("a's first memory")
    a.json("sync", "init", str(remote), "--key-file", str(key))
    b.json("sync", "join", str(remote), "--key-file", str(key))
    mid = a.add(f"My passport number is {SECRET}")
    a.sync()
    b.sync()
    assert mid in b.memories()
    a.run("forget", mid, "--purge", "--yes")
    a.sync()
    assert killed_at_purge(b, "sync") == -9
    b.sync()
    assert mid not in b.memories()
    assert SECRET.encode() not in b.db_bytes()
    assert SECRET not in b.run("search", "passport").stdout


POINTS = ["applied", "redacted", "erased", "written"]


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("kind", KINDS)
def test_kill_9_at_each_point_of_a_purge_s_sync_is_finished_by_the_next(tmp_path, kind, point):
    """PMEM_SYNC_CRASH_AT kills `pmem sync` (SIGKILL, from inside) at a named point, on the device
    that purged and on one that receives the purge; the next plain syncs finish the erasure."""
    key = tmp_path / "k"
    remote = tmp_path / ("r.git" if kind == "git" else "Sync")
    if kind == "git":
        subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    a, b, c = Device(tmp_path, "a", key), Device(tmp_path, "b", key), Device(tmp_path, "c", key)
    a.add("a's first memory")
    a.json("sync", "init", str(remote), "--key-file", str(key))
    b.json("sync", "join", str(remote), "--key-file", str(key))
    mid = a.add(f"My passport number is {SECRET}")
    a.sync()
    b.sync()
    b.run("edit", mid, f"My passport number is {SECRET}, renewed")  # b's own changesets hold it too
    b.sync()
    a.sync()
    a.run("forget", mid, "--purge", "--yes")
    codes = []
    for d in (a, b):  # the one that purged, then one that receives it and rewrites its own
        d.extra["PMEM_SYNC_CRASH_AT"] = point
        p = d.run("sync", ok=False)
        del d.extra["PMEM_SYNC_CRASH_AT"]
        assert p.returncode in (-9, 0), p.stderr
        codes.append(p.returncode)
    assert -9 in codes  # killed there at least once (b reaches every point)
    for _ in range(2):
        a.sync()
        b.sync()
    c.json("sync", "join", str(remote), "--key-file", str(key))
    for d in (a, b, c):
        assert mid not in d.memories() and SECRET.encode() not in d.db_bytes()
        assert "a's first memory" in {m["text"] for m in d.memories().values()}
    opened = []
    folder = remote if kind == "folder" else tmp_path / "c" / "pmem.db.sync" / "git"
    k = keys.read_key_file(key)
    for path in folder.glob("segments/*/*"):
        opened.append(json.dumps(keys.open_sealed(k, path.read_bytes(), path.parent.name, int(path.name), "t")))
    assert opened and SECRET not in "\n".join(opened)
    assert a.memories() == b.memories() == c.memories()


def test_the_crash_hook_is_inert_unless_named(tmp_path):
    """The test-only hook kills nothing when unset or naming no point."""
    env = {k: v for k, v in os.environ.items() if k != "PMEM_SYNC_CRASH_AT"}
    env["PYTHONPATH"] = str(ROOT)
    code = "from pmem.sync import repair\nrepair._crash('applied')\nprint('alive')\n"
    for value in (None, "", "elsewhere"):
        if value is not None:
            env["PMEM_SYNC_CRASH_AT"] = value
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and p.stdout.strip() == "alive"
    env["PMEM_SYNC_CRASH_AT"] = "applied"
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=60).returncode == -9


@pytest.mark.parametrize("kind", KINDS)
def test_a_retired_device_s_files_put_back_before_a_purge_are_rewritten_by_its_steward(tmp_path, fake_config, kind):
    """c wrote the text and was lost; a retired it, so a rewrites c's files after a purge. The
    remote puts c's old file back: a, keeping copies of the files it stewards, writes it again."""
    from pmem import sync

    net = Net(tmp_path, kind, fake_config)
    try:
        net.store("a").add("a's first memory")
        net.init("a")
        net.join("b")
        net.join("c")
        mid = net.store("c").add(f"Locker code {SECRET}")[0].id
        net.sync("c")
        net.sync("a")
        net.sync("b")
        c = net.device("c")
        old = {p: blob for p, blob in net.tree().items() if p.startswith(f"segments/{c}/")}
        net.stores.pop("c").close()  # the laptop is lost
        sync.retire(net.store("a"), c)
        net.store("b").purge([mid])
        net.sync("b")
        net.sync("a")  # a applies the purge and rewrites c's file it stewards
        net.sync("b")
        assert SECRET not in net.opened()
        net.write(old)  # c's file from before the purge, put back
        assert SECRET in net.opened()
        net.sync("a")
        assert SECRET not in net.opened()
        net.join("d")
        for name in "abd":
            assert mid not in net.texts(name) and SECRET.encode() not in net.raw(name)
    finally:
        net.close()

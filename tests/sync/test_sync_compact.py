"""`pmem sync compact`: a purged memory's text leaves a git remote's history, and no device is
broken by the new root. Devices are homes driven as processes over a real bare repository; each
git object is opened with the key, since the remote itself never holds plain text."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from test_sync_cli import Device, devices, everyone, remote  # noqa: F401 - fixtures

from pmem import sync
from pmem.service import MemoryStore
from pmem.sync import keys

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="sync over git needs the git command")

SECRET = "X1234567"


def opened_objects(repo: Path, key: bytes) -> str:
    """Every object git holds in `repo`, reachable or not, each sealed file opened with the key."""
    raw = subprocess.run(["git", "-C", str(repo), "cat-file", "--batch-all-objects", "--batch"],
                         capture_output=True, check=True).stdout
    texts, at = [], 0
    while at < len(raw):
        end = raw.index(b"\n", at)
        _sha, _kind, size = raw[at:end].split(b" ")
        body = raw[end + 1:end + 1 + int(size)]
        at = end + 1 + int(size) + 1
        if body.startswith(keys.MAGIC):
            header = json.loads(body[len(keys.MAGIC):body.index(b"\n", len(keys.MAGIC))])
            texts.append(json.dumps(keys.open_sealed(key, body, header["device"], header["seq"], "object"),
                                    ensure_ascii=False))
        else:
            texts.append(body.decode("utf-8", "replace"))
    return "\n".join(texts)


def clone(d: Device) -> Path:
    return Path(str(d.home / "pmem.db") + ".sync") / "git"


def gc(repo: Path) -> None:
    """What the remote's own garbage collection does, at once."""
    subprocess.run(["git", "-C", str(repo), "-c", "gc.reflogExpire=now", "-c", "gc.reflogExpireUnreachable=now",
                    "gc", "--quiet", "--prune=now"], check=True)


@pytest.mark.slow
def test_compact_removes_purged_text_from_every_git_object_and_no_device_breaks(devices, remote):  # noqa: F811
    a, b, c = devices
    key = keys.read_key_file(a.key)
    mid = a.add(f"My passport number is {SECRET}")
    everyone(a, b, c)
    b.run("edit", mid, f"My passport number is {SECRET}, renewed in May")  # b's changesets hold it too
    everyone(a, b, c)
    # c goes offline: it edits the memory and writes one of its own; nothing of it is sent yet
    c.run("edit", mid, f"My passport number is {SECRET}, renewed in June")
    offline = c.add("written on c while it was offline")
    a.run("forget", mid, "--purge", "--yes")
    a.sync()
    b.sync()
    a.sync()
    # the changesets were rewritten, yet git's history keeps their old versions
    assert SECRET not in json.dumps([b.memories(), a.memories()])
    assert SECRET in opened_objects(remote, key)

    report = a.json("sync", "compact")
    assert report["squashed"] and report["holding_purged"] == []
    assert report["size_after"] < report["size_before"]
    gc(remote)
    assert SECRET not in opened_objects(remote, key)
    assert SECRET not in opened_objects(clone(a), key)
    assert subprocess.run(["git", "-C", str(remote), "rev-list", "--count", "main"], capture_output=True,
                          text=True, check=True).stdout.strip() == "1"
    assert SECRET in opened_objects(clone(b), key)  # b has not pulled since

    assert b.sync()["recloned"]
    assert SECRET not in opened_objects(clone(b), key)
    report = c.sync()  # offline since before the purge: it clones afresh, sends, then erases
    assert report["recloned"] and mid in report["purged"]
    everyone(a, b, c)
    gc(remote)
    for d in (a, b, c):
        assert mid not in d.memories() and offline in d.memories()
        assert SECRET not in d.db_bytes().decode("utf-8", "replace")
        assert SECRET not in opened_objects(clone(d), key)
    assert a.memories() == b.memories() == c.memories()
    assert SECRET not in opened_objects(remote, key)
    # still syncing as before, on the new history
    later = b.add("after the compact")
    everyone(a, b, c)
    assert later in a.memories() and later in c.memories()


@pytest.mark.slow
def test_compact_names_a_device_whose_files_still_hold_the_purged_text(devices, remote):  # noqa: F811
    a, b, c = devices
    key = keys.read_key_file(a.key)
    mid = a.add(f"Locker code {SECRET}")
    everyone(a, b, c)
    a.run("forget", mid, "--purge", "--yes")
    c.run("edit", mid, f"Locker code {SECRET} (changed)")
    c.sync()  # before a has sent the purge: c's changeset holds the text
    a.sync()
    report = a.json("sync", "compact")
    device_c = c.json("sync", "status")["device"]
    assert report["squashed"] and report["holding_purged"] == [{"device": device_c, "changesets": 1}]
    human = a.run("sync", "compact")  # nothing new since: one commit already, and c still holds it
    assert "nothing to compact" in human.stdout and "one commit already" in human.stdout
    assert f"device {device_c} has not synced since a purge" in human.stderr
    c.sync()  # c rewrites its changeset, then a compacts again
    report = a.json("sync", "compact")
    assert report["holding_purged"] == []
    everyone(b, c)
    gc(remote)
    assert SECRET not in opened_objects(remote, key)
    for d in (a, b, c):
        assert SECRET not in opened_objects(clone(d), key)
        assert mid not in d.memories()


def test_a_compact_that_loses_the_race_to_a_push_keeps_that_push(tmp_path, fake_config):
    bare = tmp_path / "r.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    a, b = (MemoryStore(tmp_path / n / "pmem.db", config=fake_config) for n in "ab")
    key = tmp_path / "k"
    a.add("from a")
    sync.init(a, str(bare), key_file=str(key))
    sync.join(b, str(bare), key_file=str(key))
    t = sync.transport.Git(str(bare), sync.sync_dir(a) / "git", sync.SyncLog(a).device)
    t.pull()
    b.add("pushed by b while a compacts")
    sync.run(b)
    assert t.squash("0123456789abcdef", "test") is False  # the lease saw b's push: nothing replaced
    assert not (t.root / "epoch").exists()
    report = sync.compact(a)
    assert report["squashed"]
    sync.run(b)
    texts = {m.text for m in a.iter_all()}
    assert "pushed by b while a compacts" in texts and texts == {m.text for m in b.iter_all()}
    b_device = sync.SyncLog(b).device
    assert sync.transport.Folder(t.root).listing()[b_device] == [1]


def test_compact_over_a_folder_has_no_history_to_squash(tmp_path):
    folder, key = tmp_path / "Sync", tmp_path / "k"
    a = Device(tmp_path, "fa", key)
    a.add("one")
    a.json("sync", "init", str(folder), "--key-file", str(key))
    report = a.json("sync", "compact")
    assert report["squashed"] is False and report["kind"] == "folder" and "no history" in report["note"]
    p = a.run("sync", "compact")
    assert "nothing to compact" in p.stdout


def test_own_files_a_killed_sync_left_uncommitted_are_committed_at_the_next_pull(tmp_path, fake_config):
    """After a reclone (or a kill between writing changesets and committing them) the clone holds
    this device's files uncommitted: the next pull commits them rather than refusing to rebase."""
    bare = tmp_path / "r.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    a, b = (MemoryStore(tmp_path / n / "pmem.db", config=fake_config) for n in "ab")
    key_file = tmp_path / "k"
    a.add("from a")
    sync.init(a, str(bare), key_file=str(key_file))
    b.add("from b")
    sync.join(b, str(bare), key_file=str(key_file))
    key = keys.read_key_file(key_file)
    device = sync.SyncLog(b).device
    t = sync.transport.Git(str(bare), sync.sync_dir(b) / "git", device)
    payload = {"device": device, "seq": 1, "ops": []}
    rewritten = keys.seal(key, device, 1, payload)
    j = sync.SyncLog(b)
    with b.transaction():  # a rewrite: the kept copy first (sync._redact_kept), then the clone's file,
        j.own_add(device, 1, rewritten, sync.digest(payload), 1)
    t.write(device, 1, rewritten)  # then killed before its commit
    a.add("from a, later")
    sync.run(a)
    t.pull()
    assert t.read(device, 1) == rewritten
    sync.run(b)
    assert "from a, later" in {m.text for m in b.iter_all()}
    shown = subprocess.run(["git", "-C", str(bare), "show", f"main:segments/{device}/0000000001"],
                           capture_output=True, check=True).stdout
    assert shown == rewritten

"""Retiring a device (a lost laptop), as processes: the others stop waiting on its gap, status
shows it retired, and the device itself, if it syncs again, is refused in one line naming the
command that brings it back; `pmem sync rejoin` does, as a new device, losing nothing it held."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from test_sync_bad_input import one_line_error
from test_sync_cli import Device, devices, everyone, remote  # noqa: F401 - fixtures

pytestmark = [pytest.mark.skipif(shutil.which("git") is None, reason="sync over git needs the git command"),
              pytest.mark.slow]


def device_id(d: Device) -> str:
    return d.json("sync", "status")["device"]


def entry(d: Device, device: str) -> dict:
    return next(e for e in d.json("sync", "status")["devices"] if e["device"] == device)


def test_a_retired_device_no_longer_stops_anyone_at_its_gap(tmp_path):
    folder, key = tmp_path / "Sync", tmp_path / "k"
    a, b, lost = (Device(tmp_path, n, key) for n in ("a", "b", "lost"))
    a.add("from a")
    a.json("sync", "init", str(folder), "--key-file", str(key))
    b.json("sync", "join", str(folder), "--key-file", str(key))
    lost.json("sync", "join", str(folder), "--key-file", str(key))
    for text in ("one", "two", "three"):
        lost.add(text)
        lost.sync()
    gone = lost.json("sync", "status")["device"]
    (folder / "segments" / gone / "0000000002").unlink()  # the laptop was lost before the syncer sent it
    assert a.sync()["gaps"] == [{"device": gone, "missing": 2, "present_up_to": 3}]
    assert "three" not in {m["text"] for m in a.memories().values()}

    report = a.json("sync", "retire", gone[:6])  # a unique start of the id will do
    assert report["retired"] == gone and report["already"] is False
    assert report["note"]["by"] == device_id(a) and report["note"]["last"] == 3
    assert a.sync()["gaps"] == [] and b.sync()["gaps"] == []  # b learns it from the remote
    for d in (a, b):
        texts = {m["text"] for m in d.memories().values()}
        assert {"one", "three"} <= texts and "two" not in texts
        e = entry(d, gone)
        assert e["retired"]["by"] == device_id(a) and e["waiting"] == 0
    assert "retired by" in b.run("sync", "status").stdout
    again = a.json("sync", "retire", gone)
    assert again["already"] is True


def test_a_retired_device_that_syncs_is_refused_and_rejoins_as_a_new_one(devices, remote):  # noqa: F811
    a, b, c = devices
    old = device_id(c)
    c.add("c synced this one before it was lost")
    everyone(c, a)
    kept = c.add("written on c, the laptop that went missing")  # never synced before it was lost
    a.json("sync", "retire", old)
    everyone(a, b)
    head = subprocess.run(["git", "-C", str(remote), "rev-parse", "main"], capture_output=True, text=True).stdout
    p = c.run("sync", ok=False)
    one_line_error(p, "was retired by")
    assert "pmem sync rejoin" in p.stderr
    assert subprocess.run(["git", "-C", str(remote), "rev-parse", "main"], capture_output=True,
                          text=True).stdout == head  # refused before anything was sent
    assert kept not in a.memories()

    report = c.json("sync", "rejoin")
    assert report["previous_device"] == old and report["device"] != old and report["sent"] == 1
    everyone(a, b, c)
    assert kept in a.memories() and kept in b.memories()
    assert a.memories() == b.memories() == c.memories()
    assert entry(a, old)["retired"] and not entry(a, report["device"])["retired"]
    assert c.json("sync", "status")["conflicts"] == 0 and a.json("sync", "status")["conflicts"] == 0
    later = c.add("after the rejoin")
    everyone(c, a)
    assert later in a.memories()
    p = c.run("sync", "rejoin", ok=False)
    assert p.returncode == 2 and "is not retired" in p.stderr


def test_retire_refuses_this_device_and_an_unknown_one(devices):  # noqa: F811
    a, b, c = devices
    p = a.run("sync", "retire", device_id(a), ok=False)
    assert p.returncode == 2 and "this device" in p.stderr and "Traceback" not in p.stderr
    one_line_error(a.run("sync", "retire", "ffffffffffff", ok=False), "no device")
    assert all(e["retired"] is None for e in a.json("sync", "status")["devices"])


def test_a_retirement_note_the_remote_forged_is_refused(tmp_path):
    folder, key = tmp_path / "Sync", tmp_path / "k"
    a, b = Device(tmp_path, "a", key), Device(tmp_path, "b", key)
    a.json("sync", "init", str(folder), "--key-file", str(key))
    b.json("sync", "join", str(folder), "--key-file", str(key))
    (folder / "retired").mkdir()
    (folder / "retired" / device_id(b)).write_bytes(b"pmem-sync 1\n{}\nnot sealed")  # no key: no retirement
    one_line_error(b.run("sync", ok=False), "retirement of")
    assert entry(b, device_id(b))["retired"] is None


def test_the_device_that_retired_one_rewrites_its_files_after_a_purge(devices, remote):  # noqa: F811
    from test_sync_compact import clone, gc, opened_objects

    from pmem.sync import keys

    a, b, c = devices
    key = keys.read_key_file(a.key)
    lost = device_id(c)
    mid = c.add("The safe's combination is 31-41-59")
    early = c.add("The shed key is under the third pot")
    everyone(c, a, b)
    a.run("forget", early, "--purge", "--yes")  # purged while c is already gone: c never rewrites it
    a.sync()
    report = a.json("sync", "retire", lost)
    assert report["rewritten"] == 1  # a rewrites c's file, as c would have
    a.run("forget", mid, "--purge", "--yes")  # and after: a, its steward, rewrites it again
    a.sync()
    b.sync()
    compacted = a.json("sync", "compact")
    assert compacted["squashed"] and compacted["holding_purged"] == []
    gc(remote)
    b.sync()
    for repo in (remote, clone(a), clone(b)):
        text = opened_objects(repo, key)
        assert "31-41-59" not in text and "third pot" not in text
    assert mid not in b.memories() and early not in b.memories()

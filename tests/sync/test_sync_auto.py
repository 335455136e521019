"""Sync after each change (`sync_auto = on`), as processes: a write command starts one detached
background `pmem sync` that prints nothing into the command; a run of writes is one sync; its
failure is kept for `pmem sync status`; with the setting off (the default) nothing starts."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from test_sync_cli import Device, devices, remote  # noqa: F401 - fixtures

from pmem.sync import auto

pytestmark = [pytest.mark.skipif(shutil.which("git") is None, reason="sync over git needs the git command"),
              pytest.mark.slow]


def sync_folder(d: Device) -> Path:
    return Path(str(d.home / "pmem.db") + ".sync")


def wait_for(check, seconds: float = 60.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.5)
    return check()


def commits(repo: Path, device: str) -> int:
    log = subprocess.run(["git", "-C", str(repo), "log", "--format=%s", "main"], capture_output=True, text=True,
                         check=True).stdout
    return sum(line.startswith(f"pmem sync: {device} ") for line in log.splitlines())


def test_with_sync_auto_on_a_write_reaches_another_device_without_a_sync(devices, remote):  # noqa: F811
    a, b, c = devices
    a.extra.update(PMEM_SYNC_AUTO="on", PMEM_SYNC_AUTO_DELAY="8")  # room for two more commands on a loaded machine
    device = a.json("sync", "status")["device"]
    before = commits(remote, device)
    p = a.run("add", "Sent by the background sync", "--json")
    assert p.stderr == "" and json.loads(p.stdout)["created"]  # nothing printed into the command
    assert (sync_folder(a) / "auto.pending").exists()  # the sync waits for more writes: the add did not
    a.run("add", "A second write, within the wait")
    a.run("pin", json.loads(p.stdout)["id"])
    assert wait_for(lambda: (sync_folder(a) / "auto.json").exists() and not (sync_folder(a) / "auto.pending").exists())
    texts = wait_for(lambda: {m["text"] for m in b.memories().values()} if b.sync()["applied"] or
                     "Sent by the background sync" in {m["text"] for m in b.memories().values()} else None)
    assert {"Sent by the background sync", "A second write, within the wait"} <= texts
    assert commits(remote, device) == before + 1  # three writes, one background sync
    status = a.json("sync", "status")
    assert status["background"]["ok"] is True and status["pending_changes"] == 0
    a.run("search", "background")  # a read sends nothing: no sync starts
    assert not (sync_folder(a) / "auto.pending").exists()


def test_a_background_sync_that_fails_is_kept_for_status(devices, remote):  # noqa: F811
    a, b, c = devices
    a.extra["PMEM_SYNC_AUTO"] = "on"
    remote.rename(remote.with_name("moved.git"))  # the NAS is unplugged
    p = a.run("add", "written while the remote is gone")
    assert p.stderr == ""
    outcome = wait_for(lambda: auto.last(a.home / "pmem.db"))
    assert outcome and outcome["ok"] is False and "git" in outcome["error"]
    human = a.run("sync", "status").stdout
    assert "background sync: failed at" in human
    assert a.json("sync", "status")["pending_changes"] == 1  # kept for the next sync


def test_with_sync_auto_off_nothing_starts(devices, remote):  # noqa: F811
    a, b, c = devices
    head = subprocess.run(["git", "-C", str(remote), "rev-parse", "main"], capture_output=True, text=True).stdout
    a.add("stays here until pmem sync")
    time.sleep(auto.DELAY + 3)
    assert not (sync_folder(a) / "auto.pending").exists() and auto.last(a.home / "pmem.db") is None
    assert subprocess.run(["git", "-C", str(remote), "rev-parse", "main"], capture_output=True,
                          text=True).stdout == head
    assert "stays here until pmem sync" not in {m["text"] for m in b.memories().values()}

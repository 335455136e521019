"""Sync between PMEM_HOMEs through the CLI, as processes, over a real bare git repository and a
plain folder. Each device is its own home; `pmem sync` is run the way a person runs it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.skipif(shutil.which("git") is None, reason="sync over git needs the git command"),
              pytest.mark.slow]


class Device:
    def __init__(self, tmp: Path, name: str, key: Path):
        self.home = tmp / name
        self.key = key
        self.extra: dict[str, str] = {}

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PMEM_")}
        env.update(PMEM_HOME=str(self.home), PMEM_EMBED_MODEL="fake-64", NO_COLOR="1",
                   PYTHONPATH=str(ROOT), PMEM_MODELS_DIR=os.environ.get("PMEM_MODELS_DIR", ""), **self.extra)
        return env

    def run(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
        p = subprocess.run([sys.executable, "-m", "pmem", *args], capture_output=True, text=True, env=self.env(),
                           timeout=120)
        if ok:
            assert p.returncode == 0, p.stderr
        return p

    def json(self, *args: str):
        return json.loads(self.run(*args, "--json").stdout)

    def add(self, text: str) -> str:
        return self.json("add", text)["id"]

    def sync(self) -> dict:
        return self.json("sync")

    def memories(self) -> dict[str, dict]:
        """Every memory, forgotten ones too, without the fields that are this device's own reads."""
        rows = [json.loads(line) for line in self.run("export", "--include-forgotten").stdout.splitlines() if line]
        for r in rows:
            r.pop("access_count", None)
            r.pop("last_accessed_at", None)
        return {r["id"]: r for r in rows}

    def db_bytes(self) -> bytes:
        return b"".join(p.read_bytes() for p in self.home.rglob("*") if p.is_file())


@pytest.fixture
def remote(tmp_path):
    path = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)
    return path


@pytest.fixture
def devices(tmp_path, remote):
    """Three devices on one bare repository: a started it, b and c joined with its key file."""
    key = tmp_path / "sync.key"
    a, b, c = (Device(tmp_path, n, key) for n in "abc")
    a.add("The cabin wifi password is hunter2")
    a.json("sync", "init", str(remote), "--key-file", str(key))
    assert key.stat().st_mode & 0o777 == 0o600
    b.add("Dana approves deploys")
    b.json("sync", "join", str(remote), "--key-file", str(key))
    c.json("sync", "join", str(remote), "--key-file", str(key))
    a.sync()
    b.sync()
    return a, b, c


def everyone(*devices: Device, rounds: int = 2) -> None:
    for _ in range(rounds):
        for d in devices:
            d.sync()


def test_init_join_share_every_memory(devices):
    a, b, c = devices
    assert len(a.memories()) == 2
    assert a.memories() == b.memories() == c.memories()
    status = a.json("sync", "status")  # c joined with nothing: it has written no changeset yet
    assert [d["this"] for d in status["devices"]].count(False) == 1 and status["conflicts"] == 0
    assert status["pending_changes"] == 0


def test_remote_holds_no_plain_text(devices, remote):
    objects = subprocess.run(["git", "-C", str(remote), "cat-file", "--batch-all-objects", "--batch"],
                             capture_output=True, check=True).stdout
    assert b"hunter2" not in objects and b"Dana" not in objects
    assert b"segments" in objects  # the tree is there, and its files are sealed


def test_concurrent_edits_last_writer_wins_and_loser_is_a_conflict(devices):
    a, b, c = devices
    mid = next(i for i, m in a.memories().items() if "cabin" in m["text"])
    a.run("edit", mid, "The cabin wifi password is swordfish")
    b.run("edit", mid, "The cabin wifi password is opensesame")
    everyone(a, b, c)
    texts = {d.memories()[mid]["text"] for d in (a, b, c)}
    assert len(texts) == 1  # converged on one
    conflicts = a.json("sync", "status")["conflicts"] + b.json("sync", "status")["conflicts"]
    assert conflicts >= 1
    # the value that lost on a device stays in that device's history
    (winner,) = texts
    loser = "opensesame" if "swordfish" in winner else "swordfish"
    holder = b if loser == "opensesame" else a
    history = json.dumps(holder.json("history", mid))
    assert loser in history


def test_forget_wins_over_concurrent_edit(devices):
    a, b, c = devices
    mid = next(i for i, m in a.memories().items() if "Dana" in m["text"])
    a.run("forget", mid)
    b.run("edit", mid, "Dana approves deploys on Fridays")
    everyone(a, b, c)
    for d in (a, b, c):
        m = d.memories()[mid]
        assert m["forgotten"] and m["text"] == "Dana approves deploys on Fridays"
    assert "Fridays" in json.dumps(a.json("history", mid))


def test_undo_after_a_sync_travels(devices):
    a, b, c = devices
    mid = a.add("Standup moved to 10:30")
    everyone(a, b)
    a.run("edit", mid, "Standup moved to 11:00")
    everyone(a, b)
    assert b.memories()[mid]["text"] == "Standup moved to 11:00"
    a.run("undo")
    everyone(a, b, c)
    for d in (a, b, c):
        assert d.memories()[mid]["text"] == "Standup moved to 10:30"
    a.run("undo")  # the add itself: the memory goes everywhere
    everyone(a, b, c)
    for d in (a, b, c):
        assert mid not in d.memories()


def test_undo_loses_to_a_concurrent_change_elsewhere(devices):
    a, b, c = devices
    mid = a.add("Gym on Tuesdays")
    everyone(a, b)
    a.run("edit", mid, "Gym on Wednesdays")
    everyone(a, b)
    a.run("undo")
    b.run("edit", mid, "Gym on Thursdays")
    everyone(a, b, c)
    for d in (a, b, c):
        assert d.memories()[mid]["text"] == "Gym on Thursdays"


def test_purge_while_a_device_is_offline(devices, remote):
    a, b, c = devices
    mid = a.add("My passport number is X1234567")
    everyone(a, b, c)
    assert mid in c.memories()
    a.run("forget", mid, "--purge", "--yes")  # c is offline and edits it meanwhile
    c.run("edit", mid, "My passport number is X1234567 (renewed)")
    a.sync()
    b.sync()
    c.sync()
    everyone(a, b, c)
    for d in (a, b, c):
        assert mid not in d.memories()
        assert b"X1234567" not in d.db_bytes()
    c.add("A later memory")  # later operations never bring it back
    everyone(a, b, c)
    assert all(mid not in d.memories() for d in (a, b, c))
    objects = subprocess.run(["git", "-C", str(remote), "cat-file", "--batch-all-objects", "--batch"],
                             capture_output=True, check=True).stdout
    assert b"X1234567" not in objects
    # every changeset now on the remote, opened with the key, holds no trace of the text
    from pmem.sync import keys

    key = keys.read_key_file(a.key)
    clone = Path(str(a.home / "pmem.db") + ".sync") / "git" / "segments"
    for path in clone.glob("*/*"):
        payload = keys.open_sealed(key, path.read_bytes(), path.parent.name, int(path.name), "test")
        assert "X1234567" not in json.dumps(payload)


def test_join_with_the_wrong_key_is_refused_and_writes_nothing(devices, remote, tmp_path):
    from pmem.sync import keys

    wrong = tmp_path / "wrong.key"
    keys.write_key_file(wrong, keys.new_key())
    before = subprocess.run(["git", "-C", str(remote), "rev-parse", "main"], capture_output=True, text=True).stdout
    d = Device(tmp_path, "d", wrong)
    d.add("something of d's own")
    p = d.run("sync", "join", str(remote), "--key-file", str(wrong), ok=False)
    assert p.returncode == 1 and "wrong key" in p.stderr and "Traceback" not in p.stderr
    assert not Path(str(d.home / "pmem.db") + ".sync").exists()
    assert not list(d.home.glob(".pmem-sync-clone-*"))
    assert subprocess.run(["git", "-C", str(remote), "rev-parse", "main"], capture_output=True,
                          text=True).stdout == before
    assert d.run("sync", ok=False).returncode == 1  # still not syncing


def test_a_copied_home_is_refused(devices, tmp_path):
    a, b, c = devices
    copy = Device(tmp_path, "a-copy", a.key)
    shutil.copytree(a.home, copy.home)
    a.add("written by the original")
    a.sync()
    copy.add("written by the copy")
    p = copy.run("sync", ok=False)
    assert p.returncode == 1 and "copy of this pmem home" in p.stderr
    b.sync()
    assert "written by the copy" not in json.dumps(b.memories())


def test_folder_transport_and_its_refusals(tmp_path):
    folder = tmp_path / "Sync"
    folder.mkdir()
    key = tmp_path / "k"
    a, b = Device(tmp_path, "fa", key), Device(tmp_path, "fb", key)
    aid = a.add("first from a")
    a.json("sync", "init", str(folder), "--key-file", str(key))
    b.extra["PMEM_SYNC_KEY_FILE"] = str(key)  # scripts may name the key in the environment
    b.json("sync", "join", str(folder))
    assert aid in b.memories()
    bid = b.add("then from b")
    b.sync()
    a.sync()
    assert a.memories() == b.memories() and bid in a.memories()
    names = {p.relative_to(folder).parts[0] for p in folder.rglob("*") if p.is_file()}
    assert names == {"keycheck", "segments"}  # never a database file
    # a home inside the synced folder is refused
    inside = Device(folder, "home-inside", key)
    p = inside.run("sync", "join", str(folder), "--key-file", str(key), ok=False)
    assert p.returncode == 2 and "inside the synced folder" in p.stderr


def test_a_gap_stops_that_device_and_is_reported(tmp_path):
    folder = tmp_path / "Sync"
    key = tmp_path / "k"
    a, b = Device(tmp_path, "ga", key), Device(tmp_path, "gb", key)
    a.add("one")
    a.json("sync", "init", str(folder), "--key-file", str(key))
    b.json("sync", "join", str(folder), "--key-file", str(key))
    a.add("two")
    a.sync()
    a.add("three")
    a.sync()
    device = a.json("sync", "status")["device"]
    missing = folder / "segments" / device / "0000000002"
    held = missing.read_bytes()
    missing.unlink()  # not synced by the file syncer yet
    report = b.sync()
    assert report["gaps"] == [{"device": device, "missing": 2, "present_up_to": 3}]
    texts = {m["text"] for m in b.memories().values()}
    assert "two" not in texts and "three" not in texts
    missing.write_bytes(held)
    b.sync()
    assert {"two", "three"} <= {m["text"] for m in b.memories().values()}


def test_a_tampered_changeset_is_refused_whole(tmp_path):
    folder = tmp_path / "Sync"
    key = tmp_path / "k"
    a, b = Device(tmp_path, "ta", key), Device(tmp_path, "tb", key)
    a.json("sync", "init", str(folder), "--key-file", str(key))
    b.json("sync", "join", str(folder), "--key-file", str(key))
    a.add("honest")
    a.sync()
    path = sorted(folder.glob(f"segments/{a.json('sync', 'status')['device']}/*"))[-1]
    data = bytearray(path.read_bytes())
    data[-5] ^= 1
    path.write_bytes(bytes(data))
    p = b.run("sync", ok=False)
    assert p.returncode == 1 and "fails authentication" in p.stderr
    assert "honest" not in json.dumps(b.memories())


def test_kill_9_in_the_middle_of_a_sync_leaves_nothing_half_applied(tmp_path, fake_config):
    import random
    import signal
    import time

    from pmem import sync
    from pmem.records import Memory
    from pmem.service import MemoryStore

    folder, key = tmp_path / "Sync", tmp_path / "k"
    a = Device(tmp_path, "ka", key)
    a.home.mkdir()
    with MemoryStore(a.home / "pmem.db", config=fake_config) as store:
        store.insert([Memory(id="", text=f"memory number {i} of the kill test") for i in range(1500)])
        sync.init(store, str(folder), key_file=str(key))
    join = ["sync", "join", str(folder), "--key-file", str(key)]
    started = time.monotonic()
    whole = Device(tmp_path, "kw", key)  # one join left alone: how long a join takes here
    whole.json(*join)
    took = time.monotonic() - started
    assert len(whole.memories()) == 1500
    rng = random.Random(9)
    kills = 0
    for attempt in range(3):  # each a new device, killed at a random moment of its join
        b = Device(tmp_path, f"kb{attempt}", key)
        b.add("b's own, from before")
        p = subprocess.Popen([sys.executable, "-m", "pmem", *join], env=b.env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.4, 0.9) * took)
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            kills += 1
        p.wait()
        held = len(b.memories())
        # what the remote held (1,500 and each earlier device's own) came in one transaction, or not at all
        assert held in (1, 1501 + attempt)
        if b.run("sync", "status", ok=False).returncode != 0:
            b.json(*join)
        b.sync()
        assert len(b.memories()) == 1501 + attempt
    a.sync()
    assert kills >= 1
    assert len(a.memories()) == 1503 and a.memories() == b.memories()

"""Sync over a folder that real Syncthing replicates: two Syncthing instances on loopback (no
discovery, relays, NAT or usage reporting), each with its own copy of one shared folder, and two
PMEM_HOMEs driven through the CLI as processes, each syncing through its own instance's copy.
Every wait polls Syncthing's REST API, with a deadline; skipped where `syncthing` is not installed
(CI installs it: .ci/run)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from test_sync_cli import Device

SYNCTHING = shutil.which("syncthing")
FOLDER_ID = "pmem"
DEADLINE = 180  # seconds one wait may take: generous, for a loaded 2-core CI machine

pytestmark = pytest.mark.skipif(SYNCTHING is None, reason="needs the syncthing binary (apt-get install syncthing)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Syncthing:
    """One Syncthing instance: its own home, GUI/REST and sync port on 127.0.0.1, one folder."""

    def __init__(self, tmp: Path, name: str):
        self.home = tmp / f"syncthing-{name}"
        self.folder = tmp / f"folder-{name}"
        self.folder.mkdir()
        (self.folder / ".stfolder").mkdir()  # Syncthing's marker: the folder is there, not unmounted
        self.api_key = os.urandom(16).hex()
        self.gui_port, self.sync_port = _free_port(), _free_port()
        subprocess.run([SYNCTHING, "generate", "--home", str(self.home), "--no-default-folder"],
                       check=True, capture_output=True, timeout=60)
        self.device_id = subprocess.run([SYNCTHING, "serve", "--home", str(self.home), "--device-id"], check=True,
                                        capture_output=True, text=True, timeout=60).stdout.strip()
        self.proc: subprocess.Popen | None = None

    def configure(self, peer: "Syncthing") -> None:
        """Loopback only: the peer at its port, nothing announced, relayed or reported."""
        path = self.home / "config.xml"
        tree = ET.parse(path)
        root = tree.getroot()
        gui = root.find("gui")
        assert gui is not None
        gui.find("address").text = f"127.0.0.1:{self.gui_port}"  # type: ignore[union-attr]
        gui.find("apikey").text = self.api_key  # type: ignore[union-attr]
        options = root.find("options")
        assert options is not None
        for name, value in {"listenAddress": f"tcp://127.0.0.1:{self.sync_port}", "globalAnnounceEnabled": "false",
                            "localAnnounceEnabled": "false", "relaysEnabled": "false", "natEnabled": "false",
                            "urAccepted": "-1", "startBrowser": "false", "crashReportingEnabled": "false",
                            "autoUpgradeIntervalH": "0", "setLowPriority": "false"}.items():
            el = options.find(name)
            if el is None:
                el = ET.SubElement(options, name)
            el.text = value
        options.find("listenAddress").text = f"tcp://127.0.0.1:{self.sync_port}"  # type: ignore[union-attr]
        device = ET.SubElement(root, "device", id=peer.device_id, name="peer", compression="metadata",
                               introducer="false")
        ET.SubElement(device, "address").text = f"tcp://127.0.0.1:{peer.sync_port}"
        ET.SubElement(device, "autoAcceptFolders").text = "false"
        folder = ET.SubElement(root, "folder", id=FOLDER_ID, label="pmem", path=str(self.folder),
                               type="sendreceive", rescanIntervalS="3600", fsWatcherEnabled="true",
                               fsWatcherDelayS="1")
        for dev in (self.device_id, peer.device_id):
            ET.SubElement(folder, "device", id=dev)
        tree.write(path)

    def start(self) -> None:
        env = {**os.environ, "STNOUPGRADE": "1", "STNORESTART": "1", "STNODEFAULTFOLDER": "1"}
        self.log = open(self.home / "log.txt", "wb")
        self.proc = subprocess.Popen([SYNCTHING, "serve", "--home", str(self.home), "--no-browser", "--no-restart",
                                      "--no-upgrade"], stdout=self.log, stderr=subprocess.STDOUT, env=env)
        wait(lambda: self.rest("/rest/system/ping").get("ping") == "pong", f"syncthing {self.home.name} to start",
             self)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self.log.close()

    def rest(self, path: str, method: str = "GET") -> dict:
        req = urllib.request.Request(f"http://127.0.0.1:{self.gui_port}{path}", method=method,
                                     headers={"X-API-Key": self.api_key})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                body = r.read()
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return {}
        return json.loads(body) if body.strip() else {}

    def scan(self) -> None:
        self.rest(f"/rest/db/scan?folder={FOLDER_ID}", method="POST")

    def tail(self) -> str:
        self.log.flush()
        return (self.home / "log.txt").read_text(errors="replace")[-3000:]


def wait(check, what: str, *instances: Syncthing) -> None:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        for st in instances:
            if st.proc is not None and st.proc.poll() is not None:
                pytest.fail(f"syncthing exited while waiting for {what}:\n{st.tail()}")
        if check():
            return
        time.sleep(0.3)
    pytest.fail(f"timed out after {DEADLINE} s waiting for {what}:\n" + "\n".join(st.tail() for st in instances))


def _files(folder: Path) -> dict[str, bytes]:
    """What pmem keeps in the folder (Syncthing's marker and temporaries aside)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*")
            if p.is_file() and ".stfolder" not in p.parts and not p.name.startswith(".syncthing.")}


def converge(src: Syncthing, dst: Syncthing) -> None:
    """Until dst's copy holds what src's holds, byte for byte: src rescans (its watcher would,
    in a second), dst's REST status says nothing is needed, src sees dst at 100%."""
    src.scan()

    def done() -> bool:
        status = dst.rest(f"/rest/db/status?folder={FOLDER_ID}")
        completion = src.rest(f"/rest/db/completion?folder={FOLDER_ID}&device={dst.device_id}")
        return (status.get("state") == "idle" and status.get("needTotalItems") == 0
                and completion.get("completion") == 100 and _files(src.folder) == _files(dst.folder))

    wait(done, f"{dst.home.name} to receive {src.home.name}'s changes", src, dst)


@pytest.fixture
def pair(tmp_path):
    one, two = Syncthing(tmp_path, "one"), Syncthing(tmp_path, "two")
    one.configure(two)
    two.configure(one)
    try:
        one.start()
        two.start()
        wait(lambda: one.rest("/rest/system/connections").get("connections", {}).get(two.device_id, {})
             .get("connected") is True, "the two instances to connect", one, two)
        yield one, two
    finally:
        one.stop()
        two.stop()


def test_memories_an_edit_and_a_purge_converge_through_syncthing(tmp_path, pair):
    one, two = pair
    key = tmp_path / "sync.key"
    a, b = Device(tmp_path, "a", key), Device(tmp_path, "b", key)
    texts = ["The spare key hangs behind the blue door", "Lena's train arrives at platform 9",
             "Dentist moved to Thursday at 4pm"]
    kept = [a.json("add", t)["id"] for t in texts[:2]]
    secret = a.json("add", texts[2])["id"]
    a.json("sync", "init", str(one.folder), "--key-file", str(key))
    converge(one, two)

    own = b.json("add", "Basil needs watering every other day")["id"]
    joined = b.json("sync", "join", str(two.folder), "--key-file", str(key))
    assert joined["applied"] == 3
    converge(two, one)
    assert a.json("sync")["applied"] == 1

    a.json("edit", kept[0], "The spare key hangs behind the green door")
    a.json("sync")
    converge(one, two)
    b.run("forget", "--purge", secret, "--yes")
    assert b.json("sync")["applied"] == 1  # the edit came in
    converge(two, one)
    assert secret in a.json("sync")["purged"]  # a erases it, and rewrites its changeset that held it
    converge(one, two)
    b.json("sync")

    mem_a, mem_b = a.memories(), b.memories()
    assert mem_a == mem_b
    assert set(mem_a) == {*kept, own}
    assert mem_a[kept[0]]["text"] == "The spare key hangs behind the green door"
    for st in (one, two):
        names = [p.name for p in st.folder.rglob("*")]
        assert not [n for n in names if ".sync-conflict-" in n], names
        blob = b"".join(_files(st.folder).values())
        for text in [*texts, "green door", "Basil"]:
            assert text.encode() not in blob  # sealed: never a memory's text in the clear
    for home in (a.home, b.home):
        stored = b"".join(p.read_bytes() for p in home.rglob("*") if p.is_file())
        assert texts[2].encode() not in stored and b"Dentist" not in stored

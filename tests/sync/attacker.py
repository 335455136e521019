"""A hostile remote, for the sync tests and the hostile-sync corpus (benchmarks/sync_cases_chain.py).

Devices are real stores, in process, on a real folder or a real bare git repository; the
attacker writes to that remote as anyone with write access can, without the key: it deletes,
puts back any version of a file it saw earlier, swaps and cuts files, and (git) force-pushes an
older history. Only the checks (`opened`) use the key, as a device that joins would.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from pmem import sync
from pmem.config import Settings
from pmem.service import MemoryStore
from pmem.sync import keys


def git(*args: str, cwd: Path | None = None) -> bytes:
    return subprocess.run(["git", "-c", "user.name=x", "-c", "user.email=x@localhost", "-c", "commit.gpgsign=false",
                           *args], cwd=cwd, capture_output=True, check=True).stdout


class Net:
    """Devices on one remote (`kind` "folder" or "git") and an attacker who can write it."""

    def __init__(self, tmp: Path, kind: str, config: Settings):
        self.tmp, self.kind, self.config = tmp, kind, config
        self.key_file = tmp / "sync.key"
        self.remote = tmp / ("remote.git" if kind == "git" else "Sync")
        if kind == "git":
            git("init", "-q", "--bare", "-b", "main", str(self.remote))
        self.stores: dict[str, MemoryStore] = {}
        self.seen: dict[str, list[bytes]] = {}  # every version of every file the attacker has seen

    # -- devices ----------------------------------------------------------------------

    def store(self, name: str) -> MemoryStore:
        if name not in self.stores:
            self.stores[name] = MemoryStore(self.tmp / name / "pmem.db", config=self.config)
        return self.stores[name]

    def init(self, name: str) -> dict[str, Any]:
        return sync.init(self.store(name), str(self.remote), key_file=str(self.key_file))

    def join(self, name: str) -> dict[str, Any]:
        return sync.join(self.store(name), str(self.remote), key_file=str(self.key_file))

    def sync(self, name: str) -> dict[str, Any]:
        report = sync.run(self.store(name))
        self.look()
        return report

    def everyone(self, rounds: int = 2) -> None:
        """Every device syncs, `rounds` times; a round may fail on a file another device repairs
        later in it (each repairs its own before it reads the others'), the last may not."""
        for r in range(rounds + 1):
            for name in sorted(self.stores):
                if not sync.SyncLog(self.stores[name]).exists():
                    continue
                try:
                    self.sync(name)
                except sync.SyncError:
                    if r == rounds:
                        raise

    def texts(self, name: str) -> dict[str, str]:
        return {m.id: m.text for m in self.store(name).iter_all()}

    def device(self, name: str) -> str:
        return sync.SyncLog(self.store(name)).device

    def raw(self, name: str) -> bytes:
        """Every byte of a device's home: its database, -wal, and its sync folder (a clone)."""
        home = self.tmp / name
        return b"".join(p.read_bytes() for p in sorted(home.rglob("*")) if p.is_file() and not p.is_symlink())

    def close(self) -> None:
        for s in self.stores.values():
            s.close()

    # -- the attacker -----------------------------------------------------------------

    def tree(self) -> dict[str, bytes]:
        """The remote's current files (what a device that joins now reads), by path."""
        if self.kind == "folder":
            if not self.remote.is_dir():
                return {}
            return {str(p.relative_to(self.remote)): p.read_bytes() for p in sorted(self.remote.rglob("*"))
                    if p.is_file() and not p.name.startswith(".")}
        if not git("--git-dir", str(self.remote), "for-each-ref", "refs/heads/main").strip():
            return {}
        out = {}
        for line in git("--git-dir", str(self.remote), "ls-tree", "-r", "main").decode().splitlines():
            meta, path = line.split("\t", 1)
            out[path] = git("--git-dir", str(self.remote), "cat-file", "blob", meta.split()[2])
        return out

    def look(self) -> None:
        """The attacker watches the remote: it keeps every version of every file."""
        for path, blob in self.tree().items():
            versions = self.seen.setdefault(path, [])
            if blob not in versions:
                versions.append(blob)

    def write(self, changes: dict[str, bytes | None]) -> None:
        """Write (bytes) or delete (None) files on the remote, as anyone with write access can."""
        if self.kind == "folder":
            for path, blob in changes.items():
                target = self.remote / path
                if blob is None:
                    target.unlink(missing_ok=True)
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(blob)
            return
        work = self.tmp / "attacker-clone"
        if not work.exists():
            git("clone", "-q", str(self.remote), str(work))
        git("fetch", "-q", "origin", cwd=work)
        git("reset", "-q", "--hard", "origin/main", cwd=work)
        for path, blob in changes.items():
            target = work / path
            if blob is None:
                target.unlink(missing_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(blob)
        git("add", "-A", cwd=work)
        if subprocess.run(["git", "diff", "--cached", "--quiet"], cwd=work).returncode:
            git("commit", "-q", "-m", "not pmem", cwd=work)
            git("push", "-q", "origin", "HEAD:main", cwd=work)

    def snapshot(self) -> Path:
        """A copy of the whole remote (for git: its history too), to force back later."""
        self.look()
        n = len(list(self.tmp.glob("snapshot-*")))
        copy = self.tmp / f"snapshot-{n}"
        shutil.copytree(self.remote, copy, symlinks=True)
        return copy

    def force_back(self, snapshot: Path) -> None:
        """Put the remote back as it was at `snapshot`: for git a force-push of the older history."""
        if self.kind == "git":
            git("--git-dir", str(snapshot), "push", "-q", "--force", str(self.remote), "main:main")
            return
        shutil.rmtree(self.remote)
        shutil.copytree(snapshot, self.remote, symlinks=True)

    def segments(self, device: str) -> list[str]:
        return sorted(p for p in self.tree() if p.startswith(f"segments/{device}/"))

    # -- what the key opens ---------------------------------------------------------------

    def opened(self) -> str:
        """Every changeset of the remote's current tree, opened with the key, as JSON text."""
        key = keys.read_key_file(self.key_file)
        out = []
        for path, blob in self.tree().items():
            parts = path.split("/")
            if len(parts) == 3 and parts[0] == "segments":
                try:
                    out.append(json.dumps(keys.open_sealed(key, blob, parts[1], int(parts[2]), path),
                                          ensure_ascii=False))
                except keys.SyncError:
                    pass  # damaged: opens to nothing
        return "\n".join(out)


def started(net: Net) -> Net:
    """Two devices that synced once: a's first memory and b's, each on both."""
    net.store("a").add("a's first memory")
    net.init("a")
    net.store("b").add("b's first memory")
    net.join("b")
    net.sync("a")
    return net


def own_files(net: Net, name: str) -> dict[str, bytes]:
    """The remote's files of one device's changesets, by path."""
    return {p: b for p, b in net.tree().items() if p.startswith(f"segments/{net.device(name)}/")}

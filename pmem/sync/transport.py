"""Where changesets travel: a plain folder a file syncer replicates, or a git remote.

Both hold the same tree: `keycheck` (a sealed constant: a wrong key is caught before anything is
written), `segments/<device>/<seq>`, each file written by its device only, once (or rewritten
by it after a purge), and `retired/<device>` (sealed: a device another one retired). So git
merges are pure additions and a file syncer never makes a conflict copy. Over git, `epoch` names
the history: `pmem sync compact` replaces it by one new root commit under a new epoch, and a
clone that finds another epoch on the remote is cloned afresh (keeping this device's own files).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from ..paths import write_atomic
from .keys import SyncError

SEGMENTS = "segments"
KEYCHECK = "keycheck"
RETIRED = "retired"
EPOCH = "epoch"
MAX_NOTE = 64 * 1024  # bytes; a retirement note is a few hundred
_DEVICE = re.compile(r"^[0-9a-f]{16}$")
_SEQ = re.compile(r"^[0-9]{10}$")
BRANCH = "main"
PUSH_TRIES = 5
GIT_TIMEOUT = 300  # seconds one git command may take (a remote over ssh that hangs is given up)


def seg_name(seq: int) -> str:
    return f"{seq:010d}"


class Folder:
    """A plain folder (Syncthing, Dropbox, iCloud, rclone, a USB stick)."""

    kind = "folder"

    def __init__(self, root: Path):
        self.root = Path(root)

    def describe(self) -> str:
        return str(self.root)

    def pull(self) -> None:
        if not self.root.is_dir():
            raise SyncError(f"sync folder {self.root} is not there (unmounted, or not synced yet?)")

    def push(self) -> int:
        return 0

    def listing(self) -> dict[str, list[int]]:
        """Every device's changeset numbers, sorted (names that are not pmem's are ignored)."""
        out: dict[str, list[int]] = {}
        base = self.root / SEGMENTS
        if not base.is_dir():
            return out
        for d in os.scandir(base):
            if d.is_dir() and _DEVICE.match(d.name):
                out[d.name] = sorted(int(f.name) for f in os.scandir(d.path) if _SEQ.match(f.name) and f.is_file())
        return out

    def read(self, device: str, seq: int) -> bytes:
        try:
            return (self.root / SEGMENTS / device / seg_name(seq)).read_bytes()
        except FileNotFoundError:
            raise SyncError(f"changeset {device}/{seq} is missing from {self.describe()}") from None

    def exists(self, device: str, seq: int) -> bool:
        return (self.root / SEGMENTS / device / seg_name(seq)).is_file()

    def write(self, device: str, seq: int, blob: bytes) -> None:
        """Atomically: a syncer or a reader never sees half a file (a hidden temporary, renamed)."""
        folder = self.root / SEGMENTS / device
        folder.mkdir(parents=True, exist_ok=True)
        self._atomic(folder / seg_name(seq), blob)

    def retired(self) -> dict[str, bytes]:
        """The sealed retirement notes, by device."""
        base = self.root / RETIRED
        if not base.is_dir():
            return {}
        notes = {}
        for f in os.scandir(base):
            if _DEVICE.match(f.name) and f.is_file():
                if f.stat().st_size > MAX_NOTE:
                    raise SyncError(f"the retirement of {f.name} is {f.stat().st_size:,} bytes: not one pmem wrote")
                notes[f.name] = Path(f.path).read_bytes()
        return notes

    def write_retired(self, device: str, blob: bytes) -> None:
        (self.root / RETIRED).mkdir(parents=True, exist_ok=True)
        self._atomic(self.root / RETIRED / device, blob)

    def read_keycheck(self) -> bytes | None:
        path = self.root / KEYCHECK
        return path.read_bytes() if path.is_file() else None

    def write_keycheck(self, blob: bytes) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self._atomic(self.root / KEYCHECK, blob)

    @staticmethod
    def _atomic(path: Path, blob: bytes) -> None:
        write_atomic(path, blob, prefix=".pmem-tmp-")


class Git(Folder):
    """A clone of any remote `git clone` takes; changesets are committed and pushed, and a push
    that lost a race is rebased (additions only: it cannot conflict) and pushed again."""

    kind = "git"

    def __init__(self, remote: str, clone: Path, device: str = ""):
        super().__init__(clone)
        self.remote = remote
        self.device = device  # whose files a fresh clone keeps from the old one (after a compact)
        self.recloned = False

    def describe(self) -> str:
        return self.remote

    def git(self, *args: str, check: bool = True, cwd: Path | None = None) -> subprocess.CompletedProcess:
        env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
        cmd = ["git", "-c", "user.name=pmem", "-c", "user.email=pmem@localhost", "-c", "commit.gpgsign=false",
               "-c", "core.hooksPath=/dev/null", *args]
        try:
            p = subprocess.run(cmd, cwd=cwd or self.root, env=env, capture_output=True, text=True,
                               timeout=GIT_TIMEOUT)
        except FileNotFoundError:
            raise SyncError("sync over git needs the `git` command") from None
        except subprocess.TimeoutExpired:
            raise SyncError(f"git {args[0]} took more than {GIT_TIMEOUT} s; is {self.remote} reachable?") from None
        if check and p.returncode != 0:
            raise SyncError(f"git {args[0]} failed: {_reason(p)}")
        return p

    def clone(self, into: Path | None = None) -> None:
        """Clone the remote into this folder, or `into` (which must not exist yet). `--no-local`:
        a clone of a path hardlinks the remote's objects, unreachable ones too (a compacted
        remote's old history until its gc); over the transport it gets only what is reachable."""
        into = into or self.root
        into.parent.mkdir(parents=True, exist_ok=True)
        self.git("clone", "--quiet", "--no-local", "--", self.remote, str(into), cwd=into.parent)
        if self.git("rev-parse", "--verify", "-q", "HEAD", check=False, cwd=into).returncode != 0:
            # an empty remote (start its branch), or one whose HEAD names another branch than ours
            self.git("symbolic-ref", "HEAD", f"refs/heads/{BRANCH}", cwd=into)
            if self.git("rev-parse", "--verify", "-q", f"refs/remotes/origin/{BRANCH}", check=False,
                        cwd=into).returncode == 0:
                self.git("reset", "--quiet", "--hard", f"origin/{BRANCH}", cwd=into)

    def _has(self, ref: str) -> bool:
        return self.git("rev-parse", "--verify", "-q", ref, check=False).returncode == 0

    def _epoch(self, ref: str) -> str:
        p = self.git("show", f"{ref}:{EPOCH}", check=False)
        return p.stdout.strip() if p.returncode == 0 else ""

    def pull(self) -> None:
        self._finish_reclone()
        if not (self.root / ".git").is_dir():
            raise SyncError(f"the git clone {self.root} is missing: run `pmem sync join {self.remote}` again")
        self.git("fetch", "--quiet", "origin")
        if not self._has(f"refs/remotes/origin/{BRANCH}"):
            return
        if not self._has("HEAD"):
            self.git("reset", "--quiet", "--hard", f"origin/{BRANCH}")
            return
        # what a sync killed before its commit left in the tree is this device's own (only it
        # writes here): commit it, or the rebase refuses a dirty tree
        self.commit("pmem sync: changesets of an interrupted sync")
        if self._epoch(f"origin/{BRANCH}") != self._epoch("HEAD"):
            # compacted elsewhere: never rebase the old history onto the new root (that would
            # push every old object back); clone afresh, keeping this device's own files
            self.reclone()
            return
        p = self.git("rebase", "--quiet", f"origin/{BRANCH}", check=False)
        if p.returncode != 0:
            self.git("rebase", "--abort", check=False)
            raise SyncError("two copies of this home wrote the same changeset (a copied pmem home?): "
                            "the remote already has another device's file at one of this device's paths")

    def reclone(self) -> None:
        """Replace the clone by a fresh one of the remote. This device's own changesets are
        copied over (only it writes them, so its copy is the newest, pushed or not); the others'
        come from the remote. A kill at any point leaves the old clone or the new one in place."""
        fresh, old = self._aside(".new"), self._aside(".old")
        shutil.rmtree(fresh, ignore_errors=True)
        self.clone(into=fresh)
        if self.device:
            mine = self.root / SEGMENTS / self.device
            for f in sorted(mine.iterdir()) if mine.is_dir() else []:
                target = fresh / SEGMENTS / self.device / f.name
                if _SEQ.match(f.name) and (not target.is_file() or target.read_bytes() != f.read_bytes()):
                    target.parent.mkdir(parents=True, exist_ok=True)
                    self._atomic(target, f.read_bytes())
        shutil.rmtree(old, ignore_errors=True)
        os.replace(self.root, old)
        os.replace(fresh, self.root)
        shutil.rmtree(old, ignore_errors=True)
        self.recloned = True

    def _aside(self, suffix: str) -> Path:
        return self.root.with_name(self.root.name + suffix)

    def _finish_reclone(self) -> None:
        """A reclone killed between its two renames: the new clone is whole, take it."""
        if not self.root.exists():
            for suffix in (".new", ".old"):
                if (self._aside(suffix) / ".git").is_dir():
                    os.replace(self._aside(suffix), self.root)
                    break
        shutil.rmtree(self._aside(".old"), ignore_errors=True)

    def commits(self) -> int:
        return int(self.git("rev-list", "--count", "HEAD").stdout.strip() or 0) if self._has("HEAD") else 0

    def squash(self, epoch: str, message: str) -> bool:
        """Push the current tree as one new root commit under `epoch`, replacing the remote's
        history; False when another device pushed meanwhile (pull and try again). Then this
        clone is cloned afresh, so it keeps none of the old objects either."""
        (self.root / EPOCH).write_text(epoch + "\n", encoding="utf-8")
        self.git("add", "-A", "--", ".")
        tree = self.git("write-tree").stdout.strip()
        commit = self.git("commit-tree", tree, "-m", message).stdout.strip()
        lease = self.git("rev-parse", f"refs/remotes/origin/{BRANCH}", check=False).stdout.strip() \
            if self._has(f"refs/remotes/origin/{BRANCH}") else ""
        p = self.git("push", "--quiet", f"--force-with-lease=refs/heads/{BRANCH}:{lease}", "origin",
                     f"{commit}:refs/heads/{BRANCH}", check=False)
        if p.returncode != 0:
            if any(w in p.stderr for w in ("[rejected]", "stale info", "fetch first", "non-fast-forward")):
                self.git("checkout", "--quiet", "HEAD", "--", EPOCH, check=False)
                if not self._has(f"HEAD:{EPOCH}"):
                    (self.root / EPOCH).unlink(missing_ok=True)
                self.git("reset", "--quiet", check=False)
                return False
            raise SyncError(f"git push failed: {_reason(p)}; nothing was compacted")
        self.reclone()
        return True

    def size(self) -> int:
        """Bytes of git objects in this clone (loose and packed)."""
        fields = dict(line.split(": ", 1) for line in self.git("count-objects", "-v").stdout.splitlines()
                      if ": " in line)
        return (int(fields.get("size", 0)) + int(fields.get("size-pack", 0))) * 1024

    def commit(self, message: str) -> bool:
        self.git("add", "-A", "--", ".")
        if self.git("diff", "--cached", "--quiet", check=False).returncode == 0:
            return False
        self.git("commit", "--quiet", "-m", message)
        return True

    def push(self, message: str = "pmem sync") -> int:
        """Push what is committed; returns how many pushes were rejected first. A pull that
        finds the remote compacted clones afresh: what this device wrote is committed again."""
        if not self._has("HEAD"):
            return 0
        if self._has(f"refs/remotes/origin/{BRANCH}") and \
                self.git("rev-parse", "HEAD").stdout == self.git("rev-parse", f"origin/{BRANCH}").stdout:
            return 0
        for attempt in range(PUSH_TRIES):
            p = self.git("push", "--quiet", "origin", f"HEAD:refs/heads/{BRANCH}", check=False)
            if p.returncode == 0:
                self.git("fetch", "--quiet", "origin", check=False)
                return attempt
            if not any(w in p.stderr for w in ("[rejected]", "fetch first", "non-fast-forward")):
                # not a lost race but a remote gone (unplugged, deleted, unreachable): what is
                # committed here stays and goes with the next sync
                raise SyncError(f"git push failed: {_reason(p)}; this device's changes are kept and sent "
                                "at the next `pmem sync`")
            self.pull()
            if self.recloned:
                self.commit(message)
        raise SyncError(f"push to {self.remote} was rejected {PUSH_TRIES} times (others pushing meanwhile?); "
                        "run `pmem sync` again")

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def _reason(p: subprocess.CompletedProcess) -> str:
    """git's own first `fatal:`/`error:` line (its last is often advice: "...and the repository
    exists.")."""
    lines = [line.strip() for line in (p.stderr or p.stdout or "").splitlines() if line.strip()]
    for line in lines:
        for prefix in ("fatal: ", "error: "):
            if line.startswith(prefix):
                return line[len(prefix):]
    return lines[-1] if lines else f"exit status {p.returncode}"


def looks_like_git(remote: str) -> bool:
    """A URL, an scp-like address, or a path to a git repository (bare or not)."""
    if "://" in remote or re.match(r"^[\w.-]+@[\w.-]+:", remote):
        return True
    p = Path(remote).expanduser()
    if remote.rstrip("/").endswith(".git"):
        return True  # named like a repository: a missing one is an error to report, not a folder to make
    return (p / "HEAD").is_file() and (p / "objects").is_dir() or (p / ".git").exists()

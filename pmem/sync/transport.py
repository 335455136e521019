"""Where changesets travel: a plain folder a file syncer replicates, or a git remote.

Both hold the same tree: `keycheck` (a sealed constant: a wrong key is caught before anything is
written) and `segments/<device>/<seq>`, each file written by its device only, once (or rewritten
by it after a purge). So git merges are pure additions and a file syncer never makes a conflict
copy.
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

    def __init__(self, remote: str, clone: Path):
        super().__init__(clone)
        self.remote = remote

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

    def clone(self) -> None:
        """Clone the remote into this folder (which must not exist yet)."""
        self.root.parent.mkdir(parents=True, exist_ok=True)
        self.git("clone", "--quiet", "--", self.remote, str(self.root), cwd=self.root.parent)
        if self.git("rev-parse", "--verify", "-q", "HEAD", check=False).returncode != 0:
            self.git("symbolic-ref", "HEAD", f"refs/heads/{BRANCH}")  # an empty remote: start its branch

    def _has(self, ref: str) -> bool:
        return self.git("rev-parse", "--verify", "-q", ref, check=False).returncode == 0

    def pull(self) -> None:
        if not (self.root / ".git").is_dir():
            raise SyncError(f"the git clone {self.root} is missing: run `pmem sync join {self.remote}` again")
        self.git("fetch", "--quiet", "origin")
        if not self._has(f"refs/remotes/origin/{BRANCH}"):
            return
        if not self._has("HEAD"):
            self.git("reset", "--quiet", "--hard", f"origin/{BRANCH}")
            return
        p = self.git("rebase", "--quiet", f"origin/{BRANCH}", check=False)
        if p.returncode != 0:
            self.git("rebase", "--abort", check=False)
            raise SyncError("two copies of this home wrote the same changeset (a copied pmem home?): "
                            "the remote already has another device's file at one of this device's paths")

    def commit(self, message: str) -> bool:
        self.git("add", "-A", "--", ".")
        if self.git("diff", "--cached", "--quiet", check=False).returncode == 0:
            return False
        self.git("commit", "--quiet", "-m", message)
        return True

    def push(self) -> int:
        """Push what is committed; returns how many pushes were rejected first."""
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

"""Where changesets travel: a plain folder a file syncer replicates, or a git remote.

Both hold the same tree: `keycheck` (a sealed constant: a wrong key is caught before anything is
written), `segments/<device>/<seq>`, each file written by its device only, once (or rewritten
by it after a purge), and `retired/<device>` (sealed: a device another one retired). So git
merges are pure additions and a file syncer never makes a conflict copy. Over git, `epoch` names
the history: `pmem sync compact` replaces it by one new root commit under a new epoch, and a
clone that finds another epoch on the remote is cloned afresh (keeping this device's own files).

The remote is a stranger's disk (README, Sync: "A remote you do not trust"): every file and folder
is read and written through safefs.py (no link followed, regular files only, sizes bounded before
reading), and a git clone is made so that git never rewrites what it checks out (`ATTRIBUTES`)
nor makes a link in it (`core.symlinks=false`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from . import safefs
from .keys import MAX_FILE, SyncError

SEGMENTS = "segments"
KEYCHECK = "keycheck"
RETIRED = "retired"
EPOCH = "epoch"
MAX_NOTE = 64 * 1024  # bytes; a retirement note, a key check or an epoch is a few hundred
_DEVICE = re.compile(r"[0-9a-f]{16}")  # fullmatch only: `$` would also match before a final newline
_SEQ = re.compile(r"[0-9]{10}")
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
        if self.root.is_symlink():
            raise safefs.root_link(self.root)
        if not self.root.is_dir():
            raise SyncError(f"sync folder {self.root} is not there (unmounted, or not synced yet?)")

    def push(self) -> int:
        return 0

    def listing(self) -> dict[str, list[int]]:
        """Every device's changeset numbers, sorted (names that are not pmem's are ignored; a link
        or a special file with one of pmem's names is refused, never followed)."""
        out: dict[str, list[int]] = {}
        top = safefs.entries(self.root).get(SEGMENTS)
        if top not in (None, "dir"):
            raise safefs.refuse(self.root, SEGMENTS, top or "")
        for name, what in safefs.entries(self.root, SEGMENTS).items():
            if not _DEVICE.fullmatch(name):
                continue
            if what != "dir":
                raise safefs.refuse(self.root, f"{SEGMENTS}/{name}", what)
            seqs = []
            for f, fwhat in safefs.entries(self.root, f"{SEGMENTS}/{name}").items():
                if _SEQ.fullmatch(f):
                    if fwhat != "file":
                        raise safefs.refuse(self.root, f"{SEGMENTS}/{name}/{f}", fwhat)
                    seqs.append(int(f))
            out[name] = sorted(seqs)
        return out

    @staticmethod
    def _path(device: str, seq: int) -> str:
        if not _DEVICE.fullmatch(device):
            raise SyncError(f"not a device id: {device!r}")
        return f"{SEGMENTS}/{device}/{seg_name(seq)}"

    def read(self, device: str, seq: int) -> bytes:
        blob = safefs.read(self.root, self._path(device, seq), MAX_FILE)
        if blob is None:
            raise SyncError(f"changeset {device}/{seq} is missing from {self.describe()}")
        return blob

    def exists(self, device: str, seq: int) -> bool:
        return safefs.kind(self.root, self._path(device, seq)) == "file"

    def write(self, device: str, seq: int, blob: bytes) -> None:
        """Atomically: a syncer or a reader never sees half a file (a hidden temporary, renamed)."""
        safefs.write(self.root, self._path(device, seq), blob)

    def retired(self) -> dict[str, bytes]:
        """The sealed retirement notes, by device."""
        notes = {}
        for name, what in safefs.entries(self.root, RETIRED).items():
            if _DEVICE.fullmatch(name):
                if what != "file":
                    raise safefs.refuse(self.root, f"{RETIRED}/{name}", what)
                blob = safefs.read(self.root, f"{RETIRED}/{name}", MAX_NOTE)
                if blob is not None:
                    notes[name] = blob
        return notes

    def write_retired(self, device: str, blob: bytes) -> None:
        if not _DEVICE.fullmatch(device):
            raise SyncError(f"not a device id: {device!r}")
        safefs.write(self.root, f"{RETIRED}/{device}", blob)

    def read_keycheck(self) -> bytes | None:
        return safefs.read(self.root, KEYCHECK, MAX_NOTE)

    def write_keycheck(self, blob: bytes) -> None:
        safefs.write(self.root, KEYCHECK, blob)


# What git must never do to a changeset it checks out or adds, whatever the remote's
# `.gitattributes` say: `.git/info/attributes` outranks every attributes file in the tree.
ATTRIBUTES = "* -text -eol -filter -ident -diff -merge !working-tree-encoding\n"
# Settings on every git command: no line-ending conversion, links checked out as plain files
# (safefs refuses those where pmem expects its own), objects checked as they arrive, no hooks.
GIT_CONFIG = ("user.name=pmem", "user.email=pmem@localhost", "commit.gpgsign=false", "core.hooksPath=/dev/null",
              "core.autocrlf=false", "core.symlinks=false", "core.fsmonitor=false", "transfer.fsckObjects=true",
              "core.attributesFile=/dev/null")
# git's words for a push that lost a race: another push moved the branch first ("[rejected]",
# "fetch first", ...), or took the remote's ref lock at the same moment ("[remote rejected] ...
# failed to update ref", "cannot lock ref"): both are pulled, rebased and pushed again.
LOST_RACE = ("[rejected]", "fetch first", "non-fast-forward", "stale info", "failed to update ref",
             "cannot lock ref", "failed to lock", "incorrect old value")
STALE_LOCK = 600  # seconds: where running git processes cannot be seen, a lock file this old is a dead one's
_LOCKS = ("index.lock", "HEAD.lock", "ORIG_HEAD.lock", "FETCH_HEAD.lock", "packed-refs.lock", "config.lock",
          "shallow.lock")


def lost_race(stderr: str) -> bool:
    return any(w in stderr for w in LOST_RACE)


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
        cmd = ["git", *(a for c in GIT_CONFIG for a in ("-c", c)), *args]
        try:
            p = subprocess.run(cmd, cwd=cwd or self.root, env=env, capture_output=True, text=True,
                               errors="replace", timeout=GIT_TIMEOUT)
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
        remote's old history until its gc); over the transport it gets only what is reachable.
        `--no-checkout`, then ATTRIBUTES, then the checkout: git rewrites no file of it."""
        into = into or self.root
        into.parent.mkdir(parents=True, exist_ok=True)
        self.git("clone", "--quiet", "--no-local", "--no-checkout", "--", self.remote, str(into), cwd=into.parent)
        _harden(into)
        if self.git("rev-parse", "--verify", "-q", "HEAD", check=False, cwd=into).returncode != 0:
            # an empty remote (start its branch), or one whose HEAD names another branch than ours
            self.git("symbolic-ref", "HEAD", f"refs/heads/{BRANCH}", cwd=into)
            if self.git("rev-parse", "--verify", "-q", f"refs/remotes/origin/{BRANCH}", check=False,
                        cwd=into).returncode == 0:
                self.git("reset", "--quiet", "--hard", f"origin/{BRANCH}", cwd=into)
        else:
            self.git("reset", "--quiet", "--hard", "HEAD", cwd=into)

    def _has(self, ref: str) -> bool:
        return self.git("rev-parse", "--verify", "-q", ref, check=False).returncode == 0

    def _epoch(self, ref: str) -> str:
        """The epoch a commit names, read from git's objects (never through the working tree);
        its size is asked first, so a huge one is not read ("" when there is none)."""
        size = self.git("cat-file", "-s", f"{ref}:{EPOCH}", check=False)
        if size.returncode != 0:
            return ""
        if not size.stdout.strip().isdigit() or int(size.stdout) > MAX_NOTE:
            return f"(not an epoch pmem wrote: {size.stdout.strip()[:20]} bytes)"
        p = self.git("cat-file", "blob", f"{ref}:{EPOCH}", check=False)
        return p.stdout.strip()[:64] if p.returncode == 0 else ""

    def pull(self) -> None:
        self._finish_reclone()
        if not (self.root / ".git").is_dir():
            # the clone was deleted (by hand, a cleaner, a full disk): clone again, keeping any
            # of this device's own files still there
            self.reclone()
            return
        self._recover()
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
            both = self.git("diff", "--name-only", "--diff-filter=U", "-z", check=False).stdout
            self.git("rebase", "--abort", check=False)
            paths = [q for q in both.split("\0") if q]
            if not paths:
                raise SyncError(f"git rebase onto {self.remote} failed: {_reason(p)}")
            shown = ", ".join(repr(q)[1:-1] for q in paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3
                                                                   else "")
            raise SyncError(f"the remote changed {shown}, which this device changed too: each of pmem's files "
                            "has one writer, so another copy of this home wrote as this device, two devices "
                            "retired the same one at once, or someone without the key wrote there")

    def _recover(self) -> None:
        """What a git killed mid-command leaves: lock files (every later command refuses to run
        while one is there) and a rebase half done. Called under the sync lock, so no git of
        pmem's runs in this clone; a lock is cleared when no git process runs here at all."""
        gitdir = self.root / ".git"
        locks = [gitdir / n for n in _LOCKS if os.path.lexists(gitdir / n)]
        refs = gitdir / "refs"
        locks += [Path(d) / f for d, _, fs in os.walk(refs) for f in fs if f.endswith(".lock")]
        if locks:
            running = _git_running_in(self.root)
            if running:
                raise SyncError(f"git is running in {self.root} (process {running[0]}); try again when it ends")
            for lock in locks:
                age = time.time() - os.lstat(lock).st_mtime
                if running is None and age < STALE_LOCK:
                    raise SyncError(f"{lock} is there ({age:.0f} s old) and whether a git still runs here "
                                    f"cannot be seen: pmem clears it once it is {STALE_LOCK} s old, or delete it")
                os.unlink(lock)
        if (gitdir / "rebase-merge").exists() or (gitdir / "rebase-apply").exists():
            self.git("rebase", "--abort", check=False)
        if not _hardened(self.root):
            # a clone made before ATTRIBUTES: git may have rewritten files at checkout. Keep what
            # this device wrote (committed under the attributes it was checked out with, so a
            # rewritten file is not taken for a change), then check every file out again as stored
            has_head = self._has("HEAD")
            if has_head:
                self.commit("pmem sync: changesets of an interrupted sync")
            _harden(self.root)
            if has_head:
                self.git("rm", "-r", "-q", "--cached", "--ignore-unmatch", "--", ".")
                self.git("reset", "--quiet", "--hard", "HEAD")

    def reclone(self) -> None:
        """Replace the clone by a fresh one of the remote. This device's own changesets are
        copied over (only it writes them, so its copy is the newest, pushed or not); the others'
        come from the remote. A kill at any point leaves the old clone or the new one in place."""
        fresh, old = self._aside(".new"), self._aside(".old")
        shutil.rmtree(fresh, ignore_errors=True)
        self.clone(into=fresh)
        if self.device and self.root.is_dir():
            mine = f"{SEGMENTS}/{self.device}"
            for name, what in sorted(safefs.entries(self.root, mine).items()):
                if not (_SEQ.fullmatch(name) and what == "file"):
                    continue
                blob = safefs.read(self.root, f"{mine}/{name}", MAX_FILE)
                if blob is not None and safefs.read(fresh, f"{mine}/{name}", MAX_FILE) != blob:
                    safefs.write(fresh, f"{mine}/{name}", blob)
        shutil.rmtree(old, ignore_errors=True)
        if os.path.lexists(self.root):
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
        safefs.write(self.root, EPOCH, (epoch + "\n").encode())
        self.git("add", "-A", "--", ".")
        tree = self.git("write-tree").stdout.strip()
        commit = self.git("commit-tree", tree, "-m", message).stdout.strip()
        lease = self.git("rev-parse", f"refs/remotes/origin/{BRANCH}", check=False).stdout.strip() \
            if self._has(f"refs/remotes/origin/{BRANCH}") else ""
        p = self.git("push", "--quiet", f"--force-with-lease=refs/heads/{BRANCH}:{lease}", "origin",
                     f"{commit}:refs/heads/{BRANCH}", check=False)
        if p.returncode != 0:
            if lost_race(p.stderr):
                self.git("reset", "--quiet", check=False)
                safefs.unlink(self.root, EPOCH)
                if self._has(f"HEAD:{EPOCH}"):
                    self.git("checkout", "--quiet", "HEAD", "--", EPOCH, check=False)
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
        self.git("commit", "--quiet", "--no-verify", "-m", message)
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
            if not lost_race(p.stderr):
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


def _hardened(clone: Path) -> bool:
    try:
        return (clone / ".git" / "info" / "attributes").read_text(encoding="utf-8") == ATTRIBUTES
    except (OSError, UnicodeDecodeError):
        return False


def _harden(clone: Path) -> None:
    """Write ATTRIBUTES into the clone's `.git/info/attributes`."""
    info = clone / ".git" / "info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "attributes").write_text(ATTRIBUTES, encoding="utf-8")


def _git_running_in(clone: Path) -> list[int] | None:
    """The ids of git processes whose working folder is this clone (None: processes cannot be
    seen here, no /proc)."""
    proc = Path("/proc")
    if not (proc / "self" / "cwd").exists():
        return None
    root = os.path.realpath(clone)
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if not (entry / "comm").read_text().strip().startswith("git"):
                continue
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if cwd == root or cwd.startswith(root + os.sep):
            found.append(int(entry.name))
    return found


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

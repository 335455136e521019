"""The sync engine: one `pmem sync` (pull, apply, write, push), and init, join, compact, retire, rejoin.

Never the database file: each device appends its changes as numbered, sealed changesets under
its own id (`segments/<device>/<seq>`, see transport.py), made from the event log and applied
through the store (pmem/store/replication.py); last writer wins per field by hybrid clock
(pmem/hlc.py), and the
remote sees only ciphertext (keys.py). `init` starts a remote, `join` adds a device, `run` is
one `pmem sync`: pull, apply, write, push. `compact` squashes a git remote's history (old
objects keep purged text), `retire` stops everyone waiting on a lost device and `rejoin` brings
a retired one back as a new device; auto.py runs `pmem sync` in the background after a change.

Threat model. The remote is untrusted storage: anyone may read it, write it, delete from it, put
back any file or history it saw, without the key; the key and each device's own database are
trusted. The remote must never make a device store a purged memory, take an older state as the
newest, lose a memory, or keep pmem stuck once it stops; it can always withhold (show nothing
new, or an old consistent snapshot, until a device that knows better syncs).

Rollback, deletion and erasure. Each changeset carries, sealed, the digest of its device's
previous one (`prev`; the digest skips operation values, so the rewrite after a purge keeps it),
what its device had applied of each other one (`seen`, the acknowledgements) and the memories
it knows were purged (`purged`, or past PURGED_INLINE the number of its changeset that lists
them). A reader checks each link, takes every purge vouched for before it applies anything (a
purge whose own changeset was deleted is still learnt from any later changeset of any device,
past a gap too), reports a device whose changesets others vouched for but the remote no longer
holds (`rolled_back`), and never lowers what it knows. A device keeps its own sealed changesets
(`sync_own`) and, at every sync, writes again any the remote lacks or holds changed (by stat, so
an unchanged file is not read); a steward does so for the retired devices it rewrites. A purge's
rewrite and erase are job rows (`sync_jobs`) done at every sync until they succeed.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Collection, Iterator

from ..errors import NotFound, UsageError
from ..store.replication import SyncLog
from . import keys as keyring
from .keys import SyncError, WrongKey
from .repair import (  # noqa: F401 - the engine's steps, named here for its callers and tests
    _MEMORY_ID,
    _OP_ID,
    _adopt,
    _adopt_stewarded,
    _beyond,
    _check_ops,
    _copied,
    _crash,
    _erasure,
    _is_dir,
    _not_mine,
    _redact_kept,
    _redact_ops,
    _repair,
    _sig,
    _stats,
    _stewarded,
    digest,
)
from .transport import PUSH_TRIES, SEGMENTS, Folder, Git, looks_like_git

if TYPE_CHECKING:
    from ..service import MemoryStore

__all__ = ["SyncLog", "SyncError", "WrongKey", "init", "join", "run", "status", "compact", "retire", "rejoin",
           "export_key", "sync_dir"]

CHUNK = 5000  # operations per changeset file (a first join of 100,000 memories writes 20 files)
_DEVICE = re.compile(r"[0-9a-f]{16}")
Progress = Callable[[str], None]


def sync_dir(store: "MemoryStore") -> Path:
    """Where this database keeps its sync files: its key (unless elsewhere), its git clone, a lock."""
    return Path(str(store.path) + ".sync")


def _say(progress: Progress | None, text: str) -> None:
    if progress:
        progress(text)


# -- keys ---------------------------------------------------------------------------------

def _key_file(store: "MemoryStore", key_file: str | os.PathLike | None) -> Path:
    given = key_file or os.environ.get("PMEM_SYNC_KEY_FILE")
    return Path(given).expanduser().resolve() if given else sync_dir(store) / "key"


def _load_key(j: SyncLog, passphrase: str | None) -> bytes:
    wrapped = j.get("key_wrapped")
    if wrapped:
        phrase = passphrase or os.environ.get("PMEM_SYNC_PASSPHRASE")
        if not phrase:
            raise UsageError("this device's sync key is wrapped by a passphrase: set PMEM_SYNC_PASSPHRASE "
                             "or pass --passphrase")
        try:
            blob = Path(wrapped).read_bytes()
        except OSError as exc:
            raise SyncError(f"cannot read the wrapped key {wrapped}: {exc}") from None
        return keyring.unwrap_key(blob, phrase)
    return keyring.read_key_file(Path(j.get("key_file") or ""))


def export_key(store: "MemoryStore", passphrase: str | None = None) -> str:
    """This device's sync key as text to type (or paste) on the next device: `pmem sync key`."""
    j = _journal(store)
    return keyring.encode_key(_load_key(j, passphrase))


def _keep_key(store: "MemoryStore", j: SyncLog, key: bytes, key_file: Path, passphrase: str | None,
              fresh: bool) -> None:
    """Record where this device's key lives: wrapped by a passphrase, or in a key file (written
    when it is new or was typed in)."""
    if passphrase:
        path = sync_dir(store) / "key.scrypt"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(keyring.wrap_key(key, passphrase))
        j.put("key_wrapped", str(path))
        return
    if fresh:
        keyring.write_key_file(key_file, key)
    j.put("key_file", str(key_file))


# -- setting up -----------------------------------------------------------------------------

def _journal(store: "MemoryStore") -> SyncLog:
    j = SyncLog(store)
    if not j.exists():
        raise SyncError("this database does not sync yet: run `pmem sync init REMOTE|DIR` (the first device) "
                        "or `pmem sync join REMOTE|DIR` (the next ones)")
    return j


def _refuse_db_inside(store: "MemoryStore", folder: Path) -> None:
    db = Path(store.path).resolve()
    root = folder.expanduser().resolve()
    if db == root or root in db.parents:
        raise UsageError(f"the database {db} is inside the synced folder {root}: a file syncer corrupts a live "
                         "SQLite file. Keep pmem's home outside it (sync writes only changesets there)")


def _refuse_inside(store: "MemoryStore", kind: str, remote: str, key_file: str | os.PathLike | None) -> None:
    """The key, and pmem's own sync folder, never inside what travels to the remote: a key file
    in the synced folder (or in pmem's git clone, where `git add` would commit it) hands the key
    to whoever holds the remote."""
    synced = (sync_dir(store) / "git") if kind == "git" else Path(remote).expanduser()
    root, own = synced.resolve(), sync_dir(store).resolve()
    for what, path in (("the sync key file", Path(key_file).expanduser().resolve() if key_file else None),
                       ("pmem's sync folder", own if kind != "git" else None)):
        if path is not None and (path == root or root in path.parents):
            raise UsageError(f"{what} {path} is inside the synced folder {root}: it would travel to the remote "
                             "(anyone who holds it would hold the key). Keep it outside")
    if kind != "git" and (root == own or own in root.parents):
        raise UsageError(f"the synced folder {root} is inside pmem's own sync folder {own}: choose a folder "
                         "of its own")


def _transport(store: "MemoryStore", kind: str, remote: str, device: str = "",
               key_file: str | os.PathLike | None = None) -> Folder:
    _refuse_inside(store, kind, remote, key_file)
    if kind == "git":
        return Git(remote, sync_dir(store) / "git", device)
    folder = Folder(Path(remote))
    _refuse_db_inside(store, folder.root)
    return folder


def _kind(remote: str, kind: str | None) -> str:
    if kind not in (None, "git", "folder"):
        raise UsageError(f"unknown sync kind {kind!r}: use git or folder")
    return kind or ("git" if looks_like_git(remote) else "folder")


@contextmanager
def _staged(store: "MemoryStore", kind: str, remote: str) -> Iterator[Folder]:
    """The remote, reachable; for git a clone made in a temporary folder and moved into place only
    when setting up succeeds, so a refused join leaves nothing behind."""
    if kind == "folder":
        remote = str(Path(remote).expanduser().resolve())
        t = _transport(store, kind, remote)
        yield t
        return
    if (sync_dir(store) / "git").exists():
        shutil.rmtree(sync_dir(store) / "git")  # a clone left by a setup that did not finish
    parent = Path(store.path).resolve().parent
    tmp = Path(tempfile.mkdtemp(prefix=".pmem-sync-clone-", dir=parent))
    try:
        t = Git(remote, tmp / "git")
        t.clone()
        yield t
        final = sync_dir(store)
        final.mkdir(mode=0o700, exist_ok=True)
        os.replace(tmp / "git", final / "git")
        t.root = final / "git"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def init(store: "MemoryStore", remote: str, *, kind: str | None = None, key_file: str | None = None,
         passphrase: str | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """Start syncing this database to an empty REMOTE (git) or DIR (folder). The key is new
    (written to `key_file`, 0600) unless that file exists, whose key is then used."""
    kind = _kind(remote, kind)
    if SyncLog(store).exists():
        raise SyncError(f"this database already syncs with {SyncLog(store).get('remote')}")
    path = _key_file(store, key_file)
    _refuse_inside(store, kind, remote, None if passphrase else path)
    fresh = not path.exists()
    key = keyring.new_key() if fresh else keyring.read_key_file(path)
    with _staged(store, kind, remote) as t:
        if t.read_keycheck() is not None or t.listing():
            raise SyncError(f"{t.describe()} already holds a pmem sync: use `pmem sync join {remote}`")
        sync_dir(store).mkdir(mode=0o700, exist_ok=True)
        t.write_keycheck(keyring.seal_keycheck(key))
        if isinstance(t, Git):
            t.commit("pmem sync: key check")
        j, had = _setup(store, t, kind, remote, key, path, passphrase, fresh)
    report = run(store, progress=progress, passphrase=passphrase, key=key)
    return {**report, "sent": report["sent"] + had, "key_file": j.get("key_file"),
            "key_created": fresh and not passphrase}


def join(store: "MemoryStore", remote: str, *, kind: str | None = None, key_file: str | None = None,
         key_text: str | None = None, passphrase: str | None = None,
         progress: Progress | None = None, fill: bool = True) -> dict[str, Any]:
    """Add this device to a remote another device started: check the key against the remote's
    key check (a wrong key writes nothing), pull everything, then send what this database
    already held as this device's own operations. The memories are committed with the vectors
    that travelled with them; `fill` False returns without embedding the others (searchable by
    their words meanwhile; `pmem sync join` fills them in the background: pmem/fill.py)."""
    kind = _kind(remote, kind)
    if SyncLog(store).exists():
        raise SyncError(f"this database already syncs with {SyncLog(store).get('remote')}")
    path = _key_file(store, key_file)
    _refuse_inside(store, kind, remote, None if passphrase else path)
    if key_text is not None:
        key, fresh = keyring.decode_key(key_text), True
        if path.exists():
            raise SyncError(f"key file {path} already exists; pass it with --key-file instead of typing the key")
    else:
        key, fresh = keyring.read_key_file(path), False
    with _staged(store, kind, remote) as t:
        t.pull()
        check = t.read_keycheck()
        if check is None:
            raise SyncError(f"{t.describe()} holds no pmem sync yet: start it with `pmem sync init {remote}`")
        keyring.check_key(key, check)
        sync_dir(store).mkdir(mode=0o700, exist_ok=True)
        _, had = _setup(store, t, kind, remote, key, path, passphrase, fresh)
    report = run(store, progress=progress, passphrase=passphrase, key=key, fill=fill)
    return {**report, "sent": report["sent"] + had}


def _setup(store: "MemoryStore", t: Folder, kind: str, remote: str, key: bytes, key_file: Path,
           passphrase: str | None, fresh: bool) -> tuple[SyncLog, int]:
    j = SyncLog(store)
    j.create_tables()
    with store.transaction():
        j.put("device", os.urandom(8).hex())
        j.put("kind", kind)
        j.put("remote", remote if kind == "git" else str(t.root))
        j.put("key_id", keyring.key_id(key))
        j.lengthen_ids()
        _keep_key(store, j, key, key_file, passphrase, fresh)
        ops = j.export_existing(j.clock())
        _seal_out(j, key, ops)
    return j, len(ops)


# -- one sync -------------------------------------------------------------------------------

@contextmanager
def _lock(store: "MemoryStore", wait: float = 0.0) -> Iterator[None]:
    """One sync at a time on a database; `wait`: seconds to wait for the one running (a
    background sync waits; a person is told at once)."""
    folder = sync_dir(store)
    folder.mkdir(mode=0o700, exist_ok=True)
    fd = os.open(folder / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + wait
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise SyncError("another `pmem sync` is running on this database; try again when it ends") \
                        from None
                time.sleep(0.2)
        yield
    finally:
        os.close(fd)


# Purges listed in every changeset up to this many (~10 sealed bytes each); past it, only in the
# changeset after the list grew (docs/decisions/0055-sync-chain.md)
PURGED_INLINE = 64


def _seal_out(j: SyncLog, key: bytes, ops: list[dict[str, Any]], announce: bool = False) -> list[int]:
    """Seal operations into this device's next changesets, kept in `sync_own` (same transaction)
    until written, and after. Each carries, sealed, the digest of this device's previous one and
    what it has applied of every other device, and every purge it knows of: in each changeset
    while they are at most PURGED_INLINE, else in the first sealed after that set grew, which the
    later ones name (`purged_in`): ~170 bytes more a changeset, not 10 per purge ever made.
    `announce`: one changeset even with no operation (a purge learnt here, vouched for at once)."""
    seqs = []
    chunks = [ops[i:i + CHUNK] for i in range(0, len(ops), CHUNK)] or ([[]] if announce else [])
    if not chunks:
        return seqs
    seen = j.seen()
    count = j.tombstone_count()
    listed_in = j.get("purged_in") or ""
    for chunk in chunks:
        seq = j.number("seq") + 1
        j.put("seq", seq)
        payload: dict[str, Any] = {"device": j.device, "seq": seq, "v": 2, "prev": j.own_digest(j.device, seq - 1),
                                   "seen": seen}
        if count and (count <= PURGED_INLINE or count != j.number("announced")
                      or not listed_in.startswith(j.device + ":")):
            payload["purged"] = j.purged_ids()
            listed_in = f"{j.device}:{seq}"
            j.put("purged_in", listed_in)
            j.put("announced", count)
        if listed_in.startswith(j.device + ":"):
            payload["purged_in"] = int(listed_in.split(":", 1)[1])
        j.carry_vectors(chunk)  # a chunk at a time: 5,000 memories' vectors held, not all of them
        payload["ops"] = chunk
        j.own_add(j.device, seq, keyring.seal(key, j.device, seq, payload), digest(payload))
        for op in chunk:
            op.pop("v", None)
        seqs.append(seq)
    return seqs


VOUCH_TRIES = 8  # files tried, newest first, for the vouches past a gap
MAX_VOUCHED = 10_000_000  # purged ids one changeset may vouch for (16 hex digits each): bounds a key-holder's mistake


def _chain(payload: dict[str, Any], what: str) -> tuple[str | None, dict[str, tuple[int, str]], list[str], int]:
    """A changeset's chain fields, parsed totally: the digest of its device's previous changeset,
    what that device had applied of the others, the purges it knew of where it lists them, and
    else the number of its changeset that does (0: none; older changesets carry no chain)."""
    prev, seen, purged = payload.get("prev"), payload.get("seen", {}), payload.get("purged", [])
    listed_in = payload.get("purged_in", 0)
    if not (prev is None or isinstance(prev, str) and len(prev) <= 64) or not isinstance(seen, dict) \
            or not isinstance(purged, list) or len(purged) > MAX_VOUCHED \
            or not isinstance(listed_in, int) or isinstance(listed_in, bool) or listed_in < 0:
        raise SyncError(f"{what} holds a malformed chain")
    acks: dict[str, tuple[int, str]] = {}
    for device, entry in seen.items():
        if not (isinstance(device, str) and _DEVICE.fullmatch(device) and isinstance(entry, list) and len(entry) == 2
                and isinstance(entry[0], int) and not isinstance(entry[0], bool) and entry[0] >= 0
                and isinstance(entry[1], str) and len(entry[1]) <= 64):
            raise SyncError(f"{what} holds a malformed chain")
        acks[device] = (entry[0], entry[1])
    if not all(isinstance(m, str) and _MEMORY_ID.fullmatch(m) for m in purged):
        raise SyncError(f"{what} holds a malformed chain")
    return prev, acks, purged, listed_in


class Incoming:
    """What one sync read from the others: changesets to apply, gaps, and the chain's news."""

    def __init__(self) -> None:
        self.changesets: list[tuple[str, int, list[dict[str, Any]]]] = []
        self.gaps: list[dict[str, Any]] = []
        self.purged: set[str] = set()
        self.heads: dict[str, tuple[int, str]] = {}
        self.known: dict[str, tuple[int, str, int]] = {}
        self.rolled_back: list[dict[str, Any]] = []

    def vouch(self, by: str, seq: int, acks: dict[str, tuple[int, str]], purged: list[str]) -> None:
        """Take what changeset `by`/`seq` vouches for: its own existence, how far its device
        applied the others, the purges it knew of."""
        self.purged.update(purged)
        n, who, read = self.known.get(by, (0, "", 0))
        self.known[by] = (max(n, seq), by if seq > n else who, max(read, seq))
        for device, (acked, _) in acks.items():
            n, who, read = self.known.get(device, (0, "", 0))
            if acked > n:
                self.known[device] = (acked, by, read)


def _incoming(j: SyncLog, t: Folder, key: bytes, listing: dict[str, list[int]], progress: Progress | None,
              retired: Collection[str] = ()) -> Incoming:
    """Other devices' changesets after their cursors, in order; a missing number stops that
    device there (reported as a gap) until the file arrives. A retired device will never send
    the missing file: what it left is applied past its gaps, and nobody waits on it.

    Each changeset read must name the digest of the one applied before it. What a device
    vouches for (purges, and how far it applied the others) is read from every changeset
    applied, and from the newest one past a gap: a purge whose own changeset was deleted is
    still learnt from any later changeset of any device."""
    cursors, heads, known = j.cursors(), j.heads(), j.known()
    got = Incoming()
    for device, seqs in sorted(listing.items()):
        if device == j.device:
            continue
        expected = cursors.get(device, (0, 0))[0] + 1
        head = heads.get(device)
        prev_digest = head[1] if head and head[0] == expected - 1 else None
        last_read = 0
        for seq in sorted(s for s in seqs if s >= expected):
            if seq != expected and device not in retired:
                break
            what = f"changeset {device}/{seq}"
            payload = keyring.open_sealed(key, t.read(device, seq), device, seq, what)
            ops = _check_ops(payload, what)
            prev, acks, purged, _ = _chain(payload, what)
            if prev is not None and prev_digest is not None and prev != prev_digest and seq == expected:
                raise SyncError(f"{what} does not follow the changeset applied before it: two writers of "
                                f"device {device} (a copied pmem home?)")
            prev_digest = digest(payload)
            got.changesets.append((device, seq, ops))
            got.heads[device] = (seq, prev_digest)
            got.vouch(device, seq, acks, purged)
            expected = last_read = seq + 1
        if seqs and seqs[-1] > expected and device not in retired:
            got.gaps.append({"device": device, "missing": expected, "present_up_to": seqs[-1]})
            read = max(last_read, known.get(device, (0, "", 0))[2])
            tries = sorted((s for s in seqs if s > max(expected, read)), reverse=True)[:VOUCH_TRIES]
            while tries:
                newest = tries.pop(0)
                what = f"changeset {device}/{newest}"
                try:  # past a gap nothing is applied: a damaged file here stops nobody
                    payload = keyring.open_sealed(key, t.read(device, newest), device, newest, what)
                    _check_ops(payload, what)
                    _, acks, purged, listed_in = _chain(payload, what)
                except SyncError:
                    continue
                got.vouch(device, newest, acks, purged)
                tries = [listed_in] if listed_in in seqs and expected <= listed_in < newest else []
    for device in sorted(set(known) | set(got.known)):
        seq, by, _ = max(known.get(device, (0, "", 0)), got.known.get(device, (0, "", 0)))
        present = listing.get(device, [])
        if device != j.device and device not in retired and seq > (present[-1] if present else 0):
            got.rolled_back.append({"device": device, "vouched_up_to": seq, "present_up_to":
                                    present[-1] if present else 0, "vouched_by": by})
    if got.changesets:
        _say(progress, f"sync: {len(got.changesets)} changesets from {len({d for d, _, _ in got.changesets})} "
             "devices")
    return got


def _open(store: "MemoryStore", passphrase: str | None, key: bytes | None) -> tuple[SyncLog, Folder, bytes]:
    j = _journal(store)
    t = _transport(store, j.get("kind") or "folder", j.get("remote") or "", j.device, j.get("key_file"))
    return j, t, key or _load_key(j, passphrase)


def _pull(j: SyncLog, t: Folder, key: bytes, progress: Progress | None) -> dict[str, dict[str, Any]]:
    """Pull, check the key, and read the retirement notes (each opened with the key: a note the
    remote forged is refused); returns the retired devices."""
    _say(progress, f"sync: pulling from {t.describe()}")
    t.pull()
    check = t.read_keycheck()
    if _keycheck_damaged(j, t, key, check):
        t.write_keycheck(keyring.seal_keycheck(key))  # deleted or damaged on a remote that syncs: ours again
        check = t.read_keycheck()
    if check is None:
        raise SyncError(f"{t.describe()} holds no pmem key check: the wrong folder, or not synced yet?")
    keyring.check_key(key, check)
    known = j.retired()
    for device, blob in t.retired().items():
        if device not in known:
            note = keyring.open_sealed(key, blob, RETIRE_PREFIX + device, 0, f"the retirement of {device}")
            if not isinstance(note, dict) or note.get("device") != device:
                raise SyncError(f"the retirement of {device} is damaged")
            with j.store.transaction():
                j.mark_retired(device, note)
            known[device] = note
    return known


def _keycheck_damaged(j: SyncLog, t: Folder, key: bytes, check: bytes | None) -> bool:
    """Whether the remote's key check was deleted or damaged, where this device's key is the one
    it joined with: a joined device puts it back (and its own changesets, `_repair`). A key check
    sealed with another key is not damage (a remote started afresh, or a wrong key here): refused
    as before. A folder with no `segments` in it may be a disk not mounted: refused, not filled."""
    if keyring.key_id(key) != j.get("key_id") or not (isinstance(t, Git) or _is_dir(t, SEGMENTS)):
        return False
    if check is None:
        return True
    try:
        keyring.open_sealed(key, check, "keycheck", 0, "the remote's key check")
    except WrongKey:
        return False
    except SyncError:
        return True
    return False


RETIRE_PREFIX = "retired:"  # the sealed header's device of a retirement note: never a changeset's


def _refuse_retired(j: SyncLog, retired: dict[str, dict[str, Any]]) -> None:
    note = retired.get(j.device)
    if note is not None:
        raise SyncError(f"this device ({j.device}) was retired by {note.get('by')} at {note.get('at')}: it no "
                        "longer syncs, and nothing was sent. Run `pmem sync rejoin` to sync again as a new device, "
                        "keeping this memory")


def run(store: "MemoryStore", *, progress: Progress | None = None, passphrase: str | None = None,
        key: bytes | None = None, lock_wait: float = 0.0, fill: bool = True) -> dict[str, Any]:
    """One `pmem sync`: pull, send this device's changes, apply the others', push; then (`fill`,
    outside the sync lock) embed what arrived without vectors, unless a fill already runs here
    (pmem/fill.py). Its report says how many memories still wait for a vector (`vectors_missing`),
    and `filling` when another fill has them."""
    report = _run(store, progress, passphrase, key, lock_wait)
    if fill:
        from .. import fill as background

        done = background.unless_busy(store, lambda n, total: _say(progress, f"sync: embedded {n}/{total}"))
        report.update(filled=done["filled"], vectors_missing=done["vectors_missing"])
        if done["busy"]:  # another fill (an import's, a join's, `pmem reindex --missing`) has the work
            report["filling"] = True
        if "error" in done:
            report["fill_error"] = done["error"]
    else:
        report.update(filled=0, vectors_missing=store.missing_vectors())
    return report


def _run(store: "MemoryStore", progress: Progress | None, passphrase: str | None, key: bytes | None,
         lock_wait: float) -> dict[str, Any]:
    j, t, key = _open(store, passphrase, key)
    kind = t.kind
    with _lock(store, lock_wait):
        retired = _pull(j, t, key, progress)
        _refuse_retired(j, retired)
        if j.upgrade():
            _adopt(j, t, key)
        listing = t.listing()
        _beyond(j, t, key, listing.get(j.device, []))
        _repair(j, t, key, listing=listing)
        clock = j.clock()
        with store.transaction():
            ops, purged = j.export(clock)
            written = _seal_out(j, key, ops)
            cleared = sum(j.forget_conflicts(mid) for mid in purged)
            j.add_jobs("redact", purged)
            j.add_jobs("steward", purged)
            if cleared:
                j.add_jobs("erase", purged)  # the conflicts quoted the text: rewrite the file again
        try:
            got = _incoming(j, t, key, listing, progress, set(retired))
        except SyncError:
            try:  # what this device wrote and repaired still goes: another's damaged file blocks no one's repair
                _publish(t, f"pmem sync: {j.device} {j.number('seq')}", progress)
            except SyncError:
                pass
            raise
        stats: dict[str, Any] = {"applied": 0, "dropped": 0, "conflicts": 0, "purge": []}
        fresh = set(got.purged) - j.tombstoned(got.purged)
        if got.changesets or fresh or got.known:
            stats = j.apply(got.changesets, clock, progress=lambda i, n: _say(progress, f"sync: applied {i}/{n}"),
                            purged=fresh, heads=got.heads, known=got.known)
        _crash("applied")
        if j.tombstone_count() > j.number("announced"):
            with store.transaction():  # a purge learnt here: vouched for at once, not at the next change
                written += _seal_out(j, key, [], announce=True)
        stewarded = _stewarded(j, retired)
        listing = t.listing() if stewarded else listing
        redacted = sum(_adopt_stewarded(j, t, key, d, listing) for d in stewarded)
        redacted += _erasure(j, t, key, retired)
        if written or redacted or stewarded:  # else the repair before the export saw all there is
            for device in [j.device, *stewarded]:
                _repair(j, t, key, device)
        _crash("written")
        retries = _publish(t, f"pmem sync: {j.device} {j.number('seq')}", progress)
        return {"device": j.device, "remote": t.describe(), "kind": kind, "sent": len(ops), "changesets_written":
                written, "received_changesets": len(got.changesets), "applied": stats["applied"],
                "dropped": stats["dropped"], "conflicts": stats["conflicts"],
                "purged": sorted(set(stats["purge"]) | set(purged)), "rewritten": redacted, "gaps": got.gaps,
                "rolled_back": got.rolled_back, "push_retries": retries,
                "recloned": bool(getattr(t, "recloned", False))}


def _publish(t: Folder, message: str, progress: Progress | None) -> int:
    """Over git, commit and push what this sync wrote; returns the pushes that lost a race."""
    if not isinstance(t, Git):
        return 0
    t.commit(message)
    _say(progress, f"sync: pushing to {t.describe()}")
    return t.push(message)


def status(store: "MemoryStore") -> dict[str, Any]:
    """Devices, cursors, retirements, conflicts and the last background sync, from what was last
    pulled (no network)."""
    from .. import autosync, fill

    filling = fill.summary(store.path)
    j = _journal(store)
    t = _transport(store, j.get("kind") or "folder", j.get("remote") or "", j.device)
    try:
        listing = t.listing()
    except (OSError, SyncError):  # unreadable, or refused (a link where pmem's folder should be)
        listing = {}
    cursors = j.cursors()
    retired = j.retired()
    devices = []
    for device in sorted(set(listing) | set(cursors) | set(retired) | {j.device}):
        seqs = listing.get(device, [])
        entry: dict[str, Any] = {"device": device, "this": device == j.device, "changesets": len(seqs),
                                 "last": seqs[-1] if seqs else 0, "retired": retired.get(device)}
        if device == j.device:
            entry["written"] = j.number("seq")
        else:
            entry["applied_up_to"] = cursors.get(device, (0, 0))[0]
            entry["waiting"] = len([s for s in seqs if s > entry["applied_up_to"]])
        devices.append(entry)
    return {"device": j.device, "kind": j.get("kind"), "remote": t.describe(), "key_id": j.get("key_id"),
            "pending_changes": j.pending_events(), "devices": devices, "conflicts": j.conflict_count(),
            "recent_conflicts": j.conflicts(20), "background": autosync.last(store.path),
            "erasure_pending": len(j.jobs("erase") + j.jobs("redact") + j.jobs("steward")) if j.number("chain") else 0,
            "vectors_missing": store.missing_vectors(), "filling": filling["running"],
            "fill": filling}


# -- compact, retire, rejoin ----------------------------------------------------------------

def _holding_purged(j: SyncLog, t: Folder, key: bytes) -> list[dict[str, Any]]:
    """Devices whose changesets on the remote still hold operations on purged memories (they have
    not synced since the purge, or are retired): a squash now would keep those files' text."""
    out = []
    for device, seqs in sorted(t.listing().items()):
        holding = 0
        for seq in seqs:
            what = f"changeset {device}/{seq}"
            ops = _check_ops(keyring.open_sealed(key, t.read(device, seq), device, seq, what), what)
            if j.tombstoned({op["m"] for op in ops if op["k"] not in ("purge", "redacted")}):
                holding += 1
        if holding:
            out.append({"device": device, "changesets": holding})
    return out


FOLDER_COMPACT = ("a folder holds only the current files, so there is no history to squash; a file syncer's "
                  "own old versions (Syncthing's .stversions, Dropbox's or iCloud's version history) are its "
                  "own to clear")


def compact(store: "MemoryStore", *, progress: Progress | None = None, passphrase: str | None = None,
            key: bytes | None = None) -> dict[str, Any]:
    """Squash a git remote's history into one new root commit holding the current tree, under a
    new epoch: git keeps every old version of every file, and so a purged memory's text
    (sealed) after its changeset was rewritten. Every other device sees the epoch change at its
    next pull and clones afresh (losing nothing: it keeps its own files, and applying is
    idempotent). Syncs first, so this device's own rewrites are in the tree."""
    j, t, key = _open(store, passphrase, key)
    report = run(store, progress=progress, key=key)
    holding = _holding_purged(j, t, key)
    result: dict[str, Any] = {"device": j.device, "remote": t.describe(), "kind": t.kind, "squashed": False,
                              "epoch": None, "size_before": None, "size_after": None, "holding_purged": holding,
                              "sync": report}
    if not isinstance(t, Git):
        return {**result, "note": FOLDER_COMPACT}
    with _lock(store):
        before = t.size()
        if t.commits() <= 1:
            return {**result, "size_before": before, "size_after": before,
                    "note": "the history is one commit already: nothing to squash"}
        retries = 0
        for retries in range(PUSH_TRIES):  # noqa: B007 - how many lost the race, reported
            _pull(j, t, key, progress)
            epoch = os.urandom(8).hex()
            _say(progress, f"sync: pushing one new root commit (epoch {epoch}) to {t.describe()}")
            if t.squash(epoch, f"pmem sync: history compacted by {j.device} (epoch {epoch})"):
                break
        else:
            raise SyncError(f"compacting {t.describe()} lost the race to other devices' pushes {PUSH_TRIES} "
                            "times; run `pmem sync compact` again")
        return {**result, "squashed": True, "epoch": epoch, "size_before": before, "size_after": t.size(),
                "push_retries": retries}


def _device_named(j: SyncLog, t: Folder, name: str, retired: dict[str, dict[str, Any]]) -> str:
    """The one device whose id starts with `name` (ids are 16 hex digits; a prefix will do)."""
    name = name.strip().lower()
    known = set(t.listing()) | set(j.cursors()) | set(retired) | {j.device}
    found = sorted(d for d in known if name and d.startswith(name))
    if not found:
        raise NotFound(f"no device {name!r} syncs here (`pmem sync status` lists them)")
    if len(found) > 1:
        raise UsageError(f"device {name!r} is ambiguous: {', '.join(found)}")
    return found[0]


def retire(store: "MemoryStore", device: str, *, progress: Progress | None = None,
           passphrase: str | None = None, key: bytes | None = None) -> dict[str, Any]:
    """Retire another device (a lost laptop): a sealed note on the remote, so nobody waits on its
    missing changesets any more, and the device itself is refused if it syncs again (it can
    `rejoin` as a new device). What it had sent stays applied. Its key is not revoked."""
    j, t, key = _open(store, passphrase, key)
    with _lock(store):
        retired = _pull(j, t, key, progress)
        _refuse_retired(j, retired)
        target = _device_named(j, t, device, retired)
        if target == j.device:
            raise UsageError(f"{target} is this device: retire it from another one (or stop running `pmem sync` "
                             "here)")
        base = {"device": j.device, "remote": t.describe(), "retired": target}
        if target in retired:
            return {**base, "already": True, "note": retired[target]}
        seqs = t.listing().get(target, [])
        note = {"device": target, "by": j.device, "at": store.clock(), "last": seqs[-1] if seqs else 0}
        t.write_retired(target, keyring.seal(key, RETIRE_PREFIX + target, 0, note))
        with store.transaction():
            j.mark_retired(target, note)
        # it will never rewrite its files again: this device does, from now on (a memory purged
        # before it was lost may still be in them)
        redacted = _adopt_stewarded(j, t, key, target, t.listing())
        _repair(j, t, key, target)
        retries = 0
        if isinstance(t, Git):
            message = f"pmem sync: {j.device} retired {target}"
            t.commit(message)
            retries = t.push(message)
        return {**base, "already": False, "note": note, "rewritten": redacted, "push_retries": retries}


def rejoin(store: "MemoryStore", *, progress: Progress | None = None, passphrase: str | None = None,
           key: bytes | None = None) -> dict[str, Any]:
    """Bring a retired device back as a new one, keeping its memory: what it had sealed before it
    learnt of its retirement goes out as its old self (the others apply a retired device's files
    as they come), then it takes a new id and its changes since go out under that."""
    j, t, key = _open(store, passphrase, key)
    with _lock(store):
        retired = _pull(j, t, key, progress)
        old = j.device
        if old not in retired:
            raise UsageError(f"this device ({old}) is not retired: `pmem sync` works as it is")
        if j.upgrade():
            _adopt(j, t, key)
        last_words = len([s for s, state, _ in j.own_index(old) if state == 0])
        _repair(j, t, key, unwritten_only=True)  # the rest are its steward's now, rewritten after purges
        if isinstance(t, Git):
            message = f"pmem sync: {old}'s last changesets, before it rejoins"
            t.commit(message)
            t.push(message)
        new = os.urandom(8).hex()
        with store.transaction():
            j.set_cursor(old, j.number("seq"), j.number("op"))  # its own old files, never applied again here
            j.put("device", new)
            j.put("seq", 0)
            j.put(f"previous_device:{old}", new)
            j.own_forget(old)  # its old files are its steward's to rewrite now
    report = run(store, progress=progress, key=key)
    return {**report, "previous_device": old, "last_changesets": last_words}

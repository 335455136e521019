"""Sync one memory across devices through engines people already run: git or a synced folder.

Never the database file: each device appends its changes as numbered, sealed changesets under
its own id (`segments/<device>/<seq>`, see transport.py), made from the event log and applied
through the store (pmem/store/replication.py); last writer wins per field by hybrid clock
(pmem/hlc.py), and the
remote sees only ciphertext (keys.py). `init` starts a remote, `join` adds a device, `run` is
one `pmem sync`: pull, apply, write, push.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from ..errors import NotFound, UsageError
from ..store.replication import SyncLog
from . import keys as keyring
from .keys import SyncError, WrongKey
from .transport import Folder, Git, looks_like_git

if TYPE_CHECKING:
    from ..store import MemoryStore

__all__ = ["SyncLog", "SyncError", "WrongKey", "init", "join", "run", "status", "export_key", "sync_dir"]

CHUNK = 5000  # operations per changeset file (a first join of 100,000 memories writes 20 files)
_OP_ID = re.compile(r"^[0-9a-f]{16}-[0-9]+$")
_MEMORY_ID = re.compile(r"^[0-9a-z]{1,32}$")
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


def _transport(store: "MemoryStore", kind: str, remote: str) -> Folder:
    if kind == "git":
        return Git(remote, sync_dir(store) / "git")
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
         progress: Progress | None = None) -> dict[str, Any]:
    """Add this device to a remote another device started: check the key against the remote's
    key check (a wrong key writes nothing), pull everything, then send what this database
    already held as this device's own operations."""
    kind = _kind(remote, kind)
    if SyncLog(store).exists():
        raise SyncError(f"this database already syncs with {SyncLog(store).get('remote')}")
    path = _key_file(store, key_file)
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
    report = run(store, progress=progress, passphrase=passphrase, key=key)
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
def _lock(store: "MemoryStore") -> Iterator[None]:
    folder = sync_dir(store)
    folder.mkdir(mode=0o700, exist_ok=True)
    fd = os.open(folder / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SyncError("another `pmem sync` is running on this database; try again when it ends") from None
        yield
    finally:
        os.close(fd)


def _seal_out(j: SyncLog, key: bytes, ops: list[dict[str, Any]]) -> list[int]:
    """Seal operations into this device's next changesets, kept in the outbox (same transaction)."""
    seqs = []
    for start in range(0, len(ops), CHUNK):
        seq = j.number("seq") + 1
        j.put("seq", seq)
        blob = keyring.seal(key, j.device, seq, {"device": j.device, "seq": seq, "ops": ops[start:start + CHUNK]})
        j.outbox_add(seq, blob)
        seqs.append(seq)
    return seqs


def _flush_outbox(j: SyncLog, t: Folder) -> int:
    """Write committed changesets to the remote; one already there must be ours, byte for byte."""
    rows = j.outbox()
    for seq, blob in rows:
        if t.exists(j.device, seq) and t.read(j.device, seq) != bytes(blob):
            raise SyncError(_copied(j.device))
        t.write(j.device, seq, bytes(blob))
        j.outbox_done(seq)
    return len(rows)


def _copied(device: str) -> str:
    return (f"another copy of this pmem home wrote changesets as this device ({device}): a home copied "
            "from another machine must not sync as it. Move the copy aside and `pmem sync join` afresh")


def _check_ops(payload: Any, what: str) -> list[dict[str, Any]]:
    ops = payload.get("ops") if isinstance(payload, dict) else None
    if not isinstance(ops, list):
        raise SyncError(f"{what} holds no operations list")
    for op in ops:
        if not (isinstance(op, dict) and isinstance(op.get("id"), str) and _OP_ID.match(op["id"])
                and isinstance(op.get("m"), str) and _MEMORY_ID.match(op["m"]) and isinstance(op.get("c"), str)
                and isinstance(op.get("n"), int) and isinstance(op.get("k"), str)
                and isinstance(op.get("f", {}), dict)):
            raise SyncError(f"{what} holds a malformed operation")
        op.setdefault("f", {})
    return ops


def _incoming(j: SyncLog, t: Folder, key: bytes, listing: dict[str, list[int]],
              progress: Progress | None) -> tuple[list[tuple[str, int, list[dict[str, Any]]]], list[dict[str, Any]]]:
    """Other devices' changesets after their cursors, in order; a missing number stops that
    device there (reported as a gap) until the file arrives."""
    cursors = j.cursors()
    out, gaps = [], []
    for device, seqs in sorted(listing.items()):
        if device == j.device:
            continue
        expected = cursors.get(device, (0, 0))[0] + 1
        present = set(seqs)
        while expected in present:
            what = f"changeset {device}/{expected}"
            out.append((device, expected, _check_ops(keyring.open_sealed(key, t.read(device, expected), device,
                                                                         expected, what), what)))
            expected += 1
        if seqs and seqs[-1] > expected:
            gaps.append({"device": device, "missing": expected, "present_up_to": seqs[-1]})
    if out:
        _say(progress, f"sync: {len(out)} changesets from {len({d for d, _, _ in out})} devices")
    return out, gaps


def _redact(j: SyncLog, t: Folder, key: bytes, ids: set[str], seqs: list[int]) -> int:
    """Rewrite this device's changesets that hold operations on purged memories: the operations
    keep their ids and clocks (numbering stays whole), their values go."""
    rewritten = 0
    for seq in seqs:
        what = f"changeset {j.device}/{seq}"
        payload = keyring.open_sealed(key, t.read(j.device, seq), j.device, seq, what)
        ops = payload["ops"]
        if not any(op["m"] in ids and op["k"] not in ("purge", "redacted") for op in ops):
            continue
        payload["ops"] = [op if op["m"] not in ids or op["k"] in ("purge", "redacted") else
                          {"id": op["id"], "n": op["n"], "m": op["m"], "k": "redacted", "c": op["c"]} for op in ops]
        t.write(j.device, seq, keyring.seal(key, j.device, seq, payload))
        rewritten += 1
    return rewritten


def run(store: "MemoryStore", *, progress: Progress | None = None, passphrase: str | None = None,
        key: bytes | None = None) -> dict[str, Any]:
    """One `pmem sync`: pull, send this device's changes, apply the others', push."""
    j = _journal(store)
    kind, remote = j.get("kind") or "folder", j.get("remote") or ""
    t = _transport(store, kind, remote)
    key = key or _load_key(j, passphrase)
    with _lock(store):
        _say(progress, f"sync: pulling from {t.describe()}")
        t.pull()
        check = t.read_keycheck()
        if check is None:
            raise SyncError(f"{t.describe()} holds no pmem key check: the wrong folder, or not synced yet?")
        keyring.check_key(key, check)
        _flush_outbox(j, t)
        listing = t.listing()
        mine = listing.get(j.device, [])
        if mine and mine[-1] > j.number("seq"):
            raise SyncError(_copied(j.device))
        clock = j.clock()
        with store.transaction():
            ops, purged = j.export(clock)
            written = _seal_out(j, key, ops)
            cleared = sum(j.forget_conflicts(mid) for mid in purged)
        _flush_outbox(j, t)
        changesets, gaps = _incoming(j, t, key, listing, progress)
        stats: dict[str, Any] = {"applied": 0, "dropped": 0, "conflicts": 0, "purge": []}
        if changesets:
            stats = j.apply(changesets, clock, progress=lambda i, n: _say(progress, f"sync: applied {i}/{n}"))
        erase = list(stats["purge"])
        if cleared:
            erase.extend(purged)  # the conflicts quoted the text: rewrite the file again
        for mid in erase:
            with store.transaction():
                j.forget_conflicts(mid)
            try:
                store.purge([mid])
            except NotFound:
                pass  # never held here
        redacted = 0
        if stats["purge"] or purged:
            redacted = _redact(j, t, key, set(stats["purge"]) | set(purged), t.listing().get(j.device, []))
        retries = 0
        if isinstance(t, Git):
            t.commit(f"pmem sync: {j.device} {j.number('seq')}")
            _say(progress, f"sync: pushing to {t.describe()}")
            retries = t.push()
        return {"device": j.device, "remote": t.describe(), "kind": kind, "sent": len(ops), "changesets_written":
                written, "received_changesets": len(changesets), "applied": stats["applied"],
                "dropped": stats["dropped"], "conflicts": stats["conflicts"],
                "purged": sorted(set(stats["purge"]) | set(purged)), "rewritten": redacted, "gaps": gaps,
                "push_retries": retries}


def status(store: "MemoryStore") -> dict[str, Any]:
    """Devices, cursors and conflicts, from what was last pulled (no network)."""
    j = _journal(store)
    t = _transport(store, j.get("kind") or "folder", j.get("remote") or "")
    try:
        listing = t.listing()
    except OSError:
        listing = {}
    cursors = j.cursors()
    devices = []
    for device in sorted(set(listing) | set(cursors) | {j.device}):
        seqs = listing.get(device, [])
        entry = {"device": device, "this": device == j.device, "changesets": len(seqs),
                 "last": seqs[-1] if seqs else 0}
        if device == j.device:
            entry["written"] = j.number("seq")
        else:
            entry["applied_up_to"] = cursors.get(device, (0, 0))[0]
            entry["waiting"] = len([s for s in seqs if s > entry["applied_up_to"]])
        devices.append(entry)
    return {"device": j.device, "kind": j.get("kind"), "remote": t.describe(), "key_id": j.get("key_id"),
            "pending_changes": j.pending_events(), "devices": devices, "conflicts": j.conflict_count(),
            "recent_conflicts": j.conflicts(20)}

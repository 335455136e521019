"""A device's own changesets on an untrusted remote: the digest a chain links by, the check of a
changeset's operations, the copies a device keeps of what it sealed and the repair that writes them
again where the remote lost or changed them, and erasure as a job retried until done (the design and
its figures: docs/decisions/0055-sync-chain.md). The engine (pmem/sync/engine.py) calls these at every sync."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import NotFound
from . import keys as keyring
from . import safefs
from .keys import SyncError
from .transport import SEGMENTS, Folder, seg_name

if TYPE_CHECKING:
    from ..store.replication import SyncLog

_OP_ID = re.compile(r"[0-9a-f]{16}-[0-9]+")  # fullmatch: `$` also matches before a final newline
_MEMORY_ID = re.compile(r"[0-9a-z]{1,32}")


def _crash(point: str) -> None:
    """Test-only: PMEM_SYNC_CRASH_AT names a point at which this process kills itself (kill -9),
    so a test can show that each point leaves a state the next sync finishes. Unset, it is nothing."""
    if os.environ.get("PMEM_SYNC_CRASH_AT") == point:
        os.kill(os.getpid(), signal.SIGKILL)


def digest(payload: dict[str, Any]) -> str:
    """A changeset's link in its device's chain: a hash of everything in it but the values of its
    operations, so that the rewrite after a purge (which keeps every operation's id, memory and
    clock, and drops values) keeps it. Older changesets (no chain fields) hash the same way."""
    skeleton = {k: v for k, v in payload.items() if k != "ops"}
    skeleton["ops"] = [[op.get("id"), op.get("m"), op.get("c")] for op in payload.get("ops", [])]
    return hashlib.sha256(json.dumps(skeleton, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
                          .encode()).hexdigest()[:32]


def _adopt(j: SyncLog, t: Folder, key: bytes) -> None:
    """A device that synced before the chain: its unwritten changesets (the old outbox) and the
    ones on the remote become its kept copies, so it can repair them from now on."""
    with j.store.transaction():
        for seq, blob in j.outbox():
            what = f"changeset {j.device}/{seq}"
            j.own_add(j.device, seq, blob, digest(keyring.open_sealed(key, blob, j.device, seq, what)))
            j.outbox_drop(seq)
        held = {s for s, _, _ in j.own_index(j.device)}
        for seq in t.listing().get(j.device, []):
            if seq not in held and seq <= j.number("seq"):
                blob = t.read(j.device, seq)
                what = f"changeset {j.device}/{seq}"
                j.own_add(j.device, seq, blob, digest(keyring.open_sealed(key, blob, j.device, seq, what)), 1)


def _stats(t: Folder, device: str) -> dict[int, str]:
    """Each changeset file of `device`: its size, times and inode, in one pass over its folder.
    Any write to a file (an attacker's, a syncer's, git's checkout) changes its ctime, so an
    unchanged stat means unchanged bytes, without reading them."""
    out: dict[int, str] = {}
    if not _is_dir(t, f"{SEGMENTS}/{device}"):
        return out  # not there (a link or a file there is refused by the reads and writes that follow)
    try:
        with os.scandir(t.root / SEGMENTS / device) as entries:
            for e in entries:
                if len(e.name) == 10 and e.name.isdigit():
                    out[int(e.name)] = _sig(e)
    except OSError:
        pass
    return out


def _sig(path: os.DirEntry | Path) -> str:
    try:
        st = path.stat(follow_symlinks=False)
    except OSError:
        return ""
    return f"{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}"


def _beyond(j: SyncLog, t: Folder, key: bytes, mine: list[int]) -> None:
    """Files in this device's folder numbered past the last changeset it sealed: one that opens
    with the key as this device's was written by a copy of this home (refused); anything else the
    remote made up, and it goes (else every other device waits on this device's "gap")."""
    last = j.number("seq")
    for seq in (s for s in mine if s > last):
        try:
            keyring.open_sealed(key, t.read(j.device, seq), j.device, seq, f"changeset {j.device}/{seq}")
        except SyncError:
            pass  # damaged, moved, another key: not a changeset of this device's
        else:
            raise SyncError(_not_mine(j.device, seq, t.read(j.device, seq), key, last))
        safefs.unlink(t.root, f"{SEGMENTS}/{j.device}/{seg_name(seq)}")


def _repair(j: SyncLog, t: Folder, key: bytes, device: str | None = None,
            listing: dict[str, list[int]] | None = None, unwritten_only: bool = False) -> int:
    """Make the remote hold this device's changesets as kept here: one not written yet, deleted
    from the remote, changed there (put back in its version from before a purge's rewrite,
    swapped, cut short) is written (again). An unchanged file is known by its stat, not read.
    A file never written from here that holds another changeset of this device's was written
    by a copy of this home."""
    device = device or j.device
    listed = set((t.listing() if listing is None else listing).get(device, []))
    stats = _stats(t, device)
    written = 0
    for seq, state, sig in j.own_index(device):
        if state == 1 and (unwritten_only or seq in listed and sig and stats.get(seq) == sig):
            continue
        kept = j.own_blob(device, seq)
        assert kept is not None
        blob, ours = kept
        if seq in listed:
            try:
                there = t.read(device, seq)
            except (SyncError, OSError):
                there = b""
            if there != blob and there and state == 0:
                try:
                    theirs = digest(keyring.open_sealed(key, there, device, seq, "a changeset"))
                except SyncError:
                    theirs = ours  # damaged, moved or not pmem's: ours replaces it
                if theirs != ours:
                    raise SyncError(_copied(device))
            if there != blob:
                t.write(device, seq, blob)
                written += 1
        else:
            t.write(device, seq, blob)
            written += 1
        with j.store.transaction():
            j.own_checked(device, seq, _sig(t.root / SEGMENTS / device / seg_name(seq)))
    return written


def _copied(device: str) -> str:
    return (f"another copy of this pmem home wrote changesets as this device ({device}): a home copied "
            "from another machine must not sync as it. Move the copy aside and `pmem sync join` afresh")


def _not_mine(device: str, seq: int, found: bytes, key: bytes | None, written: int | None = None) -> str:
    """Why the remote holds a changeset at this device's path that this device did not write: a
    key holder sealed it as this device (a copy of this home, or this home restored from an
    older backup), or someone without the key put it there (the remote is not to be trusted)."""
    cause = keyring.written_by(key, found, device, seq) if key is not None else "key"
    if cause != "key":
        return (f"the remote holds a changeset {device}/{seq} at this device's own path that does not open "
                f"with the key ({cause}): someone without the key wrote it there; nothing was sent")
    if written is not None:
        return (f"the remote holds changeset {device}/{seq} of this device, which has written only {written}: "
                "another copy of this pmem home synced as it, or this home was restored from an older backup. "
                "Move this home aside and `pmem sync join` afresh")
    return _copied(device)


def _check_ops(payload: Any, what: str) -> list[dict[str, Any]]:
    ops = payload.get("ops") if isinstance(payload, dict) else None
    if not isinstance(ops, list):
        raise SyncError(f"{what} holds no operations list")
    for op in ops:
        if not (isinstance(op, dict) and isinstance(op.get("id"), str) and _OP_ID.fullmatch(op["id"])
                and isinstance(op.get("m"), str) and _MEMORY_ID.fullmatch(op["m"]) and isinstance(op.get("c"), str)
                and isinstance(op.get("n"), int) and isinstance(op.get("k"), str)
                and isinstance(op.get("f", {}), dict)):
            raise SyncError(f"{what} holds a malformed operation")
        op.setdefault("f", {})
    return ops


def _redact_ops(ops: list[dict[str, Any]], gone: set[str]) -> list[dict[str, Any]]:
    """The operations on purged memories keep their ids and clocks (numbering stays whole), their values go."""
    return [op if op["m"] not in gone or op["k"] in ("purge", "redacted") else
            {"id": op["id"], "n": op["n"], "m": op["m"], "k": "redacted", "c": op["c"]} for op in ops]


def _redact_kept(j: SyncLog, key: bytes, ids: set[str] | None, device: str) -> int:
    """Rewrite the kept changesets of `device` (this one, or a retired one it stewards) that hold
    operations on purged memories (`ids`; None: every memory purged here), here, in one
    transaction (with secure_delete: the old sealed copies' pages are zeroed); `_repair` then
    writes them to the remote at this and every later sync until it holds them."""
    rewritten = 0
    with j.secure_delete():
        with j.store.transaction():
            for seq, _, _ in j.own_index(device):
                kept = j.own_blob(device, seq)
                assert kept is not None
                what = f"changeset {device}/{seq}"
                payload = keyring.open_sealed(key, kept[0], device, seq, what)
                ops = payload["ops"]
                live = {op["m"] for op in ops if op["k"] not in ("purge", "redacted")}
                gone = live & ids if ids is not None else j.tombstoned(live)
                if not gone:
                    continue
                payload["ops"] = _redact_ops(ops, gone)
                j.own_add(device, seq, keyring.seal(key, device, seq, payload), kept[1], 1)
                rewritten += 1
    return rewritten


def _adopt_stewarded(j: SyncLog, t: Folder, key: bytes, device: str, listing: dict[str, list[int]]) -> int:
    """Keep copies of a retired device's changesets this device stewards (those not kept yet:
    at its retirement, and its last words if it rejoins), rewritten at once for every purge known:
    from then on they are repaired like this device's own. A damaged file is left for later."""
    held = {s for s, _, _ in j.own_index(device)}
    adopted = 0
    for seq in listing.get(device, []):
        if seq in held:
            continue
        what = f"changeset {device}/{seq}"
        try:
            blob = t.read(device, seq)
            payload = keyring.open_sealed(key, blob, device, seq, what)
            _check_ops(payload, what)
        except SyncError:
            continue
        with j.store.transaction():
            j.own_add(device, seq, blob, digest(payload), 1)
        adopted += 1
    return _redact_kept(j, key, None, device) if adopted else 0


def _erasure(j: SyncLog, t: Folder, key: bytes, retired: dict[str, dict[str, Any]]) -> int:
    """Finish every erasure job: the kept changesets of this device and of the retired ones it
    stewards rewritten (here; the remote is repaired from them), the memory erased here. A job
    goes only when done, so a kill -9 or a failure at any point leaves it for the next sync."""
    store = j.store
    rewritten = 0
    ids = set(j.jobs("redact")) | set(j.jobs("steward"))
    if ids:
        for device in [j.device, *_stewarded(j, retired)]:
            rewritten += _redact_kept(j, key, ids, device)
        with store.transaction():
            j.job_done("redact", ids)
            j.job_done("steward", ids)
        _crash("redacted")
    for mid in j.jobs("erase"):
        with store.transaction():
            j.forget_conflicts(mid)
        try:
            store.purge([mid])
        except NotFound:
            pass  # never held here
        _crash("erased")
        with store.transaction():
            j.job_done("erase", [mid])
    return rewritten


def _stewarded(j: SyncLog, retired: dict[str, dict[str, Any]]) -> list[str]:
    """The retired devices whose files this device rewrites after a purge: those it retired."""
    return sorted(d for d, note in retired.items() if note.get("by") == j.device and d != j.device)


def _is_dir(t: Folder, rel: str) -> bool:
    """Whether the remote holds a real folder at `rel` (a link there is no folder of pmem's)."""
    try:
        return safefs.kind(t.root, rel) == "dir"
    except SyncError:
        return False

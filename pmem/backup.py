"""Database backups before risky work (dream): SQLite's online backup API, rotated, size-bounded.

A backup is one self-contained SQLite file (rollback journal, not WAL) in paths.backups_dir(),
readable by its owner only. Restoring is copying it back over the database while pmem is idle.

A backup is written inside a private `.partial-<pid>-<token>` folder, synced, then renamed into
place: a process killed while writing leaves no file that looks like a backup, only that folder
(0700, so its contents are private whatever SQLite's journal mode gives them), which the next
backup removes once its process is gone.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from . import paths, timeutil
from .errors import DatabaseError

if TYPE_CHECKING:
    from .service import MemoryStore

MAX_TOTAL_BYTES = 2 * 1024 ** 3  # all backups together; the newest is always kept
_NAME = re.compile(r"^pmem-\d{8}T\d{6}Z(?:-\d+)?(?:-[a-z0-9]+)?\.db$")
_PARTIAL = re.compile(r"^\.partial-(\d+)-[0-9a-f]+$")
_HEADER = b"SQLite format 3\x00"


def _complete(path: Path) -> bool:
    """A whole SQLite file: older pmem versions could leave an empty or truncated one."""
    try:
        with open(path, "rb") as f:
            head = f.read(100)
    except OSError:
        return False
    if len(head) < 100 or not head.startswith(_HEADER):
        return False
    page = int.from_bytes(head[16:18], "big")
    return path.stat().st_size >= (65536 if page == 1 else page)


def list_backups(directory: Path | None = None) -> list[Path]:
    """Backups pmem wrote, oldest first."""
    directory = directory or paths.backups_dir()
    if not directory.is_dir():
        return []
    found = [p for p in directory.iterdir() if p.is_file() and _NAME.match(p.name) and _complete(p)]
    return sorted(found, key=lambda p: (p.stat().st_mtime_ns, p.name))


def _target(directory: Path, label: str) -> Path:
    stamp = timeutil.now_iso().replace("-", "").replace(":", "")
    suffix = f"-{label}" if label else ""
    path = directory / f"pmem-{stamp}{suffix}.db"
    n = 1
    while path.exists():
        path = directory / f"pmem-{stamp}-{n}{suffix}.db"
        n += 1
    return path


def backup_database(store: "MemoryStore", *, label: str = "", keep: int | None = None,
                    directory: Path | None = None, max_total_bytes: int = MAX_TOTAL_BYTES) -> Path:
    """Copy the open database to a new backup file and rotate old ones; returns the new file."""
    label = re.sub(r"[^a-z0-9]+", "", label.lower())[:20]
    keep = int(store.config.backup_keep if keep is None else keep)
    directory = paths.ensure_private_dir(directory or paths.backups_dir())
    size = store.path.stat().st_size if store.path.exists() else 0
    wal = Path(str(store.path) + "-wal")
    size += wal.stat().st_size if wal.exists() else 0
    free = shutil.disk_usage(directory).free
    if free < size * 1.2 + 16 * 1024 ** 2:
        raise DatabaseError(f"not enough free disk space for a backup in {directory} "
                            f"({free // 1024 ** 2} MiB free, the database is {size // 1024 ** 2} MiB)")
    remove_partials(directory)
    partial = directory / f".partial-{os.getpid()}-{os.urandom(4).hex()}"
    partial.mkdir(mode=0o700)
    temp = partial / "backup.db"
    try:
        fd = os.open(temp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        os.close(fd)
        store.copy_to(temp)
        os.chmod(temp, 0o600)
        _fsync(temp)
        target = _target(directory, label)
        os.replace(temp, target)
        _fsync(directory)
    except BaseException as exc:
        shutil.rmtree(partial, ignore_errors=True)
        if isinstance(exc, Exception) and not isinstance(exc, DatabaseError):
            raise DatabaseError(f"backup in {directory} failed: {exc}") from None
        raise
    shutil.rmtree(partial, ignore_errors=True)
    rotate(directory, keep=keep, max_total_bytes=max_total_bytes, protect=target)
    return target


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_partials(directory: Path) -> list[Path]:
    """Delete what backups killed mid-write left behind (their process no longer runs)."""
    removed = []
    for p in directory.iterdir() if directory.is_dir() else ():
        m = _PARTIAL.match(p.name)
        if not m or not p.is_dir():
            continue
        pid = int(m.group(1))
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, 0)
            continue  # still writing
        except ProcessLookupError:
            pass
        except PermissionError:
            continue  # another user's process holds that pid
        shutil.rmtree(p, ignore_errors=True)
        removed.append(p)
    return removed


def rotate(directory: Path, *, keep: int, max_total_bytes: int = MAX_TOTAL_BYTES,
           protect: Path | None = None) -> list[Path]:
    """Delete the oldest backups beyond `keep` files or `max_total_bytes`; returns what went."""
    removed: list[Path] = []
    files = list_backups(directory)
    keep = max(1, keep)
    while files and (len(files) > keep or sum(p.stat().st_size for p in files) > max_total_bytes):
        oldest = files[0]
        if protect is not None and oldest == protect:
            break
        oldest.unlink(missing_ok=True)
        removed.append(oldest)
        files = files[1:]
    return removed


def backups_holding(ids: list[str], directory: Path | None = None) -> list[Path]:
    """Backups that still hold any of these memories (their row or an event about them)."""
    from .store.inspection import Inspection

    found = []
    for path in list_backups(directory):
        try:
            with Inspection(path, read_only=True) as backup:
                hit = backup.holds_any(ids)
        except DatabaseError as exc:
            raise DatabaseError(f"cannot read backup {path}: {exc}") from None
        if hit:
            found.append(path)
    return found


def purge_backups(ids: list[str], *, mode: str = "rewrite", directory: Path | None = None,
                  config=None) -> list[Path]:
    """Erase memories from existing backups too: `rewrite` purges them inside each backup that
    holds them (the rest of the backup stays restorable), `remove` deletes those backups.
    Returns the backups changed or removed."""
    if mode not in ("rewrite", "remove"):
        raise ValueError("mode is rewrite or remove")
    from .service import MemoryStore

    touched = backups_holding(ids, directory)
    for path in touched:
        if mode == "remove":
            path.unlink(missing_ok=True)
            continue
        with MemoryStore(path, config=config) as copy:
            copy.purge(copy.ids_in_history(ids))
            copy.use_rollback_journal()
        os.chmod(path, 0o600)
    return touched

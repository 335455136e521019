"""Database backups before risky work (dream): SQLite's online backup API, rotated, size-bounded.

A backup is one self-contained SQLite file (rollback journal, not WAL) in paths.backups_dir(),
readable by its owner only. Restoring is copying it back over the database while pmem is idle.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from . import db, paths, timeutil
from .errors import DatabaseError

if TYPE_CHECKING:
    from .store import MemoryStore

MAX_TOTAL_BYTES = 2 * 1024 ** 3  # all backups together; the newest is always kept
_NAME = re.compile(r"^pmem-\d{8}T\d{6}Z(?:-\d+)?(?:-[a-z0-9]+)?\.db$")


def list_backups(directory: Path | None = None) -> list[Path]:
    """Backups pmem wrote, oldest first."""
    directory = directory or paths.backups_dir()
    if not directory.is_dir():
        return []
    found = [p for p in directory.iterdir() if p.is_file() and _NAME.match(p.name)]
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
    target = _target(directory, label)
    fd = os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    os.close(fd)
    try:
        dest = db.driver().connect(str(target), isolation_level=None)
        try:
            store.conn.backup(dest)
            dest.execute("PRAGMA journal_mode = DELETE")
        finally:
            dest.close()
    except BaseException as exc:
        target.unlink(missing_ok=True)
        if isinstance(exc, Exception) and not isinstance(exc, DatabaseError):
            raise DatabaseError(f"backup to {target} failed: {exc}") from None
        raise
    os.chmod(target, 0o600)
    rotate(directory, keep=keep, max_total_bytes=max_total_bytes, protect=target)
    return target


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

"""Vectors after a sync: the rows of what other devices sent are stored first (searchable by
their words at once), with the vectors that travelled with them where both devices embed with
the same model; the rest are embedded here afterwards, a committed batch at a time
(VectorIndex.fill), so that an interrupted fill (Ctrl-C, kill -9, a laptop shut) loses nothing
and the next `pmem sync`, `pmem reindex --missing` or background fill goes on from there.

`pmem sync join` returns once the rows are in and starts this in the background (`start`), as
autosync starts a sync (pmem/autosync.py); every `pmem sync` fills after its own work, outside
the sync lock. One fill at a time per database (`fill.lock`): a second one finds it busy and
leaves it the work. Figures: docs/decisions/0057-join-useful-at-once.md.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..errors import PmemError

if TYPE_CHECKING:
    from ..service import MemoryStore


def _lock_file(db_path: str | os.PathLike) -> Path:
    return Path(str(db_path) + ".sync") / "fill.lock"


def fill(store: "MemoryStore", progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Embed what a sync left without vectors, unless another process is doing it. Never raises
    for a model that cannot be had: the sync it follows is done, and the next one tries again."""
    path = _lock_file(store.path)
    path.parent.mkdir(mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return {"filled": 0, "busy": True, "vectors_missing": store.missing_vectors()}

        def say(done: int, total: int) -> None:
            if progress:
                progress(f"sync: embedded {done}/{total}")

        out: dict[str, Any] = {"filled": 0, "busy": False}
        try:
            out["filled"] = store.fill_missing(progress=say, scan=False)
        except PmemError as exc:
            out["error"] = str(exc)
        out["vectors_missing"] = store.missing_vectors()
        return out
    finally:
        os.close(fd)


def running(db_path: str | os.PathLike) -> bool:
    """Whether a fill holds this database's fill lock now (pmem sync status)."""
    path = _lock_file(db_path)
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


# At a lower priority: the person who just joined may be searching meanwhile.
_CHILD = "import os, sys; os.nice(10); from pmem.sync.fill import main; sys.exit(main(sys.argv[1:]))"


def start(db_path: str | os.PathLike) -> bool:
    """Fill in a detached process (after `pmem sync join`); True when it started."""
    try:
        subprocess.Popen([sys.executable, "-c", _CHILD, str(Path(db_path).resolve())],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True, close_fds=True)
    except OSError:
        return False
    return True


def main(argv: list[str]) -> int:
    """The background fill: `python -m pmem.sync.fill DB`."""
    from ..service import MemoryStore

    try:
        with MemoryStore(argv[0]) as store:
            report = fill(store)
    except PmemError:
        return 1
    return 0 if "error" not in report else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

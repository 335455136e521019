"""Sync after each change (the setting `sync_auto = on`), its cheap half: what a command runs as it
ends. It imports nothing of pmem but the store's glance.py, a read-only look at the file (importing
the sync package cost a write command ~0.1 s on a busy machine: docs/decisions/0047-sync-compact-auto.md);
the background half is pmem/sync/auto.py.

After a command that changed memories, one `pmem sync` starts in the background, detached, and
waits DELAY seconds for more writes before it syncs (a run of commands is one sync). It prints
nothing anywhere: its outcome goes to `pmem.db.sync/auto.json`, which `pmem sync status` shows.

`kick`: a stat, one read of the database and, when a sync is due, one process started, never
waited on. A marker file says a background sync is waiting: a second write meanwhile starts
none, as the waiting one sends it too; the marker is removed just before the sync reads the
changes, so a write after that starts the next one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .store.glance import Glance

DELAY = 2.0  # seconds a background sync waits for more writes (debounce); PMEM_SYNC_AUTO_DELAY changes it
STALE = 120.0  # seconds after which a marker left by a killed background sync is ignored
BACKOFF = 60.0  # seconds after a failed background sync (offline) before a command starts another


def _folder(db_path: str | os.PathLike) -> Path:
    return Path(str(db_path) + ".sync")


def marker(db_path: str | os.PathLike) -> Path:
    return _folder(db_path) / "auto.pending"


def state_file(db_path: str | os.PathLike) -> Path:
    return _folder(db_path) / "auto.json"


def last(db_path: str | os.PathLike) -> dict[str, Any] | None:
    """The outcome of the last background sync (None when none ran)."""
    from .paths import read_state

    return read_state(state_file(db_path))


def _changes_to_send(db_path: str | os.PathLike) -> bool:
    """Whether this database holds changes not yet sent (read-only; False when it does not sync)."""
    with Glance(db_path, timeout=1.0) as glance:
        return glance.changes_to_send()


def kick(db_path: str | os.PathLike) -> bool:
    """Start a background `pmem sync` of this database when it syncs and holds changes to send,
    unless one is already waiting or the last one failed moments ago. True when one started.
    Never raises: the command it follows has done its work and must not fail for this."""
    try:
        return _kick(db_path)
    except Exception:  # noqa: BLE001 - a sync not started is caught up at the next one
        return False


def _kick(db_path: str | os.PathLike) -> bool:
    if not _folder(db_path).is_dir() or not _changes_to_send(db_path):
        return False
    outcome = last(db_path)
    if outcome and not outcome.get("ok") and time.time() - float(outcome.get("at_epoch") or 0) < BACKOFF:
        return False
    pending = marker(db_path)
    for _ in range(2):
        try:
            fd = os.open(pending, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            break
        except FileExistsError:
            try:
                if time.time() - pending.stat().st_mtime < STALE:
                    return False  # one is waiting: it sends this change too
                pending.unlink()
            except FileNotFoundError:
                pass
        except OSError:
            return False
    else:
        return False
    os.close(fd)
    try:
        subprocess.Popen([sys.executable, "-c", _CHILD, str(_delay()), str(Path(db_path).resolve())],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True, close_fds=True)
    except OSError:
        pending.unlink(missing_ok=True)
        return False
    return True


def _delay() -> float:
    try:
        return min(max(float(os.environ.get("PMEM_SYNC_AUTO_DELAY") or DELAY), 0.0), 600.0)
    except ValueError:
        return DELAY


# The background process waits before it imports pmem, and at a lower priority: on a busy machine
# its start-up does not compete with the command that just ended (docs/decisions/0047-sync-compact-auto.md).
_CHILD = ("import os, sys, time; time.sleep(float(sys.argv[1])); os.nice(10); "
          "from pmem.sync.auto import main; sys.exit(main(sys.argv[2:]))")

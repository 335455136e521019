"""Sync after each change (the setting `sync_auto = on`): after a command that changed memories,
one `pmem sync` starts in the background, detached, and waits DELAY seconds for more writes
before it syncs (a run of commands is one sync). It prints nothing anywhere: its outcome goes to
`pmem.db.sync/auto.json`, which `pmem sync status` shows.

`kick` is what the command runs at its end: a stat, one read of the database and, when a sync
is due, one process started, never waited on (its cost: benchmarks/README.md, "Sync compact,
retire, sync after each change"). A marker file says a background sync is waiting: a second write
meanwhile starts none, as the waiting one sends it too; the marker is removed just before the
sync reads the changes, so a write after that starts the next one.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

DELAY = 2.0  # seconds a background sync waits for more writes (debounce); PMEM_SYNC_AUTO_DELAY changes it
STALE = 120.0  # seconds after which a marker left by a killed background sync is ignored
BACKOFF = 60.0  # seconds after a failed background sync (offline) before a command starts another
LOCK_WAIT = 120.0  # seconds a background sync waits for a sync already running


def _folder(db_path: str | os.PathLike) -> Path:
    return Path(str(db_path) + ".sync")


def _marker(db_path: str | os.PathLike) -> Path:
    return _folder(db_path) / "auto.pending"


def _state(db_path: str | os.PathLike) -> Path:
    return _folder(db_path) / "auto.json"


def last(db_path: str | os.PathLike) -> dict[str, Any] | None:
    """The outcome of the last background sync (None when none ran)."""
    try:
        data = json.loads(_state(db_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _changes_to_send(db_path: str | os.PathLike) -> bool:
    """Whether this database holds changes not yet sent (read-only; False when it does not sync)."""
    try:
        conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=1.0)
    except sqlite3.Error:
        return False
    try:
        row = conn.execute(
            "SELECT EXISTS (SELECT 1 FROM events e JOIN operations o ON o.id = e.op_id WHERE e.seq > "
            "(SELECT coalesce((SELECT CAST(value AS INTEGER) FROM sync_state WHERE key = 'exported'), 0)) "
            "AND o.kind != 'sync')").fetchone()
        return bool(row and row[0])
    except sqlite3.Error:
        return False  # no sync tables: this database does not sync
    finally:
        conn.close()


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
    marker = _marker(db_path)
    for _ in range(2):
        try:
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            break
        except FileExistsError:
            try:
                if time.time() - marker.stat().st_mtime < STALE:
                    return False  # one is waiting: it sends this change too
                marker.unlink()
            except FileNotFoundError:
                pass
        except OSError:
            return False
    else:
        return False
    os.close(fd)
    try:
        subprocess.Popen([sys.executable, "-m", "pmem.sync.auto", str(Path(db_path).resolve())],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True, close_fds=True)
    except OSError:
        marker.unlink(missing_ok=True)
        return False
    return True


def _record(db_path: str | os.PathLike, outcome: dict[str, Any]) -> None:
    from ..paths import write_atomic

    try:
        write_atomic(_state(db_path), json.dumps(outcome, ensure_ascii=False).encode(), mode=0o600)
    except OSError:
        pass  # nowhere to say it; the next command's sync tries again


def main(argv: list[str]) -> int:
    """The background sync itself: wait for more writes, then one `pmem sync`, its outcome kept."""
    from ..errors import PmemError
    from ..store import MemoryStore
    from ..timeutil import now_iso
    from . import run

    db_path = argv[0]
    try:
        delay = min(max(float(os.environ.get("PMEM_SYNC_AUTO_DELAY") or DELAY), 0.0), 600.0)
    except ValueError:
        delay = DELAY
    time.sleep(delay)
    _marker(db_path).unlink(missing_ok=True)
    outcome: dict[str, Any] = {"ok": False}
    try:
        with MemoryStore(db_path) as store:
            report = run(store, lock_wait=LOCK_WAIT)
        outcome = {"ok": True, "sent": report["sent"], "applied": report["applied"],
                   "conflicts": report["conflicts"], "gaps": len(report["gaps"])}
    except PmemError as exc:
        outcome["error"] = str(exc)
    except Exception as exc:  # noqa: BLE001 - detached: nobody sees a traceback; status shows this
        outcome["error"] = f"{type(exc).__name__}: {exc}"
    outcome.update(at=now_iso(), at_epoch=time.time())
    _record(db_path, outcome)
    return 0 if outcome["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

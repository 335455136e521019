"""Sync after each change, its background half: the process pmem/autosync.py starts. It waits
(before importing pmem), then runs one `pmem sync` at a lower priority and keeps its outcome in
`pmem.db.sync/auto.json` for `pmem sync status`; it prints nothing anywhere.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from ..autosync import DELAY, kick, last, marker, state_file

__all__ = ["DELAY", "kick", "last", "main"]

LOCK_WAIT = 120.0  # seconds a background sync waits for a sync already running


def _record(db_path: str | os.PathLike, outcome: dict[str, Any]) -> None:
    from ..paths import write_atomic

    try:
        write_atomic(state_file(db_path), json.dumps(outcome, ensure_ascii=False).encode(), mode=0o600)
    except OSError:
        pass  # nowhere to say it; the next command's sync tries again


def main(argv: list[str]) -> int:
    """The background sync itself, once the wait is over: one `pmem sync`, its outcome kept."""
    from ..errors import PmemError
    from ..service import MemoryStore
    from ..timeutil import now_iso
    from . import run

    db_path = argv[0]
    marker(db_path).unlink(missing_ok=True)
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


if __name__ == "__main__":  # python -m pmem.sync.auto DB: the same, at once
    sys.exit(main(sys.argv[1:]))

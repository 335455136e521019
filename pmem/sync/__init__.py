"""Sync one memory across devices through engines people already run: git or a synced folder.

The package's parts: `engine.py` (init, join, run, status, compact, retire, rejoin: the steps of
one `pmem sync` and the chain that guards them, with the threat model), `repair.py` (a device's
own changesets: digest, checks, repair, erasure jobs), `keys.py` (the key and sealed files),
`transport.py` (git and folder remotes), `safefs.py` (reading a remote without following links),
`auto.py` (the background sync after a change); the vectors a sync leaves out are embedded by
the one fill (pmem/fill.py).
Callers use the names below.
"""

from __future__ import annotations

from ..store.replication import SyncLog
from .engine import CHUNK, compact, export_key, init, join, rejoin, retire, run, status, sync_dir
from .keys import SyncError, WrongKey
from .repair import digest

__all__ = ["SyncLog", "SyncError", "WrongKey", "init", "join", "run", "status", "compact", "retire", "rejoin",
           "export_key", "sync_dir", "digest", "CHUNK"]

"""Where pmem keeps things.

One variable moves everything: PMEM_HOME holds the database, config and models.
PMEM_DB overrides only the database file. Without either, the user's data and config folders
(XDG's on Linux, platformdirs' elsewhere: pmem.dirs, which finds them as strings for a hook).
"""

from __future__ import annotations

import os
from pathlib import Path

from . import dirs

APP = dirs.APP


def home() -> Path | None:
    h = dirs.home()
    return Path(h) if h is not None else None


def data_dir() -> Path:
    return Path(dirs.data_dir())


def config_dir() -> Path:
    return Path(dirs.config_dir())


def db_path(override: str | os.PathLike | None = None) -> Path:
    return Path(dirs.db_path(override))


def config_path() -> Path:
    return Path(dirs.config_path())


def models_dir() -> Path:
    return Path(dirs.models_dir())


def socket_path() -> Path:
    """The Unix socket `pmem serve` listens on (and commands look for)."""
    return Path(dirs.socket_path())


def serve_log_path() -> Path:
    """Where a server started in the background writes its output."""
    return data_dir() / "serve.log"


def hook_log_path() -> Path:
    """Where agent hooks log the errors they never show (`pmem doctor` reads it)."""
    return data_dir() / "hook-errors.log"


def backups_dir() -> Path:
    return data_dir() / "backups"


def ensure_private_dir(path: Path) -> Path:
    """Create a directory readable by its owner only (memories are personal data)."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def read_state(path: Path) -> dict | None:
    """A small JSON object pmem wrote beside the database (a background job's progress or outcome),
    or None when it is missing, unreadable or not an object."""
    import json

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_atomic(path: Path, data: bytes, *, mode: int | None = None, prefix: str | None = None) -> None:
    """Replace `path` with `data` at once: a reader or a file syncer never sees half a file (a
    temporary beside it, fsynced, then renamed). `mode` sets the new file's permissions."""
    import tempfile  # here: every command imports this module, few write a file this way

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=prefix or f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

"""Where pmem keeps things.

One variable moves everything: PMEM_HOME holds the database, config and models.
PMEM_DB overrides only the database file. Without either, platformdirs decides.
"""

from __future__ import annotations

import os
from pathlib import Path

APP = "pmem"


def home() -> Path | None:
    value = os.environ.get("PMEM_HOME")
    return Path(value).expanduser() if value else None


def data_dir() -> Path:
    h = home()
    if h is not None:
        return h
    import platformdirs

    return Path(platformdirs.user_data_dir(APP, appauthor=False))


def config_dir() -> Path:
    h = home()
    if h is not None:
        return h
    import platformdirs

    return Path(platformdirs.user_config_dir(APP, appauthor=False))


def db_path(override: str | os.PathLike | None = None) -> Path:
    if override:
        return Path(override).expanduser()
    value = os.environ.get("PMEM_DB")
    if value:
        return Path(value).expanduser()
    return data_dir() / "pmem.db"


def config_path() -> Path:
    return config_dir() / "config.toml"


def models_dir() -> Path:
    value = os.environ.get("PMEM_MODELS_DIR")
    if value:
        return Path(value).expanduser()
    return data_dir() / "models"


def socket_path() -> Path:
    """The Unix socket `pmem serve` listens on (and commands look for)."""
    return data_dir() / "pmem.sock"


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

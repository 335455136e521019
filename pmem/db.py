"""Open the one SQLite file: a driver that can load extensions, sqlite-vec, and the pragmas.

Many Pythons (this project's CI, macOS system Python) ship an sqlite3 module without
`enable_load_extension`; sqlean.py and pysqlite3 are drop-in drivers that have it.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path
from types import ModuleType

from .errors import DatabaseError, ExtensionError

_DRIVERS = ("sqlite3", "sqlean", "pysqlite3.dbapi2")
# Reads through a memory map instead of a read() per page: at 100,000 memories the keyword side of
# a search looks up thousands of rows and took 12-13 ms through SQLite's 2 MB page cache, 8-9 ms
# mapped; the semantic side 15 -> 13 ms (docs/decisions/0026-scale-sixth-round.md). SQLite caps it at its build's
# SQLITE_MAX_MMAP_SIZE (2 GiB by default); past that the file is read as before. SQLite writes
# through its usual path; a read error on a mapped page would arrive as a signal rather than an
# error code, the accepted cost of mapping a local file (https://sqlite.org/mmap.html).
MMAP_BYTES = 1 << 31
# Bytes a page of a new database: a 384-d float32 vector row (~1.55 KB) fills 5 of 8 KB where
# 4 KB held 2 (25% slack): a store is 11% smaller (docs/decisions/0032-date-filters-scale.md).
PAGE_SIZE = 8192
_driver: ModuleType | None = None


def driver() -> ModuleType:
    """The first SQLite driver whose connections can load extensions."""
    global _driver
    if _driver is not None:
        return _driver
    tried = []
    for name in _DRIVERS:
        try:
            module = importlib.import_module(name)
        except ImportError:
            tried.append(f"{name} (not installed)")
            continue
        if hasattr(module.Connection, "enable_load_extension"):
            _driver = module
            return module
        tried.append(f"{name} (no extension loading)")
    raise ExtensionError(
        "no SQLite driver here can load sqlite-vec; tried "
        + ", ".join(tried)
        + ". Install one with: pip install sqlean.py"
    )


def _vec_path() -> str:
    """Path of sqlite-vec's loadable library, found without importing the package."""
    spec = importlib.util.find_spec("sqlite_vec")
    if spec is None or not spec.origin:
        raise ExtensionError("sqlite-vec is not installed: pip install sqlite-vec")
    return os.path.join(os.path.dirname(spec.origin), "vec0")


def _create_private(path: Path) -> None:
    """Create the database file readable by its owner only; SQLite gives -wal/-shm the same mode."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    os.close(fd)


def is_locked_error(exc: BaseException) -> bool:
    return "locked" in str(exc) or "busy" in str(exc)


def connect(path: Path | str, *, create: bool = True, busy_timeout_ms: int = 5000):
    """Open `path` with sqlite-vec loaded, WAL on, and a busy timeout for concurrent writers."""
    sqlite = driver()
    path = Path(path)
    memory = str(path) == ":memory:"
    read_only = False
    if not memory:
        if not path.exists():
            if not create:
                raise DatabaseError(f"no database at {path}")
            _create_private(path)
        elif path.is_dir():
            raise DatabaseError(f"{path} is a directory, not a database file")
        else:
            read_only = not os.access(path, os.W_OK)  # a file we may only read is still listed and searched
    try:
        if read_only:
            import urllib.parse

            uri = "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro"
            if not os.access(path.parent, os.W_OK):  # no -shm can be made beside it: read it as a snapshot
                uri += "&immutable=1"
            conn = sqlite.connect(uri, uri=True, isolation_level=None, check_same_thread=False,
                                  timeout=busy_timeout_ms / 1000)
        else:
            conn = sqlite.connect(str(path), isolation_level=None, check_same_thread=False,
                                  timeout=busy_timeout_ms / 1000)
    except sqlite.Error as exc:
        raise DatabaseError(f"cannot open {path}: {exc}") from None
    try:
        conn.enable_load_extension(True)
        conn.load_extension(_vec_path())
        conn.enable_load_extension(False)
    except sqlite.Error as exc:
        conn.close()
        raise ExtensionError(f"cannot load sqlite-vec into {sqlite.__name__}: {exc}") from None
    try:
        register_functions(conn)
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        conn.execute("PRAGMA foreign_keys = ON")
        if not memory and not read_only:
            if path.stat().st_size == 0:  # new: the page size holds only until the first table
                conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            if mode != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        if not memory:
            conn.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite.DatabaseError as exc:
        conn.close()
        if is_locked_error(exc):
            raise DatabaseError(f"database {path} is locked by another process; try again") from None
        raise DatabaseError(f"{path} is not a usable pmem database: {exc}") from None
    return conn


def register_functions(conn) -> None:
    """SQL functions the schema's triggers call: pmem_stems(text), the keyword index's stems, and
    pmem_lang(text), the language a memory is counted under."""
    from .stemming import index_language, index_stems

    conn.create_function("pmem_stems", 1, index_stems, deterministic=True)
    conn.create_function("pmem_lang", 1, index_language, deterministic=True)


def errors() -> tuple[type[Exception], ...]:
    """The driver's exception classes, for callers that translate them."""
    return (driver().Error,)

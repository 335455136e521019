"""English memories' second vectors, filled after an import in the background.

An import stores its memories with the main vector only (run_import's `english_later`): the
second model (all-MiniLM-L6-v2, pmem/store/english.py) was half its time. `kick` then starts one
detached process that fills every English memory lacking its second vector (EnglishVectors.fill),
a committed batch at a time, at a lower priority. Until it is done those memories compete by
e5 alone, as in a store from before the second vector; search works throughout. Killed (kill -9,
a reboot), the next kick or `pmem reindex --missing` goes on from where it stopped: fill takes
only what lacks a vector, and a vector is keyed by its memory, so nothing is doubled. Figures:
docs/decisions/0060-import-speed-second-vector.md.

One fill at a time: a process holds an flock on `<db>.english-fill.lock` (released by the kernel
however the process ends); a second one waits for it and then fills what is left, so rows an
import commits while a fill ends are never skipped. Its progress and outcome go to
`<db>.english-fill.json`, which `pmem doctor` shows.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

THREADS = 1  # the fill's MiniLM threads: a core left to whatever the person runs next


def lock_file(db_path: str | os.PathLike) -> Path:
    return Path(str(db_path) + ".english-fill.lock")


def state_file(db_path: str | os.PathLike) -> Path:
    return Path(str(db_path) + ".english-fill.json")


def kick(db_path: str | os.PathLike) -> bool:
    """Start the background fill of this database, detached, never waited on. True when started.
    Never raises: the import it follows is committed, and `pmem reindex --missing` catches up."""
    try:
        subprocess.Popen([sys.executable, "-c", _CHILD, str(Path(db_path).resolve())],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True, close_fds=True)
    except OSError:
        return False
    return True


def last(db_path: str | os.PathLike) -> dict[str, Any] | None:
    """The running fill's progress or the last one's outcome (None when none ran)."""
    try:
        data = json.loads(state_file(db_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def running(db_path: str | os.PathLike) -> bool:
    """Whether a fill holds this database's lock now."""
    import fcntl

    try:
        fd = os.open(lock_file(db_path), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing drops a lock taken here
    return False


@contextlib.contextmanager
def one_at_a_time(db_path: str | os.PathLike) -> Iterator[None]:
    """Hold this database's fill lock for the block, waiting for a fill that holds it (`pmem
    reindex --missing` then fills only what that one left)."""
    import fcntl

    try:
        fd = os.open(lock_file(db_path), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError:  # a folder it cannot write: no background fill could start there either
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # the kernel drops it however the process ends
        yield
    finally:
        os.close(fd)


def _record(db_path: str | os.PathLike, state: dict[str, Any]) -> None:
    from .paths import write_atomic

    try:
        write_atomic(state_file(db_path), json.dumps(state).encode(), mode=0o600)
    except OSError:
        pass  # nowhere to say it; doctor still counts what is missing


def main(argv: list[str]) -> int:
    """The fill itself: wait for a fill already running, then fill what is still missing."""
    db_path = argv[0]
    with one_at_a_time(db_path):
        return _fill(db_path)


def _fill(db_path: str) -> int:
    from .config import load
    from .errors import PmemError
    from .service import MemoryStore
    from .timeutil import now_iso

    started, cpu = time.time(), time.process_time()
    state: dict[str, Any] = {"ok": False, "pid": os.getpid(), "running": True, "done": 0}
    _record(db_path, state)

    def progress(done: int, total: int) -> None:
        state.update(done=done, total=total)
        _record(db_path, state)

    try:
        # MiniLM in this process (a `pmem serve` is for short requests, and none is started for this),
        # on one thread: at nice 10 a second spinning thread burned 107 s of CPU for a 6 s fill on a
        # busy machine (docs/decisions/0060-import-speed-second-vector.md); nobody waits for it
        with MemoryStore(db_path, config=load().with_values(server="never", threads=THREADS)) as store:
            state["done"] = store.fill_missing(progress=progress)
        state["ok"] = True
    except PmemError as exc:
        state["error"] = str(exc)
    except Exception as exc:  # noqa: BLE001 - detached: nobody sees a traceback; doctor shows this
        state["error"] = f"{type(exc).__name__}: {exc}"
    state.update(running=False, at=now_iso(), at_epoch=time.time(), wall_s=round(time.time() - started, 3),
                 cpu_s=round(time.process_time() - cpu, 3))
    _record(db_path, state)
    return 0 if state["ok"] else 1


# Lower priority than the commands a person runs next; the fill is no one's wait.
_CHILD = "import os, sys; os.nice(10); from pmem.englishfill import main; sys.exit(main(sys.argv[1:]))"

if __name__ == "__main__":  # python -m pmem.englishfill DB: the same, in the foreground
    sys.exit(main(sys.argv[1:]))

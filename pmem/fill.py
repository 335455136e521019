"""The one fill: vectors embedded after the rows were stored without them, whoever left them out.

Two writers store rows first and leave vectors for later. An import stores its memories with the
main vector only (run_import's `english_later`: the second model, all-MiniLM-L6-v2 in
pmem/store/english.py, was half its time); a sync or a join stores what other devices sent with
the vectors that travelled, the rest without (docs/decisions/0057-join-useful-at-once.md). Both
are filled by the same service method (MemoryStore.fill_missing: a committed batch at a time,
only what lacks a vector, keyed by its memory), so an interrupted fill (Ctrl-C, kill -9, a
reboot) loses nothing, the next one goes on from there, and nothing is doubled. Until then
search finds those memories by their words, and English ones by e5 alone.

One fill per database at a time, whoever started it: an flock on `<db>.fill.lock` (released by
the kernel however the process ends), taken by
- `kick`: the detached fill `pmem import` and `pmem sync join` start, at nice 10, MiniLM (and
  e5) on one thread, in its own process (`server = never`). It waits for a fill that holds the
  lock and then fills what is left, so rows committed while a fill ends are never skipped;
- `unless_busy`: every `pmem sync`, after its own work; busy, it reports so and goes on (vectors
  made in int8 it leaves to a detached fill it starts: pmem.store.refine);
- a command that stored int8 vectors and started no fill (`pmem extract`), when it ends
  (cli.common, `by=command`);
- `pmem reindex --missing` (`one_at_a_time`), which waits as the detached one does.
The fill's progress and outcome go to `<db>.fill.json` (`last`, `summary`), which `pmem doctor`,
`pmem sync status` and `pmem stats` read. Figures: docs/decisions/0060-import-speed-second-vector.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

if TYPE_CHECKING:
    from .service import MemoryStore

THREADS = 1  # the detached fill's model threads: a core left to whatever the person runs next
BY = ("import", "join", "sync", "reindex", "command", "hand")  # who started a fill, as its state file says


def lock_file(db_path: str | os.PathLike) -> Path:
    return Path(str(db_path) + ".fill.lock")


def state_file(db_path: str | os.PathLike) -> Path:
    return Path(str(db_path) + ".fill.json")


def kick(db_path: str | os.PathLike, *, scan: bool = True, by: str = "import") -> bool:
    """Start the fill of this database in a detached process, never waited on. True when started.
    `scan` False: English memories' second vectors only where a sync left some out (the scan reads
    every memory's language; a join needs it only then). Never raises: what it follows is
    committed, and the next `pmem sync` or `pmem reindex --missing` catches up."""
    from .store import refine

    refine.MARKED.discard(str(db_path))  # this fill makes them float32 (cli.common's started none then)
    argv = [str(Path(db_path).resolve()), f"--by={by}"] + ([] if scan else ["--no-scan"])
    try:
        subprocess.Popen([sys.executable, "-c", _CHILD, *argv],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True, close_fds=True)
    except OSError:
        return False
    return True


def last(db_path: str | os.PathLike) -> dict[str, Any] | None:
    """The running fill's progress or the last one's outcome (None when none ran)."""
    from .paths import read_state

    return read_state(state_file(db_path))


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


def summary(db_path: str | os.PathLike) -> dict[str, Any]:
    """What `pmem stats` and `pmem sync status` show of the fill: whether one runs now, how far
    it is (`done` of `total` in its current step), who started it, and the last one's error."""
    state = last(db_path) or {}
    now = running(db_path)
    out: dict[str, Any] = {"running": now, "by": state.get("by") if state.get("by") in BY else None}
    if now and state.get("running"):
        out.update(done=_count(state.get("done")), total=_count(state.get("total")))
    elif not now and state.get("error"):
        out["error"] = str(state["error"])[:500]
    if not now and state.get("at"):
        out["at"] = str(state["at"])[:40]
    return out


def describe(info: dict[str, Any]) -> str:
    """One line of `summary` for people ("" when nothing is worth saying)."""
    if info.get("running"):
        return f"running ({how_far(info)})"
    if info.get("error"):
        return f"stopped: {info['error']}"
    return ""


def how_far(info: dict[str, Any]) -> str:
    """A running fill's progress from `summary`: "320 of 680 done", or "starting"."""
    done, total = info.get("done"), info.get("total")
    return f"{done:,} of {total:,} done" if isinstance(done, int) and isinstance(total, int) else "starting"


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


@contextlib.contextmanager
def one_at_a_time(db_path: str | os.PathLike, wait: bool = True) -> Iterator[bool]:
    """Hold this database's fill lock for the block; yields whether it is held. `wait`: until a
    fill that holds it ends (then fill only what that one left); else yields False at once."""
    import fcntl

    try:
        fd = os.open(lock_file(db_path), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError:  # a folder it cannot write: no detached fill could start there either
        yield True
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)  # dropped however it ends
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


Progress = Callable[[int, int], None]


def embed_missing(store: "MemoryStore", progress: Progress | None = None, *, scan: bool = True,
                  by: str = "reindex", eager: bool = True, exact: bool = True) -> int:
    """The fill, with this database's lock held by the caller: MemoryStore.fill_missing, its
    progress and outcome recorded in the state file (`eager` False: only once there is something
    to embed, so a sync with nothing missing writes nothing; `exact` False: int8 vectors stay for
    a later fill). Raises what fill_missing raises, after recording it. Returns how many were
    embedded."""
    run = _Run(store.path, by, eager)

    def step(done: int, total: int) -> None:
        run.step(done, total)
        if progress:
            progress(done, total)

    try:
        n = store.fill_missing(progress=step, scan=scan, exact=exact)
    except BaseException as exc:
        run.end(0, "interrupted" if isinstance(exc, KeyboardInterrupt) else _reason(exc))
        raise
    run.end(n, None)
    return n


def unless_busy(store: "MemoryStore", progress: Progress | None = None) -> dict[str, Any]:
    """The fill after a sync: embed what it left without vectors, unless another process is
    filling (then it leaves that one the work and says `busy`); vectors made in int8 are made
    again in float32 by a detached fill started then (`kick`). Never raises for a model that
    cannot be had: the sync it follows is done, and the next one tries again."""
    from .errors import PmemError

    with one_at_a_time(store.path, wait=False) as held:
        if not held:
            return {"filled": 0, "busy": True, "vectors_missing": store.missing_vectors()}
        out: dict[str, Any] = {"filled": 0, "busy": False}
        try:
            out["filled"] = embed_missing(store, progress, scan=False, by="sync", eager=False, exact=False)
        except PmemError as exc:
            out["error"] = str(exc)
        out["vectors_missing"] = store.missing_vectors()
    if "error" not in out and store.config.embed_bulk != "int8-only" and store.int8_vectors():
        # the float32 pass is no one's wait: in the background
        kick(store.path, scan=False, by="sync")
    return out


def _reason(exc: BaseException) -> str:
    from .errors import PmemError

    return str(exc) if isinstance(exc, PmemError) else f"{type(exc).__name__}: {exc}"


class _Run:
    """One fill's record in the state file: who, how far, how it ended, its wall and CPU."""

    def __init__(self, db_path: str | os.PathLike, by: str, eager: bool):
        self.db_path, self.written = db_path, False
        self.started, self.cpu = time.time(), time.process_time()
        self.state: dict[str, Any] = {"ok": False, "pid": os.getpid(), "running": True, "done": 0, "by": by}
        if eager:
            self._write()

    def step(self, done: int, total: int) -> None:
        self.state.update(done=done, total=total)
        self._write()

    def end(self, n: int, error: str | None) -> None:
        if not self.written and error is None:
            return  # nothing was missing: the last fill's record stays
        from .timeutil import now_iso

        self.state.update(ok=error is None, running=False, at=now_iso(), at_epoch=time.time(),
                          wall_s=round(time.time() - self.started, 3),
                          cpu_s=round(time.process_time() - self.cpu, 3))
        if error is None:
            self.state["done"] = n
        else:
            self.state["error"] = error
        self._write()

    def _write(self) -> None:
        from .paths import write_atomic

        self.written = True
        try:
            write_atomic(state_file(self.db_path), json.dumps(self.state).encode(), mode=0o600)
        except OSError:
            pass  # nowhere to say it; doctor still counts what is missing


def main(argv: list[str]) -> int:
    """The detached fill: wait for a fill already running, then fill what is still missing.
    `python -m pmem.fill DB [--by=WHO] [--no-scan]`: the same, in the foreground."""
    if not argv or argv[0].startswith("-"):
        print("usage: python -m pmem.fill DB [--by=import|join|sync|reindex|command|hand] [--no-scan]", file=sys.stderr)
        return 2
    db_path, flags = argv[0], argv[1:]
    by = next((f.split("=", 1)[1] for f in flags if f.startswith("--by=")), "hand")
    with one_at_a_time(db_path):
        return _detached(db_path, scan="--no-scan" not in flags, by=by if by in BY else "hand")


def _detached(db_path: str, scan: bool, by: str) -> int:
    from .config import load
    from .service import MemoryStore

    opened = False
    try:
        # the models in this process (a `pmem serve` is for short requests, and none is started for
        # this), on one thread: at nice 10 a second spinning thread burned 107 s of CPU for a 6 s fill
        # on a busy machine (docs/decisions/0060-import-speed-second-vector.md); nobody waits for it
        with MemoryStore(db_path, config=load().with_values(server="never", threads=THREADS)) as store:
            opened = True
            embed_missing(store, scan=scan, by=by)
    except Exception as exc:  # noqa: BLE001 - detached: nobody sees a traceback; doctor shows this
        if not opened:  # embed_missing recorded its own
            _Run(db_path, by, eager=False).end(0, _reason(exc))
        return 1
    return 0


# Lower priority than the commands a person runs next; the fill is no one's wait.
_CHILD = "import os, sys; os.nice(10); from pmem.fill import main; sys.exit(main(sys.argv[1:]))"

if __name__ == "__main__":  # python -m pmem.fill DB: the same, in the foreground
    sys.exit(main(sys.argv[1:]))

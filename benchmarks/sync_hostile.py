"""A corpus of hostile sync remotes and sync faults: does a remote written by someone without the
key (or git's own broken states) ever make pmem follow a link, write or read outside the home and
the remote, die in a traceback, or lose a memory?

    PYTHONPATH=. python benchmarks/sync_hostile.py              # every case, a line each, a summary
    PYTHONPATH=. python benchmarks/sync_hostile.py -k link      # cases whose name holds "link"
    PYTHONPATH=. python benchmarks/sync_hostile.py --json       # the summary as JSON on stdout
    PYTHONPATH=. python benchmarks/sync_hostile.py --verbose    # every miss with its traceback

It loads every `benchmarks/sync_cases_*.py`; each holds `CASES: list[tuple[str, Callable[[Path],
None]]]`. A case gets a fresh temporary folder, sets up its devices (`Home`, in process, real
stores with the test embedder) and remote (`bare_git` or a folder) itself, plays the attacker or
the fault, and raises AssertionError when pmem did the wrong thing. The runner reports each case
as pass, fail (an AssertionError) or traceback (any other exception escaping, a SyncError
included: a case expects a refusal by `refused(...)`), and then checks, for every case:

- outside: `<tmp>/outside` holds a user's files (`thesis.txt`, `dir/notes.txt`) that cases point
  links at. Their bytes and the folder's listing must be unchanged, and (on Linux) inotify must
  have seen no open, read or write of anything in it during the case: a link followed for reading
  shows there even when nothing changed.
- lost: every memory a `Home` added is still in that home's database at the end.

Each case has 120 s (SIGALRM): a read that blocks (a FIFO planted for a changeset) is a traceback.
Exit status 1 when any case missed.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import os
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("PMEM_EMBED_MODEL", "fake-64")
os.environ["PMEM_SERVER"] = "never"
os.environ["PMEM_SYNC_AUTO"] = "off"

from pmem import MemoryStore, sync  # noqa: E402
from pmem.config import load  # noqa: E402
from pmem.errors import PmemError  # noqa: E402
from pmem.sync import keys  # noqa: E402

CASE_SECONDS = 120
HOMES: list["Home"] = []  # the homes the running case made (checked for lost memories, then closed)


# -- what cases use --------------------------------------------------------------------------

class Home:
    """One device: a real store at <tmp>/<name>/pmem.db; remembers what was added to it."""

    def __init__(self, tmp: Path, name: str):
        self.dir = tmp / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.store = MemoryStore(self.dir / "pmem.db", config=load())
        self.added: list[str] = []
        HOMES.append(self)

    def add(self, text: str) -> str:
        mid = self.store.add(text)[0].id
        self.added.append(text)
        return mid

    def texts(self) -> set[str]:
        return {m.text for m in self.store.iter_all()}

    def sync(self) -> dict[str, Any]:
        return sync.run(self.store)

    @property
    def device(self) -> str:
        return sync.SyncLog(self.store).device

    @property
    def seq(self) -> int:
        return sync.SyncLog(self.store).number("seq")

    @property
    def clone(self) -> Path:
        return sync.sync_dir(self.store) / "git"


def bare_git(tmp: Path) -> Path:
    path = tmp / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)
    return path


def devices(tmp: Path, kind: str = "git", n: int = 2) -> tuple[Path, list[Home], Path]:
    """n devices syncing through a new remote ("git": a bare repository; "folder"), each holding a
    memory that every other has; returns (remote, homes, key file)."""
    remote = bare_git(tmp) if kind == "git" else tmp / "Sync"
    key = tmp / "sync.key"
    homes = [Home(tmp, chr(ord("a") + i)) for i in range(n)]
    for i, h in enumerate(homes):
        h.add(f"memory {i} from {h.dir.name}")
        (sync.init if i == 0 else sync.join)(h.store, str(remote), key_file=str(key))
    for h in homes:
        h.sync()
    return remote, homes, key


def git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-c", "user.name=mallory", "-c", "user.email=m@example.invalid", *args],
                          cwd=cwd, check=check, capture_output=True, text=True)


class Attacker:
    """Someone with write access to a git remote and no key: a clone, changed, committed, pushed."""

    def __init__(self, remote: Path, tmp: Path):
        self.work = tmp / "mallory"
        shutil.rmtree(self.work, ignore_errors=True)
        subprocess.run(["git", "clone", "-q", "-b", "main", str(remote), str(self.work)], check=True,
                       capture_output=True)

    def push(self, message: str = "mallory", *paths: str) -> None:
        git(self.work, "add", "-A", "--", *(paths or (".",)))
        git(self.work, "commit", "-q", "--allow-empty", "-m", message)
        git(self.work, "push", "-q", "origin", "HEAD:main")


def outside(tmp: Path) -> Path:
    """The user's own folder outside the home and the remote (the runner fills and watches it)."""
    return tmp / "outside"


def refused(fn: Callable[[], Any], *words: str) -> str:
    """Call fn; it must refuse with pmem's one-line error (a PmemError) holding each of `words`."""
    try:
        fn()
    except PmemError as exc:
        text = str(exc)
        assert "\n" not in text.strip(), f"a refusal of several lines: {text!r}"
        for w in words:
            assert w in text, f"refused, but not for {w!r}: {text}"
        return text
    raise AssertionError(f"not refused (expected: {', '.join(words) or 'a refusal'})")


def key_id(tmp: Path) -> str:
    return keys.key_id(keys.read_key_file(tmp / "sync.key"))


def forged(device: str, seq: int, kid: str, nonce: Any = "00" * 12, body: bytes = b"x" * 48,
           **extra: Any) -> bytes:
    """A sealed file's shape as anyone can make it: MAGIC, a header with the public key id, junk."""
    header = {"device": device, "seq": seq, "key": kid, "nonce": nonce, **extra}
    return keys.MAGIC + json.dumps(header).encode() + b"\n" + body


# -- the checks around each case ---------------------------------------------------------------

CANARIES = {"thesis.txt": b"three years of work\n", "dir/notes.txt": b"the user's notes\n"}


def plant(out: Path) -> None:
    for rel, data in CANARIES.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(data)


def snapshot(out: Path) -> dict[str, bytes | str]:
    seen: dict[str, bytes | str] = {}
    for p in sorted(out.rglob("*")):
        rel = str(p.relative_to(out))
        seen[rel] = "link" if p.is_symlink() else "dir" if p.is_dir() else p.read_bytes() if p.is_file() else "?"
    return seen


class Watch:
    """inotify on the outside folders: any open, read, write, create or delete in them."""

    MASK = 0x1 | 0x2 | 0x4 | 0x8 | 0x20 | 0x40 | 0x80 | 0x100 | 0x200  # access modify attrib close_write open
    #                                                                      moved_from moved_to create delete

    def __init__(self, folders: list[Path]):
        self.fd = -1
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            self.fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            for f in folders:
                libc.inotify_add_watch(self.fd, str(f).encode(), self.MASK)
        except (OSError, AttributeError):
            self.fd = -1

    def events(self) -> list[str]:
        if self.fd < 0:
            return []
        out = []
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            i = 0
            while i + 16 <= len(data):
                _, mask, _, n = struct.unpack_from("iIII", data, i)
                name = data[i + 16:i + 16 + n].rstrip(b"\0").decode(errors="replace")
                out.append(f"{name or '.'}:{mask:#x}")
                i += 16 + n
        return out

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)


def _inotify() -> bool:
    w = Watch([])
    w.close()
    return w.fd >= 0


def _alarm(signum: int, frame: Any) -> None:
    raise TimeoutError(f"the case ran past {CASE_SECONDS} s (a read that blocks?)")


def run_case(name: str, fn: Callable[[Path], None]) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="pmem-hostile-"))
    out = outside(tmp)
    plant(out)
    before = snapshot(out)
    os.environ["PMEM_HOME"] = str(tmp / "pmem-home")
    watch = Watch([out, out / "dir"])
    HOMES.clear()
    result: dict[str, Any] = {"case": name}
    start = time.monotonic()
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(CASE_SECONDS)
    try:
        fn(tmp)
        result["result"] = "pass"
    except AssertionError as exc:
        result["result"] = "fail"
        result["why"] = str(exc).splitlines()[0] if str(exc) else "assertion failed"
        result["traceback"] = traceback.format_exc()
    except BaseException as exc:  # noqa: BLE001 - a traceback is what is measured
        if isinstance(exc, KeyboardInterrupt):
            raise
        result["result"] = "traceback"
        result["why"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        result["traceback"] = traceback.format_exc()
    finally:
        signal.alarm(0)
    result["seconds"] = round(time.monotonic() - start, 2)
    touched = watch.events()
    watch.close()
    after = snapshot(out)
    result["outside_touched"] = touched + [f"changed: {k}" for k in sorted(set(before) | set(after))
                                           if before.get(k) != after.get(k)]
    lost = []
    for h in HOMES:
        try:
            have = h.texts()
            lost += [f"{h.dir.name}: {t}" for t in h.added if t not in have]
        finally:
            h.store.close()
    result["lost"] = lost
    if result["result"] == "pass" and (result["outside_touched"] or lost):
        result["result"] = "fail"
        result["why"] = "outside touched: " + ", ".join(result["outside_touched"][:4]) if result[
            "outside_touched"] else "memories lost: " + ", ".join(lost[:4])
    shutil.rmtree(tmp, ignore_errors=True)
    return result


def load_cases() -> list[tuple[str, Callable[[Path], None]]]:
    sys.modules.setdefault("sync_hostile", sys.modules[__name__])  # cases import this very module
    cases: list[tuple[str, Callable[[Path], None]]] = []
    for path in sorted(Path(__file__).parent.glob("sync_cases_*.py")):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
        cases += [(f"{path.stem.removeprefix('sync_cases_')}: {n}", f) for n, f in module.CASES]
    return cases


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-k", default="", help="only cases whose name holds this")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    if shutil.which("git") is None:
        print("needs the git command", file=sys.stderr)
        return 2
    cases = [(n, f) for n, f in load_cases() if args.k in n]
    results = []
    for name, fn in cases:
        r = run_case(name, fn)
        results.append(r)
        if not args.json:
            print(f"{r['result']:9} {r['seconds']:6.1f}s  {name}" + (f"  -- {r['why']}" if r["result"] != "pass"
                                                                      else ""), flush=True)
            if args.verbose and r["result"] != "pass":
                print(r.get("traceback", ""))
    summary = {
        "cases": len(results),
        "pass": sum(r["result"] == "pass" for r in results),
        "fail": sum(r["result"] == "fail" for r in results),
        "traceback": sum(r["result"] == "traceback" for r in results),
        "outside_touched": sum(bool(r["outside_touched"]) for r in results),
        "memories_lost": sum(len(r["lost"]) for r in results),
        "inotify": _inotify(),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
        "seconds": round(sum(r["seconds"] for r in results), 1),
    }
    if args.json:
        print(json.dumps({"summary": summary, "cases": [{k: v for k, v in r.items() if k != "traceback"}
                                                        for r in results]}, indent=1))
    else:
        print(json.dumps(summary))
    return 0 if summary["pass"] == summary["cases"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""`pmem sync compact`, `retire` and sync after each change: what they cost.

    PMEM_EMBED_MODEL=fake-64 python benchmarks/sync_compact.py                 # 10,000 memories
    PMEM_EMBED_MODEL=fake-64 python benchmarks/sync_compact.py --memories 2000 --rounds 5

Two homes on one bare git repository: a holds N memories and starts the sync, b joins. Then a
history that compact has something to drop: each round a adds 20 memories and purges one old one
(so its changeset of 5,000 operations is rewritten: one more full version in git's history) and
syncs, and b syncs. Measured: the remote's size (`git gc` first, so packed against packed)
before and after `pmem sync compact` and the remote's `git gc --prune=now`; compact's time; b's
next sync (it clones afresh) against its sync with nothing new. Repeated `--repeat` times, each
on a history grown by the same rounds again; medians reported. Then sync_auto's cost to the
command: `auto.kick` in process (nothing to send; a sync started), and `pmem add` as a process
with the setting off and on, alternating.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pmem import MemoryStore, sync  # noqa: E402
from pmem.config import load  # noqa: E402
from pmem.records import Memory  # noqa: E402
from pmem.sync import auto  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sync_bench import WORDS  # noqa: E402  (the same made-up memories as sync_bench)


def memories(rng: random.Random, n: int, tag: str) -> list[Memory]:
    return [Memory(id="", text=f"{' '.join(rng.choice(WORDS) for _ in range(rng.randint(8, 20)))} ({tag} {i})")
            for i in range(n)]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def remote_size(repo: Path, prune: bool) -> int:
    """Bytes of the remote's objects once packed (`--prune=now`: as after the remote's own gc)."""
    git(repo, "gc", "--quiet", *(["--prune=now"] if prune else []))
    fields = dict(line.split(": ", 1) for line in git(repo, "count-objects", "-v").splitlines())
    return (int(fields["size"]) + int(fields["size-pack"])) * 1024


def timed(fn) -> tuple[float, object]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def grow(a: MemoryStore, b: MemoryStore, rng: random.Random, rounds: int) -> None:
    for r in range(rounds):
        a.insert(memories(rng, 20, f"round {r}"))
        victim = rng.choice([m.id for m in a.iter_all()])
        a.purge([victim])
        sync.run(a)
        sync.run(b)


def quiet(db: Path, seconds: float = 180.0) -> None:
    """Wait until no background sync of `db` is waiting or running (none is left behind)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        running = subprocess.run(["pgrep", "-f", f"pmem.sync.auto import main.* {db}"],
                                 capture_output=True).returncode == 0
        if not running and not (Path(str(db) + ".sync") / "auto.pending").exists():
            return
        time.sleep(0.2)
    raise SystemExit("a background sync did not end")


def pmem_add(home: Path, auto_on: bool, text: str) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PMEM_")}
    env.update(PMEM_HOME=str(home), PMEM_EMBED_MODEL="fake-64", PYTHONPATH=str(ROOT),
               PMEM_SYNC_AUTO="on" if auto_on else "off", PMEM_SYNC_AUTO_DELAY="1")
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pmem", "add", text], env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--memories", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--adds", type=int, default=5)
    args = ap.parse_args()
    rng = random.Random(32)
    cfg = load()
    out: dict = {"memories": args.memories, "rounds": args.rounds, "load": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="pmem-compact-") as tmp:
        tmp_path = Path(tmp)
        bare = tmp_path / "remote.git"
        subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
        a = MemoryStore(tmp_path / "a" / "pmem.db", config=cfg)
        b = MemoryStore(tmp_path / "b" / "pmem.db", config=cfg)
        for start in range(0, args.memories, 1000):
            a.insert(memories(rng, min(1000, args.memories - start), f"batch {start}"))
        key = tmp_path / "key"
        out["init_s"] = timed(lambda: sync.init(a, str(bare), key_file=str(key)))[0]
        out["join_s"] = timed(lambda: sync.join(b, str(bare), key_file=str(key)))[0]
        rows = []
        for _ in range(args.repeat):
            grow(a, b, rng, args.rounds)
            idle = timed(lambda: sync.run(b))[0]
            before = remote_size(bare, prune=False)
            took, report = timed(lambda: sync.compact(a))
            after = remote_size(bare, prune=True)
            reclone, r = timed(lambda: sync.run(b))
            assert r["recloned"]  # type: ignore[index]
            rows.append({"size_before": before, "size_after": after, "compact_s": took, "b_sync_idle_s": idle,
                         "b_sync_reclone_s": reclone, "commits_after": int(git(bare, "rev-list", "--count", "main"))})
        out["runs"] = rows
        for k in ("size_before", "size_after", "compact_s", "b_sync_idle_s", "b_sync_reclone_s"):
            out[f"median_{k}"] = statistics.median(r[k] for r in rows)
        # sync_auto: what the command pays
        db = a.path
        a.close()
        b.close()
        os.environ["PMEM_SYNC_AUTO_DELAY"] = "1"
        out["kick_nothing_to_send_ms"] = statistics.median(timed(lambda: auto.kick(db))[0] for _ in range(20)) * 1000
        started = []
        for i in range(args.adds):
            with MemoryStore(db, config=cfg) as s:
                s.add(f"kicked {i}")
            started.append(timed(lambda: auto.kick(db))[0])
            quiet(db)
        out["kick_sync_started_ms"] = statistics.median(started) * 1000
        off, on = [], []
        for i in range(args.adds):  # alternating, so the load is shared
            off.append(pmem_add(tmp_path / "a", False, f"added with sync_auto off {i}"))
            on.append(pmem_add(tmp_path / "a", True, f"added with sync_auto on {i}"))
            quiet(db)
        out["pmem_add_off_s"] = statistics.median(off)
        out["pmem_add_on_s"] = statistics.median(on)
        out["load_end"] = os.getloadavg()[0]
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

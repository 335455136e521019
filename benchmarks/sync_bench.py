"""`pmem sync`: what a sync costs in time and bytes, over a plain folder and a bare git repository.

    PMEM_EMBED_MODEL=fake-64 python benchmarks/sync_bench.py                   # 10,000 memories
    PMEM_EMBED_MODEL=fake-64 python benchmarks/sync_bench.py --memories 100000
    PMEM_EMBED_MODEL=fake-64 python benchmarks/sync_bench.py --memories 2000 --join-vs-insert
    python benchmarks/sync_bench.py --compare /work/main --memories 2000 --purged 100 --own 200  # before/after
    python benchmarks/sync_bench.py --chain-bytes                 # what the chain adds to one changeset
    python benchmarks/sync_bench.py --memories 1000 --embed-share     # fake embedder, then e5

Two homes, a and b. a holds N memories and starts the sync (`init`: its first changesets), b
joins (pulls and applies all N: the first join). Then a adds 1,000 new memories and syncs, b
syncs them in; then `pmem sync` with nothing new, as a process, repeated (the steady state).
Reports medians; bytes are the changeset files written (sealed and compressed). The fake
embedder keeps embedding out of the figures: with a real model, applying new memories also
embeds their texts (see "Latency and bulk import" in docs/decisions/0003-latency-foundation.md for that rate).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# `--tree DIR` (a round of --compare): import pmem from another checkout (main's), not this one
sys.path.insert(0, sys.argv[sys.argv.index("--tree") + 1] if "--tree" in sys.argv[:-1] else str(ROOT))

from pmem import MemoryStore, sync  # noqa: E402
from pmem.config import load  # noqa: E402
from pmem.records import Memory  # noqa: E402

WORDS = ("the a my our next last new old trip train flight hotel dinner recipe garden coffee bike book film "
         "song class exam project deadline meeting budget sister friend doctor Monday weekend morning summer "
         "Lisbon Oslo Kyoto want need like start finish move buy cook visit call write read learn fix").split()


def texts(rng: random.Random, n: int, tag: str) -> list[Memory]:
    return [Memory(id="", text=f"{' '.join(rng.choice(WORDS) for _ in range(rng.randint(8, 20)))} ({tag} {i})",
                   tags=[rng.choice(["home", "work", "food"])]) for i in range(n)]


def locomo_bytes(path: Path | None = None) -> tuple[int, int, int]:
    """Changeset bytes for LoCoMo's dialogue turns as creates (real text, with meta and source):
    (memories, plain JSON bytes, sealed bytes)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from pmem.store.replication import EXISTS, SYNC_FIELDS
    from pmem.sync import keys

    import locomo

    ops = []
    for conv in locomo.load(path or locomo.DATA):
        for n, r in enumerate(locomo.turn_records(conv, thread="session"), start=len(ops) + 1):
            m = Memory(id=os.urandom(8).hex(), text=r["text"], meta=r["meta"], source=r["source"],
                       created_at=r["created_at"], updated_at=r["created_at"], thread=r.get("thread"),
                       thread_pos=r.get("thread_pos"))
            ops.append({"id": f"{'a' * 16}-{n}", "n": n, "m": m.id, "k": "create",
                        "c": f"{1735689600000 + n:013d}-0000-{'a' * 16}",
                        "f": {f: getattr(m, f) for f in SYNC_FIELDS} | {EXISTS: True}})
    plain = len(json.dumps({"ops": ops}, ensure_ascii=False, separators=(",", ":")).encode())
    sealed = sum(len(keys.seal(keys.new_key(), "a" * 16, i, {"ops": ops[i:i + 5000]}))
                 for i in range(0, len(ops), 5000))
    return len(ops), plain, sealed


def seg_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.glob("segments/*/*"))


def children_cpu() -> float:
    """CPU seconds (user + system) of the child processes that have ended: a process's own cost,
    which the machine's load does not stretch as it does wall time."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def bench(kind: str, n: int, repeat: int, tmp: Path) -> dict:
    cfg = load()
    rng = random.Random(7)
    if kind == "git":
        remote = tmp / f"{kind}.git"
        subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
        where = str(remote)
    else:
        where = str(tmp / f"{kind}-folder")
    a = MemoryStore(tmp / f"{kind}-a" / "pmem.db", config=cfg)
    b = MemoryStore(tmp / f"{kind}-b" / "pmem.db", config=cfg)
    key = tmp / f"{kind}.key"
    t_fill, _ = timed(lambda: [a.insert(texts(rng, min(10_000, n - start), "old")) for start in range(0, n, 10_000)])
    t_init, _ = timed(lambda: sync.init(a, where, key_file=str(key)))
    t_join, rep = timed(lambda: sync.join(b, where, key_file=str(key)))
    assert rep["applied"] == n, rep
    root = sync.sync_dir(a) / "git" if kind == "git" else Path(where)
    first_bytes = seg_bytes(root)
    a.insert(texts(rng, 1000, "new"))
    before = seg_bytes(root)
    t_send, _ = timed(lambda: sync.run(a))
    new_bytes = seg_bytes(root) - before
    t_recv, rep = timed(lambda: sync.run(b))
    assert rep["applied"] == 1000, rep
    lib = [timed(lambda: sync.run(b))[0] for _ in range(repeat)]
    a.close()
    env = {**os.environ, "PMEM_HOME": str(tmp / f"{kind}-b"), "PYTHONPATH": str(ROOT)}
    procs, cpu, noop, noop_cpu = [], [], [], []
    for _ in range(repeat):  # alternating, so both see the same load
        for args, walls, cpus in ((["sync"], procs, cpu), (["--version"], noop, noop_cpu)):
            before = children_cpu()
            t, p = timed(lambda args=args: subprocess.run([sys.executable, "-m", "pmem", *args], env=env,
                                                           capture_output=True))
            assert p.returncode == 0, p.stderr
            walls.append(t)
            cpus.append(children_cpu() - before)
    b.close()
    return {"kind": kind, "memories": n, "fill_s": t_fill, "init_s": t_init, "join_s": t_join, "first_bytes": first_bytes,
            "bytes_per_memory": first_bytes / n, "send_1000_s": t_send, "recv_1000_s": t_recv,
            "bytes_1000": new_bytes, "steady_lib_s": statistics.median(lib),
            "steady_cli_s": statistics.median(procs), "cli_start_s": statistics.median(noop),
            "steady_cli_cpu_s": statistics.median(cpu), "cli_start_cpu_s": statistics.median(noop_cpu)}


def join_vs_insert(n: int, tmp: Path) -> tuple[float, float]:
    """A first join of n memories over a folder, and a plain `insert` of the same n into a fresh
    store: how much of a join is the store's own insert (see "Where a join's time goes")."""
    cfg = load()
    a, b, c = (MemoryStore(tmp / f"jv-{x}" / "pmem.db", config=cfg) for x in "abc")
    t_insert, _ = timed(lambda: c.insert(texts(random.Random(7), n, "old")))
    a.insert(texts(random.Random(7), n, "old"))
    sync.init(a, str(tmp / "jv-folder"), key_file=str(tmp / "jv.key"))
    t_join, _ = timed(lambda: sync.join(b, str(tmp / "jv-folder"), key_file=str(tmp / "jv.key")))
    for s in (a, b, c):
        s.close()
    return t_join, t_insert


def embed_share(n: int, tmp: Path) -> list[dict]:
    """A first join of n memories over a folder with the fake embedder, then with the default real
    model (multilingual-e5-small): the join's time, and the share of it spent embedding."""
    out = [_join_embedding(n, tmp, model) for model in ("fake-64", None)]
    os.environ["PMEM_EMBED_MODEL"] = "fake-64"
    return out


def _join_embedding(n: int, tmp: Path, model: str | None) -> dict:
    if model:
        os.environ["PMEM_EMBED_MODEL"] = model
    else:
        os.environ.pop("PMEM_EMBED_MODEL", None)
    cfg = load()
    where = tmp / f"es-{cfg.embed_model}"
    a, b = (MemoryStore(where / x / "pmem.db", config=cfg) for x in "ab")
    a.insert(texts(random.Random(7), n, "old"))
    sync.init(a, str(where / "folder"), key_file=str(where / "key"))
    spent = [0.0]
    embed = b.embed

    def timed_embed(*args, **kw):
        start = time.perf_counter()
        try:
            return embed(*args, **kw)
        finally:
            spent[0] += time.perf_counter() - start

    b.embed = timed_embed  # type: ignore[method-assign]
    t_join, rep = timed(lambda: sync.join(b, str(where / "folder"), key_file=str(where / "key")))
    assert rep["applied"] == n, rep
    a.close()
    b.close()
    return {"model": cfg.embed_model, "join_s": t_join, "embed_s": spent[0]}


def one_round(kind: str, n: int, purged: int, repeat: int, tmp: Path, own: int = 0) -> dict:
    """One round of --compare, with whichever pmem this process imported: a holds n memories
    (`purged` of them then purged, so changesets carry that many purges) and starts; b joins;
    a writes 1,000 new memories; b's sync that receives them, then b's syncs with nothing new;
    then a syncs `own` times after one change each, and its syncs with nothing new."""
    cfg = load()
    rng = random.Random(7)
    where = str(tmp / "r.git") if kind == "git" else str(tmp / "folder")
    if kind == "git":
        subprocess.run(["git", "init", "-q", "--bare", where], check=True)
    a = MemoryStore(tmp / "a" / "pmem.db", config=cfg)
    b = MemoryStore(tmp / "b" / "pmem.db", config=cfg)
    a.insert(texts(rng, n, "old"))
    sync.init(a, where, key_file=str(tmp / "key"))
    sync.join(b, where, key_file=str(tmp / "key"))
    if purged:
        a.purge([m.id for m in list(a.iter_all())[:purged]])
        sync.run(a)
        sync.run(b)
    a.insert(texts(rng, 1000, "new"))
    root = sync.sync_dir(a) / "git" if kind == "git" else Path(where)
    before = seg_bytes(root)
    sync.run(a)
    sent_bytes = seg_bytes(root) - before
    t_recv, rep = timed(lambda: sync.run(b))
    assert rep["applied"] == 1000, rep
    idle = [timed(lambda: sync.run(b))[0] for _ in range(repeat)]
    for i in range(own):  # a sync after each change: a device with `own` changesets of its own
        a.add(f"one more memory {i}")
        sync.run(a)
    idle_own = [timed(lambda: sync.run(a))[0] for _ in range(repeat)]
    kept = a.conn.execute("SELECT coalesce(sum(length(blob)), 0) FROM sync_own").fetchone()[0] \
        if a.conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'sync_own'").fetchone() else 0
    db_bytes = (tmp / "a" / "pmem.db").stat().st_size
    a.close()
    b.close()
    return {"recv_1000_s": t_recv, "idle_s": statistics.median(idle), "idle_own_s": statistics.median(idle_own),
            "bytes_1000": sent_bytes,
            "kept_bytes": kept, "db_bytes": db_bytes}


def compare(old_tree: str, kind: str, n: int, purged: int, rounds: int, own: int) -> None:
    """Main's tree (a checkout or a git revision) against this one, each round a fresh process per
    tree, interleaved (benchmarks/harness.py: the order alternating), medians."""
    from harness import Tree, median, schedule

    env = {**os.environ, "PMEM_EMBED_MODEL": "fake-64", "PMEM_SERVER": "never"}
    got: dict[str, list[dict]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as work:
        trees = {"before": Tree.resolve(f"before={old_tree}", Path(work)), "after": Tree("after", ROOT)}
        for _, label, _ in schedule(list(trees), rounds):
            tree = trees[label]
            with tempfile.TemporaryDirectory() as tmp:
                p = tree.run([sys.executable, str(Path(__file__).resolve()), "--round", kind, "--memories",
                              str(n), "--purged", str(purged), "--own", str(own), "--tree", str(tree.path),
                              "--out", tmp], env=tree.env(env, PMEM_HOME=str(Path(tmp) / "home")), cwd=Path(tmp),
                             check=False)
                assert p.returncode == 0, p.stderr[-2000:]
                got[label].append(json.loads(p.stdout.strip().splitlines()[-1]))
        old_tree = trees["before"].revision or str(trees["before"].path)

    def med(label: str, k: str) -> float:
        return median([r[k] for r in got[label]])

    print(f"{kind}, {n:,} memories, {purged} purged, {rounds} rounds interleaved (median): before = {old_tree}, "
          f"after = {ROOT}")
    for k, what, scale, unit in (("idle_s", "sync with nothing new (in process)", 1000, "ms"),
                                 ("idle_own_s", f"the same, on the writer after {own} syncs of one add", 1000,
                                  "ms"),
                                 ("recv_1000_s", "sync receiving 1,000 new changes", 1000, "ms"),
                                 ("bytes_1000", "bytes a changeset of 1,000 adds", 1 / 1000, "kB"),
                                 ("kept_bytes", "own sealed copies kept in the database", 1 / 1000, "kB"),
                                 ("db_bytes", "database file of the writing device", 1 / 1e6, "MB")):
        b, a = med("before", k) * scale, med("after", k) * scale
        ratio = f"{a / b:.2f}x" if b else "-"
        print(f"  {what:<42} {b:10.1f} {unit:<3} -> {a:10.1f} {unit:<3} ({ratio})")


def chain_bytes() -> None:
    """What the chain adds to one changeset, sealed: the digest of the previous one and what the
    device applied of 3 others (every changeset), and the list of the purges it knows (16 hex
    digits each; only the first changeset after that set grew: the others name it), against the
    same changeset without them (as before the chain), for one memory added (a sync after each
    change) and 1,000."""
    from pmem.store.replication import EXISTS, SYNC_FIELDS
    from pmem.sync import keys

    key, dev, rng = keys.new_key(), "a" * 16, random.Random(7)
    for n_ops in (1, 1000):
        ops = []
        for i, m in enumerate(texts(rng, n_ops, "chain"), start=1):
            m.id = os.urandom(8).hex()
            ops.append({"id": f"{dev}-{i}", "n": i, "m": m.id, "k": "create", "c": f"{1735689600000 + i:013d}-0000-{dev}",
                        "f": {f: getattr(m, f) for f in SYNC_FIELDS if f not in ("created_at", "updated_at")}
                        | {EXISTS: True}})
        plain = len(keys.seal(key, dev, 9, {"device": dev, "seq": 9, "ops": ops}))
        base = {"device": dev, "seq": 9, "v": 2, "prev": os.urandom(16).hex(),
                "seen": {os.urandom(8).hex(): [rng.randint(1, 5000), os.urandom(16).hex()] for _ in range(3)}}
        cells = [f"naming the list +{len(keys.seal(key, dev, 9, {**base, 'purged_in': 7, 'ops': ops})) - plain:,} B"]
        for purged in (100, 1000, 10000):
            payload = {**base, "purged": sorted(os.urandom(8).hex() for _ in range(purged)), "ops": ops}
            cells.append(f"listing {purged:,} purges +{len(keys.seal(key, dev, 9, payload)) - plain:,} B")
        print(f"a changeset of {n_ops:,} add(s): {plain:,} B sealed before the chain; with it: {', '.join(cells)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--memories", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--kind", choices=["folder", "git", "both"], default="both")
    ap.add_argument("--locomo", type=Path, default=None, help="locomo_dev.json (default: ../shared/data/)")
    ap.add_argument("--join-vs-insert", action="store_true", help="only time a first join against a plain insert")
    ap.add_argument("--embed-share", action="store_true",
                    help="only time a first join with the fake embedder and with multilingual-e5-small")
    ap.add_argument("--compare", default=None, metavar="TREE",
                    help="time main's checkout TREE (before) against this one (after), interleaved")
    ap.add_argument("--purged", type=int, default=0, help="with --compare: memories purged first")
    ap.add_argument("--own", type=int, default=0, help="with --compare: syncs of one change each, then idle syncs")
    ap.add_argument("--chain-bytes", action="store_true", help="only the bytes the chain adds to a changeset")
    ap.add_argument("--round", choices=["folder", "git"], help=argparse.SUPPRESS)
    ap.add_argument("--tree", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.round:
        print(json.dumps(one_round(args.round, args.memories, args.purged, args.repeat, args.out, args.own)))
        return
    if args.chain_bytes:
        chain_bytes()
        return
    if args.compare:
        for kind in (["folder", "git"] if args.kind == "both" else [args.kind]):
            compare(args.compare, kind, args.memories, args.purged, args.repeat, args.own)
        return
    if args.embed_share:
        with tempfile.TemporaryDirectory() as tmp:
            for r in embed_share(args.memories, Path(tmp)):
                print(f"first join of {args.memories:,} with {r['model']}: {r['join_s']:.2f} s, embedding "
                      f"{r['embed_s']:.2f} s ({r['embed_s'] / r['join_s']:.0%}); load {os.getloadavg()[0]:.2f}")
        return
    os.environ.setdefault("PMEM_EMBED_MODEL", "fake-64")
    print(f"load: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} cpus; embed model {os.environ['PMEM_EMBED_MODEL']}")
    if args.join_vs_insert:
        with tempfile.TemporaryDirectory() as tmp:
            t_join, t_insert = join_vs_insert(args.memories, Path(tmp))
        print(f"first join of {args.memories:,}: {t_join:.2f} s; plain insert of the same: {t_insert:.2f} s; "
              f"ratio {t_join / t_insert:.2f}")
        return
    n, plain, sealed = locomo_bytes(args.locomo)
    print(f"LoCoMo turns as changesets: {n:,} memories, {plain / n:.0f} B a memory as JSON, "
          f"{sealed / n:.0f} B sealed (compressed)")
    with tempfile.TemporaryDirectory() as tmp:
        for kind in (["folder", "git"] if args.kind == "both" else [args.kind]):
            r = bench(kind, args.memories, args.repeat, Path(tmp))
            print(f"{r['kind']:>6} at {r['memories']:,}: filling a {r['fill_s']:.1f} s, init {r['init_s']:.2f} s, "
                  f"first join {r['join_s']:.2f} s "
                  f"({r['first_bytes'] / 1e6:.2f} MB, {r['bytes_per_memory']:.0f} B a memory); 1,000 new: sent "
                  f"{r['send_1000_s']:.2f} s, applied {r['recv_1000_s']:.2f} s, {r['bytes_1000'] / 1e3:.0f} kB; "
                  f"nothing new: {r['steady_lib_s'] * 1000:.0f} ms in process, {r['steady_cli_s'] * 1000:.0f} ms "
                  f"as `pmem sync` (`pmem --version`: {r['cli_start_s'] * 1000:.0f} ms); CPU of the process "
                  f"{r['steady_cli_cpu_s'] * 1000:.0f} ms (`--version`: {r['cli_start_cpu_s'] * 1000:.0f} ms)")


if __name__ == "__main__":
    main()

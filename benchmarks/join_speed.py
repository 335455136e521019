"""`pmem sync join` of a large remote: how soon the new device finds memories by their words, and by
their meaning, side by side with another tree (main).

    python benchmarks/join_speed.py build                      # once: 10,000 memories, the real default model
    python benchmarks/join_speed.py time --tree /work/main --tree . --rounds 3 --base-rounds 1
    python benchmarks/join_speed.py time --tree /work/main --tree . --memories 1000 --rounds 3
    python benchmarks/join_speed.py precision                  # float16 / int8 against float32: rankings, bytes

`build` makes, under --cache (default /tmp/pmem-join-bench), a sending device holding N memories
(LoCoMo's dialogue turns from ../shared/data/locomo_dev.json, cycled: a repeat ends with " (again K)"),
embedded with the real default model (e5 and MiniLM's second vectors; at load 8 on 2 cores that is
~15 minutes for 10,000; resumable; int8 vectors made float32 after, as the sender's own background
fill leaves them: pmem.store.refine), and from it two folder remotes with one key: `remote-<tree>` made
by each tree's own `pmem sync init` (main's changesets carry no vectors; this tree's do). Also a
1,000-memory sender (the first 1,000, their vectors copied) when N is larger.

`time` runs, per tree and round in alternating order, in a fresh home with the real default model:
`pmem sync join REMOTE` as a process (its wall time: when it returns), a keyword search at once
(found by words?), then polls the database, read-only, until every memory has its vector
(`searchable by meaning`: from the start of the join), and one semantic search. A tree joins the
remote its own init made; `--cross` also joins this tree to main's remote (an older device's
changesets: no vectors, embedded in the background). Medians, ratios to the first tree, the load.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

import harness  # noqa: E402
import locomo  # noqa: E402

CACHE = Path("/tmp/pmem-join-bench")
WORD_QUERY = "adoption"  # a word in LoCoMo's turns
MEANING_QUERY = "what did she feel about the support group"


def texts(n: int) -> list[str]:
    turns = [r["text"] for conv in locomo.load() for r in locomo.turn_records(conv)]
    return [turns[i % len(turns)] + (f" (again {i // len(turns)})" if i >= len(turns) else "") for i in range(n)]


def _env(home: Path, tree: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PMEM_")}
    env.update(PMEM_HOME=str(home), PMEM_SERVER="never", PYTHONPATH=str(tree), NO_COLOR="1")
    if os.environ.get("PMEM_MODELS_DIR"):
        env["PMEM_MODELS_DIR"] = os.environ["PMEM_MODELS_DIR"]
    return env


# -- build ----------------------------------------------------------------------------------------

def build(cache: Path, n: int, trees: list[Path]) -> None:
    from pmem import MemoryStore

    sender = cache / str(n) / "sender" / "pmem.db"
    sender.parent.mkdir(parents=True, exist_ok=True)
    wanted = texts(n)
    with MemoryStore(sender) as store:
        have = store.count()
        for start in range(have, n, 500):
            chunk = wanted[start:start + 500]
            t0 = time.monotonic()
            with store.bulk_embedding(len(chunk)):
                store.insert([store.new_memory(t, source="locomo") for t in chunk], kind="import")
            print(f"build: {start + len(chunk)}/{n} embedded ({time.monotonic() - t0:.0f} s for {len(chunk)}, "
                  f"load {os.getloadavg()[0]:.1f})", file=sys.stderr)
        if hasattr(store, "int8_vectors") and store.int8_vectors():  # as its background fill leaves it
            t0 = time.monotonic()
            store.fill_missing(scan=False)
            print(f"build: int8 vectors made float32 ({time.monotonic() - t0:.0f} s)", file=sys.stderr)
        print(f"build: {store.count()} memories, {store.vectors.english.count()} English second vectors",
              file=sys.stderr)
    make_remotes(cache / str(n), trees)
    if n > 1000 and not (cache / "1000" / "sender" / "pmem.db").exists():
        subset(sender, cache / "1000" / "sender" / "pmem.db", 1000)
        make_remotes(cache / "1000", trees)


def subset(big: Path, small: Path, n: int) -> None:
    """The first n memories of `big`, with its vectors (no embedding)."""
    from pmem import MemoryStore

    small.parent.mkdir(parents=True, exist_ok=True)
    with MemoryStore(big) as src, MemoryStore(small) as dst:
        items = list(src.iter_all())[:n]
        main = src.vectors([m.id for m in items])
        seqs = src.storage_order(m.id for m in items)
        english = src.vectors.english.of(seqs.values())
        en_by_text = {m.text: english[seqs[m.id]] for m in items if seqs.get(m.id) in english}
        fresh = [dst.new_memory(m.text, source=m.source) for m in items]
        with dst.vectors.arriving({}, en_by_text):
            dst.insert(fresh, kind="import", vectors=[main[m.id] for m in items])


def make_remotes(folder: Path, trees: list[Path]) -> None:
    """Each tree's own `sync init` of a copy of the sender, into remote-<tree name>, one key."""
    from pmem import MemoryStore

    key = folder / "sync.key"
    with MemoryStore(folder / "sender" / "pmem.db") as store:
        store.checkpoint()
        for tree in trees:
            remote = folder / f"remote-{tree_name(tree)}"
            if remote.exists():
                continue
            home = folder / f"sender-{tree_name(tree)}"
            home.mkdir(exist_ok=True)
            store.copy_to(home / "pmem.db")
            code = ("import sys, pmem; from pmem import sync; from pmem import MemoryStore\n"
                    "assert pmem.__file__.startswith(sys.argv[4]), pmem.__file__\n"
                    "with MemoryStore(sys.argv[1]) as s: sync.init(s, sys.argv[2], key_file=sys.argv[3])")
            subprocess.run([sys.executable, "-c", code, str(home / "pmem.db"), str(remote), str(key), str(tree)],
                           env=_env(home, tree), cwd=home, check=True)  # cwd: `-c` puts it first on sys.path
            print(f"build: {remote} ({tree}): {folder_bytes(remote):,} bytes", file=sys.stderr)


def tree_name(tree: Path) -> str:
    return "main" if tree.resolve() == Path("/work/main") else "this" if tree.resolve() == ROOT else tree.name


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


# -- time -----------------------------------------------------------------------------------------

def waiting(db: Path) -> tuple[int, int]:
    """(memories without a vector, English second vectors), read-only."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        if "memory_vec" not in names:
            return conn.execute("SELECT count(*) FROM memories").fetchone()[0], 0
        missing = conn.execute("SELECT count(*) FROM memories m WHERE NOT EXISTS "
                               "(SELECT 1 FROM memory_vec v WHERE v.seq = m.seq)").fetchone()[0]
        en = conn.execute("SELECT count(*) FROM memory_vec_en").fetchone()[0] if "memory_vec_en" in names else 0
        return missing, en
    finally:
        conn.close()


def one_join(tree: Path, remote: Path, key: Path, limit: float) -> dict:
    home = Path(tempfile.mkdtemp(prefix="pmem-join-", dir="/tmp"))
    env = _env(home, tree)
    try:
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-m", "pmem", "sync", "join", str(remote), "--key-file", str(key),
                            "--json"], env=env, cwd=home, capture_output=True, text=True, timeout=limit)
        returned = time.monotonic() - t0
        if p.returncode:
            raise SystemExit(f"join failed ({tree}): {p.stderr.strip()[-400:]}")
        db = home / "pmem.db"
        k = subprocess.run([sys.executable, "-m", "pmem", "search", WORD_QUERY, "--mode", "keyword", "--json"],
                           env=env, cwd=home, capture_output=True, text=True, timeout=300)
        words = time.monotonic() - t0
        found_by_words = len(json.loads(k.stdout or "[]")) if k.returncode == 0 else -1
        missing_at_return = waiting(db)[0]
        while True:
            missing, en = waiting(db)
            if not missing:
                break
            if time.monotonic() - t0 > limit:
                raise SystemExit(f"{tree}: {missing} memories still without a vector after {limit:.0f} s")
            time.sleep(1.0)
        meaning = max(time.monotonic() - t0, returned) if missing_at_return else returned
        s = subprocess.run([sys.executable, "-m", "pmem", "search", MEANING_QUERY, "--mode", "semantic", "--json"],
                           env=env, cwd=home, capture_output=True, text=True, timeout=300)
        found_by_meaning = len(json.loads(s.stdout or "[]")) if s.returncode == 0 else -1
        # a background fill ends by itself: the next round starts clean (the one fill's lock,
        # pmem/fill.py; a base tree from before it locks pmem.db.sync/fill.lock)
        for lock in (home / "pmem.db.fill.lock", home / "pmem.db.sync" / "fill.lock"):
            while lock.exists() and _locked(lock) and time.monotonic() - t0 < limit:
                time.sleep(1.0)
        return {"returned_s": returned, "by_words_s": words, "by_meaning_s": meaning,
                "missing_at_return": missing_at_return, "found_by_words": found_by_words,
                "found_by_meaning": found_by_meaning, "english_vectors": waiting(db)[1]}
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _locked(path: Path) -> bool:
    import fcntl

    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def time_joins(cache: Path, n: int, trees: list[Path], rounds: int, cross: bool, limit: float,
               base_rounds: int) -> dict:
    folder = cache / str(n)
    key = folder / "sync.key"
    runs = [(tree_name(t), t, folder / f"remote-{tree_name(t)}") for t in trees]
    if cross and any(tree_name(t) == "main" for t in trees):
        runs.append(("this-on-main-remote", ROOT, folder / "remote-main"))
    figures: dict[str, list[dict]] = {name: [] for name, _, _ in runs}
    load_start = os.getloadavg()
    order = [(r, name, c) for r, name, c in harness.schedule([name for name, _, _ in runs], rounds, 0)
             if r < base_rounds or name != runs[0][0]]
    by_name = {name: (tree, remote) for name, tree, remote in runs}
    for r, name, _ in order:
        tree, remote = by_name[name]
        got = one_join(tree, remote, key, limit)
        got["load"] = os.getloadavg()[0]
        figures[name].append(got)
        print(f"round {r} {name}: {json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in got.items()})}",
              file=sys.stderr)
    first = runs[0][0]
    out = {"memories": n, "rounds": rounds, "load_start": [round(x, 2) for x in load_start],
           "load_end": [round(x, 2) for x in os.getloadavg()],
           "remote_bytes": {name: folder_bytes(remote) for name, _, remote in runs}, "trees": {}}
    for name, _, _ in runs:
        rows = figures[name]
        entry = {}
        for measure in ("returned_s", "by_words_s", "by_meaning_s"):
            values = [row[measure] for row in rows]
            entry[measure] = harness.summary(values, digits=2)
            base = harness.median([row[measure] for row in figures[first]])
            entry[measure]["ratio_to_" + first] = harness.ratio(harness.median(values), base)
        entry["missing_at_return"] = [row["missing_at_return"] for row in rows]
        entry["found_by_words"] = [row["found_by_words"] for row in rows]
        entry["found_by_meaning"] = [row["found_by_meaning"] for row in rows]
        entry["english_vectors"] = [row["english_vectors"] for row in rows]
        out["trees"][name] = entry
    return out


# -- precision ------------------------------------------------------------------------------------

def precision(cache: Path, n: int, queries: int = 300, k: int = 10) -> dict:
    """Each of `queries` memories' vectors as a query over all n: the top k by cosine with the
    stored float32 vectors against float16 and int8 (one scale per vector) copies; and the sealed
    bytes of 1,000 memories' changesets with each."""
    import base64
    import struct

    import numpy as np

    from pmem import MemoryStore
    from pmem.sync import keys

    asked = [q["question"] for conv in locomo.load() for q in locomo.questions(conv)][:queries]
    with MemoryStore(cache / str(n) / "sender" / "pmem.db") as store:
        blobs = [b for _, b in sorted(store.vectors([m.id for m in store.iter_all()]).items())]
        qvecs = np.frombuffer(b"".join(store.embed(asked, query=True)), dtype="<f4").reshape(len(asked), -1)
    f32 = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), -1)
    f16 = f32.astype("<f2").astype("<f4")
    scale = np.abs(f32).max(axis=1, keepdims=True) / 127.0
    i8q = np.round(f32 / scale).astype(np.int8)
    i8 = i8q.astype("<f4") * scale

    def unit(x):
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    rng = np.random.default_rng(7)
    picks = rng.choice(len(f32), size=min(queries, len(f32)), replace=False)
    out: dict = {"memories": len(f32), "k": k}
    truth_m = unit(f32)
    # questions (LoCoMo's, embedded as queries) and memories as queries (their own row left out)
    for kind, q, skip in (("by_questions", unit(qvecs), 0), ("by_memories", unit(f32[picks]), 1)):
        truth = np.argsort(-(q @ truth_m.T), axis=1, kind="stable")[:, skip:skip + k]
        for name, copy in (("float16", f16), ("int8", i8)):
            got = np.argsort(-(q @ unit(copy).T), axis=1, kind="stable")[:, skip:skip + k]
            overlap = np.mean([len(set(a) & set(b)) / k for a, b in zip(truth, got)])
            same_order = np.mean([list(a) == list(b) for a, b in zip(truth, got)])
            top1 = np.mean(truth[:, 0] == got[:, 0])
            err = float(np.max(np.abs(np.sum(unit(copy) * truth_m, axis=1) - 1.0)))
            out.setdefault(kind, {"queries": len(q)})[name] = {
                "overlap_at_k": round(float(overlap), 4), "same_order": round(float(same_order), 4),
                "same_top1": round(float(top1), 4), "max_cosine_loss": round(err, 6)}
    key = keys.new_key()
    sample = f32[:1000]
    for name, enc in (("none", None), ("float32", lambda v: v.astype("<f4").tobytes()),
                      ("float16", lambda v: v.astype("<f2").tobytes()),
                      ("int8", lambda v: struct.pack("<f", float(np.abs(v).max() / 127)) +
                       np.round(v / (np.abs(v).max() / 127)).astype(np.int8).tobytes())):
        ops = [{"id": f"{'0' * 16}-{i}", "n": i, "m": f"{i:016x}", "k": "create", "c": "x",
                "f": {"text": t}} for i, t in enumerate(texts(1000))]
        if enc is not None:
            for op, v in zip(ops, sample):
                op["v"] = {"e": ["multilingual-e5-small-symmetric", 384, base64.b64encode(enc(v)).decode()]}
        out.setdefault("sealed_bytes_per_1000", {})[name] = len(keys.seal(key, "0" * 16, 1, {"ops": ops}))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["build", "time", "precision"])
    ap.add_argument("--cache", type=Path, default=CACHE, help="where the senders and remotes are kept")
    ap.add_argument("--memories", type=int, default=10_000)
    ap.add_argument("--tree", action="append", default=[], help="a checkout (first: the base); default main, this")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--base-rounds", type=int, help="rounds of the first tree (a slow base), default --rounds")
    ap.add_argument("--cross", action="store_true", help="also join this tree to main's remote (no vectors)")
    ap.add_argument("--limit", type=float, default=3600.0, help="seconds one join may take until all vectors")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    trees = [Path(t).resolve() for t in args.tree] or [Path("/work/main"), ROOT]
    if args.what == "build":
        build(args.cache, args.memories, trees)
        return 0
    result = precision(args.cache, args.memories) if args.what == "precision" else \
        time_joins(args.cache, args.memories, trees, args.rounds, args.cross, args.limit,
                   args.rounds if args.base_rounds is None else args.base_rounds)
    print(json.dumps(result, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

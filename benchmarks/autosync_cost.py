"""What sync after each change costs a write command's end (pmem/autosync.py), two trees side by side.

    python benchmarks/autosync_cost.py --against /path/to/other/checkout [--imports 61] [--rounds 40]
    python benchmarks/autosync_cost.py --against HEAD~3       # a git revision (benchmarks/harness.py)

Prints JSON: the cumulative time of `import pmem.autosync` in fresh processes (`python -X
importtime`, the two trees alternating; min, first quartile and median in us), the pmem modules a
`kick` loads in a fresh process, and the CPU time of one `_changes_to_send` and one `kick` with
nothing to send, both trees' functions in one process, alternating (min and median in us). On a
loaded machine the wall-clock medians mostly measure the load: compare the mins and the CPU times.
Three databases in a temporary folder, 2,000 events each: one that syncs with nothing to send, one
with ten changes due, one without sync tables.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sqlite3
import subprocess
import sys
import tempfile
import time
import timeit
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Tree, median, percentile, schedule  # noqa: E402

HERE = Path(__file__).resolve().parents[1]


def _database(path: Path, sent: int | None) -> Path:
    """events and operations as a store keeps them; sync_state unless `sent` is None."""
    conn = sqlite3.connect(path)
    conn.executescript("CREATE TABLE operations (id TEXT PRIMARY KEY, kind TEXT, summary TEXT, at TEXT, undone_at TEXT);"
                       "CREATE TABLE events (seq INTEGER PRIMARY KEY, op_id TEXT, memory_id TEXT, action TEXT, "
                       "before TEXT, after TEXT, before_vec BLOB, at TEXT);")
    for i in range(2000):
        conn.execute("INSERT INTO operations VALUES (?, 'add', '', '', NULL)", (f"op{i}",))
        conn.execute("INSERT INTO events (op_id, memory_id, action, at) VALUES (?, ?, 'add', '')", (f"op{i}", f"m{i}"))
    if sent is not None:
        conn.execute("CREATE TABLE sync_state (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute("INSERT INTO sync_state VALUES ('exported', ?)", (sent,))
    conn.commit()
    conn.execute("PRAGMA journal_mode = WAL")
    conn.close()
    Path(str(path) + ".sync").mkdir()
    return path


def _import_us(tree: Path, cwd: Path) -> int:
    err = subprocess.run([sys.executable, "-X", "importtime", "-c", "import pmem.autosync"], capture_output=True,
                         text=True, check=True, cwd=cwd, env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"}).stderr
    return next(int(line.split("|")[1]) for line in err.splitlines() if line.rstrip().endswith(" pmem.autosync"))


def _kick_loads(tree: Path, cwd: Path, db: Path) -> list[str]:
    code = ("import sys, json, pmem.autosync as a\na.kick(sys.argv[1])\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('pmem', 'sqlite_vec', 'numpy')))))")
    out = subprocess.run([sys.executable, "-c", code, str(db)], capture_output=True, text=True, check=True, cwd=cwd,
                         env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"}).stdout
    return json.loads(out)


def _autosync(tree: Path, name: str):
    """That tree's pmem/autosync.py, as a module of a package of its own (`name`) whose path is
    the tree's pmem/: its relative imports (the store's glance.py) come from the same tree."""
    package = types.ModuleType(name)
    package.__path__ = [str(tree / "pmem")]
    sys.modules[name] = package
    return importlib.import_module(f"{name}.autosync")


def _summary(values: list[float]) -> list[int]:
    return [round(min(values)), round(percentile(values, 25)), round(median(values))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--against", required=True, help="another checkout's root, or a git revision (its pmem/ is compared)")
    ap.add_argument("--imports", type=int, default=61, help="fresh processes per tree for the import time")
    ap.add_argument("--rounds", type=int, default=40, help="alternating rounds of 50 calls per tree")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        trees = {"this": HERE, "against": Tree.resolve(args.against, folder / "trees").path}
        dbs = {"nothing to send": _database(folder / "syncing.db", 2000),
               "changes due": _database(folder / "due.db", 1990),
               "does not sync": _database(folder / "plain.db", None)}
        imports: dict[str, list[float]] = {name: [] for name in trees}
        for _, name, _ in schedule(list(trees), args.imports):  # the order alternating
            imports[name].append(_import_us(trees[name], folder))
        out: dict = {"import pmem.autosync, us (min, q1, median)": {n: _summary(v) for n, v in imports.items()},
                     "modules a kick loads": {n: _kick_loads(t, folder, dbs["nothing to send"])
                                              for n, t in trees.items()}}
        modules = {name: _autosync(tree, f"autosync_{name}") for name, tree in trees.items()}
        cpu: dict = {}
        for case, db in dbs.items():
            answers = {name: m._changes_to_send(db) for name, m in modules.items()}
            assert len(set(answers.values())) == 1, answers
            for label, fn in (("check", "_changes_to_send"), ("kick", "kick")):
                if label == "kick" and case != "nothing to send":
                    continue  # a kick with changes due starts a background sync
                times: dict[str, list[float]] = {name: [] for name in modules}
                for _ in range(args.rounds):
                    for name, m in modules.items():
                        f = getattr(m, fn)
                        times[name].append(timeit.timeit(lambda f=f, db=db: f(db), number=50, timer=time.process_time) / 50 * 1e6)
                cpu[f"{label}, {case}"] = {n: [round(min(v)), round(median(v))] for n, v in times.items()}
        out["CPU us per call (min, median)"] = cpu
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

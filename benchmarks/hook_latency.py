"""Agent hook latency: whole processes of `pmem hook claude-code user-prompt|session-start`.

    python benchmarks/hook_latency.py                         # this tree, 20 runs each
    python benchmarks/hook_latency.py --tree ../main --tree . # two trees side by side, one run
    python benchmarks/hook_latency.py --tree ../main --tree . --store /work/latency-store/pmem-10000.db \
        --serve --runs 50 --event user-prompt --no-lock      # each tree with its own `pmem serve`

Builds one store of N LoCoMo turns (embedded with the default model, as a user's is) in a
temporary PMEM_HOME, then times each tree's hook processes, interleaved run by run so that load
falls on both alike: a prompt and a session start, each first with the database free and then
while another process holds its write lock (BEGIN IMMEDIATE, as an import or a dream does). Every
run is a new session, so nothing is held back as already given. Reports medians and quartiles in
milliseconds, and how many runs printed memories.

--store copies a built database (latency.py's `--store` folder holds one of 10,000 memories) into
each tree's home instead. --serve gives each tree its own home and its own `pmem serve` (a server
answers its own build only), started before the runs; the hook runs with server = auto. Then it
also reports p50/p95 of wall time and of CPU time: the hook process's, and the server's share
while it ran (from /proc, Linux). Each run's prompt is distinct ("... please (i)"), so no cache
of any kind answers it. --launch script runs what the `pmem` console script runs (a host starts
`pmem hook ...`), instead of `python -m pmem`, which imports runpy's modules first. A --tree is a
checkout folder or a git revision; the trees, the order and the percentiles are benchmarks/harness.py's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import locomo  # noqa: E402
from harness import Tree, median, percentile, schedule  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ["when did Caroline go to the support group", "painting a sunrise", "adoption agency",
           "camping with the kids", "pottery class", "running a charity race"]
HOLD = ("import sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
        "c.execute('BEGIN IMMEDIATE'); print('held', flush=True); sys.stdin.read()")


def build(home: Path, n: int, tree: Tree, store: Path | None = None) -> None:
    home.mkdir(parents=True, exist_ok=True)
    if store is not None:
        shutil.copyfile(store, home / "pmem.db")
        os.chmod(home / "pmem.db", 0o600)
        return
    data = locomo.DATA if locomo.DATA.exists() else ROOT.parents[1] / "shared" / "data" / "locomo_dev.json"
    turns = [r for conv in locomo.load(data) for r in locomo.turn_records(conv)][:n]
    path = home.parent / "turns.jsonl"
    path.write_text("".join(json.dumps({"text": r["text"]}) + "\n" for r in turns))
    env = tree.env(PMEM_HOME=str(home), PMEM_SERVER="never")  # no server of its own: --serve starts one
    # the import's English vectors: after its background fill (reindex --missing waits for it)
    for args in (["import", str(path)], ["reindex", "--missing"], ["add", "--pin", "I am vegetarian"]):
        tree.run(["pmem", *args], env=env, cwd=home)


def _env(tree: Tree, home: Path, server: str) -> dict:
    # the harness drops PYTHONDONTWRITEBYTECODE: users' installs have bytecode; without it every run compiles
    return tree.env(PMEM_HOME=str(home), PMEM_SERVER=server)


def _cpu_of(pid: int | None) -> float:
    """User + system seconds of process `pid` so far (0 when unknown)."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


# How a host starts the hook: the `pmem` console script (what `pmem hook install` writes) runs
# these lines; `python -m pmem` imports runpy first (importlib.util, contextlib...).
LAUNCH = {"module": ["-m", "pmem"],
          "script": ["-c", "import sys\nfrom pmem.cli import main\nsys.exit(main())"]}


def run_hook(tree: Tree, home: Path, event: str, payload: dict, server: str = "never",
             server_pid: int | None = None, launch: str = "module") -> tuple[float, bool, float, float]:
    """(wall ms, whether it printed, the hook process's CPU ms, the server's CPU ms meanwhile)."""
    env = _env(tree, home, server)
    served_before = _cpu_of(server_pid)
    r = tree.run([sys.executable, *LAUNCH[launch], "hook", "claude-code", event], input=json.dumps(payload),
                 env=env, timeout=60, cwd=home, check=False)  # cwd: never the cwd's pmem
    return r.wall_s * 1000, bool(r.stdout.strip()), r.cpu_s * 1000, (_cpu_of(server_pid) - served_before) * 1000


def start_server(tree: Tree, home: Path) -> int:
    env = _env(tree, home, "never")
    tree.run(["pmem", "serve", "--detach", "--idle", "30m"], env=env, cwd=home, timeout=300)
    info = tree.run(["pmem", "serve", "--status", "--json"], env=env, cwd=home).stdout
    return int(json.loads(info)["pid"])


def stop_server(tree: Tree, home: Path) -> None:
    tree.run(["pmem", "serve", "--stop"], env=_env(tree, home, "never"), cwd=home, check=False)


def _p95(values: list[float]) -> float:
    return percentile(values, 95)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", action="append", help="a pmem checkout or git revision (repeat to compare)")
    ap.add_argument("--n", type=int, default=1000, help="memories in the store")
    ap.add_argument("--store", type=Path, help="a built pmem.db to copy instead of importing --n turns")
    ap.add_argument("--serve", action="store_true", help="each tree with its own `pmem serve`, hooks on server = auto")
    ap.add_argument("--event", action="append", choices=("user-prompt", "session-start"),
                    help="the events timed (repeat; default both)")
    ap.add_argument("--no-lock", action="store_true", help="skip the runs under a held write lock")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--launch", choices=tuple(LAUNCH), default="module",
                    help="python -m pmem (default), or the console script's lines, as a host runs `pmem`")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    events = args.event or ["user-prompt", "session-start"]
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:  # short: a server's socket path must fit
        trees = [Tree.resolve(t, Path(tmp) / "trees") for t in (args.tree or [str(ROOT)])]
        by_name = {t.name: t for t in trees}
        if len(by_name) != len(trees):
            raise SystemExit("hook_latency: two trees have the same name")
        homes = {t.name: Path(tmp) / (f"h{i}" if args.serve else "home") for i, t in enumerate(trees)}
        for home in homes.values():
            if not (home / "pmem.db").exists():
                build(home, args.n, trees[-1], args.store)
        servers: dict[str, int] = {}
        results: dict[str, dict[str, list]] = {}
        load = [os.getloadavg()[0]]
        try:
            for tree in trees:
                home = homes[tree.name]
                if args.serve:
                    servers[tree.name] = start_server(tree, home)
                for event in events:  # bytecode written, pages cached, the server's first request made
                    run_hook(tree, home, event, {"session_id": f"warm-{event}", "cwd": tmp, "prompt": "warm up",
                                                 "source": "startup"}, "auto" if args.serve else "never")
            for locked in (False,) if args.no_lock else (False, True):
                holders = []
                if locked:
                    for home in set(homes.values()):
                        holder = subprocess.Popen([sys.executable, "-c", HOLD, str(home / "pmem.db")],
                                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
                        holders.append(holder)
                try:
                    for i, name, _ in schedule(list(by_name), args.runs):  # order alternating
                        tree = by_name[name]
                        for event in events:
                            payload = {"session_id": f"{tree.name}-{locked}-{event}-{i}", "cwd": tmp,
                                       "prompt": f"{PROMPTS[i % len(PROMPTS)]} please ({i})", "source": "startup"}
                            wall, printed, cpu, served = run_hook(tree, homes[name], event, payload,
                                                                  "auto" if args.serve else "never",
                                                                  servers.get(name), args.launch)
                            key = f"{tree.name} {event}" + (" (write lock held)" if locked else "")
                            r = results.setdefault(key, {"ms": [], "printed": [], "cpu": [], "server_cpu": []})
                            r["ms"].append(wall)
                            r["printed"].append(printed)
                            r["cpu"].append(cpu)
                            r["server_cpu"].append(served)
                finally:
                    for holder in holders:
                        assert holder.stdin is not None
                        holder.stdin.close()
                        holder.wait()
        finally:
            for tree in trees:
                if tree.name in servers:
                    stop_server(tree, homes[tree.name])
        load.append(os.getloadavg()[0])
    report = {}
    for key, r in results.items():
        report[key] = {"median_ms": round(median(r["ms"])), "q1_ms": round(percentile(r["ms"], 25)),
                       "q3_ms": round(percentile(r["ms"], 75)),
                       "p95_ms": round(_p95(r["ms"])), "cpu_p50_ms": round(median(r["cpu"])),
                       "cpu_p95_ms": round(_p95(r["cpu"])),
                       "server_cpu_p50_ms": round(median(r["server_cpu"])),
                       "printed": f"{sum(r['printed'])}/{len(r['printed'])}"}
    if args.json:
        print(json.dumps({"load_start": load[0], "load_end": load[1], "launch": args.launch, "results": report},
                         indent=2))
        return
    print(f"load: {load[0]:.2f} at the start, {load[1]:.2f} at the end  memories: "
          f"{'copied from ' + str(args.store) if args.store else args.n}  runs: {args.runs}"
          + ("  (each tree with its own server)" if args.serve else "") + f"  launch: {args.launch}")
    for key, r in report.items():
        print(f"{key:45} p50 {r['median_ms']:4d} ms (q1 {r['q1_ms']}, q3 {r['q3_ms']}) p95 {r['p95_ms']:4d}  "
              f"CPU p50 {r['cpu_p50_ms']} p95 {r['cpu_p95_ms']}, server's {r['server_cpu_p50_ms']}  "
              f"printed {r['printed']}")


if __name__ == "__main__":
    main()

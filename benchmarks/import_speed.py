"""`pmem import` of one LoCoMo conversation, two pmem trees side by side (interleaved runs).

    python benchmarks/import_speed.py --base /work/main --runs 5                # server auto, as a user runs it
    python benchmarks/import_speed.py --base /work/main --runs 5 --server off   # the model in the command
    python benchmarks/import_speed.py --threads 2    # PMEM_THREADS=2: what an idle 2-core machine gets
    python benchmarks/import_speed.py --server running   # a `pmem serve` already up (a command before started it)
    python benchmarks/import_speed.py --anchor /work/anchor-venv/bin/llm --runs 3   # and `llm embed-multi` of the turns
    python benchmarks/import_speed.py --busy-start 1.5   # a core busy for the import's first 1.5 s
    python benchmarks/import_speed.py --setting embed_bulk=float32   # a setting for both trees' commands
    python benchmarks/import_speed.py --base c0f63bc --tree HEAD   # two revisions (the figures of 0070's last round)

Writes one LoCoMo development conversation (conv-43 by default, 680 turns) as pmem JSONL, then
imports it with each tree in turn (PYTHONPATH=<tree>, the same Python), each run in a fresh
PMEM_HOME (no server running: with server auto the command starts one, as a first import does;
`--server running` starts one first, untimed, and counts the CPU it spends during the import),
the models from one shared directory (--models, its caches warm after the first run). The trees
alternate run by run (benchmarks/harness.py: A B, B A, ...), so a machine other work loads hurts
both alike; it prints each run's time, the medians, turns/s and the ratio. A server a run started is
stopped before the next. --base and --tree take a checkout folder or a git revision.

A tree whose import leaves the English second vectors to a background fill (pmem/fill.py)
is waited for until that fill ends, before the next run; the fill's own wall and CPU seconds (from
`pmem.db.fill.json`; `pmem.db.english-fill.json` in a tree from before the one fill) are reported
beside the import's. `--anchor LLM`: each round also runs
`llm embed-multi` (the llm of a separate environment with llm-gguf) storing the same turns' texts with
MiniLM (--anchor-gguf, registered with `llm gguf register-embed-model` in a fresh LLM_USER_PATH,
untimed), the anchor of docs/decisions/0060-import-speed-second-vector.md.
"""

from __future__ import annotations

import argparse
import fcntl
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
import locomo  # noqa: E402
from harness import Bench, Tree, clock, schedule  # noqa: E402

MODELS = ("multilingual-e5-small.q4.e5s1", "all-MiniLM-L6-v2.f16.gguf", "all-MiniLM-L6-v2.q8_0.gguf")


def write_jsonl(path: Path, sample: str) -> int:
    conv = next(c for c in locomo.load() if c["sample_id"] == sample)
    records = locomo.turn_records(conv, thread="session")
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    return len(records)


def models_copy(source: Path, target: Path) -> Path:
    """The model files in a folder of this benchmark's own (their caches are written beside them)."""
    target.mkdir(parents=True, exist_ok=True)
    for name in MODELS:
        if (source / name).exists() and not (target / name).exists():
            shutil.copy2(source / name, target / name)
    return target


def server_cpu(env: dict) -> tuple[int, float] | None:
    """(pid, CPU seconds so far) of the home's running server, None when none runs."""
    proc = subprocess.run([sys.executable, "-m", "pmem", "serve", "--status", "--json"], env=env,
                          capture_output=True, text=True)
    try:
        pid = int(json.loads(proc.stdout)["pid"])
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (ValueError, KeyError, OSError):
        return None
    return pid, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_fill(home: Path, timeout: float = 1800.0) -> tuple[float, float]:
    """(wall, CPU) seconds of the background English fill an import started, once it has ended;
    (0, 0) when none started."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        # the one fill's files (pmem/fill.py); a base tree from before it names them english-fill
        stem = next((home / n for n in ("pmem.db.fill", "pmem.db.english-fill")
                     if (home / f"{n}.json").exists() or (home / f"{n}.lock").exists()), home / "pmem.db.fill")
        state, lock = Path(f"{stem}.json"), Path(f"{stem}.lock")
        try:
            data = json.loads(state.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            if not lock.exists():
                return 0.0, 0.0
            data = {"running": True}
        if not data.get("running"):
            fd = os.open(lock, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_SH)  # until the process has ended
            finally:
                os.close(fd)
            if not data.get("ok"):
                raise SystemExit(f"the English fill failed: {data.get('error')}")
            return float(data["wall_s"]), float(data["cpu_s"])
        time.sleep(0.2)
    raise SystemExit("the English fill did not end")


def anchor_run(llm: str, gguf: Path, data: Path, work: Path) -> tuple[float, float, int]:
    """`llm embed-multi` of the turns' texts with MiniLM through llm-gguf, stored: (wall, CPU, rows)."""
    home = Path(tempfile.mkdtemp(prefix="llm-", dir=work))
    env = {**os.environ, "LLM_USER_PATH": str(home)}
    subprocess.run([llm, "gguf", "register-embed-model", "minilm", str(gguf)], env=env, check=True,
                   capture_output=True)
    texts = home / "turns.json"
    with open(data, encoding="utf-8") as f:
        texts.write_text(json.dumps([{"id": str(i), "content": json.loads(line)["text"]}
                                     for i, line in enumerate(f)]), encoding="utf-8")
    with clock() as took:
        proc = subprocess.run([llm, "embed-multi", "turns", str(texts), "-m", "gguf/minilm", "--store"], env=env,
                              capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"llm embed-multi failed: {proc.stderr[-2000:]}")
    rows = sqlite3.connect(home / "embeddings.db").execute("SELECT count(*) FROM embeddings").fetchone()[0]
    shutil.rmtree(home, ignore_errors=True)
    return took["wall_s"], took["cpu_s"], rows


def one_run(tree: Tree, data: Path, models: Path, server: str, work: Path,
            threads: int = 0, busy: float = 0.0,
            settings: dict[str, str] | None = None) -> tuple[float, float, int, tuple[float, float]]:
    """(wall seconds, CPU seconds of the command, memories stored, the background fill's (wall, CPU));
    with `busy`, another process keeps a core busy for that many seconds from just before the
    command starts (something else running when a person starts an import)."""
    home = Path(tempfile.mkdtemp(prefix="home-", dir=work))
    env = tree.env({k: v for k, v in os.environ.items() if not k.startswith("PMEM_")},
                   PMEM_HOME=str(home), PMEM_MODELS_DIR=str(models), NO_COLOR="1")
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):  # as this script always ran
        env["PYTHONDONTWRITEBYTECODE"] = os.environ["PYTHONDONTWRITEBYTECODE"]
    if server not in ("auto", "running"):
        env["PMEM_SERVER"] = server
    if threads:
        env["PMEM_THREADS"] = str(threads)
    for key, value in (settings or {}).items():  # --setting: a tree that has no such setting ignores it
        env["PMEM_" + key.upper()] = value
    served = None
    if server == "running":
        subprocess.run([sys.executable, "-m", "pmem", "serve", "--detach", "--idle", "10m"], env=env,
                       capture_output=True, check=True, timeout=300)
        served = server_cpu(env)
    # cwd: the home, since `python -m` puts the working directory first on sys.path (run from a
    # checkout, that checkout's pmem would shadow the tree on PYTHONPATH)
    burner = None
    if busy:
        burner = subprocess.Popen([sys.executable, "-c", f"import time\nt = time.time()\nwhile time.time() - t < {busy}: pass"])
        time.sleep(0.1)
    sample = tree.run(["pmem", "import", str(data), "--json"], env=env, cwd=home, check=False)
    if burner is not None:
        burner.wait()
    took, cpu = sample.wall_s, sample.cpu_s
    if served is not None:  # the import's work the server did counts too
        now = server_cpu(env)
        cpu += now[1] - served[1] if now is not None and now[0] == served[0] else 0.0
    if sample.returncode != 0:
        raise SystemExit(f"{tree.path}: pmem import failed ({sample.returncode}): {sample.stderr[-2000:]}")
    fill = wait_fill(home)
    count = subprocess.run([sys.executable, "-c", "import sqlite3,sys; print(sqlite3.connect(sys.argv[1])"
                            ".execute('select count(*) from memories').fetchone()[0])", str(home / "pmem.db")],
                           capture_output=True, text=True).stdout.strip()
    subprocess.run([sys.executable, "-m", "pmem", "serve", "--stop"], env=env, capture_output=True, timeout=60)
    shutil.rmtree(home, ignore_errors=True)
    return took, cpu, int(count or 0), fill


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default="/work/main", help="the tree to compare with (a folder or a git revision)")
    ap.add_argument("--tree", default=str(ROOT), help="this tree (default: the benchmark's own)")
    ap.add_argument("--runs", type=int, default=5, help="runs of each tree (interleaved)")
    ap.add_argument("--server", default="auto", choices=("auto", "off", "always", "running"))
    ap.add_argument("--sample", default="conv-43", help="the LoCoMo conversation")
    ap.add_argument("--warm", type=int, default=1, help="untimed runs of each tree first")
    ap.add_argument("--threads", type=int, default=0, help="PMEM_THREADS for the commands (0: automatic)")
    ap.add_argument("--setting", action="append", default=[], metavar="KEY=VALUE",
                    help="a pmem setting for every command (PMEM_KEY=VALUE; a tree without it ignores it)")
    ap.add_argument("--busy-start", type=float, default=0.0, metavar="SECONDS",
                    help="another process keeps a core busy for SECONDS from just before each pmem import starts")
    ap.add_argument("--models", type=Path, default=Path(tempfile.gettempdir()) / "pmem-import-speed-models")
    ap.add_argument("--anchor", help="the `llm` executable (with llm-gguf) to time `llm embed-multi` of the turns with")
    ap.add_argument("--anchor-gguf", type=Path, help="the MiniLM GGUF the anchor embeds with "
                    "(default: all-MiniLM-L6-v2.f16.gguf of --models-from)")
    ap.add_argument("--models-from", type=Path,
                    default=Path(os.environ.get("PMEM_TEST_MODELS_DIR") or ROOT / ".models-cache"))
    args = ap.parse_args()

    if any("=" not in kv for kv in args.setting):
        ap.error("--setting takes KEY=VALUE")
    settings = dict(kv.split("=", 1) for kv in args.setting)
    work = Path(tempfile.mkdtemp(prefix="pmem-import-speed-"))
    data = work / "conversation.jsonl"
    turns = write_jsonl(data, args.sample)
    models = models_copy(args.models_from, args.models)
    trees = {"base": Tree.resolve(f"base={args.base}", work / "trees"),
             "this": Tree.resolve(f"this={args.tree}", work / "trees")}
    bench = Bench(list(trees.values()))
    names = list(trees) + (["anchor"] if args.anchor else [])
    bench.values.setdefault("anchor", {})
    gguf = args.anchor_gguf or args.models_from / "all-MiniLM-L6-v2.f16.gguf"
    # the warm-up rounds: the models' caches, the page cache and the .pyc files; not counted
    for i, name, counted in schedule(names, args.runs, args.warm):
        if name == "anchor":
            took, cpu, stored = anchor_run(args.anchor, gguf, data, work)
            fill = (0.0, 0.0)
        else:
            took, cpu, stored, fill = one_run(trees[name], data, models, args.server, work, args.threads,
                                              args.busy_start, settings)
        if counted:
            bench.add(name, "import", "wall_s", took)
            bench.add(name, "import", "cpu_s", cpu)
            bench.add(name, "fill", "wall_s", fill[0])
            bench.add(name, "fill", "cpu_s", fill[1])
            print(f"run {i + 1} {name}: {took:.2f} s, CPU {cpu:.2f} s ({stored} memories)"
                  + (f"; English fill after it {fill[0]:.2f} s, CPU {fill[1]:.2f} s" if fill[0] else ""), flush=True)
    shutil.rmtree(work, ignore_errors=True)
    print(f"\n{turns} turns, server {args.server}, threads {args.threads or 'automatic'}, {args.runs} runs each, "
          f"settings {settings or 'default'}, "
          f"load {os.getloadavg()[0]:.1f}" + (f", a core busy for the first {args.busy_start:g} s" if args.busy_start else ""))
    med = {k: bench.median(k, "import") for k in names}
    cpu_med = {k: bench.median(k, "import", "cpu_s") for k in names}
    for name in names:
        what = "llm embed-multi" if name == "anchor" else (trees[name].revision or trees[name].path)
        fill = bench.median(name, "fill")
        print(f"{name:6} {what}: median {med[name]:.2f} s, {turns / med[name]:.0f} turns/s, "
              f"CPU {cpu_med[name]:.2f} s (runs {' '.join(f'{t:.2f}' for t in bench.values[name]['import']['wall_s'])})"
              + (f"; English fill after it {fill:.2f} s, CPU {bench.median(name, 'fill', 'cpu_s'):.2f} s"
                 if fill else ""))
    print(f"this / base: {med['this'] / med['base']:.2f} wall, {cpu_med['this'] / cpu_med['base']:.2f} CPU")
    if args.anchor:
        print(f"this / anchor: {med['this'] / med['anchor']:.2f} wall, {cpu_med['this'] / cpu_med['anchor']:.2f} CPU; "
              f"base / anchor: {med['base'] / med['anchor']:.2f} wall")


if __name__ == "__main__":
    main()

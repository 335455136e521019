"""End-to-end CLI latency and bulk import throughput, with the real embedding model.

    python benchmarks/latency.py                    # 10,000 memories, 15 runs per command
    python benchmarks/latency.py --n 10000 --runs 15 --json

Builds a database of N LoCoMo-style memories (the dev conversations' turns, repeated with a
suffix to reach N) by `pmem import` (timed: memories per second), then times whole processes
(start to exit) of `pmem search`, `pmem add`, `pmem list` and `pmem recall`, reporting medians and
quartiles: first with `server = never` (every command loads the model itself), then as a user
who never started a server gets it (`server = auto`): the first command, cold, starts one in
the background and the next ones use it. That round also times the agent hook `user-prompt`
(p50 and p95 over --prompts prompts) and MCP `initialize` (spawn included). `--no-serve` skips it.
`--data` names the LoCoMo file when ../shared is elsewhere.

It measures the installed pmem, as a user runs it: the processes start in the temporary
directory, so `python -m pmem` imports the copy that `pip install .` put in site-packages (with
its bytecode compiled), not this source tree. Reinstall after changing the code. The JSON says
which copy ran.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import locomo  # noqa: E402

QUERIES = ["cabin internet password", "who approves deploys", "when did Caroline go to the support group",
           "painting a sunrise", "plans for the summer", "adoption agency", "camping with the kids",
           "favourite books", "pottery class", "running a charity race"]


def records(n: int, data: Path = locomo.DATA) -> list[dict]:
    base = [r for conv in locomo.load(data) for r in locomo.turn_records(conv)]
    out = []
    i = 0
    while len(out) < n:
        r = dict(base[i % len(base)])
        if i >= len(base):
            r["text"] = f"{r['text']} (copy {i // len(base)})"
        out.append(r)
        i += 1
    return out


def timed(cmd: list[str], env: dict, stdin: str | None = None) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, env=env, input=stdin, text=True, capture_output=True, check=True, cwd=env["PMEM_HOME"])
    return time.perf_counter() - t


def summary(xs: list[float]) -> dict:
    q = statistics.quantiles(xs, n=4)
    return {"median_s": round(statistics.median(xs), 3), "q1_s": round(q[0], 3), "q3_s": round(q[2], 3),
            "runs": len(xs)}


def percentiles(xs: list[float]) -> dict:
    q = statistics.quantiles(xs, n=20)
    return {"p50_ms": round(1000 * statistics.median(xs)), "p95_ms": round(1000 * q[18]), "runs": len(xs)}


def mcp_initialize(pmem: list[str], env: dict) -> float:
    """Spawn `pmem mcp` and time it until `initialize` is answered."""
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "b", "version": "0"}}}
    t = time.perf_counter()
    proc = subprocess.Popen([*pmem, "mcp"], env=env, cwd=env["PMEM_HOME"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write((json.dumps(init) + "\n").encode())
    proc.stdin.flush()
    json.loads(proc.stdout.readline())
    dt = time.perf_counter() - t
    proc.stdin.close()
    proc.wait(30)
    return dt


def wait_for_server(pmem: list[str], env: dict, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if subprocess.run([*pmem, "serve", "--status"], env=env, capture_output=True, cwd=env["PMEM_HOME"]).returncode == 0:
            return
        time.sleep(0.2)
    raise RuntimeError("no server started")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-serve", action="store_true", help="skip the round with `pmem serve` running")
    ap.add_argument("--prompts", type=int, default=50, help="hook prompts timed")
    ap.add_argument("--data", type=Path, default=locomo.DATA)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        env = {**os.environ, "PMEM_HOME": tmp, "PMEM_SERVER": "never"}
        # Some sandboxes set this; users do not, and without cached bytecode every process
        # would compile pmem's modules again.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        if "PMEM_MODELS_DIR" not in env:
            env["PMEM_MODELS_DIR"] = str(Path(__file__).resolve().parents[1] / ".models-cache")
        pmem = [sys.executable, "-m", "pmem"]
        subprocess.run([*pmem, "models", "pull"], env=env, check=True, capture_output=True, cwd=tmp)
        where = subprocess.run([sys.executable, "-c", "import pmem; print(pmem.__file__)"], env=env, cwd=tmp,
                               capture_output=True, text=True, check=True).stdout.strip()
        data = "".join(json.dumps(r) + "\n" for r in records(args.n, args.data))
        t_import = timed([*pmem, "import", "-"], env, data)
        load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
        result = {"pmem": where, "memories": args.n, "import_s": round(t_import, 2),
                  "import_per_s": round(args.n / t_import, 1), "uptime_start": load}
        commands = [
            ("search", lambda i: [*pmem, "search", QUERIES[i % len(QUERIES)], "--json"]),
            ("add", lambda i: [*pmem, "add", f"benchmark note number {i} about the garden"]),
            ("list", lambda i: [*pmem, "list"]),
            ("recall", lambda i: [*pmem, "recall", QUERIES[i % len(QUERIES)]]),
        ]
        for name, make in commands:
            timed(make(-1), env)  # warm the page cache
            result[name] = summary([timed(make(i), env) for i in range(args.runs)])
        if not args.no_serve:
            auto = {**env, "PMEM_SERVER": "auto"}
            try:
                # A user who never started a server: the first command is cold and starts one.
                first = [timed(commands[0][1](-2), auto)]
                wait_for_server(pmem, auto)
                result["auto"] = {"first_search_s": round(first[0], 3)}
                for name, make in commands:
                    if name == "list":
                        continue  # needs no model
                    timed(make(-1), auto)
                    result["auto"][name] = summary([timed(make(i + 1000), auto) for i in range(args.runs)])
                hook = [*pmem, "hook", "claude-code", "user-prompt"]
                prompts = [json.dumps({"prompt": f"{QUERIES[i % len(QUERIES)]} please ({i})", "session_id": f"s{i}"})
                           for i in range(args.prompts)]
                result["auto"]["hook_user_prompt"] = percentiles([timed(hook, auto, p) for p in prompts])
                result["auto"]["mcp_initialize"] = summary([mcp_initialize(pmem, auto) for _ in range(args.runs)])
            finally:
                subprocess.run([*pmem, "serve", "--stop"], env=auto, capture_output=True, cwd=tmp)
        result["python_startup"] = summary([timed([sys.executable, "-c", "pass"], env) for _ in range(args.runs)])
        result["uptime_end"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""End-to-end CLI latency as a user meets it, side by side with `llm similar`, with the real models.

    python benchmarks/latency.py --store /tmp/pmem-latency --anchor /work/anchor-venv/bin/llm
    python benchmarks/latency.py --n 1000 --runs 7 --prompts 50 --json      # no anchor, a small store

The store of N LoCoMo-style memories (the dev conversations' turns, repeated with a suffix to reach
N) is built once into --store and copied for each run, so the slow part (embedding) is paid once:
the distinct turns are embedded by the store's model and each copy carries its turn's vector (the
copies differ by " (copy K)" only; what a search costs does not depend on which vectors they are).
Without --store a fresh store is imported with `pmem import` (timed: memories per second).

Then whole processes (start to exit), in rounds, each command next to the others in every round:

- `pmem search` as a user who never started a server (`server = auto`): the first command is cold
  (no server: it loads the model itself and starts one in the background; the round stops that
  server first), the next one finds it; `pmem search` with `server = never`; `pmem add`; `pmem list`
  and `python -c pass` (the machine's speed, to scale by);
- `llm similar COLLECTION -c QUERY` (--anchor: the llm executable of a separate environment with
  llm-gguf and MiniLM registered; see docs/decisions/0037-llm-similar-anchor.md), over the same turns,
  embedded into an llm collection once (kept in --store too).

After the rounds, with the server running: the agent hook `user-prompt` (p50 and p95 over --prompts
prompts) and MCP `initialize` (spawn included; and to the answers of `tools/list` and of a first
`tools/call`, `recall`). Each figure is a median of wall time and of CPU time (user + system of the
process): on a shared machine the CPU time is the one that does not depend on what else runs.

It measures the pmem that `python -m pmem` imports from the temporary directory: the installed one,
or the tree on PYTHONPATH. The JSON says which copy ran.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import locomo  # noqa: E402
from harness import clock  # noqa: E402

QUERIES = ["cabin internet password", "who approves deploys", "when did Caroline go to the support group",
           "painting a sunrise", "plans for the summer", "adoption agency", "camping with the kids",
           "favourite books", "pottery class", "running a charity race"]
COPY = re.compile(r" \(copy \d+\)$")
COLLECTION = "turns"


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


def run(cmd: list[str], env: dict, stdin: str | None = None) -> tuple[float, float]:
    """(wall, CPU) seconds of one whole process."""
    with clock() as t:
        subprocess.run(cmd, env=env, input=stdin, text=True, capture_output=True, check=True, cwd=env["PMEM_HOME"])
    return t["wall_s"], t["cpu_s"]


def summary(pairs: list[tuple[float, float]]) -> dict:
    walls = [w for w, _ in pairs]
    out = {"median_s": round(statistics.median(walls), 3), "cpu_s": round(statistics.median(c for _, c in pairs), 3),
           "runs": len(pairs)}
    if len(walls) >= 2:
        q = statistics.quantiles(walls, n=4)
        out.update(q1_s=round(q[0], 3), q3_s=round(q[2], 3))
    return out


def percentiles(pairs: list[tuple[float, float]]) -> dict:
    walls = [w for w, _ in pairs]
    cpus = [c for _, c in pairs]
    q, qc = statistics.quantiles(walls, n=20), statistics.quantiles(cpus, n=20)
    return {"p50_ms": round(1000 * statistics.median(walls)), "p95_ms": round(1000 * q[18]),
            "cpu_p50_ms": round(1000 * statistics.median(cpus)), "cpu_p95_ms": round(1000 * qc[18]),
            "runs": len(pairs)}


def build_store(db: Path, n: int, data: Path, env: dict) -> dict:
    """The store of `n` records at `db`, its distinct texts embedded once (see the module's doc)."""
    tmp = db.with_suffix(".building")
    tmp.unlink(missing_ok=True)
    code = f"""
import json, re, sys, time
from pathlib import Path
from pmem import MemoryStore
from pmem.transfer import parse_jsonl
sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
import latency
recs = latency.records({n}, Path({str(data)!r}))
memories = parse_jsonl(json.dumps(r) for r in recs)
store = MemoryStore(Path({str(tmp)!r}))
t = time.perf_counter()
base = {{}}
for m in memories:
    base.setdefault(latency.COPY.sub("", m.text), None)
texts = list(base)
for text, blob in zip(texts, store.embed(texts)):
    base[text] = blob
embed_s = time.perf_counter() - t
store.insert(memories, vectors=[base[latency.COPY.sub("", m.text)] for m in memories], summary="latency store")
store.checkpoint()
store.close()
print(json.dumps({{"memories": len(memories), "embedded": len(texts), "embed_s": round(embed_s, 1),
                  "build_s": round(time.perf_counter() - t, 1)}}))
"""
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=env["PMEM_HOME"],
                         capture_output=True, text=True, check=True).stdout
    for suffix in ("-wal", "-shm"):
        Path(str(tmp) + suffix).unlink(missing_ok=True)
    tmp.rename(db)
    return json.loads(out.strip().splitlines()[-1])


def build_anchor(llm: str, home: Path, n: int, data: Path, model: str, gguf: Path | None = None) -> dict:
    """An llm collection of the same `n` texts: the distinct ones embedded by `llm embed-multi`,
    each copy a row with its turn's vector (llm similar reads every row: its cost is the rows').
    `gguf`: a GGUF embedding model registered with llm-gguf first, as `model` ("gguf/NAME")."""
    recs = records(n, data)
    home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "LLM_USER_PATH": str(home)}
    if gguf is not None:
        subprocess.run([llm, "gguf", "register-embed-model", model.removeprefix("gguf/"), str(gguf)], env=env,
                       check=True, capture_output=True)
    distinct: dict[str, str] = {}
    for i, r in enumerate(recs):
        distinct.setdefault(COPY.sub("", r["text"]), str(i))
    src = home / "distinct.json"
    src.write_text(json.dumps([{"id": i, "content": t} for t, i in distinct.items()]))
    t = time.perf_counter()
    subprocess.run([llm, "embed-multi", COLLECTION, str(src), "-m", model, "--batch-size", "64"], env=env,
                   check=True, capture_output=True)
    embed_s = time.perf_counter() - t
    conn = sqlite3.connect(home / "embeddings.db")
    with conn:
        cid = conn.execute("SELECT id FROM collections WHERE name = ?", (COLLECTION,)).fetchone()[0]
        rows = {content_id: row for content_id, *row in conn.execute(
            "SELECT id, embedding, content_hash, updated FROM embeddings WHERE collection_id = ?", (cid,))}
        for i, r in enumerate(recs):
            if str(i) in rows:
                continue
            embedding, _, updated = rows[distinct[COPY.sub("", r["text"])]]
            conn.execute("INSERT INTO embeddings (collection_id, id, embedding, content_hash, updated) "
                         "VALUES (?, ?, ?, ?, ?)", (cid, str(i), embedding,
                                                    hashlib.md5(r["text"].encode()).digest(), updated))
    count = conn.execute("SELECT count(*) FROM embeddings WHERE collection_id = ?", (cid,)).fetchone()[0]
    conn.close()
    built = {"rows": count, "embedded": len(distinct), "embed_s": round(embed_s, 1)}
    (home / "built.json").write_text(json.dumps(built))
    return built


def mcp_initialize(pmem: list[str], env: dict, topic: str) -> tuple[tuple[float, float], float, float]:
    """Spawn `pmem mcp` and do what a client does: ((wall, CPU) until `initialize` is answered, wall
    until `tools/list` is, wall until a first `tools/call` (`recall` of `topic`) is); the CPU time
    is the whole process's, to its exit."""
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "b", "version": "0"}}}
    call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "recall", "arguments": {"topic": topic}}}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.Popen([*pmem, "mcp"], env=env, cwd=env["PMEM_HOME"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write((json.dumps(init) + "\n").encode())
    proc.stdin.flush()
    json.loads(proc.stdout.readline())
    dt = time.perf_counter() - t
    proc.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n'
                     b'{"jsonrpc": "2.0", "id": 2, "method": "tools/list"}\n')
    proc.stdin.flush()
    assert "tools" in json.loads(proc.stdout.readline())["result"]
    listed = time.perf_counter() - t
    proc.stdin.write((json.dumps(call) + "\n").encode())
    proc.stdin.flush()
    assert not json.loads(proc.stdout.readline())["result"].get("isError")
    called = time.perf_counter() - t
    proc.stdin.close()
    proc.wait(30)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (dt, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)), listed, called


def server_status(pmem: list[str], env: dict) -> bool:
    return subprocess.run([*pmem, "serve", "--status"], env=env, capture_output=True,
                          cwd=env["PMEM_HOME"]).returncode == 0


def wait_for_server(pmem: list[str], env: dict, up: bool = True, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server_status(pmem, env) == up:
            return
        time.sleep(0.2)
    raise RuntimeError("no server started" if up else "the server did not stop")


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=7, help="rounds (each command once per round)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-serve", action="store_true", help="skip the hook and MCP figures")
    ap.add_argument("--prompts", type=int, default=50, help="hook prompts timed")
    ap.add_argument("--data", type=Path, default=locomo.DATA)
    ap.add_argument("--store", type=Path, help="folder where the built store (and the anchor's collection) "
                    "are kept between runs")
    ap.add_argument("--anchor", help="the `llm` executable to time `llm similar` with (its own environment, "
                    "with an embedding model registered)")
    ap.add_argument("--anchor-model", default="gguf/minilm", help="the anchor's embedding model id")
    ap.add_argument("--anchor-gguf", type=Path, help="a GGUF embedding model to register with llm-gguf as "
                    "--anchor-model first (pmem's converted MiniLM)")
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
        result: dict = {"pmem": where, "memories": args.n, "uptime_start": uptime()}
        if args.store:
            args.store.mkdir(parents=True, exist_ok=True)
            built = args.store / f"pmem-{args.n}.db"
            if not built.exists():
                result["store_build"] = build_store(built, args.n, args.data, {**env, "PMEM_HOME": str(args.store)})
            shutil.copyfile(built, Path(tmp) / "pmem.db")
            os.chmod(Path(tmp) / "pmem.db", 0o600)
        else:
            data = "".join(json.dumps(r) + "\n" for r in records(args.n, args.data))
            wall, _ = run([*pmem, "import", "-"], env, data)
            result.update(import_s=round(wall, 2), import_per_s=round(args.n / wall, 1))
            run([*pmem, "reindex", "--missing"], env, "")  # the English vectors the import left to a background fill
        anchor = None
        if args.anchor:
            home = (args.store or Path(tmp)) / f"llm-{args.n}"
            if not (home / "built.json").exists():
                result["anchor_build"] = build_anchor(args.anchor, home, args.n, args.data, args.anchor_model,
                                                      args.anchor_gguf)
            anchor = {**env, "LLM_USER_PATH": str(home)}
        auto = {**env, "PMEM_SERVER": "auto"}
        steps = {
            "search_first": (lambda i: [*pmem, "search", QUERIES[i % len(QUERIES)], "--json"], auto),
            "search_next": (lambda i: [*pmem, "search", QUERIES[(i + 3) % len(QUERIES)], "--json"], auto),
            "search_never": (lambda i: [*pmem, "search", QUERIES[(i + 5) % len(QUERIES)], "--json"], env),
            "add_next": (lambda i: [*pmem, "add", f"benchmark note number {i} about the garden"], auto),
            "recall_next": (lambda i: [*pmem, "recall", QUERIES[(i + 7) % len(QUERIES)]], auto),
            "list": (lambda i: [*pmem, "list"], env),
            "python_pass": (lambda i: [sys.executable, "-c", "pass"], env),
        }
        if anchor:
            steps["llm_similar"] = (lambda i: [args.anchor, "similar", COLLECTION, "-c", QUERIES[i % len(QUERIES)]],
                                    anchor)
        timings: dict[str, list] = {name: [] for name in steps}
        run(steps["search_never"][0](-1), env)  # the page cache, and the model's cache files
        if anchor:
            run(steps["llm_similar"][0](-1), anchor)
        try:
            for i in range(args.runs):
                subprocess.run([*pmem, "serve", "--stop"], env=auto, capture_output=True, cwd=tmp)
                wait_for_server(pmem, auto, up=False)
                for name, (make, e) in steps.items():
                    if name == "search_next":
                        wait_for_server(pmem, auto)  # the one the first command started
                    timings[name].append(run(make(i), e))
            result.update({name: summary(pairs) for name, pairs in timings.items()})
            if anchor:
                result["ratio_to_llm_similar"] = {
                    name: {"wall": round(statistics.median(timings[name][i][0] / timings["llm_similar"][i][0]
                                                           for i in range(args.runs)), 3),
                           "cpu": round(statistics.median(timings[name][i][1] / timings["llm_similar"][i][1]
                                                          for i in range(args.runs)), 3)}
                    for name in steps if name != "llm_similar"}
            if not args.no_serve:
                wait_for_server(pmem, auto)
                hook = [*pmem, "hook", "claude-code", "user-prompt"]
                prompts = [json.dumps({"prompt": f"{QUERIES[i % len(QUERIES)]} please ({i})", "session_id": f"s{i}"})
                           for i in range(args.prompts)]
                result["hook_user_prompt"] = percentiles([run(hook, auto, p) for p in prompts])
                mcp = [mcp_initialize(pmem, auto, QUERIES[i % len(QUERIES)]) for i in range(args.runs)]
                result["mcp_initialize"] = summary([m[0] for m in mcp])
                result["mcp_tools_listed_s"] = round(statistics.median(m[1] for m in mcp), 3)
                result["mcp_first_call_s"] = round(statistics.median(m[2] for m in mcp), 3)
        finally:
            subprocess.run([*pmem, "serve", "--stop"], env=auto, capture_output=True, cwd=tmp)
        result["uptime_end"] = uptime()
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

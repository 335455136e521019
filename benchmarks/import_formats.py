"""`pmem import` of agents' histories as they lie on disk: a Codex CLI home of 10,000 messages.

    python benchmarks/import_formats.py                                  # default settings (the e5 model)
    PMEM_EMBED_MODEL=fake-64 python benchmarks/import_formats.py         # reading and storing alone
    python benchmarks/import_formats.py --messages 2000 --runs 1         # a quicker look

Writes `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl` files the way Codex writes them
(pmem.integrations.importers.codex.rollout_line; shapes in tests/data/codex/README.md): per
session a `session_meta` line, and per turn a `turn_context`, the user's message twice (a
`response_item` and an `event_msg`), a reasoning item, a shell call and its output, the answer
twice, and a token count; the first turn also carries Codex's AGENTS.md and environment context.
Then runs `pmem import <home>/sessions` as a user would, a new process in a new PMEM_HOME each
time (models from PMEM_MODELS_DIR, else the tests' cache), and reports the median of `--runs`
wall times and turns (messages kept) per second, and the import process's CPU time (steadier
than wall time on a shared machine). A server the import started is stopped after.
Before that it times the reading alone (`importers.load` in this process, nothing stored).
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
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from pmem.integrations.importers.codex import rollout_line  # noqa: E402

WORDS = ("the parser reader writer test fixture module function class import export config option flag "
         "file line lines newline split join loop index cache queue lock thread process socket server "
         "client request response error warning timeout retry backoff schema migration column table "
         "query index vector keyword search rank score fusion model prompt token budget limit bound "
         "fix add remove rename move refactor document measure profile speed memory disk network").split()


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def write_home(home: Path, messages: int, per_session: int, seed: int = 7) -> int:
    """A Codex home holding `messages` messages (half the user's, half Codex's answers)."""
    rng = random.Random(seed)
    start = datetime(2025, 9, 1, 9, 0, tzinfo=timezone.utc)
    written = 0
    session = 0
    while written < messages:
        sid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        at = start + timedelta(hours=7 * session)
        cwd = f"/home/sam/project-{session % 12}"
        day = home / "sessions" / f"{at:%Y}" / f"{at:%m}" / f"{at:%d}"
        day.mkdir(parents=True, exist_ok=True)

        def ts(seconds: float, at: datetime = at) -> str:
            return (at + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"

        lines = [rollout_line(ts(0), "session_meta", {
            "id": sid, "timestamp": ts(0), "cwd": cwd, "originator": "codex_cli_rs", "cli_version": "0.65.0",
            "instructions": None, "source": "cli", "model_provider": "openai",
            "git": {"commit_hash": "%040x" % rng.getrandbits(160), "branch": "main"}})]
        lines.append(rollout_line(ts(0.1), "response_item", {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": f"# AGENTS.md instructions for {cwd}\n\n<INSTRUCTIONS>\n"
                                           f"{sentence(rng, 40)}\n</INSTRUCTIONS>"}]}))
        lines.append(rollout_line(ts(0.1), "response_item", {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": f"<environment_context>\n  <cwd>{cwd}</cwd>\n  <shell>bash</shell>\n"
                                           "</environment_context>"}]}))
        turns = min(per_session // 2, (messages - written + 1) // 2)
        for k in range(turns):
            t = 60.0 * k + 5
            ask = sentence(rng, rng.randint(8, 30))
            answer = " ".join(sentence(rng, rng.randint(10, 25)) for _ in range(rng.randint(1, 4)))
            lines += [
                rollout_line(ts(t), "turn_context", {"cwd": cwd, "approval_policy": "on-request",
                                                     "sandbox_policy": {"type": "workspace-write"},
                                                     "model": "gpt-5-codex", "effort": "medium", "summary": "auto"}),
                rollout_line(ts(t + 0.1), "response_item", {"type": "message", "role": "user",
                                                            "content": [{"type": "input_text", "text": ask}]}),
                rollout_line(ts(t + 0.1), "event_msg", {"type": "user_message", "message": ask, "images": None,
                                                        "local_images": [], "text_elements": []}),
                rollout_line(ts(t + 2), "response_item", {"type": "reasoning", "summary": [
                    {"type": "summary_text", "text": sentence(rng, 6)}], "content": None,
                    "encrypted_content": "gAAAA" + "x" * 400}),
                rollout_line(ts(t + 3), "response_item", {"type": "function_call", "name": "shell_command",
                                                          "arguments": json.dumps({"command": "rg parser",
                                                                                   "workdir": cwd}),
                                                          "call_id": f"call_{k}"}),
                rollout_line(ts(t + 4), "response_item", {"type": "function_call_output", "call_id": f"call_{k}",
                                                          "output": "\n".join(sentence(rng, 8) for _ in range(20))}),
                rollout_line(ts(t + 9), "response_item", {"type": "message", "role": "assistant",
                                                          "content": [{"type": "output_text", "text": answer}]}),
                rollout_line(ts(t + 9), "event_msg", {"type": "agent_message", "message": answer}),
                rollout_line(ts(t + 9.5), "event_msg", {"type": "token_count", "info": None, "rate_limits": None}),
            ]
            written += 2
        name = f"rollout-{at:%Y-%m-%dT%H-%M-%S}-{sid}.jsonl"
        (day / name).write_text("\n".join(lines) + "\n")
        session += 1
    return written


def import_once(sessions: Path, env: dict[str, str]) -> tuple[float, float, dict]:
    """(wall seconds, CPU seconds of the import process, its --json summary)."""
    with tempfile.TemporaryDirectory(prefix="pmem-home-") as home:
        run_env = {**env, "PMEM_HOME": home}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "pmem", "import", str(sessions), "--json"], env=run_env,
                              capture_output=True, text=True)
        elapsed = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        sock = Path(home) / "pmem.sock"
        if sock.exists():
            from pmem.models import serve

            serve.stop(sock, timeout=5.0)
        if proc.returncode != 0:
            raise SystemExit(f"pmem import failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
        return elapsed, cpu, json.loads(proc.stdout)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--per-session", type=int, default=50, help="messages per session (user and Codex)")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    env = dict(os.environ)
    env.setdefault("PMEM_MODELS_DIR", str(Path(os.environ.get("PMEM_TEST_MODELS_DIR", ROOT / ".models-cache"))))
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    with tempfile.TemporaryDirectory(prefix="codex-home-") as tmp:
        home = Path(tmp)
        messages = write_home(home, args.messages, args.per_session)
        files = list((home / "sessions").rglob("*.jsonl"))
        size = sum(f.stat().st_size for f in files)
        print(f"codex home: {messages:,} messages in {len(files)} rollouts, {size / 1e6:.1f} MB "
              f"(embedder: {env.get('PMEM_EMBED_MODEL') or 'default'})", flush=True)
        parse = []
        for _ in range(args.runs):  # reading alone, in this process: files, JSON, the turns kept
            from pmem.integrations.importers import load

            t0 = time.perf_counter()
            plan = load(home / "sessions")
            parse.append(time.perf_counter() - t0)
        print(f"  reading (importers.load, in process): median {statistics.median(parse):.2f} s, "
              f"{len(plan.records):,} turns, {len(plan.records) / statistics.median(parse):,.0f} turns/s", flush=True)
        times, cpus = [], []
        for run in range(args.runs):
            elapsed, cpu, result = import_once(home / "sessions", env)
            if result["imported"] != messages:
                raise SystemExit(f"imported {result['imported']} memories, expected {messages}")
            times.append(elapsed)
            cpus.append(cpu)
            print(f"  run {run + 1}: {elapsed:.1f} s wall, {cpu:.1f} s CPU, {result['imported']:,} turns, "
                  f"load average {os.getloadavg()[0]:.1f}", flush=True)
        median = statistics.median(times)
        print(f"median of {len(times)}: {median:.1f} s, {messages / median:,.0f} turns/s "
              f"(CPU {statistics.median(cpus):.1f} s: {messages / statistics.median(cpus):,.0f} turns per CPU second)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

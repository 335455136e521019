"""Importing a Gemini CLI history: synthetic sessions in Gemini CLI 0.61's own format, imported twice.

    PMEM_EMBED_MODEL=fake-384 python benchmarks/gemini_import.py                    # 50 sessions x 200 = 10,000 messages
    python benchmarks/gemini_import.py --sessions 5 --messages 40 --model multilingual-e5-small   # with the real model

Writes `<dir>/.gemini/tmp/<project>/chats/session-*.jsonl` as Gemini CLI 0.61 writes them (the
shapes of tests/data/gemini/session-0.61.0-resumed.jsonl): a header, the `<session_context>`
message in a `$set`, each prompt and answer a line followed by a `$set` of `lastUpdated`, each
answer written a second time (Gemini adds its token counts), thoughts on answers, pmem's marked
session-start block in front of each session's first prompt (its `<` and `>` escaped, as Gemini
does), and one `/rewind` per session that undoes its last two messages. Then times
`importers.load` (read, replay, strip pmem's blocks) and `run_import` into a new database, with
the time spent embedding measured inside it; then imports again (nothing may be added).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORDS = ("the a my our this that next last new old small big early late good long short trip train "
         "flight hotel dinner recipe garden tomato bread coffee tea bike book film song guitar class "
         "project deadline meeting report budget plan sister friend doctor Monday weekend morning "
         "summer Lisbon Oslo Kyoto want need like try start finish move buy cook visit call fix").split()


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 18))).capitalize() + "."


def _text(rng: random.Random) -> str:
    return " ".join(_sentence(rng) for _ in range(rng.randint(1, 4)))


def _at(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"


def session_lines(rng: random.Random, n: int, start: float, block: str) -> list[dict]:
    sid = str(uuid.UUID(int=rng.getrandbits(128)))
    lines: list[dict] = [{"sessionId": sid, "projectHash": "ab" * 32, "startTime": _at(start),
                          "lastUpdated": _at(start), "kind": "main"},
                         {"$set": {"messages": [{"id": "d04923d38bb0f6017037e74183378ef4", "timestamp": _at(start),
                                                 "type": "user", "content": [{"text": "<session_context>\nThis is "
                                                 "the Gemini CLI.\n</session_context>"}]}], "lastUpdated": _at(start)}}]
    t = start
    ids = []
    for i in range(n):
        t += rng.uniform(2, 60)
        mid = str(uuid.UUID(int=rng.getrandbits(128)))
        ids.append(mid)
        if i % 2 == 0:
            text = _text(rng)
            if i == 0:
                text = f"<hook_context>{block}</hook_context>\n\n{text}"
            lines.append({"id": mid, "timestamp": _at(t), "type": "user", "content": [{"text": text}]})
        else:
            answer = {"id": mid, "timestamp": _at(t), "type": "gemini", "content": _text(rng),
                      "thoughts": [{"subject": "Thinking", "description": _sentence(rng), "timestamp": _at(t)}],
                      "model": "gemini-2.5-flash"}
            lines.append(answer)
            lines.append({"$set": {"lastUpdated": _at(t)}})
            answer = {**answer, "tokens": {"input": 900, "output": 60, "cached": 0, "thoughts": 40, "tool": 0,
                                           "total": 1000}}
        lines.append({"$set": {"lastUpdated": _at(t)}})
        if i % 2 == 1:
            lines.append(answer)
    lines.append({"$rewindTo": ids[-2]})
    return lines


def build(folder: Path, sessions: int, messages: int, seed: int = 7) -> tuple[int, int]:
    """The history; returns (turns the import should keep, bytes written)."""
    from pmem import ownblocks

    rng = random.Random(seed)
    chats = folder / ".gemini" / "tmp" / "bench" / "chats"
    chats.mkdir(parents=True)
    (chats.parent / ".project_root").write_text("/home/sam/bench")
    block = ownblocks.mark("# From the user's memory (pmem; quote it, do not invent more)\n\n## Core (always true "
                           "for this user)\n- [2026-01-02 · ab12cd34] My cat is called Miso")
    block = block.replace("<", "&lt;").replace(">", "&gt;")
    size = 0
    for s in range(sessions):
        start = 1_767_225_600 + s * 86_400
        path = chats / f"session-{_at(start)[:16].replace(':', '-')}-{s:08x}.jsonl"
        text = "".join(json.dumps(r) + "\n" for r in session_lines(rng, messages, start, block))
        path.write_text(text)
        size += len(text.encode())
    return sessions * (messages - 2), size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=50)
    ap.add_argument("--messages", type=int, default=200, help="messages a session (even)")
    ap.add_argument("--model", help="PMEM_EMBED_MODEL for this run (default: the environment's, else fake-384)")
    args = ap.parse_args()
    os.environ["PMEM_EMBED_MODEL"] = args.model or os.environ.get("PMEM_EMBED_MODEL", "fake-384")
    from pmem import MemoryStore
    from pmem.config import load as load_config
    from pmem.integrations.importers import load, run_import

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["PMEM_HOME"] = str(Path(tmp) / "pmem-home")
        kept, size = build(Path(tmp) / "home", args.sessions, args.messages)
        folder = Path(tmp) / "home" / ".gemini" / "tmp"
        t = time.perf_counter()
        plan = load(folder)
        parse = time.perf_counter() - t
        assert len(plan.records) == kept, (len(plan.records), kept)
        assert not any("pmem:block" in m.text for m in plan.records)
        with MemoryStore(Path(tmp) / "bench.db", config=load_config()) as store:
            _ = store.embedder
            spent = [0.0]
            real_embed = store.embed

            def timed(texts, progress=None, batch=64):
                t0 = time.perf_counter()
                try:
                    return real_embed(texts, progress=progress, batch=batch)
                finally:
                    spent[0] += time.perf_counter() - t0

            store.embed = timed  # type: ignore[method-assign]
            t = time.perf_counter()
            first = run_import(store, plan.records)
            stored = time.perf_counter() - t
            t = time.perf_counter()
            again = run_import(store, load(folder).records)
            second = time.perf_counter() - t
        total = args.sessions * args.messages
        print(f"model {os.environ['PMEM_EMBED_MODEL']}: {args.sessions} sessions, {total:,} messages, "
              f"{size / 1e6:.1f} MB; {kept:,} turns kept")
        print(f"load (read, replay, strip): {parse:.2f} s = {total / parse:,.0f} messages/s")
        print(f"run_import: {stored:.2f} s = {first.imported / stored:,.0f} memories/s "
              f"(embedding {spent[0]:.2f} s, the rest SQLite {stored - spent[0]:.2f} s)")
        print(f"again: load + run_import {second:.2f} s, imported {again.imported}")
        assert first.imported == kept and again.imported == 0


if __name__ == "__main__":
    main()

"""What a dream's plan asks the chat model on a store, without running the model: calls and prompt tokens.

    python benchmarks/dream_model_calls.py --synthetic 20000                 # fake-384 vectors
    PMEM_MODELS_DIR=.models-cache python benchmarks/dream_model_calls.py --db conv-26.db --seconds-per-call 1.4

The plan runs with a stand-in generator that counts each call (merge or summary), the prompt's
tokens under the configured chat model's tokenizer (when it can be loaded, else estimated) and
answers with the first note verbatim. Which memories are merged or summarised, and so how many
calls a plan makes, does not depend on the answers (a merge's text decides only whether it is
kept); the cost of the calls is then estimated from a measured CPU time per call
(--seconds-per-call: dream_bench.py --plan-speed --chat, CPU seconds of the plan over its calls).
The synthetic store is dream_bench.py's (--plan-speed --synthetic): LoCoMo's texts repeated.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


class Counting:
    """A chat model that only counts what it is asked."""

    name = "counting"
    strong = chooses = False

    def __init__(self, tokens):
        self.tokens = tokens
        self.calls: dict[str, int] = {}
        self.prompt_tokens = 0

    def generate_json(self, messages, schema, max_tokens=256):
        kind = "merge" if "merge" in messages[0]["content"] else "compress"
        self.calls[kind] = self.calls.get(kind, 0) + 1
        self.prompt_tokens += sum(self.tokens(m["content"]) for m in messages)
        first = messages[-1]["content"].split("\n- ")[1].split("\n")[0]
        return {"text": first}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--synthetic", type=int, default=0, help="memories of a synthetic store (fake-384 vectors)")
    ap.add_argument("--db", default="", help="a store to plan on (a copy is planned)")
    ap.add_argument("--seconds-per-call", type=float, default=0.0, help="CPU seconds per model call, measured")
    args = ap.parse_args()
    if not args.synthetic and not args.db:
        ap.error("--synthetic N or --db PATH")
    import shutil

    tmp = Path(tempfile.mkdtemp(prefix="pmem-model-calls-"))
    os.environ["PMEM_HOME"] = str(tmp / "home")
    if args.synthetic:
        os.environ["PMEM_EMBED_MODEL"] = "fake-384"
    from pmem import MemoryStore, dream
    from pmem.config import load
    from pmem.errors import PmemError

    try:
        from pmem.models.generate import load_generator

        tokens = load_generator().count_tokens  # type: ignore[attr-defined]
        counted = "the chat model's tokenizer"
    except PmemError:
        from pmem.recall import estimate_tokens as tokens

        counted = "estimated (estimate_tokens)"
    db = tmp / "store.db"
    t0 = time.perf_counter()
    if args.db:
        shutil.copy(args.db, db)
    with MemoryStore(db, config=load()) as store:
        if args.synthetic:
            from dream_bench import build_synthetic

            build_synthetic(store, args.synthetic)
        built = time.perf_counter() - t0
        gen = Counting(tokens)
        t1 = time.perf_counter()
        plan = dream.plan(store, now="2026-01-01T00:00:00Z", generator=gen)
        planned = time.perf_counter() - t1
        calls = sum(gen.calls.values())
        figures = {"memories": plan.considered, "build_s": round(built, 1), "plan_without_model_s": round(planned, 1),
                   "calls": gen.calls, "prompt_tokens": gen.prompt_tokens, "counted": counted,
                   "complete": plan.complete, "proposals": len(plan.proposals)}
        if args.seconds_per_call:
            figures["model_cpu_s_estimated"] = round(calls * args.seconds_per_call)
    shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""llama.cpp's extra buffer types on and off: the chat model's tokens/s and MiniLM's texts/s.

    python benchmarks/extra_bufts.py --rounds 7 --threads 1

pmem loads every llama.cpp model with `use_extra_bufts` off (pmem.models.loading.EXTRA_BUFFER_TYPES): the
AMX kernels that live there crash natively built wheels on some Intel Xeons. This measures what the
switch costs where it works: each round loads the chat model (SmolLM2-135M-Instruct) and MiniLM with
the switch on, then off (the order alternates by round), and times a greedy 32-token completion and
the embedding of 256 LoCoMo turns (--texts). Medians over the rounds, side by side; `uptime` before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pmem.models import loading, provision  # noqa: E402
from pmem.models.embed import LlamaEmbedder  # noqa: E402
from pmem.models.generate import LlamaGenerator  # noqa: E402

import locomo  # noqa: E402

PROMPT = [{"role": "user", "content": "Write a long story about a lighthouse keeper and her cat."}]


def chat_rate(path: Path, threads: int) -> float:
    g = LlamaGenerator(path, threads=threads)
    try:
        t = time.perf_counter()
        out = g._llm.create_chat_completion(messages=PROMPT, max_tokens=32, temperature=0.0, seed=0)
        dt = time.perf_counter() - t
        return out["usage"]["completion_tokens"] / dt
    finally:
        g.close()


def embed_rate(path: Path, threads: int, texts: list[str]) -> float:
    e = LlamaEmbedder(path, threads=threads)
    try:
        e.embed(texts[:8])  # first call allocates
        t = time.perf_counter()
        e.embed(texts)
        return len(texts) / (time.perf_counter() - t)
    finally:
        e.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--texts", type=int, default=256, help="LoCoMo turns embedded per round")
    ap.add_argument("--data", type=Path, default=locomo.DATA, help="the LoCoMo dev file")
    args = ap.parse_args()
    models = Path(os.environ.get("PMEM_MODELS_DIR") or Path(__file__).resolve().parents[1] / ".models-cache")
    chat = provision.ensure_model("SmolLM2-135M-Instruct", models, progress=False)
    minilm = provision.ensure_model("all-MiniLM-L6-v2", models, progress=False)
    texts = [r["text"] for conv in locomo.load(args.data) for r in locomo.turn_records(conv)][:args.texts]
    load_before = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    rates: dict[str, dict[str, list[float]]] = {k: {"chat_tok_s": [], "minilm_texts_s": []} for k in ("on", "off")}
    for r in range(args.rounds):
        for setting in (("on", "off") if r % 2 == 0 else ("off", "on")):
            loading.EXTRA_BUFFER_TYPES = setting == "on"
            rates[setting]["chat_tok_s"].append(chat_rate(chat, args.threads))
            rates[setting]["minilm_texts_s"].append(embed_rate(minilm, args.threads, texts))
            print(r, setting, rates[setting]["chat_tok_s"][-1], rates[setting]["minilm_texts_s"][-1],
                  file=sys.stderr, flush=True)
    result = {"threads": args.threads, "rounds": args.rounds, "uptime_before": load_before,
              "uptime_after": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()}
    for setting, by in rates.items():
        result[setting] = {k: {"median": round(statistics.median(v), 1), "all": [round(x, 1) for x in v]}
                           for k, v in by.items()}
    result["off_over_on"] = {k: round(result["off"][k]["median"] / result["on"][k]["median"], 3)
                             for k in ("chat_tok_s", "minilm_texts_s")}
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""MiniLM's calls of many texts: llama.cpp against its int8 graph (pmem.models.bert_int8).

    env -u OPENBLAS_CORETYPE python benchmarks/minilm_bulk.py --rounds 3

English memories' second vectors, as the fill after an import embeds them: the Q8_0 GGUF, one
thread, all the turns of --sample in calls of 64 texts (english.py's batches). The two ways
alternate round by round in one process (llama.cpp, then int8, ...); printed: each one's median
seconds and turns a second, and how near the int8 vectors are to llama.cpp's (what a search embeds
a query with) and to the GGUF's own layers in float32 (BertInt8.forward): 1 - mean cosine, least.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=Path, default=Path(os.environ.get("PMEM_TEST_MODELS_DIR", ".models-cache")))
    ap.add_argument("--sample", default="conv-43", help="the LoCoMo conversation (conv-43: 680 turns)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()
    import numpy as np

    from pmem.models import provision
    from pmem.models.embed import LlamaEmbedder

    conv = next(c for c in locomo.load() if c["sample_id"] == args.sample)
    texts = [r["text"] for r in locomo.turn_records(conv, thread="session")]
    e = LlamaEmbedder(provision.quantized_model("all-MiniLM-L6-v2", args.models), threads=1)

    def run(int8: bool) -> np.ndarray:
        e.use_int8(int8)
        return np.array([v for i in range(0, len(texts), args.batch) for v in e.embed(texts[i : i + args.batch])])

    run(True)  # the graph built or read
    times: dict[str, list[float]] = {"llama.cpp": [], "int8": []}
    out = {}
    for _ in range(args.rounds):
        for name in times:
            t = time.perf_counter()
            out[name] = run(name == "int8")
            times[name].append(time.perf_counter() - t)
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"{name:9s} {m:.2f} s ({len(texts) / m:.0f} turns/s; runs {', '.join(f'{t:.2f}' for t in ts)})")
    assert e.int8_layers
    f32 = np.array([e.int8_layers.forward([e.tokenize(t)])[0] for t in texts])  # type: ignore[union-attr]
    f32 /= np.linalg.norm(f32, axis=1, keepdims=True)
    for name, want in (("llama.cpp", out["llama.cpp"]), ("float32", f32)):
        cos = (out["int8"] * want).sum(axis=1)
        print(f"int8 against {name}: 1 - mean cosine {1 - cos.mean():.6f}, least {cos.min():.5f}")
    cos = (out["llama.cpp"] * f32).sum(axis=1)
    print(f"llama.cpp against float32: 1 - mean cosine {1 - cos.mean():.6f}, least {cos.min():.5f}")
    print(f"load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

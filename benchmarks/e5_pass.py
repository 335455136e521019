"""One e5 pass over a LoCoMo conversation's turns, in process: what `pmem import` spends on e5.

    python benchmarks/harness.py --tree base=/work/main --tree this=. --rounds 5 --warmup 1 \\
        -- python $PWD/benchmarks/e5_pass.py
    python benchmarks/e5_pass.py --threads 2 --sample conv-26 --profile
    python benchmarks/e5_pass.py --threads 2 --serial     # one pack at a time on 2 BLAS threads

Loads multilingual-e5-small from --models (pmem's own numpy engine, `server = never`), embeds 20 of
the turns untimed (the weights paged in), then all the turns of --sample once as passages, and
prints the pass's wall and CPU seconds and turns per second. --batch 64 hands them over in calls
of 64 texts, as `pmem import` does (VectorIndex.embed); by default all in one call. With --threads N the packs of
a batch run side by side on N threads of one BLAS thread each (docs/decisions/0066-e5-data-parallel.md);
--serial runs them one after the other on N BLAS threads, as before that change (a tree from
before it ignores the flag: it has no other way). Under benchmarks/harness.py each tree
runs it in its own process (the harness's wall and CPU are the whole process's, start-up and model
load included: the same in both trees); --profile prints cProfile's top functions instead.
OPENBLAS_CORETYPE, when set, chooses OpenBLAS's kernels: time with and without it (`env -u`).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=Path, default=Path(os.environ.get("PMEM_TEST_MODELS_DIR", "/work/main/.models-cache")),
                    help="the folder holding multilingual-e5-small.q4.e5s1 (and its caches)")
    ap.add_argument("--sample", default="conv-43", help="the LoCoMo conversation (conv-43: 680 turns)")
    ap.add_argument("--threads", type=int, default=1, help="BLAS threads (1: as an import on a busy machine)")
    ap.add_argument("--batch", type=int, default=0, help="texts per call (0: all; 64: VectorIndex.embed's batch)")
    ap.add_argument("--serial", action="store_true", help="the packs one after the other on --threads BLAS threads")
    ap.add_argument("--profile", action="store_true", help="cProfile's top functions instead of the timing")
    args = ap.parse_args()
    from pmem.models.e5 import E5Embedder

    conv = next(c for c in locomo.load() if c["sample_id"] == args.sample)
    texts = [r["text"] for r in locomo.turn_records(conv, thread="session")]
    e5 = E5Embedder(args.models / "multilingual-e5-small.q4.e5s1", threads=args.threads)
    if args.serial:
        e5.parallel = False
    e5.embed_array(texts[:20])

    def embed_all() -> None:
        step = args.batch or len(texts)
        for start in range(0, len(texts), step):
            e5.embed_array(texts[start : start + step])
    if args.profile:
        import cProfile
        import pstats

        profile = cProfile.Profile()
        profile.runcall(embed_all)
        pstats.Stats(profile).sort_stats("tottime").print_stats(15)
        return 0
    wall, cpu = time.perf_counter(), time.process_time()
    embed_all()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(f"{len(texts)} turns: wall {wall:.2f} s, CPU {cpu:.2f} s, {len(texts) / wall:.0f} turns/s, "
          f"load {os.getloadavg()[0]:.1f}, threads {args.threads}{' serial' if args.serial else ''}, "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '-')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

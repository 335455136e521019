"""e5's int8 graph with int8 and with uint8 weights: how near float32 each stays, and how fast.

    env -u OPENBLAS_CORETYPE python benchmarks/e5_kernels.py --turns 680 --rounds 3   # this CPU
    python benchmarks/e5_kernels.py --turns 60 --emulate       # under QEMU: AVX2, no VNNI

ONNX Runtime multiplies uint8 activations by int8 weights with VNNI (or AMX) exactly; on x86 with
AVX2 and no VNNI (AMD before Zen 4, Intel before Ice Lake) it multiplies pairs of bytes into 16
bits, which saturate. pmem.models.e5_int8.saturates() asks the runtime; where they saturate, the
graph takes uint8 weights, which the runtime multiplies in 16 bits (decision 0070, "CPUs without
VNNI"). Each kind of weights runs in its own process (its own copy of the model, so its own
`.int8` cache), over the first --turns turns of LoCoMo's conv-43, as passages in one call; with
--emulate that process runs under `qemu-x86_64 -cpu max` (Debian: qemu-user), whose timings mean
nothing, so only the fidelity is printed. Float32 runs here, natively. Prints, per kind: the probe's
answer in its process, 1 - mean cosine and the least cosine to float32, and (natively) the median
seconds of --rounds passes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo  # noqa: E402

MODEL = "multilingual-e5-small.q4.e5s1"


def texts(n: int) -> list[str]:
    conv = next(c for c in locomo.load() if c["sample_id"] == "conv-43")
    return [r["text"] for r in locomo.turn_records(conv, thread="session")][:n]


def child(model: str, weights: str, turns: int, rounds: int, out: str) -> int:
    import numpy as np

    from pmem.models import e5_int8
    from pmem.models.e5 import E5Embedder

    found = e5_int8.saturates()
    if weights != "float32":
        e5_int8.saturates = lambda: weights == "uint8"  # type: ignore[assignment]
    e5 = E5Embedder(model, threads=2, int8=weights != "float32")
    batch = texts(turns)
    e5.embed_array(batch[:40])  # the graph built or read, the weights paged in
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        vectors = e5.embed_array(batch)
        times.append(time.perf_counter() - t)
    np.save(out, vectors)
    print(found, sorted(times)[len(times) // 2])
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=Path, default=Path(os.environ.get("PMEM_TEST_MODELS_DIR", ".models-cache")))
    ap.add_argument("--turns", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--emulate", action="store_true", help="int8 and uint8 under qemu-x86_64 -cpu max")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        model, weights, rounds, out = args.child
        return child(model, weights, args.turns, int(rounds), out)
    import numpy as np

    qemu = shutil.which("qemu-x86_64")
    if args.emulate and not qemu:
        print("qemu-x86_64 not found (Debian: apt-get install qemu-user)", file=sys.stderr)
        return 2
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, *sys.path])}
    got, lines = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        for weights in ("float32", "int8", "uint8"):
            folder = Path(tmp) / weights
            folder.mkdir()
            for f in args.models.glob(MODEL + "*"):
                if not f.name.endswith(".int8"):
                    shutil.copy2(f, folder / f.name)
            out = folder / "v.npy"
            cmd = [sys.executable, __file__, "--turns", str(args.turns), "--child", str(folder / MODEL), weights,
                   str(args.rounds), str(out)]
            if args.emulate and weights != "float32":
                cmd = [qemu, "-cpu", "max", *cmd]
            run = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if run.returncode:
                print(run.stderr[-2000:], file=sys.stderr)
                return 1
            found, seconds = run.stdout.split()
            got[weights] = np.load(out)
            lines.append((weights, found, float(seconds)))
    want = got["float32"]
    for weights, found, seconds in lines:
        cos = (got[weights] * want).sum(axis=1)
        where = "emulated" if args.emulate and weights != "float32" else "native"
        speed = "" if where == "emulated" else f", {seconds:.2f} s a pass"
        print(f"{weights:8s} ({where}, products saturate: {found}): 1 - mean cosine {1 - cos.mean():.6f}, "
              f"least {cos.min():.5f}{speed}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What an import leaves once its background fill ends, under each `embed_bulk`: the vectors
against those of `embed_bulk = float32`, and what each import and fill cost.

    python benchmarks/settled_vectors.py                       # conv-43 (680 turns), once each
    python benchmarks/settled_vectors.py --sample conv-26 --rounds 3

Each round imports the conversation (pmem JSONL, as benchmarks/import_speed.py writes it) with this
tree in a fresh PMEM_HOME per setting (int8, int8-only, float32; PMEM_SERVER=never, the models from
--models), in rotating order, and waits for the fill `pmem import` starts (pmem/fill.py). Reported
per setting: the import's wall seconds, the fill's wall and CPU seconds (its state file), and for
e5's vectors (memory_vec) and MiniLM's (memory_vec_en) the largest absolute difference from the
float32 store's vector of the same text and the least cosine; the medians of the rounds
(pmem.store.refine, docs/decisions/0071-int8-then-exact.md).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))
from import_speed import wait_fill, write_jsonl  # noqa: E402

SETTINGS = ("int8", "int8-only", "float32")
TABLES = ("memory_vec", "memory_vec_en")


def one(setting: str, data: Path, home: Path, models: Path) -> tuple[float, tuple[float, float]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PMEM_")}
    env.update(PYTHONPATH=str(ROOT), PMEM_HOME=str(home), PMEM_SERVER="never", PMEM_MODELS_DIR=str(models),
               PMEM_EMBED_BULK=setting)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pmem", "import", str(data), "--json"], env=env,
                          capture_output=True, text=True, timeout=1800)
    took = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"{setting}: pmem import failed: {done.stderr.strip()}")
    return took, wait_fill(home)


def vectors(db: Path, table: str) -> dict[str, np.ndarray]:
    with sqlite3.connect(db) as conn:
        return {t: np.frombuffer(b, np.float32) for t, b in conn.execute(
            f"SELECT m.text, v.embedding FROM memories m JOIN {table} v ON v.seq = m.seq")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sample", default="conv-43")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--models", type=Path, default=Path(os.environ.get("PMEM_MODELS_DIR", ROOT / ".models-cache")))
    args = ap.parse_args()
    rows: dict[str, dict[str, list[float]]] = {s: {} for s in SETTINGS}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data = work / f"{args.sample}.jsonl"
        turns = write_jsonl(data, args.sample)
        print(f"{args.sample}: {turns} turns, load {os.getloadavg()[0]:.1f}", flush=True)
        for r in range(args.rounds):
            order = SETTINGS[r % 3:] + SETTINGS[:r % 3]
            homes = {}
            for setting in order:
                home = work / f"{setting}-{r}"
                home.mkdir()
                took, (fill_wall, fill_cpu) = one(setting, data, home, args.models)
                homes[setting] = home / "pmem.db"
                for key, value in (("import_s", took), ("fill_s", fill_wall), ("fill_cpu_s", fill_cpu)):
                    rows[setting].setdefault(key, []).append(value)
            for table in TABLES:
                want = vectors(homes["float32"], table)
                for setting in SETTINGS:
                    got = vectors(homes[setting], table)
                    common = [t for t in want if t in got]
                    if len(common) != len(want):
                        raise SystemExit(f"{setting}: {len(common)} of {len(want)} {table} vectors")
                    rows[setting].setdefault(f"{table} max |diff|", []).append(
                        max(float(np.abs(got[t] - want[t]).max()) for t in common))
                    rows[setting].setdefault(f"{table} least cos", []).append(
                        min(float(got[t] @ want[t]) for t in common))
    for setting in SETTINGS:
        print(f"{setting:>9}: " + ", ".join(f"{k} {statistics.median(v):.6g}" for k, v in rows[setting].items()))


if __name__ == "__main__":
    main()

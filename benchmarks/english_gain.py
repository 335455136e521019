"""What the English second vector earns: the quality gate's figures with it and without it.

    python benchmarks/english_gain.py --cache /tmp/pmem-gain-cache     # the gate's sets, both ways
    python benchmarks/english_gain.py --json > gain.json

Measures the sets of tests/retrieval/test_quality_gate.py (paraphrase with LoCoMo conv-26 as
distractors, multilingual, LoCoMo conv-26 and conv-30; every search mode and the recall block)
through `search()` and `recall()` with the real models, twice: as a store with every English
memory's second vector (all-MiniLM-L6-v2 beside e5, the default) and as one with none, which is
what search sees after `pmem import` until its background fill has run (pmem/fill.py).
e5's vectors are embedded once and shared by both (--cache keeps them between runs). Prints each
gated figure both ways, the gain, and how many figures the second vector moves by more than the
gate's tolerance (0.005). Figures: docs/decisions/0060-import-speed-second-vector.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))


def gate_module():
    spec = importlib.util.spec_from_file_location("quality_gate", ROOT / "tests" / "retrieval" / "test_quality_gate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", type=Path, help="keep the models' vectors in this folder between runs")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()

    gate = gate_module()
    os.environ.setdefault("PMEM_LOCOMO_DEV", str(gate.LOCOMO_DEV))
    import retrieval

    from pmem.config import Settings

    work = Path(tempfile.mkdtemp(prefix="pmem-english-gain-"))
    os.environ["PMEM_HOME"] = str(work / "home")  # no one's own settings
    os.environ["PMEM_SERVER"] = "never"
    if os.environ.get("PMEM_TEST_MODELS_DIR") and not os.environ.get("PMEM_MODELS_DIR"):
        os.environ["PMEM_MODELS_DIR"] = os.environ["PMEM_TEST_MODELS_DIR"]
    cache = args.cache or work / "vectors"
    figures = {}
    for side, value in (("with", "minilm"), ("without", "none")):
        os.environ["PMEM_EMBED_ENGLISH"] = value
        figures[side] = gate.gated(retrieval.measure(work / side, Settings().embed_model, gate.SETS, cache,
                                                     conversations=gate.CONVERSATIONS))
    rows = []
    for key in sorted(figures["with"]):
        a, b = figures["with"][key]["value"], figures["without"][key]["value"]
        rows.append({"figure": key, "n": figures["with"][key]["n"], "with": a, "without": b, "gain": a - b})
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    for r in rows:
        print(f"{r['figure']:<52} n={r['n']:<4} with {r['with']:.3f}  without {r['without']:.3f}  gain {r['gain']:+.3f}")
    moved = [r for r in rows if abs(r["gain"]) > 0.005]
    print(f"\n{len(moved)} of {len(rows)} figures move by more than 0.005 "
          f"({sum(r['gain'] > 0.005 for r in moved)} up, {sum(r['gain'] < -0.005 for r in moved)} down); "
          f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

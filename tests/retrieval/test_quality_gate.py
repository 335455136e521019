"""The retrieval quality gate: the project's own retrieval sets through `search()` and the recall
block with the real models, against the figures checked in beside this file (baseline.json).

The figures are computed by the benchmark's own code (benchmarks/retrieval.py `measure`, the
measurement behind `retrieval.py --suite`), on a subset that fits CI: the paraphrase set (with
LoCoMo conv-26's turns as distractors), the multilingual set, and LoCoMo's dev conversations
conv-26 and conv-30 (231 questions; conv-26's turns are embedded once for both). Vectors are kept
only in this session's tmp folder. A figure may fall by the baseline's tolerance, or by one question
(the engines' floating point differs a little between CPUs), before the gate fails.

After a change that moves a figure on purpose, write the new figures and commit them with the change:

    UPDATE_QUALITY_BASELINE=1 python -m pytest tests/retrieval/test_quality_gate.py
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest
from conftest import ROOT, SHARED

# minutes of embedding on a busy machine (6.5 min at load 13 on 2 cores): more than the default timeout
pytestmark = [pytest.mark.eval, pytest.mark.model, pytest.mark.slow, pytest.mark.timeout(1800)]

BASELINE = Path(__file__).with_name("baseline.json")
LOCOMO_DEV = SHARED / "data" / "locomo_dev.json"
SETS = ("paraphrase", "multilingual", "locomo")
CONVERSATIONS = ("conv-26", "conv-30")
# read before the autouse fixture clears PMEM_* (this name has no PMEM_ prefix for that reason)
UPDATE = os.environ.get("UPDATE_QUALITY_BASELINE") == "1"


def gated(figures: dict) -> dict[str, dict]:
    """The figures the gate holds: every mode's split totals (not the small per-language or
    per-category groups), and the recall block; {"set/mode/split/figure": {"value", "n"}}."""
    out = {}
    for qset, modes in ((s, figures.get(f"{s} store", {}).get(s, {})) for s in SETS):
        for mode, groups in modes.items():
            for group in ("dev", "held-out", "all"):
                for name, value in groups.get(group, {}).items():
                    if name != "n":
                        out[f"{qset}/{mode}/{group}/{name}"] = {"value": value, "n": groups[group]["n"]}
    return out


@pytest.fixture(scope="module")
def benchmarks():
    """benchmarks/retrieval.py, loaded under its own name (with benchmarks/ on sys.path for the
    modules it imports, locomo reading the shared LoCoMo file)."""
    folder = str(ROOT / "benchmarks")
    sys.path.insert(0, folder)
    before = os.environ.get("PMEM_LOCOMO_DEV")
    os.environ["PMEM_LOCOMO_DEV"] = str(LOCOMO_DEV)
    try:
        spec = importlib.util.spec_from_file_location("benchmarks_retrieval", ROOT / "benchmarks" / "retrieval.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        if before is None:
            os.environ.pop("PMEM_LOCOMO_DEV")
        else:
            os.environ["PMEM_LOCOMO_DEV"] = before
    yield module
    sys.path.remove(folder)


@pytest.mark.skipif(not LOCOMO_DEV.exists(), reason=f"needs {LOCOMO_DEV}")
def test_retrieval_figures_hold_the_baseline(benchmarks, tmp_path):
    from pmem.config import Settings

    figures = gated(benchmarks.measure(tmp_path / "stores", Settings().embed_model, SETS, tmp_path / "vectors",
                                       conversations=CONVERSATIONS))
    baseline = json.loads(BASELINE.read_text(encoding="utf-8")) if BASELINE.exists() else {}
    if UPDATE:
        BASELINE.write_text(json.dumps({
            "about": "tests/retrieval/test_quality_gate.py: each figure, its questions, and how far it may fall",
            "tolerance": baseline.get("tolerance", 0.005),
            "sets": list(SETS), "conversations": list(CONVERSATIONS),
            "figures": figures}, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        return
    assert baseline, f"no baseline: run with UPDATE_QUALITY_BASELINE=1 to write {BASELINE.name}"
    tolerance = baseline["tolerance"]
    assert set(figures) == set(baseline["figures"]), "the gated figures changed: update the baseline"
    fell = []
    for key, base in baseline["figures"].items():
        now = figures[key]
        assert now["n"] == base["n"], f"{key}: {now['n']} questions, the baseline had {base['n']}"
        # one question, as the figures show it: each is rounded to 3 decimals, so one question of
        # 77 (0.012987) reads as 0.013 between 0.857 and 0.844
        allowed = max(tolerance, 1 / base["n"] + 0.001)
        if now["value"] < base["value"] - allowed:
            fell.append(f"{key}: {now['value']:.3f} < {base['value']:.3f} (allowed {allowed:.3f}, n={base['n']})")
    assert not fell, "retrieval quality fell below the baseline:\n" + "\n".join(fell)

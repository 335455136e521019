"""benchmarks/retrieval.py --paired: two runs' question outcomes compared question by question."""

from __future__ import annotations

import json

import pytest


@pytest.fixture(scope="module")
def retrieval(load_benchmark):
    return load_benchmark("retrieval")


def _write(path, firsts: list[int | None], scores: list[list[float]]) -> str:
    rows = [{"store": "s", "set": "paraphrase", "mode": "hybrid", "split": "dev", "group": "g",
             "question": f"q{i}", "first": f, "scores": sc} for i, (f, sc) in enumerate(zip(firsts, scores))]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def test_gains_losses_sign_test_and_the_lead_lost(retrieval, tmp_path, capsys):
    # q0 kept at 1; q1 lost at 1 (led by 0.25), still in the top 3; q2 gained at 1; q3 lost from
    # the top 10; q4 and q5 come into the top 5
    before = _write(tmp_path / "a.jsonl", [1, 1, 2, 7, 6, 9], [[0.9, 0.8], [0.75, 0.5, 0.4], [], [], [], []])
    after = _write(tmp_path / "b.jsonl", [1, 3, 1, None, 4, 5], [[0.9, 0.8]] + [[]] * 5)
    assert retrieval.paired(before, after) == 0
    (cell,) = json.loads(capsys.readouterr().out)
    assert cell["cell"] == "s store / paraphrase / hybrid / dev" and cell["n"] == 6
    assert cell["top1"] == {"gained": 1, "lost": 1, "net": 0.0, "p": 1.0}
    assert cell["top3"] == {"gained": 0, "lost": 0, "net": 0.0, "p": 1.0}
    assert cell["top5"] == {"gained": 2, "lost": 0, "net": 0.3333, "p": 0.5}  # two-sided: 2 * (1/2)^2
    assert cell["top10"] == {"gained": 0, "lost": 1, "net": -0.1667, "p": 1.0}
    assert cell["lost at top1, lead before"] == [0.25]

"""benchmarks/harness.py: the statistics and the interleaving every side-by-side benchmark relies on."""

from __future__ import annotations

import json
import statistics

import pytest


@pytest.fixture(scope="module")
def harness(load_benchmark):
    return load_benchmark("harness")


def test_percentiles_on_fixed_numbers(harness):
    values = [7.0, 1.0, 3.0, 5.0, 9.0]  # unsorted on purpose
    assert harness.median(values) == 5.0
    assert harness.median([4.0, 1.0, 3.0, 2.0]) == 2.5
    assert harness.percentile(values, 0) == 1.0
    assert harness.percentile(values, 100) == 9.0
    assert harness.percentile(values, 10) == pytest.approx(1.8)  # linear: 1 + 0.4 * (3 - 1)
    assert harness.percentile(values, 90) == pytest.approx(8.2)
    assert harness.percentile(values, 25) == 3.0
    assert harness.percentile([2.0], 90) == 2.0
    with pytest.raises(ValueError):
        harness.percentile([], 50)
    with pytest.raises(ValueError):
        harness.percentile(values, 101)
    s = harness.summary(values, (10, 90))
    assert (s["n"], s["median"], s["p10"], s["p90"], s["min"], s["max"]) == (5, 5.0, 1.8, 8.2, 1.0, 9.0)
    assert s["values"] == values  # in the order measured


def test_median_agrees_with_statistics(harness):
    data = [0.31, 0.12, 0.95, 0.44, 0.27, 0.61]
    assert harness.median(data) == pytest.approx(statistics.median(data))


def test_schedule_alternates_and_warms_up_first(harness):
    order = list(harness.schedule(["A", "B"], rounds=4, warmup=1))
    assert order == [(-1, "A", False), (-1, "B", False),
                     (0, "A", True), (0, "B", True), (1, "B", True), (1, "A", True),
                     (2, "A", True), (2, "B", True), (3, "B", True), (3, "A", True)]
    fixed = [name for _, name, counted in harness.schedule(["A", "B", "C"], rounds=2, alternate=False) if counted]
    assert fixed == ["A", "B", "C", "A", "B", "C"]


def test_bench_ratios_and_json_keys(harness, tmp_path):
    trees = [harness.Tree("base", tmp_path), harness.Tree("new", tmp_path)]
    bench = harness.Bench(trees, (10, 90))
    for wall in (1.0, 2.0, 3.0):
        bench.add("base", "search", "wall_s", wall)
        bench.add("new", "search", "wall_s", wall / 2)
    rep = json.loads(json.dumps(bench.report()))
    assert list(rep) == ["format", "trees", "percentiles", "load", "results", "ratios"]
    assert rep["results"]["new"]["search"]["wall_s"]["median"] == 1.0
    assert rep["ratios"] == {"new": {"search": {"wall_s": 0.5}}}
    table = bench.table()
    assert "2000.0 ms (1200.0-2800.0)" in table and "0.500" in table


def test_runs_in_the_interleaved_order_with_each_tree_on_pythonpath(harness, tmp_path):
    """Each run is a fresh process that imports the tree's own module; the runs alternate."""
    trees = []
    for name in ("A", "B"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "which_tree.py").write_text(f"NAME = {name!r}\n")
        trees.append(harness.Tree(name, tmp_path / name))
    log = tmp_path / "log"
    code = "import sys, which_tree; open(sys.argv[1], 'a').write(which_tree.NAME)"
    bench = harness.Bench(trees)
    harness.run_rounds(trees, 3, 1, lambda t, r: {"snippet": t.python(code, str(log), cwd=tmp_path)}, bench)
    assert log.read_text() == "AB" + "AB" + "BA" + "AB"
    for name in ("A", "B"):
        figures = bench.values[name]["snippet"]
        assert len(figures["wall_s"]) == 3 and all(w > 0 for w in figures["wall_s"])
        assert all(c >= 0 for c in figures["cpu_s"])


def test_a_failing_command_is_one_line(harness, tmp_path):
    tree = harness.Tree("A", tmp_path)
    with pytest.raises(SystemExit, match="exited 3"):
        tree.python("import sys; sys.exit(3)", cwd=tmp_path)
    assert tree.python("import sys; sys.exit(3)", cwd=tmp_path, check=False).returncode == 3


def test_a_tree_from_a_git_revision(harness, tmp_path):
    """A revision is materialised as committed, apart from the working tree's later changes."""
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-C", str(repo)]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "which_tree.py").write_text("NAME = 'old'\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "old"], check=True)
    (repo / "which_tree.py").write_text("NAME = 'new'\n")
    old = harness.Tree.resolve("before=HEAD", tmp_path / "work", repo=repo)
    new = harness.Tree.resolve(f"after={repo}", tmp_path / "work", repo=repo)
    assert old.revision and old.path != repo and new.path == repo
    code = "import which_tree; print(which_tree.NAME)"
    assert old.python(code, cwd=tmp_path).stdout.strip() == "old"
    assert new.python(code, cwd=tmp_path).stdout.strip() == "new"
    with pytest.raises(SystemExit, match="neither a folder nor a git revision"):
        harness.Tree.resolve("no-such-revision", tmp_path / "work", repo=repo)

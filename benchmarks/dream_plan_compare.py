"""Are two trees' dream plans the same? Every plan the dream tests make, recorded under each tree.

    python benchmarks/dream_plan_compare.py --against /work/main            # tests/dream/test_*.py
    python benchmarks/dream_plan_compare.py --against /work/main tests/dream/test_dream.py -k merge

The dream tests of this checkout run twice, once with each tree's `pmem` first on PYTHONPATH
(this file is their pytest plugin: `-p dream_plan_compare`), and every call of `pmem.dream.plan`
is recorded: its proposals (kind, members, text, reason, score, details), what it dropped, its
notes and whether it finished, with memory ids written as the memory's text (ids are random
per run) and the timing left out. It prints how many plans each tree made and the first that
differ; exit status 1 when any differ. A tree is compared with itself with `--against .`: a
recording that is not stable says nothing. LoCoMo's plans: dream_bench.py --plan-speed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
_OUT = "PMEM_PLAN_RECORD"  # the file a recording appends to (one JSON line per plan)
_HEX = re.compile(r"\b[0-9a-f]{8,16}\b")
_TMP = re.compile(r"/tmp/pytest-of-[^/]+/pytest-\d+/")  # each run's own temporary folders
# the tests stamp memories by the clock: a time from yesterday on is "the clock", not a time to compare
_TODAY = (datetime.now(timezone.utc) - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
_STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z")


def normalized(store: Any, plan: Any) -> dict[str, Any]:
    """`plan` as two trees can compare it: ids as their memory's text (#k: the k-th memory of
    that text, in storage order), times the clock gave as "(the clock)", no timing or time
    planned at, no proposal ids or fingerprints."""
    names: dict[str, str] = {}
    seen: dict[str, int] = {}
    for mid, text in store.conn.execute("SELECT id, text FROM memories ORDER BY rowid"):
        k = seen[text] = seen.get(text, 0) + 1
        names[mid] = f"«{text}»#{k}"
    d = plan.to_dict()
    d.pop("elapsed_s", None)
    d.pop("created_at", None)  # the time it was planned at: the clock, where a test gives no `now`
    for p in d["proposals"]:
        p.pop("id", None)
        p.pop("fingerprints", None)
    raw = json.dumps(d, ensure_ascii=False, sort_keys=True)
    raw = _TMP.sub("TMP/", raw)
    raw = _STAMP.sub(lambda m: "(the clock)" if m.group(0) >= _TODAY else m.group(0), raw)
    return json.loads(_HEX.sub(lambda m: json.dumps(names.get(m.group(0), m.group(0)))[1:-1], raw))


# -- the pytest plugin (loaded in the child run by -p dream_plan_compare) ------------------------

_current: dict[str, Any] = {"test": "", "n": 0}


def pytest_configure(config) -> None:  # noqa: ARG001
    path = os.environ.get(_OUT)  # read now: the tests' fixtures clear the environment
    if not path:
        return
    from pmem import dream
    from pmem.dream import planning

    real = planning.plan

    def recording(store, *args, **kwargs):
        result = real(store, *args, **kwargs)
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"test": _current["test"], "pmem": dream.__file__, "plan": normalized(store, result)},
                               ensure_ascii=False) + "\n")
        return result

    dream.plan = planning.plan = recording  # type: ignore[assignment]

    # Ids from a counter per test, so that both trees' memories get the same ones (a plan orders
    # memories of one time by id; random ids would order them differently in each run).
    import hashlib

    from pmem.store import memories

    def token(size: int = 4) -> str:
        _current["n"] = n = int(_current.get("n", 0)) + 1
        return hashlib.sha1(f"{_current['test']}:{n}".encode()).hexdigest()[:2 * size]

    memories.token = token  # type: ignore[attr-defined]


def pytest_runtest_setup(item) -> None:
    _current["test"], _current["n"] = item.nodeid, 0


# -- the driver ----------------------------------------------------------------------------------


def record(tree: Path, tests: list[str], out: Path) -> tuple[list[dict], int]:
    """The plans the tests make with `tree`'s pmem, and pytest's exit status."""
    out.unlink(missing_ok=True)
    env = dict(os.environ, PYTHONPATH=f"{tree}{os.pathsep}{Path(__file__).resolve().parent}", **{_OUT: str(out)})
    env.setdefault("PMEM_TEST_MODELS_DIR", str(ROOT.parent / "main" / ".models-cache"))
    # -P: the working directory (this checkout) is not put before PYTHONPATH's tree
    rc = subprocess.run([sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "dream_plan_compare",
                         *tests], cwd=ROOT, env=env, stdout=subprocess.DEVNULL).returncode
    lines = out.read_text(encoding="utf-8").splitlines() if out.exists() else []
    return [json.loads(line) for line in lines], rc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--against", required=True, help="the other tree (a checkout's root)")
    ap.add_argument("tests", nargs="*", help="pytest arguments (default: tests/dream/test_*.py)")
    args = ap.parse_args()
    tests = args.tests or sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "dream").glob("test_*.py"))
    tmp = Path(tempfile.mkdtemp(prefix="pmem-plan-compare-"))
    theirs, rc_theirs = record(Path(args.against).resolve(), tests, tmp / "theirs.jsonl")
    ours, rc_ours = record(ROOT, tests, tmp / "ours.jsonl")
    differ = [(a, b) for a, b in zip(theirs, ours) if (a["test"], a["plan"]) != (b["test"], b["plan"])]
    print(json.dumps({"pmem": {"against": sorted({r["pmem"] for r in theirs}), "this tree": sorted({r["pmem"] for r in ours})},
                      "plans": {"against": len(theirs), "this tree": len(ours)},
                      "pytest_exit": {"against": rc_theirs, "this tree": rc_ours},
                      "proposals": sum(len(r["plan"]["proposals"]) for r in ours),
                      "differ": len(differ) + abs(len(theirs) - len(ours))}, indent=1))
    if differ:
        print("tests whose plans differ:", sorted({a["test"] for a, _ in differ}))
    for a, b in differ[:3]:
        print("first different plan:", a["test"], "/", b["test"])
        print(" against:  ", json.dumps(a["plan"], ensure_ascii=False)[:600])
        print(" this tree:", json.dumps(b["plan"], ensure_ascii=False)[:600])
    return 1 if differ or len(theirs) != len(ours) else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Bad input at volume, through the whole command line: every case of badinput_cases.py's corpus
(482: every command's bad arguments, stdin, files, environment, configs, damaged databases, a pty,
SIGINT; every importer's fields turned into wrong types; huge input; hooks and the MCP server fed
garbage) ends in its documented exit code, one `pmem: error:` line, no traceback, the canary
memory intact. One test per family of cases; a family's cases run a few processes at a time."""

from __future__ import annotations

import os
import signal
from concurrent.futures import ThreadPoolExecutor

import pytest

import badinput_cases as bad

pytestmark = [pytest.mark.stress, pytest.mark.slow]

FAMILIES = {
    "import mutated": lambda name: name.startswith("import mutated"),
    "import": lambda name: name.startswith("import") and not name.startswith("import mutated"),
    "huge input": lambda name: name.startswith("huge:"),
    "hooks and mcp": lambda name: name.startswith(("hook ", "mcp:")),
}


def family_of(name: str) -> str:
    return next((f for f, match in FAMILIES.items() if match(name)), "commands")


def test_every_case_belongs_to_one_family():
    names = [c.name for c in bad.cases()]
    assert len(names) == len(set(names)), "two cases share a name"
    assert {family_of(n) for n in names} == {*FAMILIES, "commands"}


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    root = tmp_path_factory.mktemp("badinput")
    home, canary = bad.make_template(root)
    return root, home, canary


@pytest.mark.parametrize("family", ["commands", *FAMILIES])
def test_bad_input_ends_in_one_line_and_its_exit_code(family, template):
    root, home, canary = template
    todo = [c for c in bad.cases() if family_of(c.name) == family and c.sigint_after is None]
    # the huge cases time themselves (max_seconds): run them one at a time
    workers = 1 if family == "huge input" else max(2, min(4, os.cpu_count() or 2))
    with ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(lambda ic: bad.run_home(ic[1], home, root, f"{family}-{ic[0]}", canary),
                                enumerate(todo)))
    missed = [r for r in results if bad.missed(r)]
    assert not missed, f"{len(missed)} of {len(results)} cases missed:\n" + "\n".join(map(describe, missed))


def describe(r: dict) -> str:
    return (f"- {r['name']}: exit {r['exit']} (expected {r['expected']}), traceback={r['traceback']}, "
            f"one line={r['one_line']}, canary={r['canary']}, stored ok={r['stored_ok']}, "
            f"{r['seconds']} s\n  {r['stderr'][-300:]!r}")


def test_ctrl_c_ends_in_its_exit_code(template):
    """The cases that interrupt pmem (SIGINT): apart, since a process started in the background by a
    shell without job control ignores SIGINT, and so do its children (`nohup bash .ci/run &`)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        pytest.skip("SIGINT is ignored in this process (started in the background), so in pmem too")
    root, home, canary = template
    todo = [c for c in bad.cases() if c.sigint_after is not None]
    assert todo
    results = [bad.run_home(c, home, root, f"sigint-{i}", canary) for i, c in enumerate(todo)]
    missed = [r for r in results if bad.missed(r)]
    assert not missed, f"{len(missed)} of {len(results)} cases missed:\n" + "\n".join(map(describe, missed))

"""House rules that live in pyproject.toml stay complete as modules are added."""

from __future__ import annotations

import pkgutil
from pathlib import Path

import pytest

import pmem

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def contracts() -> dict[str, dict]:
    try:
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {c["type"]: c for c in data["tool"]["importlinter"]["contracts"]}


def library_modules() -> set[str]:
    """Every module and package directly under pmem, except the two interfaces."""
    names = {m.name for m in pkgutil.iter_modules(pmem.__path__)}
    return names - {"cli", "tui", "__main__"}


def test_every_library_module_is_forbidden_the_ui(contracts):
    listed = {m.removeprefix("pmem.") for m in contracts["forbidden"]["source_modules"]}
    assert listed == library_modules()


def test_every_module_has_a_layer(contracts):
    placed = {name.strip() for layer in contracts["layers"]["layers"]
              for name in layer.replace(":", "|").split("|")}
    assert placed == library_modules() | {"cli", "tui"}


def test_only_the_store_reaches_into_a_store():
    """No module but store.py uses a MemoryStore's connection or a private store name (issue 9)."""
    import re

    reach = re.compile(r"\b(?:store|copy|self\.store|s)\.(?:conn\b|_[a-z])")
    offenders = []
    for path in sorted((ROOT / "pmem").rglob("*.py")):
        if path.name == "store.py" or path.relative_to(ROOT).as_posix() == "pmem/sync/journal.py":
            continue  # sync's journal: its SQL over the store's connection, to move into the store's journal
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if reach.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []


def test_no_two_modules_import_each_other():
    """The import graph has no mutual pair (issue 9), inside a layer as well as across layers."""
    grimp = pytest.importorskip("grimp")  # comes with import-linter (the dev extra)
    graph = grimp.build_graph("pmem")
    mutual = {tuple(sorted((a, b))) for a in graph.modules for b in graph.find_modules_directly_imported_by(a)
              if a in graph.find_modules_directly_imported_by(b)}
    assert mutual == set()

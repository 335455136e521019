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

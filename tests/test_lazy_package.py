"""`import pmem` binds its public names on first use (PEP 562): a command, a hook or the server
that imports one submodule does not load the store, search and config with it, and the public
API reads exactly as before."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pmem

ROOT = Path(__file__).resolve().parents[1]
HEAVY = {"pmem.store", "pmem.search", "pmem.recall", "pmem.config", "pmem.db", "numpy", "sqlite3"}


def loaded_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_import_pmem_loads_no_store_search_config_or_numpy():
    loaded = loaded_after("import pmem")
    assert not loaded & HEAVY
    assert {m for m in loaded if m.startswith("pmem")} == {"pmem", "pmem.version"}
    assert not loaded_after("import pmem.timeutil, pmem.records, pmem.text") & HEAVY


def test_a_name_loads_its_module_when_first_used():
    mods = loaded_after("import pmem\npmem.MemoryStore")
    assert "pmem.store" in mods and "pmem.search" not in mods and "numpy" not in mods
    mods = loaded_after("from pmem import search, MemoryStore\nassert callable(search) and MemoryStore.add")
    assert {"pmem.search", "pmem.store"} <= mods and "numpy" not in mods


def test_every_public_name_is_its_modules_object():
    where = {"load_config": ("config", "load"), "__version__": ("version", "__version__")}
    for name in pmem.__all__:
        module, attr = where.get(name, (None, name))
        value = getattr(pmem, name)
        if module:
            assert value is getattr(importlib.import_module(f"pmem.{module}"), attr), name
        else:
            assert getattr(value, "__module__", "").startswith("pmem.") or name == "TIERS", name
    assert set(pmem.__all__) <= set(dir(pmem))
    from pmem import Filter, MemoryStore, UsageError
    from pmem.errors import UsageError as Usage
    from pmem.service import MemoryStore as Store
    from pmem.store import Filter as StoreFilter
    assert (MemoryStore, Filter, UsageError) == (Store, StoreFilter, Usage)


def test_search_and_recall_stay_functions_beside_their_modules():
    """`pmem.search` and `pmem.recall` are the functions (as the eager imports made them) even
    where the submodules of those names are imported after them, or before them."""
    code = ("import pmem.search, pmem.recall, sys\nimport pmem\n"
            "assert pmem.search is sys.modules['pmem.search'].search, pmem.search\n"
            "assert pmem.recall is sys.modules['pmem.recall'].recall, pmem.recall\n"
            "from pmem import search, recall\nassert search.__name__ == 'search' and recall.__name__ == 'recall'\n"
            "import pmem.recall\nassert callable(pmem.recall) and not isinstance(pmem.recall, type(sys))")
    assert "pmem.search" in loaded_after(code)
    assert callable(pmem.search) and pmem.search is importlib.import_module("pmem.search").search


def test_unknown_names_and_submodules():
    import pytest

    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        pmem.nothing_here  # noqa: B018
    from pmem import dream, transfer  # submodules import as before
    assert dream.__name__ == "pmem.dream" and transfer.__name__ == "pmem.transfer"

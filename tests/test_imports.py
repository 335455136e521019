"""`import pmem` stays light: no CLI, TUI or model code until needed (checked in a clean process)."""

from __future__ import annotations

import json
import subprocess
import sys


def loaded_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.splitlines()[-1]))


HEAVY = {"typer", "textual", "llama_cpp", "rich", "numpy", "sqlite_utils"}


def test_import_pmem_loads_no_heavy_modules():
    assert not (loaded_after("import pmem") & HEAVY)


def test_store_without_model_loads_no_model(tmp_path):
    code = f"""
import os
os.environ['PMEM_HOME'] = {str(tmp_path)!r}
from pmem import MemoryStore, Filter
s = MemoryStore()
s.list_memories(); s.count(); s.stats()
"""
    assert "llama_cpp" not in loaded_after(code)


def test_commands_that_need_no_model_never_load_one(tmp_path):
    from pmem import Memory, MemoryStore
    from pmem.config import load
    from pmem.models.embed import FakeEmbedder

    db = tmp_path / "p.db"
    with MemoryStore(db, config=load(), embedder=FakeEmbedder(64)) as s:
        s.insert([Memory(id="abcd1234", text="cabin wifi password")])
    for argv in (["list", "--json"], ["show", "abcd"], ["pin", "abcd"], ["export"],
                 ["search", "cabin", "--mode", "keyword"], ["history", "abcd"], ["stats"]):
        code = f"""
import os, sys
os.environ['PMEM_HOME'] = {str(tmp_path)!r}
from pmem.cli import main
sys.argv = ['pmem', '--db', {str(db)!r}, *{argv!r}]
try:
    main()
except SystemExit as exc:
    assert not exc.code, exc.code
"""
        mods = loaded_after(code)
        assert "llama_cpp" not in mods and "textual" not in mods, argv


def test_the_version_has_one_home():
    """pyproject.toml reads the version from pmem/version.py, a foundation module (serve imports it)."""
    import pmem
    from pmem import version

    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "pmem.version.__version__"}
    assert pmem.__version__ == version.__version__

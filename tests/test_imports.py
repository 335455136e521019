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
s.list(); s.count(); s.stats()
"""
    assert "llama_cpp" not in loaded_after(code)


def test_cli_list_does_not_load_models_or_tui(tmp_path):
    code = f"""
import os, sys
os.environ['PMEM_HOME'] = {str(tmp_path)!r}
from pmem.cli import main
sys.argv = ['pmem', 'list', '--json']
try:
    main()
except SystemExit:
    pass
"""
    mods = loaded_after(code)
    assert "llama_cpp" not in mods and "textual" not in mods

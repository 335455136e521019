"""Benchmarks are scripts, not a package: their tests load them by file name."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="session")
def load_benchmark():
    """load_benchmark("harness") -> benchmarks/harness.py as the module `bench_harness`."""
    def load(name: str):
        spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[f"bench_{name}"] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
        return module
    return load

"""The hook tests' shared fixtures: a project (a git root) and the default store seeded with a few
memories, one of them the project's."""

from __future__ import annotations

import pytest

from pmem.service import MemoryStore


@pytest.fixture
def project(tmp_path):
    p = tmp_path / "garden-planner"
    (p / ".git").mkdir(parents=True)
    return p


@pytest.fixture
def seeded(fake_config, pmem_home, project):
    """The default store (under PMEM_HOME) with a few memories, one of them the project's."""
    with MemoryStore(config=fake_config) as s:
        s.add("I am vegetarian and allergic to peanuts", pinned=True)
        s.add("Dinner on Fridays is usually pasta with friends", tags=["food"])
        s.add("The tomato beds need watering every morning", scope=str(project.resolve()))
        s.add("The cabin wifi password is hunter2", tags=["home"])
    return pmem_home

"""The verbs that take a memory out of recall need a real part of its id, and a memory that is not
active cannot be pinned: in the library and through the CLI, as a process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pmem.errors import AmbiguousId, UsageError
from pmem.service import MemoryStore
from pmem.store import SAFE_PREFIX, Filter

ROOT = Path(__file__).resolve().parents[1]
IDS = {"abcd1234": "Dana approves deploys", "abcd5678": "The cabin has no wifi",
       "b1234567": "I am vegetarian", "ef": "An imported memory with a short id"}


@pytest.fixture
def seeded(fake_config):
    with MemoryStore(config=fake_config) as store:
        store.insert([store.new_memory(text, memory_id=mid) for mid, text in IDS.items()])
    return fake_config


def pmem(*args, stdin: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PMEM_EMBED_MODEL": "fake-64"}
    return subprocess.run([sys.executable, "-m", "pmem", *args], input=stdin, capture_output=True, text=True,
                          check=False, env=env, timeout=60)


def test_resolve_with_a_minimum_prefix(seeded):
    with MemoryStore(config=seeded) as store:
        assert store.resolve("b") == "b1234567"  # reading: any unique prefix, as before
        with pytest.raises(UsageError, match="at least 4 characters"):
            store.resolve("b12", min_prefix=SAFE_PREFIX)
        assert store.resolve("B123", min_prefix=SAFE_PREFIX) == "b1234567"
        assert store.resolve("ef", min_prefix=SAFE_PREFIX) == "ef"  # a whole id, however short
        with pytest.raises(AmbiguousId, match="abcd1234, abcd5678; give more of the id"):
            store.resolve("abcd", min_prefix=SAFE_PREFIX)


@pytest.mark.parametrize("verb", [["forget"], ["expire"], ["forget", "--purge", "--yes"]])
def test_destructive_verbs_refuse_a_short_prefix(seeded, verb):
    r = pmem(*verb, "b12")
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("pmem: error:") and "at least 4 characters" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    with MemoryStore(config=seeded) as store:
        assert len(store.list_memories(Filter())) == 4  # nothing forgotten, expired or erased
    ambiguous = pmem(*verb, "abcd")
    assert ambiguous.returncode == 1 and "abcd1234, abcd5678" in ambiguous.stderr
    done = pmem(*verb, "b123")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["b1234567"]


def test_reading_and_reversible_verbs_keep_any_unique_prefix(seeded):
    assert pmem("show", "b").returncode == 0
    assert pmem("pin", "b").stdout.split() == ["b1234567"]
    assert pmem("forget", "ef").returncode == 0  # a whole id shorter than 4
    assert pmem("restore", "e").stdout.split() == ["ef"]


def test_a_memory_that_is_not_active_cannot_be_pinned(seeded):
    with MemoryStore(config=seeded) as store:
        store.forget("b1234567")
        store.supersede("abcd1234", "abcd5678")
        with pytest.raises(UsageError, match=r"b1234567 is forgotten: restore it first \(pmem restore b1234567\)"):
            store.pin("b1234567")
        with pytest.raises(UsageError, match="abcd1234 is superseded: pin abcd5678, which replaced it"):
            store.pin("abcd1234")
        assert not store.get("b1234567").pinned and store.get("b1234567").tier == "archival"
        events = len(store.history("b1234567"))
    r = pmem("pin", "b1234567")
    assert r.returncode == 2 and "forgotten: restore it first" in r.stderr, r.stderr
    assert pmem("restore", "b1234567").returncode == 0
    assert pmem("pin", "b1234567").returncode == 0
    with MemoryStore(config=seeded) as store:
        assert store.get("b1234567").pinned
        assert [e.action for e, _ in store.history("b1234567")][events:] == ["restore", "pin"]

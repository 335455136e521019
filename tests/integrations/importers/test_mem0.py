"""The mem0 importer against what mem0 writes today: the CLI's `list -o json` envelope and the
platform's v3 memories (replaced_by, session_id, expiration_date). mem0 needs its platform (the
network) to list anything, so the fixtures are built from mem0's own source: tests/data/mem0/README.md."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pmem.errors import UsageError
from pmem.integrations.importers import load, run_import
from pmem.store import Filter

DATA = Path(__file__).resolve().parents[2] / "data" / "mem0"


def test_the_cli_envelope_is_read_and_its_scope_names_the_user(tmp_path):
    path = shutil.copy(DATA / "cli-list.json", tmp_path / "mem0-list.json")
    plan = load(path)
    assert plan.formats == {"mem0": 1}
    got = [(m.text, m.source, m.created_at, m.expires_at, sorted(m.tags)) for m in plan.records]
    assert got == [
        ("Prefers window seats on long flights", "mem0:sam", "2026-09-02T15:14:11Z", None, ["mem0", "travel"]),
        ("Is training for the Lisbon half marathon in October", "mem0:sam", "2026-09-04T02:40:00Z",
         "2026-10-19T00:00:00Z", ["health", "mem0", "sports"]),
        ("Keeps a sourdough starter called Bruno", "mem0:sam", "2026-09-04T14:00:00Z", None, ["mem0"]),
    ]
    assert plan.records[0].meta["mem0_id"] == "3f0c1a52-7a0e-4d8c-9a43-5b1f3c2e9a01"


def test_v3_a_replaced_fact_is_history_not_current(tmp_path, store):
    plan = load(DATA / "v3-memories.json")
    by_text = {m.text: m for m in plan.records}
    porto, lisbon = by_text["Lives in Porto"], by_text["Moved from Porto to Lisbon in June 2026"]
    assert porto.valid_to == lisbon.created_at == "2026-06-20T18:29:55Z" and porto.superseded_by == lisbon.id
    assert porto.meta["mem0_replaced_by"] == "8d2e6a40-1c55-4f0b-b7a9-0e6c1d2f3a02"
    assert porto.meta["session_id"] == "onboarding-2026-03" and lisbon.meta["session_id"] == "chat-2026-06-20"
    coffee = by_text["Drinks two coffees a day"]  # its replacement is not in the file: from its last update
    assert coffee.valid_to == "2026-05-05T08:00:00Z" and coffee.superseded_by is None
    dentist = by_text["Has a dentist appointment on 14 July 2026"]
    assert dentist.expires_at == "2026-07-15T00:00:00Z" and dentist.valid_to is None
    assert lisbon.valid_to is None and lisbon.expires_at is None

    run_import(store, plan.records)
    current = {m.text for m in store.list_memories(Filter(), limit=None)}
    assert current == {"Moved from Porto to Lisbon in June 2026"}  # the dentist's day is past
    kept = {m.text: m.status("2026-12-06T00:00:00Z")
            for m in store.list_memories(Filter.everything(), limit=None)}
    assert kept == {"Lives in Porto": "superseded", "Drinks two coffees a day": "superseded",
                    "Moved from Porto to Lisbon in June 2026": "active",
                    "Has a dentist appointment on 14 July 2026": "expired"}


def test_an_empty_cli_listing_is_recognised_and_says_it_held_nothing(tmp_path):
    envelope = json.loads((DATA / "cli-list.json").read_text())
    envelope.update(count=0, data=[])
    path = tmp_path / "list.json"
    path.write_text(json.dumps(envelope, indent=2))
    plan = load(path)
    assert plan.formats == {"mem0": 1} and plan.records == []
    assert plan.empty == ["list.json: no records in it"]


def test_every_memory_deleted_says_how_many_were_read(tmp_path):
    path = tmp_path / "memories.json"
    path.write_text(json.dumps({"results": [{"id": "a", "memory": "x", "state": "deleted"},
                                            {"id": "b", "memory": "y", "deleted_at": "2026-01-01"}]}))
    plan = load(path)
    assert plan.empty == ["memories.json: 2 memories read, each deleted or without text"]


def test_an_error_the_cli_printed_is_refused_in_one_line(tmp_path):
    path = tmp_path / "list.json"
    path.write_text(json.dumps({"status": "error", "command": "list", "error": "Invalid API key", "data": None}))
    with pytest.raises(UsageError, match="the mem0 CLI reported an error, not memories: Invalid API key"):
        load(path, "mem0")

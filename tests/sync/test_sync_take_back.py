"""Taking a conflict's losing value back (SyncLog.take_back, the TUI's conflicts view): a new
local edit of that one field, undoable, that the next sync sends and that wins on every device."""

from __future__ import annotations

import pytest

from pmem import sync
from pmem.errors import NotFound
from pmem.service import MemoryStore


@pytest.fixture
def retagged(tmp_path, fake_config):
    """a (clock in January) and b (in June) retag one memory before either syncs: b's tags win."""
    folder, key = tmp_path / "synced", tmp_path / "key"
    a = MemoryStore(tmp_path / "a" / "pmem.db", config=fake_config, clock=lambda: "2025-01-10T00:00:00Z")
    b = MemoryStore(tmp_path / "b" / "pmem.db", config=fake_config, clock=lambda: "2025-06-10T00:00:00Z")
    m, _ = a.add("The boat is moored at pier 4", tags=["boat"])
    sync.init(a, str(folder), key_file=str(key))
    sync.join(b, str(folder), key_file=str(key))
    a.edit(m.id, tags=["boat", "summer"])
    b.edit(m.id, tags=["boat", "sold"])
    sync.run(a)
    sync.run(b)
    sync.run(a)
    yield a, b, m.id
    a.close()
    b.close()


def test_the_losing_tags_come_back_as_an_edit_that_wins_everywhere(retagged):
    a, b, mid = retagged
    assert a.get(mid).tags == b.get(mid).tags == ["boat", "sold"]
    entry = next(e for e in sync.SyncLog(a).conflict_entries() if e["field"] == "tags")
    assert entry["lost_value"] == ["boat", "summer"] and entry["kept_value"] == ["boat", "sold"]
    assert entry["lost_device"] == sync.SyncLog(a).device and entry["kept_device"] == sync.SyncLog(b).device
    assert entry["lost_at"].startswith("2025-01-10") and entry["kept_at"].startswith("2025-06-10")
    assert entry["can_take_back"] and not entry["taken_back"]
    text_before = a.get(mid).text
    assert sync.SyncLog(a).take_back(entry["id"]) == mid
    assert a.get(mid).tags == ["boat", "summer"] and a.get(mid).text == text_before
    assert a.operations(1)[0].kind == "edit"
    assert next(e for e in sync.SyncLog(a).conflict_entries() if e["id"] == entry["id"])["taken_back"]
    a.undo()
    assert a.get(mid).tags == ["boat", "sold"]
    sync.SyncLog(a).take_back(entry["id"])
    sync.run(a)
    sync.run(b)
    assert b.get(mid).tags == ["boat", "summer"]  # a's clock has seen b's edit: the take-back is later


def test_an_unknown_conflict_is_a_clear_error(retagged):
    a, _, _ = retagged
    with pytest.raises(NotFound, match="no sync conflict 999"):
        sync.SyncLog(a).take_back(999)

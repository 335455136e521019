"""The journal (pmem/store/journal.py): operations, events and undo's bookkeeping."""

from __future__ import annotations

import pytest

from pmem import Memory
from pmem.errors import NotFound


def test_undo_sequence_and_nothing_left(store):
    m, _ = store.add("first")
    store.pin(m.id)
    store.forget(m.id)
    assert store.undo().kind == "forget"
    assert store.undo().kind == "pin"
    assert not store.get(m.id).pinned
    assert store.undo().kind == "add"
    with pytest.raises(NotFound):
        store.get(m.id)
    with pytest.raises(NotFound):
        store.undo()
    # history survives the undone add
    assert [e.action for e, op in store.history(m.id)] == ["add", "pin", "forget"]
    assert all(op.undone_at for _, op in store.history(m.id))


def test_nested_operation_is_one_undo(store):
    a, _ = store.add("one")
    b, _ = store.add("two")
    with store.operation("forget", "both"):
        store.forget(a.id)
        store.forget(b.id)
    assert store.count() == 0
    op = store.undo()
    assert op.events == 2
    assert store.count() == 2


def test_failed_operation_rolls_back(store):
    a, _ = store.add("one")
    with pytest.raises(RuntimeError):
        with store.operation("forget"):
            store.forget(a.id)
            raise RuntimeError("boom")
    assert store.get(a.id).forgotten_at is None
    assert [o.kind for o in store.operations()] == ["add"]


def test_operation_can_span_transactions_by_id(store):
    a, _ = store.add("one")
    b, _ = store.add("two")
    with store.operation("dream", "run") as op:
        store.forget(a.id)
    with store.operation("dream", "run", op_id=op):
        store.forget(b.id)
    assert [o.kind for o in store.operations()][:1] == ["dream"]
    assert store.undo().events == 2
    assert store.count() == 2


def test_memory_dict_and_row_copy_every_field():
    """to_dict / to_row copy the fields directly (dataclasses.asdict's deep recursion was 70% of
    an export's time): the same values and key order, and changing the dict changes no memory."""
    from dataclasses import asdict

    m = Memory(id="a1", text="t", tags=["x"], meta={"k": {"n": [1]}}, derived_from=["b2"], thread="c",
               thread_pos=3, expires_at="2030-01-01T00:00:00Z", pinned=True)
    want = {**asdict(m), "forgotten": False}
    got = m.to_dict()
    assert got == want and list(got) == list(want)
    got["meta"]["k"]["n"].append(2)
    got["tags"].append("y")
    got["derived_from"].clear()
    assert m.meta == {"k": {"n": [1]}} and m.tags == ["x"] and m.derived_from == ["b2"]
    assert Memory.from_row(m.to_row()) == m


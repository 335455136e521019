"""A device that joins is useful at once: the memories are committed before anything is embedded
(searchable by their words), with the vectors that travelled in the sealed changesets where both
devices embed with the same model; the rest are embedded after, resumably. Vectors are bytes from
another device: anything but this store's model, dimension and finite values is ignored.
Real stores, a real folder and a real bare git repository, as the other sync tests."""

from __future__ import annotations

import base64
import json
import math
import os
import shutil
import signal
import struct
import subprocess
import sys
import time

import pytest
from attacker import Net

from pmem import doctor, sync
from pmem.config import load
from pmem.models.embed import FakeEmbedder
from pmem.search import search
from pmem.service import MemoryStore
from pmem.store.vectors import pack_half, unpack_half
from pmem.sync import keys

KINDS = ["folder", pytest.param("git", marks=pytest.mark.skipif(shutil.which("git") is None, reason="needs git"))]
TEXTS = [f"memory {i}: the {w} of the harbour at dawn, note {i * 7}" for i, w in
         enumerate(["lighthouse", "ferry", "crane", "pier", "gull", "tide", "buoy", "mast"] * 10)]


@pytest.fixture
def embeds(monkeypatch):
    """Texts embedded by any FakeEmbedder from now on (memories and queries alike)."""
    seen: list[str] = []
    real = FakeEmbedder.embed

    def counting(self, texts, **kw):
        seen.extend(texts)
        return real(self, texts, **kw)

    monkeypatch.setattr(FakeEmbedder, "embed", counting)
    return seen


def vectors_by_id(store: MemoryStore) -> dict[str, bytes]:
    return store.vectors([m.id for m in store.iter_all()])


def floats(blob: bytes) -> list[float]:
    return list(struct.unpack(f"<{len(blob) // 4}f", blob))


def cosine(a: bytes, b: bytes) -> float:
    x, y = floats(a), floats(b)
    return sum(p * q for p, q in zip(x, y)) / math.sqrt(sum(p * p for p in x) * sum(q * q for q in y))


def sender(net: Net, texts=TEXTS) -> list[str]:
    a = net.store("a")
    ids = [m.id for m in a.insert([a.new_memory(t) for t in texts])]
    net.init("a")
    return ids


@pytest.mark.parametrize("kind", KINDS)
def test_vectors_travel_and_equal_the_senders(tmp_path, fake_config, kind, embeds):
    net = Net(tmp_path, kind, fake_config)
    try:
        sender(net)
        embeds.clear()
        report = sync.join(net.store("b"), str(net.remote), key_file=str(net.key_file), fill=False)
        assert embeds == []  # not one text embedded on the joining device
        assert report["vectors_missing"] == 0
        mine, theirs = vectors_by_id(net.store("b")), vectors_by_id(net.store("a"))
        assert set(mine) == set(theirs) and len(mine) == len(TEXTS)
        for mid, blob in theirs.items():
            assert len(mine[mid]) == len(blob)
            assert max(abs(p - q) for p, q in zip(floats(mine[mid]), floats(blob))) < 1e-3  # float16
            assert cosine(mine[mid], blob) > 0.9999
        hits = search(net.store("b"), "lighthouse harbour", mode="semantic", limit=3)
        assert hits and "lighthouse" in hits[0].memory.text
    finally:
        net.close()


def test_a_changed_text_never_carries_a_stale_vector(tmp_path, fake_config, embeds):
    net = Net(tmp_path, "folder", fake_config)
    try:
        a = net.store("a")
        a.add("a memory from before the sync began")
        net.init("a")
        mid = a.add("the first wording of a note")[0].id
        a.edit(mid, text="the second wording, after an edit before any sync")
        net.sync("a")  # one create (the first text) and one change (the second) in one export
        ops = [op for line in net.opened().splitlines() for op in json.loads(line)["ops"] if op["m"] == mid]
        assert [(op["k"], "v" in op) for op in ops] == [("create", False), ("change", True)]  # the text now only
        net.join("b")
        assert vectors_by_id(net.store("b"))[mid] == vectors_by_id(a)[mid] or \
            cosine(vectors_by_id(net.store("b"))[mid], vectors_by_id(a)[mid]) > 0.9999
        a.edit(mid, text="a third wording, sent as a change with its vector")
        net.sync("a")
        embeds.clear()
        sync.run(net.store("b"))
        assert embeds == []
        b = net.store("b")
        assert b.get(mid).text == "a third wording, sent as a change with its vector"
        assert cosine(vectors_by_id(b)[mid], vectors_by_id(a)[mid]) > 0.9999
    finally:
        net.close()


@pytest.mark.parametrize("kind", KINDS)
def test_join_returns_searchable_by_words_then_fills(tmp_path, fake_config, kind, embeds, monkeypatch):
    """The sender embeds with another model (or is an older device sending no vectors): the join
    commits the rows, embeds nothing, keyword search finds them; the next sync embeds them."""
    net = Net(tmp_path, kind, fake_config)
    try:
        sender(net)
        monkeypatch.setenv("PMEM_EMBED_MODEL", "fake-32")
        net.stores["b"] = MemoryStore(tmp_path / "b" / "pmem.db", config=load())
        embeds.clear()
        report = sync.join(net.store("b"), str(net.remote), key_file=str(net.key_file), fill=False)
        assert embeds == [] and report["vectors_missing"] == len(TEXTS) and report["applied"] == len(TEXTS)
        b = net.store("b")
        assert b.count() == len(TEXTS) and not vectors_by_id(b)
        assert sync.status(b)["vectors_missing"] == len(TEXTS)
        hits = search(b, "ferry", mode="keyword", limit=20)
        assert hits and all("ferry" in h.memory.text for h in hits)
        hits = search(b, "ferry", limit=20)  # hybrid: the semantic side has nothing yet, the words answer
        assert hits and "ferry" in hits[0].memory.text
        report = sync.run(b)
        assert report["filled"] == len(TEXTS) and report["vectors_missing"] == 0
        own = vectors_by_id(b)
        e = FakeEmbedder(32)
        for m in b.iter_all():
            assert own[m.id] == struct.pack("<32f", *e.embed([m.text])[0])
        assert sync.status(b)["vectors_missing"] == 0
    finally:
        net.close()


def test_older_changesets_without_vectors_are_embedded_later(tmp_path, fake_config, embeds, monkeypatch):
    net = Net(tmp_path, "folder", fake_config)
    try:
        monkeypatch.setattr(sync.SyncLog, "carry_vectors", lambda self, ops: None)  # a sender from before
        sender(net)
        assert not [op for line in net.opened().splitlines() for op in json.loads(line)["ops"] if "v" in op]
        embeds.clear()
        report = sync.join(net.store("b"), str(net.remote), key_file=str(net.key_file), fill=False)
        assert embeds == [] and report["vectors_missing"] == len(TEXTS)
        assert sync.run(net.store("b"))["vectors_missing"] == 0
        assert vectors_by_id(net.store("b")) == vectors_by_id(net.store("a"))  # the same model: the same vectors
    finally:
        net.close()


def half(values: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(values)}e", *values)).decode()


GOOD = half([0.125] * 64)
HOSTILE = [
    None, 7, "text", [], {"e": None}, {"e": "fake-64"}, {"e": ["fake-64", 64]},
    {"e": ["fake-64", 64, GOOD[:-4]]},                               # too short
    {"e": ["fake-64", 64, GOOD + "AAAA"]},                           # too long
    {"e": ["fake-64", 32, GOOD]},                                    # the length of another dimension
    {"e": ["fake-64", True, GOOD]},                                  # a bool for the dimension
    {"e": ["fake-64", 10 ** 12, GOOD]},                              # a dimension past any bound
    {"e": ["fake-32", 64, GOOD]},                                    # another model
    {"e": ["fake-64", 64, half([0.1] * 63 + [float("nan")])]},
    {"e": ["fake-64", 64, half([0.1] * 63 + [float("inf")])]},
    {"e": ["fake-64", 64, half([0.0] * 64)]},                        # no direction
    {"e": ["fake-64", 64, "!" * len(GOOD)]},                         # not base64
    {"e": ["fake-64", 64, "A" * 50_000_000]},                        # huge
    {"e": ["fake-64", 64, GOOD], "n": ["all-MiniLM-L6-v2", 384, "A" * 7]},  # a damaged second vector
]


def test_hostile_vector_fields_are_ignored_never_a_crash(tmp_path, fake_config, embeds, monkeypatch):
    """A key holder's device of another version, or a bug, sends vectors that are wrong in every
    way: the join stores every memory, no bad value, and embeds those memories itself."""
    net = Net(tmp_path, "folder", fake_config)
    texts = [f"hostile case {i}: the vector of this memory is wrong" for i in range(len(HOSTILE))]

    def carry(self, ops):
        for i, op in enumerate(o for o in ops if "text" in o.get("f", {})):
            op["v"] = HOSTILE[i]

    try:
        monkeypatch.setattr(sync.SyncLog, "carry_vectors", carry)
        sender(net, texts)
        monkeypatch.undo()
        report = sync.join(net.store("b"), str(net.remote), key_file=str(net.key_file), fill=False)
        b = net.store("b")
        assert report["applied"] == len(texts) and b.count() == len(texts)
        assert report["vectors_missing"] == len(texts) - 1  # only the last case's main vector is whole
        kept = vectors_by_id(b)
        assert list(kept.values()) == [struct.pack("<64f", *([0.125] * 64))]
        assert sync.run(b)["vectors_missing"] == 0
        e = FakeEmbedder(64)
        for m in b.iter_all():
            blob = vectors_by_id(b)[m.id]
            assert all(math.isfinite(v) for v in floats(blob))
            if m.text != texts[-1]:
                assert blob == struct.pack("<64f", *e.embed([m.text])[0])
    finally:
        net.close()


def test_unpack_half_is_total():
    assert unpack_half(GOOD, 64) == struct.pack("<64f", *([0.125] * 64))
    assert pack_half(struct.pack("<2f", 1e9, 0.5)) is None and pack_half(struct.pack("<2f", math.inf, 0.5)) is None
    for bad, dim in [(GOOD, 0), (GOOD, -1), (GOOD, 5000), (b"bytes", 64), (None, 64), (GOOD.replace("A", "-"), 64)]:
        assert unpack_half(bad, dim) is None


FILL_KILLED = """
import os, signal, sys
from pmem import sync
from pmem.service import MemoryStore
store = MemoryStore(sys.argv[1])
report = sync.join(store, sys.argv[2], key_file=sys.argv[3], fill=False)
assert report["vectors_missing"] == int(sys.argv[4]), report
def die(done, total):
    if done >= 16:
        os.kill(os.getpid(), signal.SIGKILL)
store.fill_missing(progress=die, batch=16)
"""


def test_a_fill_killed_midway_is_finished_by_the_next_sync(tmp_path, fake_config, monkeypatch):
    net = Net(tmp_path, "folder", fake_config)
    try:
        monkeypatch.setattr(sync.SyncLog, "carry_vectors", lambda self, ops: None)
        sender(net)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "PMEM_EMBED_MODEL": "fake-64"}
        db = tmp_path / "b" / "pmem.db"
        db.parent.mkdir()
        p = subprocess.run([sys.executable, "-c", FILL_KILLED, str(db), str(net.remote), str(net.key_file),
                            str(len(TEXTS))], env=env, capture_output=True, text=True, timeout=120)
        assert p.returncode == -signal.SIGKILL, p.stderr
        b = net.store("b")
        assert b.count() == len(TEXTS)  # the rows were committed before the fill began
        assert b.missing_vectors() == len(TEXTS) - 16  # the first batch stayed; the second died with it
        report = sync.run(b)
        assert report["filled"] == len(TEXTS) - 16 and report["vectors_missing"] == 0
        e = FakeEmbedder(64)
        for m in b.iter_all():
            assert vectors_by_id(b)[m.id] == struct.pack("<64f", *e.embed([m.text])[0])
    finally:
        net.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_purge_leaves_no_vector_of_the_memory(tmp_path, fake_config, kind):
    net = Net(tmp_path, kind, fake_config)
    try:
        net.store("a").add("a's first memory")
        net.init("a")
        net.join("b")
        mid = net.store("a").add("My locker code is 4711, next to the pool")[0].id
        net.sync("a")
        net.sync("b")
        blob = vectors_by_id(net.store("b"))[mid]
        packed = pack_half(blob)
        assert packed in net.opened()  # it travelled
        net.store("a").purge([mid])
        net.everyone()
        assert packed not in net.opened()
        key = keys.read_key_file(net.key_file)
        for name in "ab":
            store = net.store(name)
            assert mid not in vectors_by_id(store)
            j = sync.SyncLog(store)
            for seq, _, _ in j.own_index(j.device):  # the kept copies, rewritten
                kept = j.own_blob(j.device, seq)
                assert kept is not None
                assert packed not in json.dumps(keys.open_sealed(key, kept[0], j.device, seq, "kept"))
            store.checkpoint()
            assert blob not in net.raw(name)
    finally:
        net.close()


def test_status_counts_what_waits(tmp_path, fake_config, monkeypatch):
    net = Net(tmp_path, "folder", fake_config)
    try:
        monkeypatch.setattr(sync.SyncLog, "carry_vectors", lambda self, ops: None)
        sender(net)
        sync.join(net.store("b"), str(net.remote), key_file=str(net.key_file), fill=False)
        data = sync.status(net.store("b"))
        assert data["vectors_missing"] == len(TEXTS) and data["filling"] is False
    finally:
        net.close()


def test_pmem_sync_join_returns_then_fills_in_the_background(tmp_path):
    """The commands themselves: a device on another model joins (nothing it can take travels),
    `pmem sync join` returns with the rows searchable by words and starts the fill, which ends by
    itself; `pmem sync status --json` counts down to 0."""
    from test_sync_cli import Device

    class OtherModel(Device):
        def env(self) -> dict[str, str]:
            return {**super().env(), "PMEM_EMBED_MODEL": "fake-32"}

    key = tmp_path / "sync.key"
    a, b = Device(tmp_path, "a", key), OtherModel(tmp_path, "b", key)
    for t in TEXTS[:40]:
        a.add(t)
    a.json("sync", "init", str(tmp_path / "Sync"), "--key-file", str(key))
    joined = b.json("sync", "join", str(tmp_path / "Sync"), "--key-file", str(key))
    assert joined["applied"] == 40 and joined["vectors_missing"] == 40 and joined["filling"] is True
    assert [h for h in b.json("search", "crane", "--mode", "keyword") if "crane" in h["text"]]
    deadline = time.monotonic() + 90
    while (status := b.json("sync", "status"))["vectors_missing"] or status["filling"]:
        assert time.monotonic() < deadline, status
        time.sleep(0.5)
    assert b.json("search", "crane", "--mode", "semantic")


def test_an_imports_fill_and_a_syncs_fill_never_run_at_once(tmp_path, fake_config, monkeypatch, embeds):
    """One fill per database (pmem/fill.py), whoever starts it. An import's fill holds the lock:
    a sync coming meanwhile embeds nothing and says the work is being done. A sync's fill holds
    it: the fill an import starts (a detached process) waits, then finds nothing left; every
    memory is embedded once."""
    from typer.testing import CliRunner

    from pmem import fill
    from pmem.cli.app import app

    net = Net(tmp_path, "folder", fake_config)
    try:
        monkeypatch.setattr(sync.SyncLog, "carry_vectors", lambda self, ops: None)  # the join leaves them all
        sender(net)
        sync.join(net.store("b"), str(net.remote), key_file=str(net.key_file), fill=False)
        b, db = net.store("b"), tmp_path / "b" / "pmem.db"
        assert b.missing_vectors() == len(TEXTS)

        # the import's fill first, as its detached process runs it (fill.main); a sync comes mid-way
        seen: list[dict] = []

        def import_step(done: int, total: int) -> None:
            if not seen:
                assert fill.running(db) and fill.last(db)["by"] == "import"
                embeds.clear()
                with MemoryStore(db, config=fake_config) as other:  # `pmem sync` in another process
                    status = sync.status(other)
                    seen.append(sync.run(other))
                assert embeds == []  # the sync embedded nothing while the import's fill held the lock
                # `pmem sync status` and `pmem doctor` read the one fill's state
                assert status["filling"] and status["fill"] == {"running": True, "by": "import", "done": done,
                                                                 "total": len(TEXTS)}
                (check,) = [c for c in doctor.run_checks(fake_config, db_override=db) if c.name == "missing vectors"]
                assert check.detail.endswith(f"the background fill is running ({done} of {len(TEXTS)} done)")
                assert not check.fix
                shown = CliRunner().invoke(app, ["--db", str(db), "sync", "status"])
                waiting = len(TEXTS) - done
                assert f"waiting for vectors: {waiting} (embedding in the background: {done} of {len(TEXTS)} done)" \
                    in shown.stdout, shown.output

        with fill.one_at_a_time(db) as held:
            assert held
            assert fill.embed_missing(b, import_step, by="import") == len(TEXTS)
        (report,) = seen
        assert report["filled"] == 0 and report["filling"] is True
        assert 0 < report["vectors_missing"] < len(TEXTS)  # what the import's fill had not reached yet
        assert b.missing_vectors() == 0 and not fill.running(db)
        state = fill.last(db)
        assert state["by"] == "import" and state["ok"] and state["done"] == len(TEXTS)

        # the sync's fill first; an import's detached fill is started while it runs
        b.conn.execute("DELETE FROM memory_vec")  # as a join leaves them, again
        assert b.missing_vectors() == len(TEXTS)
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))  # the child imports this tree
        during: list[tuple[int, dict]] = []

        def sync_step(text: str) -> None:
            if text.startswith("sync: embedded") and not during:
                assert fill.kick(db, by="import")
                time.sleep(1.5)  # time enough for the child to start, and to embed if it did not wait
                during.append((b.missing_vectors(), dict(fill.last(db) or {})))

        embeds.clear()
        report = sync.run(b, progress=sync_step)
        assert report["filled"] == len(TEXTS) and report["vectors_missing"] == 0 and "filling" not in report
        assert sorted(embeds) == sorted(TEXTS)  # each memory embedded once, by the sync
        ((missing, state),) = during
        assert missing == len(TEXTS) - 64 and state["by"] == "sync"  # the import's fill had not begun
        deadline = time.monotonic() + 60
        while (fill.last(db) or {}).get("by") != "import" or fill.running(db):
            assert time.monotonic() < deadline, fill.last(db)
            time.sleep(0.1)
        state = fill.last(db)
        assert state["ok"] and state["done"] == 0  # it waited, then found nothing left
    finally:
        net.close()


def test_int8_vectors_travel_marked_and_the_receiver_makes_them_float32(tmp_path, fake_config, int8ish):
    """A sender's vectors from an import's int8 pass, not yet made again in float32, say so in the
    changeset (`r`): the receiver marks them and its fill makes them float32, as the sender's does."""
    net = Net(tmp_path, "folder", fake_config)
    try:
        a = net.store("a")
        a.insert([a.new_memory(t) for t in TEXTS])
        assert a.int8_vectors() == len(TEXTS)
        net.init("a")
        sync.join(net.store("b"), str(net.remote), key_file=str(net.key_file), fill=False)
        b = net.store("b")
        assert b.int8_vectors() == len(TEXTS)  # marked as they came
        theirs = vectors_by_id(a)
        assert min(cosine(v, theirs[mid]) for mid, v in vectors_by_id(b).items()) > 0.9999  # float16 of a's
        exact = {m.id: struct.pack("<64f", *FakeEmbedder(64).embed([m.text])[0]) for m in a.iter_all()}
        assert all(v != exact[mid] for mid, v in vectors_by_id(b).items())
        for s in (a, b):
            s.fill_missing(scan=False)
            assert s.int8_vectors() == 0 and vectors_by_id(s) == exact
        later = {a.add("added after the fill, one text: float32, no mark")[0].id, next(iter(exact))}
        a.edit(next(iter(exact)), text="an edit after the fill, float32 too")
        net.sync("a")
        ops = [op for line in net.opened().splitlines() for op in json.loads(line)["ops"] if "v" in op]
        assert sum("r" in op["v"] for op in ops) == len(TEXTS)  # the first export's, and no later one's
        assert {op["m"] for op in ops if op["m"] in later and "r" not in op["v"]} == later
    finally:
        net.close()


@pytest.mark.parametrize("flag", ["e", {"e": 1}, ["e"] * 1000, [None, ["e"]], 5, ["n"], [], ["e", "e", "e"]])
def test_a_hostile_int8_flag_marks_nothing_and_never_crashes(tmp_path, fake_config, int8ish, monkeypatch, flag):
    net = Net(tmp_path, "folder", fake_config)
    texts = ["one memory whose int8 flag is odd", "another, the control, flagged as a sender would"]

    def carry(self, ops):
        creates = [o for o in ops if "text" in o.get("f", {})]
        creates[0]["v"] = {"e": ["fake-64", 64, half([0.25] * 64)], "r": flag}
        creates[1]["v"] = {"e": ["fake-64", 64, half([0.5] * 64)], "r": ["e"]}

    try:
        monkeypatch.setattr(sync.SyncLog, "carry_vectors", carry)
        sender(net, texts)
        monkeypatch.undo()
        report = sync.join(net.store("b"), str(net.remote), key_file=str(net.key_file), fill=False)
        b = net.store("b")
        assert report["applied"] == 2 and report["vectors_missing"] == 0
        assert b.int8_vectors() == 1  # the control only: no odd flag marks (a list of at most two parts)
    finally:
        net.close()


@pytest.mark.parametrize("bulk,marked", [("float32", True), ("int8-only", False)])
def test_a_receivers_setting_decides_what_it_does_with_int8_vectors(tmp_path, fake_config, int8ish, bulk, marked):
    """float32 wants float32's vectors: the sender's int8 ones are marked and made float32 here;
    int8-only keeps them as they came."""
    net = Net(tmp_path, "folder", fake_config)
    try:
        a = net.store("a")
        a.insert([a.new_memory(t) for t in TEXTS])
        net.init("a")
        (tmp_path / "b").mkdir()
        net.stores["b"] = b = MemoryStore(tmp_path / "b" / "pmem.db", config=fake_config.with_values(embed_bulk=bulk))
        sync.join(b, str(net.remote), key_file=str(net.key_file), fill=False)
        assert b.int8_vectors() == (len(TEXTS) if marked else 0)
        b.fill_missing(scan=False)
        exact = {m.id: struct.pack("<64f", *FakeEmbedder(64).embed([m.text])[0]) for m in a.iter_all()}
        assert (vectors_by_id(b) == exact) == marked
    finally:
        net.close()

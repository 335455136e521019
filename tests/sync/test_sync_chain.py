"""A hostile remote against the chain: a changeset deleted, put back in an older version, a whole
history forced back. Real stores on a real folder and a real bare git repository; the attacker
(attacker.py) writes to the remote without the key. Threat model: pmem/sync/__init__.py."""

from __future__ import annotations

import shutil

import pytest
from attacker import Net, own_files, started

from pmem import sync
from pmem.sync import engine

KINDS = ["folder", pytest.param("git", marks=pytest.mark.skipif(shutil.which("git") is None, reason="needs git"))]
SECRET = "X1234567"


@pytest.fixture
def net(tmp_path, fake_config, request):
    n = Net(tmp_path, request.param, fake_config)
    yield n
    n.close()


@pytest.mark.parametrize("net", KINDS, indirect=True)
def test_a_purge_whose_changeset_was_deleted_and_text_put_back_never_reaches_a_joining_device(net):
    started(net)
    mid = net.store("a").add(f"My passport number is {SECRET}")[0].id
    net.sync("a")
    net.sync("b")
    before = own_files(net, "a")  # the attacker keeps a's changesets, the text (sealed) in one of them
    net.store("a").purge([mid])
    net.sync("a")  # the purge goes out, a's changeset with the text is rewritten
    net.sync("b")  # b applies it, and vouches for it
    after = own_files(net, "a")
    purge = sorted(set(after) - set(before))
    assert purge
    net.write({**before, **{p: None for p in purge}})  # the old version back, the purge gone
    assert SECRET in net.opened()
    net.join("c")
    assert mid not in net.texts("c") and SECRET.encode() not in net.raw("c")
    net.everyone()  # a writes its changesets again from its own copies
    assert SECRET not in net.opened()
    assert set(own_files(net, "a")) == set(after)
    for name in "abc":
        assert mid not in net.texts(name) and SECRET.encode() not in net.raw(name)
    assert net.texts("a") == net.texts("b") == net.texts("c")


@pytest.mark.parametrize("net", KINDS, indirect=True)
def test_a_remote_forced_back_to_before_a_purge_teaches_a_joining_device_the_purge(net):
    """The whole remote forced back (for git: the history from before the purge and the compact,
    force-pushed): once a device that knew of the purge syncs, a device that joins learns it."""
    started(net)
    mid = net.store("a").add(f"Locker code {SECRET}")[0].id
    net.sync("a")
    net.sync("b")
    old = net.snapshot()
    net.store("a").purge([mid])
    net.sync("a")
    net.sync("b")
    if net.kind == "git":
        assert sync.compact(net.store("a"))["squashed"]
        net.sync("b")
    net.force_back(old)
    net.store("b").add("b writes on, after the rollback")
    net.sync("b")  # b, not the device that purged, syncs on the rolled back remote
    net.join("c")
    assert mid not in net.texts("c") and SECRET.encode() not in net.raw("c")
    net.everyone()
    assert SECRET not in net.opened()
    for name in "abc":
        assert mid not in net.texts(name) and SECRET.encode() not in net.raw(name)
    assert net.texts("a") == net.texts("b") == net.texts("c")


@pytest.mark.parametrize("net", KINDS, indirect=True)
def test_a_deleted_newest_changeset_is_written_again_and_nobody_is_cut_off(net):
    started(net)
    first = net.store("a").add("written on a, then deleted from the remote")[0].id
    net.sync("a")
    newest = max(own_files(net, "a"))
    net.write({newest: None})
    assert newest not in net.tree()
    net.sync("b")
    later = net.store("a").add("written on a afterwards")[0].id
    net.sync("a")  # a notices its changeset gone, and writes it again
    assert newest in net.tree()
    report = net.sync("b")
    assert report["gaps"] == []
    assert {first, later} <= set(net.texts("b"))
    net.join("c")
    assert net.texts("a") == net.texts("b") == net.texts("c")


@pytest.mark.parametrize("net", KINDS, indirect=True)
def test_changesets_another_device_vouched_for_are_reported_when_the_remote_lost_them(net):
    """a is offline; the remote loses its newest changeset, which b had applied and vouched for in
    one of its own: a device that joins now reports a rolled back, never takes it as a's newest."""
    started(net)
    net.store("a").add("a's second memory")
    net.sync("a")
    newest = max(own_files(net, "a"))
    net.sync("b")
    net.store("b").add("b vouches for what it applied of a")
    net.sync("b")
    net.write({newest: None})
    net.join("c")
    report = net.sync("c")
    assert report["rolled_back"] == [{"device": net.device("a"), "vouched_up_to": int(newest.rsplit("/", 1)[1]),
                                      "present_up_to": int(newest.rsplit("/", 1)[1]) - 1,
                                      "vouched_by": net.device("b")}]
    net.sync("a")
    assert net.sync("c")["rolled_back"] == []
    assert "a's second memory" in net.texts("c").values()


@pytest.mark.parametrize("net", KINDS, indirect=True)
def test_a_swapped_or_cut_changeset_is_written_again_by_its_device(net):
    started(net)
    net.store("a").add("a's second memory")
    net.sync("a")
    files = own_files(net, "a")
    first, newest = min(files), max(files)
    b_file = max(own_files(net, "b"))
    net.write({newest: files[first], b_file: net.tree()[b_file][:40]})  # a swap, and a file cut short
    with pytest.raises(sync.SyncError):
        net.join("c")  # set up, but nothing applied: it syncs on below
    net.everyone()
    assert net.texts("a") == net.texts("b") == net.texts("c")
    assert len(net.texts("c")) == 3


def test_devices_that_synced_before_the_chain_keep_syncing_and_repair_their_older_changesets(tmp_path, fake_config):
    """a and b as older pmem left them: changesets without chain fields, no chain tables. They sync
    on; a adopts its older changesets from the remote and writes one again when it is deleted."""
    from pmem.store.replication import CHAIN_SCHEMA
    from pmem.sync import keys

    net = started(Net(tmp_path, "folder", fake_config))
    try:
        key = keys.read_key_file(net.key_file)
        for name in "ab":
            device = net.device(name)
            for path in own_files(net, name):
                seq = int(path.rsplit("/", 1)[1])
                payload = keys.open_sealed(key, net.tree()[path], device, seq, path)
                old = {k: payload[k] for k in ("device", "seq", "ops")}
                net.write({path: keys.seal(key, device, seq, old)})
            conn = net.store(name).conn
            for sql in CHAIN_SCHEMA:
                conn.execute(f"DROP TABLE {sql.split()[5]}")
            conn.execute("DELETE FROM sync_state WHERE key IN ('chain', 'announced')")
        legacy = min(own_files(net, "a"))
        net.store("a").add("after the upgrade")
        net.sync("a")
        net.sync("b")
        net.write({legacy: None})
        net.sync("a")
        assert legacy in net.tree()
        net.join("c")
        assert net.texts("a") == net.texts("b") == net.texts("c")
        assert len(net.texts("c")) == 3
    finally:
        net.close()


def test_past_many_purges_a_changeset_names_the_one_that_lists_them_and_a_reader_past_a_gap_finds_it(
        tmp_path, fake_config, monkeypatch):
    from pmem.sync import keys

    monkeypatch.setattr(engine, "PURGED_INLINE", 0)  # as if past 64 purges: the list goes only after it grew
    net = started(Net(tmp_path, "folder", fake_config))
    try:
        doomed = net.store("a").add(f"Locker code {SECRET}")[0].id
        net.sync("a")
        net.store("a").purge([doomed])
        net.sync("a")
        for i in range(2):
            net.store("a").add(f"a writes on {i}")
            net.sync("a")
        key = keys.read_key_file(net.key_file)
        a = net.device("a")
        files = sorted(own_files(net, "a"))
        payloads = [keys.open_sealed(key, net.tree()[p], a, int(p.rsplit("/", 1)[1]), p) for p in files]
        listing = [int(p.rsplit("/", 1)[1]) for p, pl in zip(files, payloads) if "purged" in pl]
        assert len(listing) == 1 and payloads[-1]["purged_in"] == listing[0] and "purged" not in payloads[-1]
        gap = files[files.index(next(p for p in files if p.endswith(f"{listing[0]:010d}"))) - 1]
        net.write({gap: None})  # the gap is before the list: the reader reads the newest, then the one it names
        net.join("c")
        assert doomed not in net.texts("c")
        report = net.sync("c")
        assert report["gaps"] and doomed not in net.texts("c")
        known = sync.SyncLog(net.store("c")).tombstoned([doomed])
        assert known == {doomed}
    finally:
        net.close()

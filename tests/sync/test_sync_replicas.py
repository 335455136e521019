"""Sync in process, on real stores over a plain folder and a bare git repository: the race of two
pushes, and a property test that random work on three replicas converges once everyone syncs."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from pmem import sync
from pmem.errors import NotFound, UsageError
from pmem.service import MemoryStore
from pmem.sync import keys

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def state(store: MemoryStore) -> dict[str, dict]:
    out = {}
    for m in store.iter_all():
        d = m.to_dict()
        d.pop("access_count")
        d.pop("last_accessed_at")
        out[m.id] = d
    return out


def homes(tmp_path, fake_config, n: int):
    return [MemoryStore(tmp_path / f"home{i}" / "pmem.db", config=fake_config) for i in range(n)]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_push_that_lost_the_race_is_rebased_and_pushed_again(tmp_path, fake_config, monkeypatch):
    remote = tmp_path / "r.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    a, b = homes(tmp_path, fake_config, 2)
    key = tmp_path / "k"
    a.add("from a, first")
    sync.init(a, str(remote), key_file=str(key))
    sync.join(b, str(remote), key_file=str(key))
    # a pulls, then b pushes before a does: a's push is rejected once, rebased, retried
    b.add("from b, meanwhile")
    assert sync.run(b)["push_retries"] == 0
    a.add("from a, second")
    report = sync.run(a)
    assert report["push_retries"] == 0  # run() pulls first: no race yet
    a.add("from a, racing")
    real_push, raced = sync.transport.Git.push, []

    def push(self, *args, **kw):  # a has committed its changeset; b wins the race to the remote
        if not raced:
            raced.append(True)
            b.add("from b, winning the race")
            assert sync.run(b)["push_retries"] == 0
        return real_push(self, *args, **kw)

    monkeypatch.setattr(sync.transport.Git, "push", push)
    assert sync.run(a)["push_retries"] == 1  # rejected once, then pushed after a rebase
    assert raced
    sync.run(a)  # b's changeset, pushed while a was pushing
    sync.run(b)
    assert state(a) == state(b)
    assert len(state(a)) == 5
    log = subprocess.run(["git", "-C", str(remote), "log", "--format=%s", "main"], capture_output=True, text=True)
    assert len(log.stdout.splitlines()) >= 5  # every push is on the remote's main


OPS = st.lists(st.tuples(st.sampled_from(["add", "edit", "forget", "restore", "tag", "undo", "purge", "sync"]),
                         st.integers(0, 2), st.integers(0, 30)), min_size=1, max_size=25)


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(script=OPS)
def test_three_replicas_converge_and_purged_text_is_gone(tmp_path_factory, fake_config, script):
    tmp = tmp_path_factory.mktemp("replicas")
    folder = tmp / "Sync"
    stores = homes(tmp, fake_config, 3)
    key = tmp / "k"
    try:
        sync.init(stores[0], str(folder), key_file=str(key))
        for s in stores[1:]:
            sync.join(s, str(folder), key_file=str(key))
        purged_texts: list[str] = []
        counter = 0
        for action, who, pick in script:
            s = stores[who]
            ids = sorted(state(s))
            target = ids[pick % len(ids)] if ids else None
            counter += 1
            try:
                if action == "add" or target is None:
                    s.add(f"note {counter} from {who} zq{counter}x")
                elif action == "edit":
                    s.edit(target, text=f"edited {counter} by {who} zq{counter}x")
                elif action == "forget":
                    s.forget(target)
                elif action == "restore":
                    s.restore(target)
                elif action == "tag":
                    s.edit(target, add_tags=[f"t{counter}"])
                elif action == "undo":
                    s.undo()
                elif action == "purge":
                    purged_texts.extend(e.after["text"] for e, _ in s.history(target) if e.after)
                    s.purge([target])
                else:
                    sync.run(s)
            except (NotFound, UsageError):
                pass
        for _ in range(2):
            for s in stores:
                sync.run(s)
        first = state(stores[0])
        for s in stores[1:]:
            assert state(s) == first
        key_bytes = keys.read_key_file(key)
        for text in purged_texts:
            if any(text == m["text"] for m in first.values()):
                continue  # the same words written again under another id
            for s in stores:
                raw = b"".join(p.read_bytes() for p in s.path.parent.iterdir() if p.is_file())
                assert text.encode() not in raw
            for path in folder.glob("segments/*/*"):
                payload = keys.open_sealed(key_bytes, path.read_bytes(), path.parent.name, int(path.name), "t")
                assert text not in json.dumps(payload, ensure_ascii=False)
    finally:
        for s in stores:
            s.close()


def test_ids_made_after_sync_starts_are_longer_and_old_collisions_are_conflicts(tmp_path, fake_config):
    from pmem.records import Memory

    a, b = homes(tmp_path, fake_config, 2)
    key = tmp_path / "k"
    old = a.add("from before sync")[0].id
    assert len(old) == 8
    a.insert([Memory(id="abcd1234", text="a's memory")])
    b.insert([Memory(id="abcd1234", text="b's memory")])  # the same id, made apart
    sync.init(a, str(tmp_path / "Sync"), key_file=str(key))
    sync.join(b, str(tmp_path / "Sync"), key_file=str(key))
    new = a.add("after sync started")[0].id
    assert len(new) == 16 and a.get(old[:4]).id == old  # old ids and prefixes still work
    sync.run(a)
    sync.run(b)
    assert a.get("abcd1234").text == "a's memory" and b.get("abcd1234").text == "b's memory"
    assert b.get(new).text == "after sync started"
    listed = sync.status(a)["recent_conflicts"] + sync.status(b)["recent_conflicts"]
    assert {c["field"] for c in listed} == {"id"}


def test_a_key_wrapped_by_a_passphrase_unlocks_sync_and_exports_as_text(tmp_path, fake_config, monkeypatch):
    a, b = homes(tmp_path, fake_config, 2)
    a.add("kept under a passphrase")
    sync.init(a, str(tmp_path / "Sync"), passphrase="correct horse")
    assert not (sync.sync_dir(a) / "key").exists()
    assert (sync.sync_dir(a) / "key.scrypt").stat().st_mode & 0o777 == 0o600
    with pytest.raises(UsageError, match="passphrase"):
        sync.run(a)
    with pytest.raises(keys.WrongKey):
        sync.run(a, passphrase="wrong horse")
    monkeypatch.setenv("PMEM_SYNC_PASSPHRASE", "correct horse")
    sync.run(a)
    text = sync.export_key(a)
    sync.join(b, str(tmp_path / "Sync"), key_text=text)  # typed on the next device
    assert [m.text for m in b.iter_all()] == ["kept under a passphrase"]
    assert (sync.sync_dir(b) / "key").stat().st_mode & 0o777 == 0o600

"""safefs: the file operations pmem uses under a sync folder or its git clone, where a stranger may
have made any name a link, a FIFO or a folder. Nothing under the root is ever followed."""

from __future__ import annotations

import os

import pytest

from pmem.sync import safefs
from pmem.sync.keys import SyncError


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "remote"
    (r / "segments" / "dev").mkdir(parents=True)
    (r / "segments" / "dev" / "0001").write_bytes(b"sealed")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"the user's")
    return r, outside


def test_reads_and_writes_a_plain_tree(root):
    r, _ = root
    assert safefs.read(r, "segments/dev/0001", 100) == b"sealed"
    assert safefs.read(r, "segments/other/0001", 100) is None
    safefs.write(r, "retired/dev", b"note")
    assert (r / "retired" / "dev").read_bytes() == b"note"
    assert safefs.entries(r, "segments") == {"dev": "dir"}
    assert not [p for p in r.rglob(".pmem-tmp-*")]


@pytest.mark.parametrize("link", ["segments", "segments/dev", "segments/dev/0001"])
def test_a_link_at_any_level_is_refused_for_reading(root, link):
    r, outside = root
    target = r / link
    if target.is_dir():
        os.rename(target, r.parent / "aside")
    else:
        target.unlink()
    (outside / "dev").mkdir()
    (outside / "dev" / "0001").write_bytes(b"outside")
    (outside / "0001").write_bytes(b"outside")
    target.symlink_to(outside if link != "segments/dev/0001" else outside / "secret")
    with pytest.raises(SyncError, match="symbolic link"):
        safefs.read(r, "segments/dev/0001", 100)
    with pytest.raises(SyncError, match="symbolic link"):
        safefs.write(r, "segments/dev/0002" if link != "segments/dev/0001" else "segments/dev/0001/x", b"x")
    assert (outside / "secret").read_bytes() == b"the user's"
    assert sorted(p.name for p in outside.rglob("*")) == ["0001", "0001", "dev", "secret"]


def test_a_write_over_a_link_replaces_the_link_never_its_target(root):
    r, outside = root
    (r / "epoch").symlink_to(outside / "secret")
    safefs.write(r, "epoch", b"new epoch\n")
    assert not (r / "epoch").is_symlink() and (r / "epoch").read_bytes() == b"new epoch\n"
    assert (outside / "secret").read_bytes() == b"the user's"


def test_a_fifo_is_refused_without_waiting_and_a_size_is_checked_before_reading(root):
    r, _ = root
    os.mkfifo(r / "segments" / "dev" / "0002")
    with pytest.raises(SyncError, match="special file"):
        safefs.read(r, "segments/dev/0002", 100)
    (r / "segments" / "dev" / "0003").write_bytes(b"x" * 101)
    with pytest.raises(SyncError, match="refusing more than 100"):
        safefs.read(r, "segments/dev/0003", 100)
    assert safefs.read(r, "segments/dev/0003", 101) == b"x" * 101
    assert safefs.entries(r, "segments/dev") == {"0001": "file", "0002": "other", "0003": "file"}
    with pytest.raises(SyncError, match="special file"):
        safefs.kind(r, "segments/dev/0002")


def test_a_root_that_became_a_link_is_refused(root):
    r, outside = root
    os.rename(r, r.parent / "real")
    r.symlink_to(outside)
    with pytest.raises(SyncError, match="is now a symbolic link"):
        safefs.entries(r)
    with pytest.raises(SyncError, match="is now a symbolic link"):
        safefs.write(r, "keycheck", b"x")
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]

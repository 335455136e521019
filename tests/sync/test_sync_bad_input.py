"""Bad input on sync, as processes: damaged changesets, a remote that is not a git repository,
a remote that vanishes mid-push. Each is one line on stderr with exit 1, and nothing applied half."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from test_sync_cli import Device

from pmem.sync import keys

pytestmark = [pytest.mark.skipif(shutil.which("git") is None, reason="sync over git needs the git command"),
              pytest.mark.slow]


def one_line_error(p: subprocess.CompletedProcess, words: str) -> None:
    assert p.returncode == 1, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr
    lines = [line for line in p.stderr.splitlines() if not line.startswith("sync: ")]  # progress
    assert len(lines) == 1 and lines[0].startswith("pmem: error: ") and words in lines[0], p.stderr


def test_a_damaged_changeset_is_refused_in_one_line_and_nothing_of_it_applied(tmp_path):
    folder, key = tmp_path / "Sync", tmp_path / "k"
    a, b = Device(tmp_path, "a", key), Device(tmp_path, "b", key)
    a.json("sync", "init", str(folder), "--key-file", str(key))
    b.json("sync", "join", str(folder), "--key-file", str(key))
    a.add("before the damage")
    a.sync()
    a.add("second of the changeset")
    a.add("third of the changeset")
    a.sync()
    device = a.json("sync", "status")["device"]
    path = sorted(folder.glob(f"segments/{device}/*"))[-1]
    good = path.read_bytes()
    seq = int(path.name)
    held = b.memories()
    damaged = {
        "corrupt": (bytes(range(256)) * 4, "is not a pmem sync file"),
        "truncated": (good[:len(good) // 2], "fails authentication"),
        "another key": (keys.seal(keys.new_key(), device, seq, {"device": device, "seq": seq, "ops": []}),
                        "sealed with another key"),
        "empty": (b"", "changeset"),
    }
    for name, (blob, words) in damaged.items():
        path.write_bytes(blob)
        p = b.run("sync", ok=False)
        one_line_error(p, words)
        assert b.memories().keys() == held.keys(), name
    path.write_bytes(good)  # the syncer delivers the whole file at last
    b.sync()
    assert {"second of the changeset", "third of the changeset"} <= {m["text"] for m in b.memories().values()}


def test_a_remote_that_is_not_a_git_repository_leaves_nothing_behind(tmp_path):
    (tmp_path / "plain.git").mkdir()
    (tmp_path / "notes.txt").write_text("not a repository")
    key = tmp_path / "k"
    a = Device(tmp_path, "a", key)
    a.add("stays local")
    for remote, words in ((tmp_path / "plain.git", "does not exist"),
                          (f"file://{tmp_path / 'nothere'}", "does not appear to be a git repository"),
                          (f"file://{tmp_path / 'notes.txt'}", "invalid gitfile format")):
        one_line_error(a.run("sync", "init", str(remote), "--key-file", str(key), ok=False), words)
        one_line_error(a.run("sync", "join", str(remote), "--key-file", str(key), ok=False)
                       if key.exists() else a.run("sync", ok=False), "does not sync yet")
    assert not key.exists()
    assert sorted(p.name for p in a.home.iterdir() if not p.name.startswith("pmem.db-")) == ["pmem.db"]
    assert [m["text"] for m in a.memories().values()] == ["stays local"]


def test_a_remote_that_vanishes_mid_push_keeps_the_changes_for_the_next_sync(tmp_path):
    remote, key = tmp_path / "remote.git", tmp_path / "k"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    a, b = Device(tmp_path, "a", key), Device(tmp_path, "b", key)
    a.json("sync", "init", str(remote), "--key-file", str(key))
    b.json("sync", "join", str(remote), "--key-file", str(key))
    # a git that takes the remote away just as it starts to push (an unplugged USB stick)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "git"
    fake.write_text(f'#!/bin/sh\ncase " $* " in *" push "*) mv "{remote}" "{remote}.gone";; esac\n'
                    f'exec {shutil.which("git")} "$@"\n')
    fake.chmod(0o755)
    b.extra["PATH"] = f"{bin_dir}:{shutil.which('git').rsplit('/', 1)[0]}:/usr/bin:/bin"
    b.add("written while the stick came out")
    p = b.run("sync", ok=False)
    one_line_error(p, "git push failed")
    assert not remote.exists()
    (tmp_path / "remote.git.gone").rename(remote)
    del b.extra["PATH"]
    assert json.loads(b.run("sync", "--json").stdout)["push_retries"] == 0
    a.sync()
    assert "written while the stick came out" in {m["text"] for m in a.memories().values()}

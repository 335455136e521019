"""A remote written by someone without the key, and git's own broken states, on real stores over a
real bare git repository and a real folder. The attacker here does what anyone with write access
to the remote can: commits a symbolic link or a `.gitattributes` with git, plants files in the
folder, forges a header with the key id (which is public: it is in every header). Whatever they
do, pmem follows no link, writes and reads nothing outside the remote and the home, refuses in
one line (SyncError, never a traceback), and loses no memory."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pmem import sync
from pmem.errors import UsageError
from pmem.service import MemoryStore
from pmem.sync import keys

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="sync over git needs the git command")
ROOT = Path(__file__).resolve().parents[2]


def texts(store: MemoryStore) -> set[str]:
    return {m.text for m in store.iter_all()}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=mallory", "-c", "user.email=m@example.invalid", *args],
                          cwd=cwd, check=True, capture_output=True, text=True).stdout


def attacker_clone(remote: Path, tmp: Path) -> Path:
    """The attacker's own clone of the remote (no key; git with its default settings)."""
    work = tmp / "mallory"
    shutil.rmtree(work, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", "-b", "main", str(remote), str(work)], check=True)
    return work


def attacker_push(work: Path, message: str, *paths: str) -> None:
    git(work, "add", "-A", "--", *(paths or (".",)))
    git(work, "commit", "-q", "-m", message)
    git(work, "push", "-q", "origin", "HEAD:main")


def canaries(tmp: Path) -> tuple[Path, Path, dict[Path, bytes]]:
    """A user's folder and file outside the home and the remote, and what they hold."""
    outside = tmp / "outside"
    outside.mkdir()
    user_file = outside / "thesis.txt"
    user_file.write_bytes(b"three years of work\n")
    return outside, user_file, {user_file: user_file.read_bytes()}


def unchanged(outside: Path, before: dict[Path, bytes]) -> None:
    assert {p: p.read_bytes() for p in outside.rglob("*") if p.is_file()} == before


@pytest.fixture
def remote(tmp_path):
    path = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)
    return path


@pytest.fixture
def pair(tmp_path, fake_config):
    def make(where: str):
        a = MemoryStore(tmp_path / "a" / "pmem.db", config=fake_config)
        b = MemoryStore(tmp_path / "b" / "pmem.db", config=fake_config)
        key = tmp_path / "k"
        a.add("from a before the attack")
        sync.init(a, where, key_file=str(key))
        sync.join(b, where, key_file=str(key))
        sync.run(a)
        return a, b, key
    return make


def device(store: MemoryStore) -> str:
    return sync.SyncLog(store).device


# -- 1. no link is ever followed ---------------------------------------------------------------

def test_a_committed_link_for_a_device_folder_is_refused_and_nothing_is_written_through_it(tmp_path, remote, pair):
    a, b, _ = pair(str(remote))
    outside, _, before = canaries(tmp_path)
    work = attacker_clone(remote, tmp_path)
    for name in (device(a), device(b)):
        shutil.rmtree(work / "segments" / name, ignore_errors=True)
        (work / "segments" / name).symlink_to(outside, target_is_directory=True)
    attacker_push(work, "segments/<device> -> a folder of the user's")
    b.add("written by b after the attack")
    with pytest.raises(sync.SyncError, match="someone else wrote this remote"):
        sync.run(b)
    unchanged(outside, before)
    assert "written by b after the attack" in texts(b)


def test_a_link_for_segments_or_retired_in_a_folder_is_refused(tmp_path, pair):
    folder = tmp_path / "Sync"
    a, b, _ = pair(str(folder))
    outside, _, before = canaries(tmp_path)
    (folder / "retired").symlink_to(outside, target_is_directory=True)
    with pytest.raises(sync.SyncError, match="retired .* symbolic link"):
        sync.retire(a, device(b))
    (folder / "retired").unlink()
    shutil.move(folder / "segments", tmp_path / "moved")
    (folder / "segments").symlink_to(outside, target_is_directory=True)
    b.add("written by b after the attack")
    with pytest.raises(sync.SyncError, match="segments .* symbolic link"):
        sync.run(b)
    unchanged(outside, before)


def test_a_committed_epoch_link_does_not_let_compact_overwrite_a_users_file(tmp_path, remote, pair):
    a, b, _ = pair(str(remote))
    _, user_file, before = canaries(tmp_path)
    work = attacker_clone(remote, tmp_path)
    (work / "epoch").unlink(missing_ok=True)
    (work / "epoch").symlink_to(user_file)
    attacker_push(work, "epoch -> the user's thesis")
    a.add("a second commit, so there is history to squash")
    sync.run(a)
    sync.compact(a)
    assert user_file.read_bytes() == before[user_file]


def test_a_changeset_or_key_check_that_is_a_link_is_not_read(tmp_path, pair):
    """The link points at a file a key holder sealed (here: the test, to see whether it was read):
    followed, its memory would arrive."""
    folder = tmp_path / "Sync"
    a, b, key = pair(str(folder))
    outside = tmp_path / "outside"
    outside.mkdir()
    k = keys.read_key_file(key)
    j = sync.SyncLog(a)
    nxt = j.number("seq") + 1
    op = {"id": f"{device(a)}-999", "n": 999, "m": "0123456789abcdef", "k": "create", "c": "1", "f": {}}
    (outside / "bait").write_bytes(keys.seal(k, device(a), nxt, {"device": device(a), "seq": nxt, "ops": [op]}))
    (folder / "segments" / device(a) / f"{nxt:010d}").symlink_to(outside / "bait")
    with pytest.raises(sync.SyncError, match="symbolic link"):
        sync.run(b)
    (folder / "segments" / device(a) / f"{nxt:010d}").unlink()
    (outside / "keycheck").write_bytes((folder / "keycheck").read_bytes())
    (folder / "keycheck").unlink()
    (folder / "keycheck").symlink_to(outside / "keycheck")
    with pytest.raises(sync.SyncError, match="keycheck .* symbolic link"):
        sync.run(b)


# -- 2. every byte of a header is parsed totally -----------------------------------------------

@pytest.mark.parametrize("nonce", [5, [1], None, "zz" * 12, "00" * 12 + "\n", {"x": 1}])
def test_a_forged_header_with_the_public_key_id_is_one_refusal(tmp_path, pair, nonce):
    folder = tmp_path / "Sync"
    a, b, key = pair(str(folder))
    kid = json.loads((folder / "keycheck").read_bytes().split(b"\n")[1])["key"]  # anyone can read it
    nxt = sync.SyncLog(a).number("seq") + 1
    header = json.dumps({"device": device(a), "seq": nxt, "key": kid, "nonce": nonce}).encode()
    (folder / "segments" / device(a) / f"{nxt:010d}").write_bytes(keys.MAGIC + header + b"\n" + b"x" * 64)
    with pytest.raises(sync.SyncError, match="damaged header|fails authentication"):
        sync.run(b)
    (folder / "retired").mkdir()
    (folder / "retired" / device(a)).write_bytes(keys.MAGIC + json.dumps(
        {"device": "retired:" + device(a), "seq": 0, "key": kid, "nonce": nonce}).encode() + b"\n")
    with pytest.raises(sync.SyncError):
        sync.run(b)
    (folder / "keycheck").write_bytes(keys.MAGIC + json.dumps(
        {"device": "keycheck", "seq": 0, "key": kid, "nonce": nonce}).encode() + b"\n")
    # a key check damaged under this device's own key id is put back (the chain's repair); the forged
    # retirement note is still one refusal
    with pytest.raises(sync.SyncError, match="damaged header"):
        sync.run(b)
    keys.check_key(keys.read_key_file(key), (folder / "keycheck").read_bytes())


def test_a_header_nested_past_pythons_limit_is_one_line_not_a_traceback(tmp_path, pair):
    folder = tmp_path / "Sync"
    a, b, _ = pair(str(folder))
    nxt = sync.SyncLog(a).number("seq") + 1
    (folder / "segments" / device(a) / f"{nxt:010d}").write_bytes(keys.MAGIC + b"[" * 4000 + b"\n")
    p = subprocess.run([sys.executable, "-m", "pmem", "sync"],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PMEM_HOME": str(tmp_path / "b"), "PYTHONPATH": str(ROOT),
                            "PMEM_EMBED_MODEL": "fake-64"})
    assert "Traceback" not in p.stderr and p.returncode == 1, p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith("pmem: error: ")


def test_an_oversized_changeset_is_refused_before_it_is_read(tmp_path, pair):
    folder = tmp_path / "Sync"
    a, b, _ = pair(str(folder))
    big = folder / "segments" / device(a) / f"{sync.SyncLog(a).number('seq') + 1:010d}"
    with open(big, "wb") as f:  # sparse: 300 MB to read, none on disk
        f.write(keys.MAGIC)
        f.truncate(300 * 1024 * 1024)
    code = ("import resource, sys\nfrom pmem import sync\nfrom pmem.config import load\n"
            "from pmem.service import MemoryStore\n"
            f"s = MemoryStore({str(tmp_path / 'b' / 'pmem.db')!r}, config=load())\n"
            "try:\n    sync.run(s)\nexcept sync.SyncError as e:\n    print('refused:', e)\n"
            # VmHWM: this process's own peak; ru_maxrss keeps the forking parent's (a big pytest) across exec
            "print(next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:')))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT), "PMEM_EMBED_MODEL": "fake-64"})
    out = p.stdout.splitlines()
    assert p.returncode == 0 and out[0].startswith("refused:") and "refusing more than" in out[0], p.stderr
    assert int(out[-1]) < 200 * 1024, f"peak {int(out[-1]) // 1024} MiB: the file was read"  # KiB on Linux


# -- 6. git's own states -----------------------------------------------------------------------

def test_a_stale_index_lock_left_by_a_kill_does_not_block_later_syncs(remote, pair):
    a, b, _ = pair(str(remote))
    (sync.sync_dir(b) / "git" / ".git" / "index.lock").write_bytes(b"")  # what a killed `git add` leaves
    a.add("sent after b's git was killed")
    sync.run(a)
    sync.run(b)
    assert "sent after b's git was killed" in texts(b)


def test_a_push_refused_on_the_remotes_ref_lock_is_a_lost_race(tmp_path, remote, pair, monkeypatch):
    """Two devices pushing at once: git answers `[remote rejected] main -> main (failed to update
    ref)` to the one that found the ref locked. A real git, whose first push finds the lock taken."""
    a, b, _ = pair(str(remote))
    real = shutil.which("git")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    flag = tmp_path / "raced"
    (bin_dir / "git").write_text(
        "#!/bin/sh\n"
        f'case " $* " in *" push "*) if [ ! -e "{flag}" ]; then touch "{flag}"; '
        f'touch "{remote}/refs/heads/main.lock"; "{real}" "$@"; rc=$?; rm -f "{remote}/refs/heads/main.lock"; '
        f'exit $rc; fi;; esac\nexec "{real}" "$@"\n')
    (bin_dir / "git").chmod(0o755)
    b.add("pushed while another push held the ref")
    with monkeypatch.context() as m:
        m.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        report = sync.run(b)
    assert flag.exists() and report["push_retries"] == 1
    sync.run(a)
    assert "pushed while another push held the ref" in texts(a)


def test_a_deleted_clone_is_cloned_again(remote, pair):
    a, b, _ = pair(str(remote))
    shutil.rmtree(sync.sync_dir(b) / "git")
    a.add("sent after b's clone was deleted")
    sync.run(a)
    b.add("written by b after its clone was deleted")
    assert sync.run(b)["recloned"]
    sync.run(a)
    assert "sent after b's clone was deleted" in texts(b)
    assert "written by b after its clone was deleted" in texts(a)


# -- 7. git rewrites nothing it checks out -----------------------------------------------------

def test_a_pushed_gitattributes_rewrites_no_changeset(tmp_path, remote, pair, fake_config):
    attributes = "* text eol=crlf\n"  # every LF (the header ends with one) becomes CRLF at checkout
    a, b, _ = pair(str(remote))
    work = attacker_clone(remote, tmp_path)
    (work / ".gitattributes").write_text(attributes)
    attacker_push(work, "rewrite every file at checkout", ".gitattributes")
    a.add("sent while the attributes were there")
    sync.run(a)
    sync.run(b)
    assert "sent while the attributes were there" in texts(b)
    c = MemoryStore(tmp_path / "c" / "pmem.db", config=fake_config)  # a device that clones now
    sync.join(c, str(remote), key_file=str(tmp_path / "k"))
    assert "sent while the attributes were there" in texts(c)
    work = attacker_clone(remote, tmp_path)
    (work / ".gitattributes").unlink()
    attacker_push(work, "and gone again", ".gitattributes")
    b.add("sent after they were removed")
    sync.run(b)
    sync.run(a)
    sync.run(c)
    assert "sent after they were removed" in texts(a) and "sent after they were removed" in texts(c)


# -- 8. names matched whole, the key kept off the remote, true causes ---------------------------

def test_a_device_folder_named_with_a_final_newline_is_not_a_device(tmp_path, pair):
    folder = tmp_path / "Sync"
    a, b, _ = pair(str(folder))
    shutil.copytree(folder / "segments" / device(a), folder / "segments" / (device(a) + "\n"))
    a.add("still arrives")
    sync.run(a)
    sync.run(b)
    assert "still arrives" in texts(b)
    assert all(len(d["device"]) == 16 for d in sync.status(b)["devices"])


def test_the_key_or_pmems_own_folder_inside_the_synced_folder_is_refused(tmp_path, fake_config):
    a = MemoryStore(tmp_path / "a" / "pmem.db", config=fake_config)
    folder = tmp_path / "Sync"
    with pytest.raises(UsageError, match="key file .* is inside the synced folder"):
        sync.init(a, str(folder), key_file=str(folder / "pmem.key"))
    assert not (folder / "pmem.key").exists()
    with pytest.raises(UsageError, match="inside pmem's own sync folder"):
        sync.init(a, str(sync.sync_dir(a) / "out"), key_file=str(tmp_path / "k"))
    assert not (tmp_path / "k").exists()


def test_a_file_planted_at_a_devices_path_is_removed_not_blamed_on_a_copied_home(tmp_path, pair):
    """Past the last changeset this device sealed, a file that does not open with the key was made
    up by the remote: it goes (else every other device would wait on a gap), and what the device
    writes still travels. One sealed with the key would be a copy of this home's (refused)."""
    folder = tmp_path / "Sync"
    a, b, key = pair(str(folder))
    mine = folder / "segments" / device(b)
    mine.mkdir(parents=True, exist_ok=True)
    (mine / "0000000050").write_bytes(b"not sealed by anyone with the key")
    b.add("kept")
    sync.run(b)
    assert not (mine / "0000000050").exists()
    sync.run(a)
    assert "kept" in texts(a) and "kept" in texts(b)

"""Hostile-remote and fault cases for the transport (benchmarks/sync_hostile.py runs them): links
in the remote, forged headers and sizes, git's own broken states, `.gitattributes`, names that
match only with a final newline, the key inside what travels, and refusals that must name their
true cause. Each case is what a writer without the key can do to a git remote or a folder."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from sync_hostile import Attacker, Home, devices, forged, git, key_id, outside, refused

from pmem import sync
from pmem.sync import keys

CASES: list[tuple[str, Callable[[Path], None]]] = []


def case(name: str) -> Callable[[Callable[[Path], None]], Callable[[Path], None]]:
    def add(fn: Callable[[Path], None]) -> Callable[[Path], None]:
        CASES.append((name, fn))
        return fn
    return add


def seg(root: Path, device: str, seq: int) -> Path:
    return root / "segments" / device / f"{seq:010d}"


def push_fails(tmp: Path) -> Callable[[], None]:
    """Every `git push` fails as an unreachable remote does, until the returned function is called."""
    bin_dir = tmp / "nopush"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "git").write_text(f'#!/bin/sh\ncase " $* " in *" push "*) echo "fatal: unable to access remote" >&2; '
                                 f'exit 128;; esac\nexec "{shutil.which("git")}" "$@"\n')
    (bin_dir / "git").chmod(0o755)
    path = os.environ["PATH"]
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{path}"
    return lambda: os.environ.__setitem__("PATH", path)


def still_syncs(a: Home, b: Home, text: str) -> None:
    """After the attack is undone, a memory still travels from a to b."""
    a.add(text)
    a.sync()
    b.sync()
    assert text in b.texts(), f"{text!r} did not arrive"


# -- 1. links: none followed, in a git remote or a folder --------------------------------------

@case("git: segments/<this device> committed as a link to a user's folder")
def git_own_dir_link(tmp: Path) -> None:
    remote, homes, _ = devices(tmp, "git")
    a, b = homes
    m = Attacker(remote, tmp)
    shutil.rmtree(m.work / "segments" / b.device)
    (m.work / "segments" / b.device).symlink_to(outside(tmp))
    m.push()
    b.add("b writes after the attack")
    refused(b.sync, "someone else wrote this remote")


@case("git: segments/<another device> committed as a link to a user's folder")
def git_other_dir_link(tmp: Path) -> None:
    remote, homes, _ = devices(tmp, "git")
    a, b = homes
    m = Attacker(remote, tmp)
    shutil.rmtree(m.work / "segments" / a.device)
    (m.work / "segments" / a.device).symlink_to(outside(tmp) / "dir")
    m.push()
    refused(b.sync, "someone else wrote this remote")


@case("git: segments committed as a link to a user's folder")
def git_segments_link(tmp: Path) -> None:
    remote, homes, _ = devices(tmp, "git")
    m = Attacker(remote, tmp)
    shutil.rmtree(m.work / "segments")
    (m.work / "segments").symlink_to(outside(tmp))
    m.push()
    homes[1].add("b writes after the attack")
    refused(homes[1].sync, "segments", "someone else wrote this remote")


@case("git: retired committed as a link; `sync retire` writes nothing through it")
def git_retired_link(tmp: Path) -> None:
    remote, homes, _ = devices(tmp, "git", 3)
    m = Attacker(remote, tmp)
    (m.work / "retired").symlink_to(outside(tmp) / "dir")
    m.push()
    refused(lambda: sync.retire(homes[0].store, homes[2].device), "retired", "someone else wrote this remote")


@case("git: epoch committed as a link to a user's file; `sync compact` overwrites nothing")
def git_epoch_link(tmp: Path) -> None:
    remote, (a, b), _ = devices(tmp, "git")
    m = Attacker(remote, tmp)
    (m.work / "epoch").symlink_to(outside(tmp) / "thesis.txt")
    m.push()
    a.add("history to squash")
    a.sync()
    sync.compact(a.store)
    still_syncs(a, b, "after the compact")


@case("git: epoch committed as a link after a compact")
def git_epoch_link_after_compact(tmp: Path) -> None:
    remote, (a, b), _ = devices(tmp, "git")
    a.add("history to squash")
    a.sync()
    sync.compact(a.store)
    b.sync()
    m = Attacker(remote, tmp)
    (m.work / "epoch").unlink()
    (m.work / "epoch").symlink_to(outside(tmp) / "thesis.txt")
    m.push()
    a.add("more history")
    a.sync()
    sync.compact(a.store)
    b.sync()
    sync.compact(b.store)


@case("git: a changeset committed as a link to a user's file")
def git_changeset_link(tmp: Path) -> None:
    remote, (a, b), _ = devices(tmp, "git")
    m = Attacker(remote, tmp)
    seg(m.work, a.device, a.seq + 1).symlink_to(outside(tmp) / "thesis.txt")
    m.push()
    refused(b.sync, f"{a.device}")


@case("git: the key check committed as a link to a user's file")
def git_keycheck_link(tmp: Path) -> None:
    remote, (a, b), _ = devices(tmp, "git")
    m = Attacker(remote, tmp)
    (m.work / "keycheck").unlink()
    (m.work / "keycheck").symlink_to(outside(tmp) / "thesis.txt")
    m.push()
    b.sync()  # git checks a link out as a plain file: a damaged key check, put back by a device of the key
    keys.check_key(keys.read_key_file(tmp / "sync.key"), (b.clone / "keycheck").read_bytes())


@case("git: a retirement note committed as a link to a user's file")
def git_note_link(tmp: Path) -> None:
    remote, (a, b), _ = devices(tmp, "git")
    m = Attacker(remote, tmp)
    (m.work / "retired").mkdir()
    (m.work / "retired" / a.device).symlink_to(outside(tmp) / "thesis.txt")
    m.push()
    refused(b.sync, "retirement")


@case("git: this device's next changeset path committed as a link")
def git_next_path_link(tmp: Path) -> None:
    remote, (a, b), _ = devices(tmp, "git")
    m = Attacker(remote, tmp)
    seg(m.work, b.device, b.seq + 1).symlink_to(outside(tmp) / "thesis.txt")
    m.push()
    b.add("b's next changeset")
    b.sync()  # not sealed with the key: replaced by b's own changeset, nothing written through it
    a.sync()
    assert "b's next changeset" in a.texts()


def _folder(tmp: Path, n: int = 2) -> tuple[Path, list[Home]]:
    folder, homes, _ = devices(tmp, "folder", n)
    return folder, homes


@case("folder: segments/<this device> made a link to a user's folder")
def folder_own_dir_link(tmp: Path) -> None:
    folder, (a, b) = _folder(tmp)
    shutil.rmtree(folder / "segments" / b.device)
    (folder / "segments" / b.device).symlink_to(outside(tmp))
    b.add("b writes after the attack")
    refused(b.sync, "symbolic link")


@case("folder: segments/<another device> a link to a folder inside the remote")
def folder_internal_link(tmp: Path) -> None:
    folder, (a, b) = _folder(tmp)
    shutil.rmtree(folder / "segments" / a.device)
    (folder / "segments" / a.device).symlink_to(folder / "segments" / b.device)
    refused(b.sync, "symbolic link")


@case("folder: segments made a link to a user's folder")
def folder_segments_link(tmp: Path) -> None:
    folder, (a, b) = _folder(tmp)
    shutil.rmtree(folder / "segments")
    (folder / "segments").symlink_to(outside(tmp))
    b.add("b writes after the attack")
    refused(b.sync, "segments", "symbolic link")


@case("folder: retired made a link; `sync retire` writes nothing through it")
def folder_retired_link(tmp: Path) -> None:
    folder, homes = _folder(tmp, 3)
    (folder / "retired").symlink_to(outside(tmp) / "dir")
    refused(lambda: sync.retire(homes[0].store, homes[2].device), "retired", "symbolic link")


@case("folder: a changeset made a link to a user's file")
def folder_changeset_link(tmp: Path) -> None:
    folder, (a, b) = _folder(tmp)
    seg(folder, a.device, a.seq + 1).symlink_to(outside(tmp) / "thesis.txt")
    refused(b.sync, "symbolic link")


@case("folder: a changeset a dangling link")
def folder_dangling_link(tmp: Path) -> None:
    folder, (a, b) = _folder(tmp)
    seg(folder, a.device, a.seq + 1).symlink_to(tmp / "nowhere")
    refused(b.sync, "symbolic link")


@case("folder: a changeset a link to /dev/zero (endless)")
def folder_zero_link(tmp: Path) -> None:
    folder, (a, b) = _folder(tmp)
    seg(folder, a.device, a.seq + 1).symlink_to("/dev/zero")
    refused(b.sync, "symbolic link")


@case("folder: a changeset a FIFO (a read would wait forever)")
def folder_fifo(tmp: Path) -> None:
    folder, (a, b) = _folder(tmp)
    os.mkfifo(seg(folder, a.device, a.seq + 1))
    refused(b.sync, "special file")


@case("folder: the key check a link to a user's file")
def folder_keycheck_link(tmp: Path) -> None:
    folder, (a, b) = _folder(tmp)
    (folder / "keycheck").unlink()
    (folder / "keycheck").symlink_to(outside(tmp) / "thesis.txt")
    refused(b.sync, "keycheck", "symbolic link")


@case("folder: a retirement note a link to a user's file")
def folder_note_link(tmp: Path) -> None:
    folder, (a, b) = _folder(tmp)
    (folder / "retired").mkdir()
    (folder / "retired" / a.device).symlink_to(outside(tmp) / "thesis.txt")
    refused(b.sync, "symbolic link")


@case("folder: this device's next changeset path a hard link to a user's file")
def folder_hardlink(tmp: Path) -> None:
    folder, (a, b) = _folder(tmp)
    try:
        os.link(outside(tmp) / "thesis.txt", seg(folder, b.device, b.seq + 1))
    except OSError:
        return  # another filesystem: no hard link to make
    b.add("b's next changeset")
    b.sync()  # replaced by b's own changeset (a rename: the user's file keeps its bytes)
    a.sync()
    assert "b's next changeset" in a.texts()


@case("folder: the synced folder itself replaced by a link (by whoever shares its parent)")
def folder_root_link(tmp: Path) -> None:
    folder, (a, b) = _folder(tmp)
    folder.rename(tmp / "Sync.real")
    folder.symlink_to(outside(tmp))
    b.add("b writes after the swap")
    refused(b.sync, "is now a symbolic link")
    refused(lambda: sync.retire(a.store, b.device), "is now a symbolic link")


@case("folder: a link removed again, sync goes on and nothing is lost")
def folder_link_then_gone(tmp: Path) -> None:
    folder, (a, b) = _folder(tmp)
    shutil.move(folder / "segments" / b.device, tmp / "aside")
    (folder / "segments" / b.device).symlink_to(outside(tmp))
    b.add("b writes while the link is there")
    refused(b.sync, "symbolic link")
    (folder / "segments" / b.device).unlink()
    shutil.move(tmp / "aside", folder / "segments" / b.device)
    b.sync()
    a.sync()
    assert "b writes while the link is there" in a.texts()


# -- 2. forged headers and sizes: one refusal each, never a traceback --------------------------

def _forge_changeset(tmp: Path, make: Callable[[Home, str], bytes], *words: str) -> None:
    folder, (a, b) = _folder(tmp)
    seg(folder, a.device, a.seq + 1).write_bytes(make(a, key_id(tmp)))
    refused(b.sync, *words)


for _label, _nonce in (("an int", 5), ("a list", [1]), ("null", None), ("an object", {"x": 1}), ("true", True),
                       ("a float", 1.5), ("empty", ""), ("not hex", "zz" * 12), ("too short", "00" * 4),
                       ("hex and a newline", "00" * 12 + "\n")):
    case(f"header: nonce {_label}, with the public key id")(
        lambda tmp, n=_nonce: _forge_changeset(tmp, lambda a, kid: forged(a.device, a.seq + 1, kid, n), "changeset"))


@case("header: seq a string")
def header_seq_string(tmp: Path) -> None:
    _forge_changeset(tmp, lambda a, kid: forged(a.device, str(a.seq + 1), kid), "moved or tampered")


@case("header: seq true (a bool is not a number)")
def header_seq_bool(tmp: Path) -> None:
    _forge_changeset(tmp, lambda a, kid: forged(a.device, True, kid), "changeset")


@case("header: device a list")
def header_device_list(tmp: Path) -> None:
    _forge_changeset(tmp, lambda a, kid: forged([a.device], a.seq + 1, kid), "moved or tampered")


@case("header: a field missing")
def header_missing(tmp: Path) -> None:
    _forge_changeset(tmp, lambda a, kid: keys.MAGIC + json.dumps({"device": a.device, "key": kid}).encode() + b"\n",
                     "damaged header")


@case("header: an extra field")
def header_extra(tmp: Path) -> None:
    _forge_changeset(tmp, lambda a, kid: forged(a.device, a.seq + 1, kid, evil=1), "damaged header")


@case("header: a list, not an object")
def header_list(tmp: Path) -> None:
    _forge_changeset(tmp, lambda a, kid: keys.MAGIC + b"[1,2]\n", "damaged header")


@case("header: nested 5,000 deep (past Python's recursion limit)")
def header_nested(tmp: Path) -> None:
    _forge_changeset(tmp, lambda a, kid: keys.MAGIC + b"[" * 5000 + b"\n", "damaged header")


@case("header: no newline within 4 KiB")
def header_long(tmp: Path) -> None:
    _forge_changeset(tmp, lambda a, kid: keys.MAGIC + b" " * 10000, "damaged header")


@case("header: not UTF-8")
def header_bytes(tmp: Path) -> None:
    _forge_changeset(tmp, lambda a, kid: keys.MAGIC + b"\xff\xfe{}\n", "damaged header")


@case("changeset: empty")
def changeset_empty(tmp: Path) -> None:
    _forge_changeset(tmp, lambda a, kid: b"", "not a pmem sync file")


@case("changeset: the magic line only")
def changeset_magic(tmp: Path) -> None:
    _forge_changeset(tmp, lambda a, kid: keys.MAGIC, "damaged header")


@case("changeset: another device's, moved to this number")
def changeset_moved(tmp: Path) -> None:
    folder, (a, b) = _folder(tmp)
    seg(folder, a.device, a.seq + 1).write_bytes(seg(folder, b.device, 1).read_bytes())
    refused(b.sync, "moved or tampered")


@case("changeset: sealed with another key")
def changeset_other_key(tmp: Path) -> None:
    _forge_changeset(tmp, lambda a, kid: keys.seal(keys.new_key(), a.device, a.seq + 1, {"ops": []}), "another key")


def _sparse(path: Path, size: int, head: bytes = keys.MAGIC) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)


def _rss_mib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


@case("size: a 300 MB changeset is refused before it is read")
def size_changeset(tmp: Path) -> None:
    folder, (a, b) = _folder(tmp)
    _sparse(seg(folder, a.device, a.seq + 1), 300 * 1024 * 1024)
    before = _rss_mib()
    refused(b.sync, "refusing more than")
    assert _rss_mib() - before < 100, f"peak memory grew {_rss_mib() - before} MiB: the file was read"


@case("size: a 1 MB key check is refused before it is read")
def size_keycheck(tmp: Path) -> None:
    folder, (a, b) = _folder(tmp)
    _sparse(folder / "keycheck", 1024 * 1024)
    refused(b.sync, "refusing more than")


@case("size: a 300 MB retirement note is refused before it is read")
def size_note(tmp: Path) -> None:
    folder, (a, b) = _folder(tmp)
    _sparse(folder / "retired" / a.device, 300 * 1024 * 1024)
    before = _rss_mib()
    refused(b.sync, "refusing more than")
    assert _rss_mib() - before < 100


@case("size: a 300 MB changeset committed to git")
def size_git(tmp: Path) -> None:
    remote, (a, b), _ = devices(tmp, "git")
    m = Attacker(remote, tmp)
    _sparse(seg(m.work, a.device, a.seq + 1), 257 * 1024 * 1024, b"")
    m.push()
    before = _rss_mib()
    refused(b.sync, "refusing more than")
    assert _rss_mib() - before < 100


@case("key check: forged with a nonce of the wrong type")
def keycheck_forged(tmp: Path) -> None:
    folder, (a, b) = _folder(tmp)
    (folder / "keycheck").write_bytes(forged("keycheck", 0, key_id(tmp), [1]))
    b.sync()  # damaged under this key's own id: put back
    keys.check_key(keys.read_key_file(tmp / "sync.key"), (folder / "keycheck").read_bytes())


@case("retirement note: forged with a nonce of the wrong type")
def note_forged(tmp: Path) -> None:
    folder, (a, b) = _folder(tmp)
    (folder / "retired").mkdir()
    (folder / "retired" / a.device).write_bytes(forged("retired:" + a.device, 0, key_id(tmp), 5))
    refused(b.sync, "retirement")


@case("retirement note: forged, well formed, for this very device")
def note_forged_self(tmp: Path) -> None:
    folder, (a, b) = _folder(tmp)
    (folder / "retired").mkdir()
    (folder / "retired" / b.device).write_bytes(forged("retired:" + b.device, 0, key_id(tmp)))
    b.add("kept though the note was forged")
    refused(b.sync, "fails authentication")


# -- 6. git's own states ------------------------------------------------------------------------

for _lock in ("index.lock", "HEAD.lock", "refs/heads/main.lock", "packed-refs.lock"):
    @case(f"git: a stale {_lock} in the clone (a killed git)")
    def _stale(tmp: Path, lock: str = _lock) -> None:
        remote, (a, b), _ = devices(tmp, "git")
        (b.clone / ".git" / lock).parent.mkdir(parents=True, exist_ok=True)
        (b.clone / ".git" / lock).write_bytes(b"")
        still_syncs(a, b, "after the kill")
        b.add("b after the kill")
        b.sync()
        a.sync()
        assert "b after the kill" in a.texts()


@case("git: a lock held by a git that still runs in the clone is left alone")
def git_live_lock(tmp: Path) -> None:
    remote, (a, b), _ = devices(tmp, "git")
    lock = b.clone / ".git" / "index.lock"
    lock.write_bytes(b"")
    live = subprocess.Popen(["git", "cat-file", "--batch"], cwd=b.clone, stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL)
    comm = Path(f"/proc/{live.pid}/comm")
    for _ in range(500):  # until it has become git (a forked child is python until its exec)
        if not comm.exists() or comm.read_text().strip() == "git":
            break
        time.sleep(0.01)
    try:
        refused(b.sync, "git is running")
        assert lock.exists()
    finally:
        live.communicate(b"")
    b.sync()


@case("git: a rebase left half done")
def git_half_rebase(tmp: Path) -> None:
    remote, (a, b), _ = devices(tmp, "git")
    b.add("b's own, committed")
    sync.run(b.store)
    git(b.clone, "commit", "-q", "--allow-empty", "-m", "local")
    a.add("a's, meanwhile")
    a.sync()
    git(b.clone, "fetch", "-q", "origin")
    git(b.clone, "rebase", "-q", "--exec", "false", "origin/main", check=False)  # stops at its exec: in progress
    assert (b.clone / ".git" / "rebase-merge").exists() or (b.clone / ".git" / "rebase-apply").exists()
    b.sync()
    assert "a's, meanwhile" in b.texts()


@case("git: '[remote rejected] ... failed to update ref' is a lost race")
def git_remote_rejected(tmp: Path) -> None:
    remote, (a, b), _ = devices(tmp, "git")
    real = shutil.which("git")
    bin_dir, flag = tmp / "bin", tmp / "raced"
    bin_dir.mkdir()
    (bin_dir / "git").write_text(
        "#!/bin/sh\n"
        f'case " $* " in *" push "*) if [ ! -e "{flag}" ]; then touch "{flag}"; '
        f'touch "{remote}/refs/heads/main.lock"; "{real}" "$@"; rc=$?; rm -f "{remote}/refs/heads/main.lock"; '
        f'exit $rc; fi;; esac\nexec "{real}" "$@"\n')
    (bin_dir / "git").chmod(0o755)
    path = os.environ["PATH"]
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{path}"
    try:
        b.add("pushed against a held ref")
        report = b.sync()
    finally:
        os.environ["PATH"] = path
    assert flag.exists() and report["push_retries"] == 1, report
    a.sync()
    assert "pushed against a held ref" in a.texts()


@case("git: two devices sync at the same moment, as processes")
def git_two_at_once(tmp: Path) -> None:
    remote, homes, _ = devices(tmp, "git", 3)
    for h in homes:
        h.add(f"raced by {h.dir.name}")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    results: dict[str, Any] = {}

    def one(h: Home) -> None:
        results[h.dir.name] = subprocess.run([sys.executable, "-m", "pmem", "sync"], capture_output=True, text=True,
                                             env={**env, "PMEM_HOME": str(h.dir)}, timeout=100)
    threads = [threading.Thread(target=one, args=(h,)) for h in homes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name, p in results.items():
        assert p.returncode == 0, f"{name}: {p.stderr.strip().splitlines()[-1:]}"
    for h in homes:
        h.sync()
    for h in homes:
        assert {f"raced by {x.dir.name}" for x in homes} <= h.texts()


@case("git: the clone deleted; the next sync clones again")
def git_clone_deleted(tmp: Path) -> None:
    remote, (a, b), _ = devices(tmp, "git")
    shutil.rmtree(b.clone)
    b.add("b after its clone went")
    assert b.sync()["recloned"]
    still_syncs(a, b, "a after b's clone went")
    assert "b after its clone went" in a.texts()


@case("git: .git deleted under an unpushed changeset; it is kept and sent")
def git_dotgit_deleted(tmp: Path) -> None:
    remote, (a, b), _ = devices(tmp, "git")
    b.add("b's, not yet pushed")
    restore = push_fails(tmp)  # b seals, writes and commits, cannot push
    try:
        refused(b.sync, "git push failed")
    finally:
        restore()
    shutil.rmtree(b.clone / ".git")
    b.sync()
    a.sync()
    assert "b's, not yet pushed" in a.texts()


# -- 7. .gitattributes: git rewrites nothing pmem checks out -----------------------------------

for _attrs in ("* text eol=crlf", "* text=auto eol=crlf", "* text working-tree-encoding=UTF-16LE",
               "* ident text", "* filter=lfs diff=lfs merge=lfs text"):
    @case(f"git: the remote's .gitattributes says '{_attrs}'")
    def _attributes(tmp: Path, attrs: str = _attrs) -> None:
        remote, (a, b), key = devices(tmp, "git")
        m = Attacker(remote, tmp)
        (m.work / ".gitattributes").write_text(attrs + "\n")
        m.push("attributes", ".gitattributes")
        still_syncs(a, b, "while the attributes are there")
        c = Home(tmp, "c")
        sync.join(c.store, str(remote), key_file=str(key))
        assert "while the attributes are there" in c.texts()
        m = Attacker(remote, tmp)
        (m.work / ".gitattributes").unlink()
        m.push("gone again", ".gitattributes")
        still_syncs(b, c, "after they are gone")


@case("git: a clone made before pmem guarded attributes, its files rewritten at checkout")
def git_old_clone(tmp: Path) -> None:
    remote, (a, b), _ = devices(tmp, "git")
    m = Attacker(remote, tmp)
    (m.work / ".gitattributes").write_text("* text eol=crlf\n")
    m.push("attributes", ".gitattributes")
    (b.clone / ".git" / "info" / "attributes").unlink()  # as an older pmem made it
    git(b.clone, "pull", "-q", "--ff-only", "origin", "main")
    git(b.clone, "rm", "-r", "-q", "--cached", ".")
    git(b.clone, "reset", "-q", "--hard", "HEAD")  # every file checked out CRLF
    assert b"\r\n" in (b.clone / "keycheck").read_bytes()
    still_syncs(a, b, "after the upgrade")


# -- 8. names matched whole, the key kept home, true causes --------------------------------------

@case("names: a device folder named with a final newline is not a device")
def names_device_newline(tmp: Path) -> None:
    folder, (a, b) = _folder(tmp)
    shutil.copytree(folder / "segments" / a.device, folder / "segments" / (a.device + "\n"))
    still_syncs(a, b, "still arrives")
    assert all(len(d["device"]) == 16 for d in sync.status(b.store)["devices"])


@case("names: a changeset named with a final newline is not a changeset")
def names_seq_newline(tmp: Path) -> None:
    folder, (a, b) = _folder(tmp)
    nxt = seg(folder, a.device, a.seq + 1)
    nxt.with_name(nxt.name + "\n").write_bytes(b"junk")
    still_syncs(a, b, "still arrives")


@case("key: a key file inside the synced folder is refused")
def key_in_folder(tmp: Path) -> None:
    h = Home(tmp, "a")
    folder = tmp / "Sync"
    refused(lambda: sync.init(h.store, str(folder), key_file=str(folder / "pmem.key")), "inside the synced folder")
    assert not (folder / "pmem.key").exists()


@case("key: a key file inside pmem's git clone (git add would commit it) is refused")
def key_in_clone(tmp: Path) -> None:
    remote, (a,), key = devices(tmp, "git", 1)
    b = Home(tmp, "b")
    inside = sync.sync_dir(b.store) / "git" / "k"
    refused(lambda: sync.join(b.store, str(remote), key_text=keys.encode_key(keys.read_key_file(key)),
                              key_file=str(inside)), "inside the synced folder")
    objects = subprocess.run(["git", "-C", str(remote), "cat-file", "--batch-all-objects", "--batch"],
                             capture_output=True, check=True).stdout
    assert keys.encode_key(keys.read_key_file(key)).encode() not in objects


@case("key: the synced folder inside pmem's own sync folder is refused")
def folder_in_syncdir(tmp: Path) -> None:
    h = Home(tmp, "a")
    refused(lambda: sync.init(h.store, str(sync.sync_dir(h.store) / "out"), key_file=str(tmp / "k")),
            "inside pmem's own sync folder")


@case("cause: junk planted at this device's next number is not blamed on a copied home")
def cause_planted_next(tmp: Path) -> None:
    folder, (a, b) = _folder(tmp)
    seg(folder, b.device, b.seq + 1).write_bytes(b"junk")
    b.add("b's next")
    b.sync()  # not blamed on a copy, not refused: b's own changeset replaces it
    a.sync()
    assert "b's next" in a.texts()


@case("cause: junk planted far ahead of this device's numbers")
def cause_planted_ahead(tmp: Path) -> None:
    folder, (a, b) = _folder(tmp)
    planted = seg(folder, b.device, b.seq + 40)
    planted.write_bytes(forged(b.device, b.seq + 40, key_id(tmp)))
    b.sync()  # past b's last changeset and not sealed with the key: made up by the remote, removed
    assert not planted.exists()


@case("cause: a git commit at this device's path racing its own is named, not blamed on a copy")
def cause_git_conflict(tmp: Path) -> None:
    remote, (a, b), _ = devices(tmp, "git")
    b.add("b's next, committed not pushed")
    restore = push_fails(tmp)
    try:
        refused(b.sync, "git push failed")
    finally:
        restore()
    m = Attacker(remote, tmp)
    seg(m.work, b.device, b.seq).write_bytes(b"junk")
    m.push()
    text = refused(b.sync, f"segments/{b.device}/{b.seq:010d}")
    assert "someone without the key" in text


@case("cause: a real copy of a home is still called one")
def cause_real_copy(tmp: Path) -> None:
    folder, (a, b) = _folder(tmp)
    b.store.close()
    shutil.copytree(b.dir, tmp / "copy")
    from pmem import MemoryStore
    from pmem.config import load
    b.store = MemoryStore(b.dir / "pmem.db", config=load())
    copy = Home(tmp, "copy")
    b.add("by the original")
    b.sync()
    copy.add("by the copy")
    refused(copy.sync, "copy of this pmem home")

"""Hostile-remote cases for the sync chain: rollback, deletion, replay, erasure that must finish.

    python benchmarks/sync_hostile.py            # the runner loads every benchmarks/sync_cases_*.py

`CASES` holds (name, case): each case gets a fresh empty folder, sets up its own devices (real
stores, in process; two cases run `pmem sync` as processes killed by kill -9) on a real folder or
a real bare git repository, lets the attacker of tests/sync/attacker.py write the remote without
the key, and raises AssertionError when pmem did not hold. Threat model: pmem/sync/__init__.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "sync"))

from attacker import Net, own_files, started  # noqa: E402

from pmem import sync  # noqa: E402
from pmem.sync import keys, transport  # noqa: E402

SECRET = "X1234567"
KINDS = ("folder", "git") if shutil.which("git") else ("folder",)


def _net(tmp: Path, kind: str) -> Net:
    os.environ.update(PMEM_HOME=str(tmp / "home"), PMEM_EMBED_MODEL="fake-64", PMEM_SERVER="never")
    from pmem.config import load

    return Net(tmp, kind, load())


def _agree(net: Net, *names: str) -> None:
    first = net.texts(names[0])
    for name in names[1:]:
        assert net.texts(name) == first, f"{name} differs from {names[0]}"


def _clean(net: Net, mid: str, *names: str) -> None:
    assert SECRET not in net.opened(), "a changeset on the remote still holds the purged text"
    for name in names:
        assert mid not in net.texts(name), f"{name} still holds the purged memory"
        assert SECRET.encode() not in net.raw(name), f"{name}'s files hold the purged text"


def _purged(net: Net, edit_on_b: bool = False) -> tuple[str, dict[str, bytes], dict[str, bytes]]:
    """a writes the secret (b edits it too when asked), then purges it; returns the memory, the
    remote's files before the purge and after it (both applied by b)."""
    mid = net.store("a").add(f"My passport number is {SECRET}")[0].id
    net.sync("a")
    net.sync("b")
    if edit_on_b:
        net.store("b").edit(mid, text=f"My passport number is {SECRET}, renewed")
        net.sync("b")
        net.sync("a")
    before = net.tree()
    net.store("a").purge([mid])
    net.sync("a")
    net.sync("b")
    return mid, before, net.tree()


# -- the cases --------------------------------------------------------------------------------

def purge_deleted_and_text_put_back(kind: str) -> Callable[[Path], None]:
    def case(tmp: Path) -> None:
        net = started(_net(tmp, kind))
        try:
            mid, before, after = _purged(net)
            a = net.device("a")
            purge = [p for p in after if p.startswith(f"segments/{a}/") and p not in before]
            net.write({**{p: b for p, b in before.items() if p.startswith(f"segments/{a}/")},
                       **{p: None for p in purge}})
            net.join("c")
            assert mid not in net.texts("c"), "a device that joined holds the purged memory"
            net.everyone()
            _clean(net, mid, "a", "b", "c")
        finally:
            net.close()
    return case


def purge_learnt_past_a_gap(kind: str) -> Callable[[Path], None]:
    def case(tmp: Path) -> None:
        net = started(_net(tmp, kind))
        try:
            mid, before, after = _purged(net)
            a = net.device("a")
            purge = min(p for p in after if p.startswith(f"segments/{a}/") and p not in before)
            net.store("a").add("a writes on after the purge")
            net.sync("a")
            net.write({purge: None, **{p: b for p, b in before.items() if p.startswith(f"segments/{a}/")}})
            net.join("c")
            assert mid not in net.texts("c"), "the purge vouched for past the gap was not learnt"
            net.everyone()
            _clean(net, mid, "a", "b", "c")
            _agree(net, "a", "b", "c")
        finally:
            net.close()
    return case


def forced_back_before_the_purge(kind: str) -> Callable[[Path], None]:
    def case(tmp: Path) -> None:
        net = started(_net(tmp, kind))
        try:
            mid = net.store("a").add(f"Locker code {SECRET}")[0].id
            net.sync("a")
            net.sync("b")
            old = net.snapshot()
            net.store("a").purge([mid])
            net.sync("a")
            net.sync("b")
            if kind == "git":
                sync.compact(net.store("a"))
                net.sync("b")
            net.force_back(old)
            net.store("b").add("b writes on after the rollback")
            net.sync("b")
            net.join("c")
            assert mid not in net.texts("c"), "a device that joined a rolled back remote holds the purged memory"
            net.everyone()
            _clean(net, mid, "a", "b", "c")
            _agree(net, "a", "b", "c")
        finally:
            net.close()
    return case


def deleted_newest_written_again(kind: str) -> Callable[[Path], None]:
    def case(tmp: Path) -> None:
        net = started(_net(tmp, kind))
        try:
            first = net.store("a").add("deleted from the remote")[0].id
            net.sync("a")
            net.write({max(own_files(net, "a")): None})
            net.sync("b")
            later = net.store("a").add("written afterwards")[0].id
            net.sync("a")
            report = net.sync("b")
            assert report["gaps"] == [], f"b waits on a gap: {report['gaps']}"
            assert {first, later} <= set(net.texts("b")), "b never got a's memories"
        finally:
            net.close()
    return case


def every_changeset_of_a_device_deleted(kind: str) -> Callable[[Path], None]:
    def case(tmp: Path) -> None:
        net = started(_net(tmp, kind))
        try:
            net.store("a").add("a's second")
            net.sync("a")
            net.write({p: None for p in own_files(net, "a")})
            net.sync("a")
            net.join("c")
            _agree(net, "a", "c")
            assert len(net.texts("c")) == 3
        finally:
            net.close()
    return case


def rolled_back_reported_not_taken(kind: str) -> Callable[[Path], None]:
    def case(tmp: Path) -> None:
        net = started(_net(tmp, kind))
        try:
            net.store("a").add("a's second")
            net.sync("a")
            newest = max(own_files(net, "a"))
            net.sync("b")
            net.store("b").add("b vouches")
            net.sync("b")
            net.write({newest: None})
            net.join("c")
            rolled = net.sync("c")["rolled_back"]
            assert [r["device"] for r in rolled] == [net.device("a")], f"not reported: {rolled}"
            net.sync("a")
            assert net.sync("c")["rolled_back"] == []
            _agree(net, "a", "b", "c")
        finally:
            net.close()
    return case


def forced_back_keeps_every_device_s_memories(kind: str) -> Callable[[Path], None]:
    def case(tmp: Path) -> None:
        net = started(_net(tmp, kind))
        try:
            old = net.snapshot()
            for i in range(3):
                net.store("a").add(f"a's later memory {i}")
                net.store("b").add(f"b's later memory {i}")
                net.sync("a")
                net.sync("b")
            held = set(net.texts("b"))
            net.force_back(old)
            net.sync("b")
            assert held <= set(net.texts("b")), "b lost memories to a rollback"
            net.everyone()
            net.join("c")
            _agree(net, "a", "b", "c")
            assert held <= set(net.texts("c"))
        finally:
            net.close()
    return case


def swapped_between_devices(kind: str) -> Callable[[Path], None]:
    def case(tmp: Path) -> None:
        net = started(_net(tmp, kind))
        try:
            a_file, b_file = max(own_files(net, "a")), max(own_files(net, "b"))
            tree = net.tree()
            net.write({a_file: tree[b_file], b_file: tree[a_file]})
            net.everyone()
            net.join("c")
            _agree(net, "a", "b", "c")
            assert len(net.texts("c")) == 2
        finally:
            net.close()
    return case


def cut_short(kind: str, keep: int) -> Callable[[Path], None]:
    def case(tmp: Path) -> None:
        net = started(_net(tmp, kind))
        try:
            net.store("a").add("a's second")
            net.sync("a")
            path = max(own_files(net, "a"))
            net.write({path: net.tree()[path][:keep]})
            net.everyone()
            net.join("c")
            _agree(net, "a", "b", "c")
            assert len(net.texts("c")) == 3
        finally:
            net.close()
    return case


def older_version_of_a_rewritten_changeset(kind: str) -> Callable[[Path], None]:
    def case(tmp: Path) -> None:
        net = started(_net(tmp, kind))
        try:
            mid, before, after = _purged(net, edit_on_b=True)
            b = net.device("b")
            net.write({p: blob for p, blob in before.items() if p.startswith(f"segments/{b}/")})
            assert SECRET in net.opened()
            net.sync("b")  # b notices its file changed, and writes its own copy again
            assert SECRET not in net.opened(), "b did not write its rewritten changeset again"
            net.join("c")
            net.everyone()
            _clean(net, mid, "a", "b", "c")
        finally:
            net.close()
    return case


def key_check_deleted(kind: str) -> Callable[[Path], None]:
    def case(tmp: Path) -> None:
        net = started(_net(tmp, kind))
        try:
            net.write({"keycheck": None})
            net.sync("b")
            assert "keycheck" in net.tree(), "the key check was not put back"
            net.join("c")
            _agree(net, "a", "b", "c")
        finally:
            net.close()
    return case


def junk_numbered_past_a_device(kind: str) -> Callable[[Path], None]:
    def case(tmp: Path) -> None:
        net = started(_net(tmp, kind))
        try:
            junk = f"segments/{net.device('a')}/{transport.seg_name(99)}"
            net.write({junk: b"pmem-sync 1\n{}\nnot a changeset"})
            net.sync("b")  # past a's gap nothing is applied, and a damaged file stops nobody
            net.sync("a")  # not a copy of a's home: the made-up file goes
            assert junk not in net.tree()
            net.store("a").add("a writes on")
            net.sync("a")
            assert net.sync("b")["gaps"] == []
            _agree(net, "a", "b")
        finally:
            net.close()
    return case


def rewrite_fails_once(kind: str) -> Callable[[Path], None]:
    def case(tmp: Path) -> None:
        net = started(_net(tmp, kind))
        try:
            mid = net.store("a").add(f"My passport number is {SECRET}")[0].id
            net.sync("a")
            net.sync("b")
            net.store("a").purge([mid])
            write = transport.Folder.write
            failed: list[int] = []

            def once(self: transport.Folder, device: str, seq: int, blob: bytes) -> None:
                if not failed:
                    failed.append(seq)
                    raise OSError(28, "No space left on device")
                write(self, device, seq, blob)

            transport.Folder.write = once  # type: ignore[method-assign]
            try:
                net.sync("a")
            except OSError:
                pass
            finally:
                transport.Folder.write = write  # type: ignore[method-assign]
            assert failed
            net.everyone()
            _clean(net, mid, "a", "b")
        finally:
            net.close()
    return case


def chain_links_every_changeset(kind: str) -> Callable[[Path], None]:
    def case(tmp: Path) -> None:
        net = started(_net(tmp, kind))
        try:
            for i in range(3):
                net.store("a").add(f"a's memory {i}")
                net.sync("a")
            key = keys.read_key_file(net.key_file)
            a = net.device("a")
            prev = None
            for path, blob in sorted(own_files(net, "a").items()):
                payload = keys.open_sealed(key, blob, a, int(path.rsplit("/", 1)[1]), path)
                assert payload["prev"] == prev, f"{path} does not name its predecessor"
                prev = sync.digest(payload)
        finally:
            net.close()
    return case


def killed(kind: str, point: str) -> Callable[[Path], None]:
    """`pmem sync` as a process, killed (kill -9, PMEM_SYNC_CRASH_AT) at `point` on the device
    that receives a purge; the next sync finishes the erasure."""
    def case(tmp: Path) -> None:
        net = started(_net(tmp, kind))
        try:
            mid = net.store("a").add(f"My passport number is {SECRET}")[0].id
            net.sync("a")
            net.sync("b")
            net.store("b").edit(mid, text=f"My passport number is {SECRET}, renewed")
            net.sync("b")
            net.store("a").purge([mid])
            net.sync("a")
            net.stores.pop("b").close()
            env = {**os.environ, "PMEM_HOME": str(tmp / "b"), "PYTHONPATH": str(ROOT), "PMEM_SYNC_CRASH_AT": point}
            p = subprocess.run([sys.executable, "-m", "pmem", "sync"], env=env, capture_output=True, timeout=300)
            assert p.returncode == -9, f"not killed at {point}: {p.returncode} {p.stderr[-300:]!r}"
            net.store("b")  # opened again, as the next `pmem sync` does
            net.everyone()
            _clean(net, mid, "a", "b")
            _agree(net, "a", "b")
        finally:
            net.close()
    return case


CASES: list[tuple[str, Callable[[Path], None]]] = []
for _kind in KINDS:
    CASES += [
        (f"chain/{_kind}/purge deleted, text put back, a device joins", purge_deleted_and_text_put_back(_kind)),
        (f"chain/{_kind}/purge deleted, learnt past the gap", purge_learnt_past_a_gap(_kind)),
        (f"chain/{_kind}/remote forced back to before the purge", forced_back_before_the_purge(_kind)),
        (f"chain/{_kind}/newest changeset deleted", deleted_newest_written_again(_kind)),
        (f"chain/{_kind}/every changeset of a device deleted", every_changeset_of_a_device_deleted(_kind)),
        (f"chain/{_kind}/vouched changeset lost: reported, not taken", rolled_back_reported_not_taken(_kind)),
        (f"chain/{_kind}/forced back: no memory lost", forced_back_keeps_every_device_s_memories(_kind)),
        (f"chain/{_kind}/changesets swapped between devices", swapped_between_devices(_kind)),
        (f"chain/{_kind}/changeset cut to nothing", cut_short(_kind, 0)),
        (f"chain/{_kind}/changeset cut mid-way", cut_short(_kind, 60)),
        (f"chain/{_kind}/older version of a rewritten changeset", older_version_of_a_rewritten_changeset(_kind)),
        (f"chain/{_kind}/key check deleted", key_check_deleted(_kind)),
        (f"chain/{_kind}/junk numbered past a device", junk_numbered_past_a_device(_kind)),
        (f"chain/{_kind}/erasure rewrite fails once", rewrite_fails_once(_kind)),
        (f"chain/{_kind}/each changeset names its predecessor", chain_links_every_changeset(_kind)),
    ]
CASES += [(f"chain/folder/kill -9 at {point}", killed("folder", point)) for point in ("applied", "redacted")]
CASES += [(f"chain/{KINDS[-1]}/kill -9 at {point}", killed(KINDS[-1], point)) for point in ("erased", "written")]


if __name__ == "__main__":  # run this module's cases alone (sync_hostile.py runs every module's)
    import tempfile
    import time

    failed = 0
    for name, run in CASES:
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory() as d:
            try:
                run(Path(d))
                verdict = "ok"
            except AssertionError as exc:
                verdict, failed = f"FAILED: {exc}", failed + 1
            except Exception as exc:  # noqa: BLE001 - a case that broke is reported, the next runs
                verdict, failed = f"ERROR: {type(exc).__name__}: {exc}", failed + 1
        print(f"{time.monotonic() - t0:6.1f}s  {name}: {verdict}", flush=True)
    print(f"{len(CASES) - failed}/{len(CASES)} held")
    sys.exit(1 if failed else 0)

"""A property test of sync against a hostile remote: random work on three replicas, interleaved
with an attacker who deletes, puts back older versions of, swaps and cuts changesets, deletes the
key check, and forces the whole remote back to an older state (for git, a force-push of an older
history). Once the attacker stops and everyone syncs, every replica holds every memory it ever
held (but those purged), all agree, and a purged text is in no replica and in no file of the
remote a device that joins then can read."""

from __future__ import annotations

import shutil

import pytest
from attacker import Net

from pmem import sync
from pmem.errors import NotFound

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

NAMES = ("a", "b", "c")
WORK = st.tuples(st.sampled_from(["add", "add", "edit", "purge", "sync", "sync", "sync"]), st.integers(0, 2),
                 st.integers(0, 50))
ATTACK = st.tuples(st.sampled_from(["delete", "replay", "swap", "truncate", "snapshot", "force_back", "keycheck"]),
                   st.integers(0, 50), st.integers(0, 50))
SCRIPT = st.lists(st.one_of(WORK, ATTACK), min_size=4, max_size=22)


def attack(net: Net, move: str, i: int, k: int, snapshots: list) -> None:
    net.look()
    segments = sorted(p for p in net.seen if p.startswith("segments/"))
    if move == "snapshot":
        snapshots.append(net.snapshot())
    elif move == "force_back":
        if snapshots:
            net.force_back(snapshots[i % len(snapshots)])
    elif move == "keycheck":
        net.write({"keycheck": None})
    elif segments:
        path = segments[i % len(segments)]
        versions = net.seen[path]
        if move == "delete":
            net.write({path: None})
        elif move == "replay":
            net.write({path: versions[k % len(versions)]})
        elif move == "swap":
            other = segments[k % len(segments)]
            net.write({path: net.seen[other][-1]})
        elif move == "truncate":
            net.write({path: versions[-1][:max(0, len(versions[-1]) - 1 - k)]})


def work(net: Net, move: str, who: int, pick: int, counter: int, purged: dict[str, list[str]]) -> None:
    name = NAMES[who]
    s = net.store(name)
    ids = sorted(net.texts(name))
    target = ids[pick % len(ids)] if ids else None
    try:
        if move == "add" or target is None:
            s.add(f"note {counter} from {name} zq{counter}x")
        elif move == "edit":
            s.edit(target, text=f"edited {counter} by {name} zq{counter}x")
        elif move == "purge":
            purged[target] = [e.after["text"] for e, _ in s.history(target) if e.after]
            s.purge([target])
        else:
            net.sync(name)
    except NotFound:
        pass
    except sync.SyncError:
        pass  # a damaged file the attacker left: this sync stops, nothing half applied


@pytest.mark.parametrize("kind", ["folder", pytest.param("git", marks=pytest.mark.skipif(
    shutil.which("git") is None, reason="needs git"))])
@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck), print_blob=True,
          phases=(Phase.explicit, Phase.reuse, Phase.generate))  # no shrinking: an example is seconds
@given(script=SCRIPT)
def test_replicas_survive_a_hostile_remote_and_purged_text_stays_gone(tmp_path_factory, fake_config, kind, script):
    net = Net(tmp_path_factory.mktemp("hostile"), kind, fake_config)
    try:
        net.store("a").add("a's first memory zq0x")
        net.init("a")
        for name in NAMES[1:]:
            net.join(name)
        held = {name: set(net.texts(name)) for name in NAMES}
        purged: dict[str, list[str]] = {}
        snapshots: list = []
        for counter, (move, x, y) in enumerate(script, start=1):
            if move in ("add", "edit", "purge", "sync"):
                work(net, move, x, y, counter, purged)
            else:
                attack(net, move, x, y, snapshots)
            for name in NAMES:
                held[name] |= set(net.texts(name))
        # the attacker stops; everyone syncs, then a new device joins
        net.everyone(rounds=2)
        net.join("d")
        net.everyone(rounds=1)
        final = net.texts("a")
        for name in (*NAMES, "d"):
            assert net.texts(name) == final, name
        for name in NAMES:
            lost = held[name] - set(final) - set(purged)
            assert not lost, (name, lost)
        opened = net.opened()
        for mid, texts in purged.items():
            assert mid not in final
            for text in texts:
                if any(text == t for t in final.values()):
                    continue  # the same words kept under another id
                assert text not in opened
                for name in (*NAMES, "d"):
                    assert text.encode() not in net.raw(name), (name, text)
    finally:
        net.close()

"""Test doubles shared by the test modules (habit 5: fakes for speed, real models for truth).

Test modules import these (`from fakes import ...`; tests/ is on sys.path under pytest) and
never import one another. Fixtures live in conftest.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# The fixed "now" of the TUI tests: data and clock are fixed, so snapshots are stable.
TUI_NOW = "2025-03-01T12:00:00Z"


class FakeGenerator:
    """A deterministic chat model, answering by the JSON schema it is given.

    - extraction labels (`labels`): "preference" for sentences with "prefer", else "event";
    - extraction rewrites (`facts`, a strong model): `writes` maps a shown sentence to its fact;
    - conflict judgements (`relation`): `judge`;
    - dream merges and summaries (`text`): the notes joined, grounded by construction, plus `extra`.
    `fail_on_call=n` raises KeyboardInterrupt at the n-th call; `junk` answers nonsense."""

    name = "fake-chat"

    def __init__(self, strong=False, writes=None, judge="unrelated", fail_on_call=None, junk=False, extra=""):
        self.strong = strong
        self.writes = writes or {}
        self.judge = judge
        self.calls = 0
        self.fail_on_call = fail_on_call
        self.junk = junk
        self.extra = extra

    def generate_json(self, messages, schema, max_tokens=256):
        self.calls += 1
        if self.fail_on_call == self.calls:
            raise KeyboardInterrupt
        if self.junk:
            return {"labels": "not a list", "facts": 7}
        props = schema["properties"]
        if "text" in props:
            notes = [line[2:].rstrip(".") for line in messages[-1]["content"].splitlines() if line.startswith("- ")]
            return {"text": "; ".join(notes) + "." + self.extra}
        if "relation" in props:
            return {"relation": self.judge}
        lines = re.findall(r"^\d+\. (.*)$", messages[-1]["content"], re.M)
        if "labels" in props:
            return {"labels": ["preference" if "prefer" in s else "event" for s in lines]}
        facts = [{"n": i, "kind": "event", "fact": self.writes[s]} for i, s in enumerate(lines, 1) if s in self.writes]
        return {"facts": facts}


# -- the TUI's view of pmem.dream -------------------------------------------------------------

@dataclass
class FakeProposal:
    id: str
    kind: str
    members: list
    result_text: str | None
    reason: str

    def to_dict(self):
        return self.__dict__


@dataclass
class FakePlan:
    proposals: list = field(default_factory=list)
    since: int | None = None  # a plan of what changed since the last dream (pmem.dream.Plan.since)


class FakeDream:
    """The shape of pmem.dream: plan(store, ...) -> Plan, apply(store, plan, accept=, progress=)."""

    def __init__(self):
        self.applied = None
        self.planned: list[bool] = []  # `full` of each plan() call

    def plan(self, store, *, only=None, now=None, generator=None, max_seconds=None, full=False):
        self.planned.append(full)
        p1 = FakeProposal("p1", "dedup", ["a2", "a5"], None, "same [bold]cabin[/] fact")
        if full:  # a whole plan: p2 is not in it, p3 is
            return FakePlan([p1, FakeProposal("p3", "expire", ["a3"], None, "an old note")])
        return FakePlan([p1, FakeProposal("p2", "expire", ["a4"], None, "looks like noise")])

    def apply(self, store, plan, *, accept=None, progress=None):
        self.applied = set(accept or ())
        chosen = [p for p in plan.proposals if p.id in self.applied]
        with store.operation("dream", "dream"):
            for i, p in enumerate(chosen, 1):
                if p.kind == "dedup":
                    store.forget(p.members[1])
                elif p.kind == "expire":
                    store.expire(p.members[0])
                if progress:
                    progress(i, len(chosen))
        return {"applied": len(chosen)}


def writing_while_embedding(db, config, dim: int = 64):
    """A fake embedder that, inside each embed call, has another connection add a memory to `db`
    (as another process would): `.written` collects the ids added, `.locked` the errors, so a test
    shows that the code under test embeds outside its write transaction."""
    import itertools

    from pmem.models.embed import FakeEmbedder
    from pmem.service import MemoryStore

    count = itertools.count()

    class WritingWhileEmbedding(FakeEmbedder):
        def embed(self, texts):
            try:
                with MemoryStore(db, config=config, embedder=FakeEmbedder(dim)) as other:
                    memory, created = other.add(f"written meanwhile {next(count)}")
                    assert created  # a new row: a write, not a duplicate found
                    self.written.append(memory.id)
            except Exception as exc:  # noqa: BLE001 - the test's assertion names it
                self.locked.append(str(exc))
            return super().embed(texts)

    embedder = WritingWhileEmbedding(dim)
    embedder.written, embedder.locked = [], []
    return embedder

"""A dream's merges and summaries written several at once (the chat model's lanes): the plan is the
one a single lane makes, the answers are read in order, and no answer starts after the time limit."""

from __future__ import annotations

import threading
import time

from dream.test_dream import NOW, _loose_merge, add  # noqa: F401 - the fixture applies here too
from pmem import dream, prompts

from fakes import FakeGenerator

TOPICS = ["hiking on the lake trail", "painting a sunrise", "the support group", "swimming with the kids",
          "the camping trip", "baking bread"]


def busy_store(store) -> None:
    """Several merges and several old episodes to summarise."""
    for k, topic in enumerate(TOPICS):
        for i in range(3):
            add(store, f"Caroline: we talked about {topic}, part {i}, and it went well.", tier="episodic",
                created_at=f"2023-05-{k + 10:02d}T10:0{i}:00Z")
        add(store, f"Bob's friend number {k} likes {topic} a lot")
        add(store, f"Bob's friend number {k} likes {topic} very much")


class Lanes(FakeGenerator):
    """A chat model with `n` lanes: a summary is its first note (grounded, shorter); the even calls
    take longer, so that later answers are ready before earlier ones."""

    def __init__(self, n: int, delay: float = 0.05, odd: float = 0.0):
        super().__init__()
        self.n, self.delay, self.odd = n, delay, odd
        self.asked: list[int] = []
        self.released = 0
        self.started: list[float] = []
        self._lock = threading.Lock()
        self.running = self.most = 0

    def lanes(self, n: int) -> int:
        self.asked.append(n)
        return self.n

    def release_lanes(self) -> None:
        self.released += 1

    def generate_json(self, messages, schema, max_tokens=256):
        with self._lock:
            k = len(self.started)
            self.started.append(time.monotonic())
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            time.sleep(self.delay if k % 2 == 0 else self.odd)
            if messages[0]["content"] == prompts.DREAM_SYSTEM["compress"]:
                first = messages[-1]["content"].splitlines()[1][2:]
                return {"text": first.split(",")[0] + "."}
            with self._lock:
                return super().generate_json(messages, schema, max_tokens)
        finally:
            with self._lock:
                self.running -= 1


def plain(plan) -> list:
    out = plan.to_dict()
    out.pop("elapsed_s")
    out.pop("generator", None)
    return out["proposals"] + out["dropped"]


def test_two_lanes_make_the_plan_one_lane_makes(store):
    busy_store(store)
    one, two = Lanes(1), Lanes(2)
    serial = dream.plan(store, only={"merge", "compress"}, now=NOW, generator=one)
    both = dream.plan(store, only={"merge", "compress"}, now=NOW, generator=two)
    kinds = [p.kind for p in serial.proposals]
    assert kinds.count("merge") >= 3 and kinds.count("compress") >= 3
    assert any("summary by fake-chat" in p.reason for p in serial.proposals)  # the model's own text is used
    assert plain(both) == plain(serial)
    assert two.most == 2 and one.most == 1  # two answers were written at once, never more
    assert len(two.started) == len(one.started)
    assert two.released == 1 and one.released == 1  # the other contexts given back once the plan is made
    assert two.asked and all(n >= 1 for n in two.asked)


def test_no_answer_starts_after_the_time_limit(store):
    busy_store(store)
    gen = Lanes(2, delay=0.3, odd=0.3)
    start = time.monotonic()
    plan = dream.plan(store, only={"compress"}, now=NOW, generator=gen, max_seconds=0.5)
    assert not plan.complete and "time limit reached while planning compression" in plan.notes
    assert len(gen.started) == 4  # two answers at 0 s, two at 0.3 s; the next two would begin at 0.6 s
    assert all(t - start < 0.5 + 0.05 for t in gen.started)  # none began once the limit had passed
    assert gen.released == 1


def test_a_model_without_lanes_answers_one_at_a_time(store):
    busy_store(store)
    gen = FakeGenerator()
    plan = dream.plan(store, only={"merge"}, now=NOW, generator=gen)
    assert [p.kind for p in plan.proposals].count("merge") >= 3 and gen.calls == len(TOPICS)

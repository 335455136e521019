"""The chat model's lanes, with the real model: an answer is the same whatever the context read
before, however many threads it runs on, and whichever lane writes it; two lanes write at once."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from pmem import prompts
from pmem.models import generate
from pmem.models.generate import LlamaGenerator, load_generator

pytestmark = pytest.mark.model

ASKED = [
    ("merge", ["Caroline: I went to the LGBTQ support group yesterday and it was so powerful.",
               "Caroline: The support group made me feel accepted and gave me courage."]),
    ("compress", ["Melanie: I painted a lake sunrise last year, it's special to me.",
                  "Melanie: Painting is a fun way to express my feelings and get creative.",
                  "Melanie: I'm going swimming with the kids on Saturday."]),
    ("merge", ["Caroline: Caroline wants to work in counseling and mental health.",
               "Caroline: Caroline is looking into counseling jobs for transgender people."]),
    ("compress", ["Caroline: We went camping in the mountains last weekend.",
                  "Melanie: That sounds lovely, did the kids like it?",
                  "Caroline: They loved roasting marshmallows by the fire."]),
]


def messages_of(kind, notes):
    return prompts.dream_messages(kind, notes)


@pytest.fixture(scope="module")
def gen():
    g = load_generator("SmolLM2-135M-Instruct", threads=1)
    yield g
    g.release_lanes()


def test_an_answer_does_not_depend_on_what_the_context_read_before(gen):
    alone = [gen.complete(messages_of(*a), prompts.DREAM_SCHEMA, 40, 0, fresh=True) for a in ASKED]
    assert len(set(alone)) == len(ASKED)  # four different answers
    # in another order, each after another prompt (of the same kind or the other)
    again = {i: gen.complete(messages_of(*ASKED[i]), prompts.DREAM_SCHEMA, 40, 0) for i in (3, 1, 2, 0, 2)}
    assert [again[i] for i in range(len(ASKED))] == alone
    # the frame (the instructions before the notes) is read once and kept: a call reads its notes
    before = gen.stats["prompt_evaluated"]
    tokens, _ = generate.prompt_of(gen.llama, messages_of(*ASKED[2]))
    gen.complete(messages_of(*ASKED[0]), prompts.DREAM_SCHEMA, 40, 0)
    assert gen.stats["prompt_evaluated"] - before < len(tokens) - 20


def test_two_lanes_write_at_once_what_one_lane_writes(gen, monkeypatch):
    own = gen.lane_threads
    assert len(own) == 1
    # one answer from a context on two threads (the lanes' have one; two threads are slow where the
    # other core is busy, as on a shared CI machine: llama.cpp's threads wait for each other spinning)
    two = LlamaGenerator(gen.path, threads=2)
    try:
        serial = [two.generate_json(messages_of(*ASKED[0]), prompts.DREAM_SCHEMA, 40)]
        assert two.lane_threads == [2]
    finally:
        two.close()
    serial += [gen.generate_json(messages_of(*a), prompts.DREAM_SCHEMA, 40) for a in ASKED[1:]]

    assert gen.lanes(2) == 2
    assert gen.lane_threads == [1, 1]
    used, running, most = set(), [0], [0]
    lock = threading.Lock()
    complete = generate.LlamaGenerator.complete

    def watched(self, *args, llm=None, **kwargs):
        with lock:
            used.add(id(llm))
            running[0] += 1
            most[0] = max(most[0], running[0])
        try:
            return complete(self, *args, llm=llm, **kwargs)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(generate.LlamaGenerator, "complete", watched)
    with ThreadPoolExecutor(2) as pool:
        both = list(pool.map(lambda a: gen.generate_json(messages_of(*a), prompts.DREAM_SCHEMA, 40), ASKED * 2))
    assert both == serial * 2
    assert len(used) == 2 and most[0] == 2

    gen.release_lanes()
    assert gen.lane_threads == own


def test_a_large_model_gets_one_lane(gen, monkeypatch):
    monkeypatch.setattr(gen, "params", generate.LANE_PARAMS)
    assert gen.lanes(4) == 1 and len(gen.lane_threads) == 1

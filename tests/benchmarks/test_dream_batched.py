"""benchmarks/dream_batched.py: prompts decoded together give the answers one at a time gives,
with the real chat model (docs/decisions/0065-dream-plan-batched.md)."""

from __future__ import annotations

import pytest

from pmem import prompts
from pmem.models.generate import load_generator

pytestmark = pytest.mark.model

NOTES = [
    ["Caroline: I went to the LGBTQ support group yesterday and it was so powerful.",
     "Caroline: The support group made me feel accepted and gave me courage to embrace myself."],
    ["Melanie: I painted a lake sunrise last year, it's special to me.",
     "Melanie: Painting is a fun way to express my feelings and get creative.",
     "Melanie: I'm going swimming with the kids on Saturday."],
    ["Audrey adopted a dog named Pixie in May.", "Audrey's dog Pixie is a one-year-old beagle."],
    ["Nate: I won my second video game tournament last week!", "Nate: The prize was a new keyboard."],
]


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("dream_batched")


@pytest.fixture(scope="module")
def gen():
    return load_generator("SmolLM2-135M-Instruct", threads=1)


def asked() -> list:
    return [(prompts.dream_messages(kind, notes), prompts.DREAM_SCHEMA, 48)
            for kind in ("merge", "compress") for notes in NOTES]


def test_answers_decoded_together_are_the_answers_one_at_a_time(bench, gen):
    requests = asked()
    gen.llama.reset()
    one_at_a_time = bench.plain(gen, requests)
    together, evaluated = bench.batched(gen, requests, 4)
    assert together == one_at_a_time
    assert all(text for text, _ in together)
    # the shared start (template and instructions) evaluated once for each chunk of four
    whole = sum(len(bench.prompt_of(gen.llama, m, t, None).tokens) for m, _, t in requests)
    assert evaluated < whole


def test_an_answer_cut_at_max_tokens_is_the_plain_paths_cut(bench, gen):
    requests = [(m, s, 5) for m, s, _ in asked()[:3]]  # too short for the JSON to close
    gen.llama.reset()
    one_at_a_time = bench.plain(gen, requests)
    together, _ = bench.batched(gen, requests, 3)
    assert together == one_at_a_time
    assert all(not text.rstrip().endswith("}") for text, _ in together)

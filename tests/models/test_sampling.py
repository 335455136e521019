"""The grammar asked only where the greedy token breaks it: the same answers as llama.cpp's grammar
sampler in the chain, token for token, with the real chat model."""

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
]
# A schema the model does not follow by itself: the first tokens it wants break the grammar.
COUNTS = {"type": "object", "properties": {"count": {"type": "integer"}, "who": {"type": "string",
          "enum": ["Caroline", "Melanie"]}}, "required": ["count", "who"]}


def in_the_chain(gen, messages, schema, max_tokens, attempt):
    """What llama-cpp-python answers with the grammar in its own sampler chain (what pmem did before),
    from an empty KV cache."""
    return gen.complete(messages, schema, max_tokens, attempt, grammar="chain", fresh=True)


def ours_of(gen, messages, schema, max_tokens, attempt):
    """The answer pmem gets now, from an empty KV cache as well."""
    return gen.complete(messages, schema, max_tokens, attempt, fresh=True)


@pytest.fixture(scope="module")
def gen():
    return load_generator("SmolLM2-135M-Instruct", threads=1)


@pytest.mark.parametrize("kind", ["merge", "compress"])
@pytest.mark.parametrize("notes", NOTES)
def test_a_dream_answer_is_the_grammar_samplers(gen, kind, notes):
    messages = prompts.dream_messages(kind, notes)
    before = dict(gen.stats)
    ours = ours_of(gen, messages, prompts.DREAM_SCHEMA, 96, 0)
    # the grammar was asked about single tokens, and far fewer times about the whole vocabulary
    checked = gen.stats["tokens_checked"] - before["tokens_checked"]
    masked = gen.stats["tokens_masked"] - before["tokens_masked"]
    assert checked >= gen.stats["completion_tokens"] - before["completion_tokens"] > 0
    assert masked < checked / 2
    assert ours == in_the_chain(gen, messages, prompts.DREAM_SCHEMA, 96, 0)


def test_where_the_model_breaks_the_grammar_the_mask_decides(gen):
    messages = [{"role": "user", "content": "How many people talk in: " + " ".join(NOTES[1]) + " Who?"}]
    before = gen.stats["tokens_masked"]
    ours = ours_of(gen, messages, COUNTS, 32, 0)
    assert gen.stats["tokens_masked"] > before  # the greedy token was refused at least once
    assert ours == in_the_chain(gen, messages, COUNTS, 32, 0)


@pytest.mark.parametrize("attempt", [1, 2])
def test_a_retry_samples_from_what_the_grammar_allows_as_before(gen, attempt):
    messages = prompts.dream_messages("compress", NOTES[1])
    ours = ours_of(gen, messages, prompts.DREAM_SCHEMA, 64, attempt)
    assert ours == in_the_chain(gen, messages, prompts.DREAM_SCHEMA, 64, attempt)


def test_a_loop_of_symbols_ends_the_answer_where_it_starts(gen):
    from pmem.models.generate import Runaway
    from pmem.models.sampling import RUNAWAY

    messages = [{"role": "system", "content": prompts.DREAM_SYSTEM["compress"]},
                {"role": "user", "content": "Write a row of emoji: 😀😃😄😁😆😅😂🤣"}]
    before = dict(gen.stats)
    with pytest.raises(Runaway, match=f"wrote {RUNAWAY} tokens in a row without a letter or digit"):
        ours_of(gen, messages, prompts.DREAM_SCHEMA, 128, 0)
    assert gen.stats["runaways"] == before["runaways"] + 1
    assert gen.stats["completion_tokens"] - before["completion_tokens"] <= RUNAWAY + 8  # not to the limit
    # with the grammar in the chain the answer is the same symbols: no word a grounding gate could find
    import json

    written = json.loads(in_the_chain(gen, messages, prompts.DREAM_SCHEMA, 128, 0))["text"]
    assert written and not any(ch.isalnum() for ch in written)


def test_the_prompt_tokens_evaluated_leave_out_what_the_cache_held(gen):
    from pmem.models.generate import prompt_of

    first = prompts.dream_messages("compress", NOTES[0])
    second = prompts.dream_messages("compress", NOTES[1])
    tokens, stops = prompt_of(gen.llama, second)
    assert stops == [b"<|im_end|>"]
    before = dict(gen.stats)
    ours_of(gen, first, prompts.DREAM_SCHEMA, 24, 0)  # fresh: the whole prompt
    whole = gen.stats["prompt_evaluated"] - before["prompt_evaluated"]
    assert whole == gen.stats["prompt_tokens"] - before["prompt_tokens"]
    middle = dict(gen.stats)
    gen.complete(second, prompts.DREAM_SCHEMA, 24, 0)  # after the first: the shared instructions kept
    evaluated = gen.stats["prompt_evaluated"] - middle["prompt_evaluated"]
    assert gen.stats["prompt_tokens"] - middle["prompt_tokens"] == len(tokens)
    shared = len(prompt_of(gen.llama, [first[0]])[0])  # at least the system message's tokens
    assert 0 < evaluated <= len(tokens) - shared + 8
    again = dict(gen.stats)
    gen.complete(second, prompts.DREAM_SCHEMA, 24, 1)  # a retry: the prompt held whole, its last token again
    assert gen.stats["prompt_evaluated"] - again["prompt_evaluated"] == 1


def test_a_chat_handler_that_cannot_be_asked_leaves_the_answer_alone(gen, monkeypatch):
    """The count is a figure for benchmarks: a handler it cannot ask (a user's own GGUF's) must not fail a call."""
    from pmem.models import generate

    messages = prompts.dream_messages("compress", NOTES[0])
    expected = gen.complete(messages, prompts.DREAM_SCHEMA, 24, 0, fresh=True)

    def broken(*_args, **_kwargs):
        raise AttributeError("this handler wants what the capture lacks")

    monkeypatch.setattr(generate, "prompt_of", broken)
    before = dict(gen.stats)
    assert gen.complete(messages, prompts.DREAM_SCHEMA, 24, 0, fresh=True) == expected
    assert gen.stats["prompt_evaluated"] == before["prompt_evaluated"]
    assert gen.stats["calls"] == before["calls"] + 1

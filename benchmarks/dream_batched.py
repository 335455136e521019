"""Greedy first tries of a dream's plan decoded together in one llama.cpp batch, against one at a time.

    PMEM_MODELS_DIR=.models-cache python benchmarks/dream_batched.py --db conv-26.db            # a dream_bench store
    PMEM_MODELS_DIR=.models-cache python benchmarks/dream_batched.py --db conv-26.db --batch 4 --threads 2

What was measured for docs/decisions/0065-dream-plan-batched.md, kept so it can be measured again
(on another CPU, another model file). The plan's first tries (a merge per group, a summary per
episode; which ones does not depend on the answers) are recorded by planning with a stand-in model,
then the real chat model answers them twice: one at a time as `pmem dream` asks them
(LlamaGenerator.complete, the KV cache reused across calls as llama-cpp-python does), and in
chunks of --batch prompts decoded together (below: one context with a KV stream per prompt, the
shared start evaluated once and copied, then one token of every unfinished answer per decode,
each token chosen by sampling.GrammarFirstTry.pick as the plain path chooses it, the text
assembled as llama-cpp-python assembles a completion). Prints both CPU times, the prompt tokens
each evaluated, and every answer that differs (text or loop-of-symbols verdict).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

SLACK = 8  # tokens past max_tokens an answer may take to finish a multi-byte character


def prompt_of(llm: Any, messages: list[dict], max_tokens: int, grammar: Any) -> "Prompt":
    from pmem.models.generate import prompt_of as tokens_of

    tokens, stops = tokens_of(llm, messages)
    return Prompt(tokens, stops, max_tokens, grammar)


@dataclass
class Prompt:
    """One request as the chat handler would send it: its tokens and its stop strings."""

    tokens: list[int]
    stops: list[bytes]
    max_tokens: int
    grammar: Any  # a LlamaGrammar


@dataclass
class Answer:
    text: str = ""
    runaway: bool = False
    completion: list[int] = field(default_factory=list)
    checks: int = 0
    masks: int = 0


def _shared(prompts: list[Prompt]) -> int:
    """How many tokens every prompt starts with (each keeps at least its last token)."""
    first = prompts[0].tokens
    n = min(len(p.tokens) for p in prompts) - 1
    for p in prompts[1:]:
        k = 0
        while k < n and p.tokens[k] == first[k]:
            k += 1
        n = k
    return max(n, 0)


class _Sequence:
    def __init__(self, seq: int, prompt: Prompt, sampler: Any, np: Any):
        self.seq, self.prompt, self.sampler = seq, prompt, sampler
        self.ids = np.zeros(len(prompt.tokens) + prompt.max_tokens + SLACK + 1, dtype=np.intc)
        self.ids[:len(prompt.tokens)] = prompt.tokens
        self.n = len(prompt.tokens)  # tokens in `ids` (the prompt, then what was chosen)
        self.answer = Answer()
        self.multibyte = 0
        self.done = False

    def take(self, token: int, llm: Any, lib: Any) -> None:
        """One chosen token, as llama-cpp-python's _create_completion takes it."""
        out = self.answer.completion
        if lib.llama_vocab_is_eog(llm._model.vocab, token):
            self._finish(llm.detokenize(out))
            return
        out.append(token)
        self.ids[self.n] = token
        self.n += 1
        text = llm.detokenize(out)
        for k, char in enumerate(text[-3:]):
            k = 3 - k
            for num, pattern in ((2, 192), (3, 224), (4, 240)):
                if num > k and pattern & char == pattern:
                    self.multibyte = num - k
        if self.multibyte > 0:
            self.multibyte -= 1
            if self.n < len(self.ids):
                return
        stops = [s for s in self.prompt.stops if s in text]
        if stops:
            self._finish(text[:text.index(stops[0])])
        elif len(out) >= self.prompt.max_tokens or self.n >= len(self.ids):
            self._finish(text)

    def _finish(self, text: bytes) -> None:
        self.answer.text = text.decode("utf-8", errors="ignore")
        self.answer.runaway = self.sampler.runaway
        self.answer.checks, self.answer.masks = self.sampler.checks, self.sampler.masks
        self.done = True


def decode(gen: Any, prompts: list[Prompt]) -> tuple[list[Answer], int]:
    """The greedy answers to `prompts`, decoded together in a context of their own beside `gen`'s
    (a LlamaGenerator: its model, its context's settings and threads), and how many prompt
    tokens were evaluated (the shared start once)."""
    import numpy as np

    from pmem.models.generate import REPEAT_PENALTY
    from pmem.models.sampling import GrammarFirstTry

    llm, low = gen._llm, gen._lib
    shared = _shared(prompts)
    # A stream of the KV cache per sequence: a token attends to its own sequence's cells only (in
    # one unified cache every token's attention goes over every sequence's cells, masked: more
    # work than the weights at 16 sequences). The shared start is evaluated once, then copied.
    cells = max(len(p.tokens) + p.max_tokens + SLACK + 1 for p in prompts)
    params = type(llm.context_params).from_buffer_copy(llm.context_params)
    params.n_ctx = cells * len(prompts)
    params.n_seq_max = len(prompts)
    params.kv_unified = False
    ctx = low.llama_init_from_model(llm.model, params)
    if not ctx:
        raise MemoryError(f"llama.cpp could not make a context of {cells} tokens")
    n_batch = int(params.n_batch)
    batch = low.llama_batch_init(n_batch, 0, len(prompts))
    n_vocab = int(llm.n_vocab())
    seqs: list[_Sequence] = []
    try:
        for i, p in enumerate(prompts):
            sampler = GrammarFirstTry(low, llm, p.grammar, greedy=True, penalty=REPEAT_PENALTY,
                                      last_n=llm.last_n_tokens_size)
            seqs.append(_Sequence(i, p, sampler, np))

        def run(items: list[tuple[int, int, list[int], bool]]) -> None:
            """Decode (token, position, sequences, logits wanted) items, n_batch at a time, and
            choose the next token of every sequence whose logits come back."""
            for start in range(0, len(items), n_batch):
                part = items[start:start + n_batch]
                batch.n_tokens = len(part)
                wanted = []
                for k, (token, pos, ids, logits) in enumerate(part):
                    batch.token[k], batch.pos[k], batch.n_seq_id[k] = token, pos, len(ids)
                    for j, s in enumerate(ids):
                        batch.seq_id[k][j] = s
                    batch.logits[k] = logits
                    if logits:
                        wanted.append((k, ids[0]))
                if low.llama_decode(ctx, batch) != 0:
                    raise MemoryError("llama.cpp could not decode the batch")
                for k, s in wanted:
                    row = np.ctypeslib.as_array(low.llama_get_logits_ith(ctx, k), shape=(n_vocab,))
                    seq = seqs[s]
                    seq.take(seq.sampler.pick(seq.ids[:seq.n], row), llm, low)

        first = prompts[0].tokens
        if shared:
            run([(first[k], k, [0], False) for k in range(shared)])
            mem = low.llama_get_memory(ctx)
            for seq in seqs[1:]:
                low.llama_memory_seq_cp(mem, 0, seq.seq, -1, -1)
        items = []
        for seq in seqs:
            rest = seq.prompt.tokens
            items += [(rest[k], k, [seq.seq], k == len(rest) - 1) for k in range(shared, len(rest))]
        run(items)
        while True:
            live = [s for s in seqs if not s.done]
            if not live:
                break
            run([(int(s.ids[s.n - 1]), s.n - 1, [s.seq], True) for s in live])
        return [s.answer for s in seqs], shared + len(items)
    finally:
        for seq in seqs:
            seq.sampler.close()
        low.llama_batch_free(batch)
        low.llama_free(ctx)


class Recording:
    """A chat model that records the first tries a plan asks and answers with the first note."""

    name = "recording"
    strong = chooses = False

    def __init__(self):
        self.asked: list[tuple[list[dict], dict, int]] = []

    def generate_json(self, messages, schema, max_tokens=256):
        self.asked.append((messages, schema, max_tokens))
        return {"text": messages[-1]["content"].split("\n- ")[1].split("\n")[0]}


def first_tries(db: Path) -> list[tuple[list[dict], dict, int]]:
    from pmem import MemoryStore, dream
    from pmem.config import load

    tmp = Path(tempfile.mkdtemp(prefix="pmem-batched-"))
    os.environ["PMEM_HOME"] = str(tmp / "home")
    shutil.copy(db, tmp / "store.db")
    gen = Recording()
    with MemoryStore(tmp / "store.db", config=load()) as store:
        dream.plan(store, now="2026-01-01T00:00:00Z", generator=gen)
    shutil.rmtree(tmp, ignore_errors=True)
    return gen.asked


def plain(gen: Any, asked: list) -> list[tuple[str, bool]]:
    from pmem.models.generate import Runaway

    out = []
    for messages, schema, max_tokens in asked:
        try:
            out.append((gen.complete(messages, schema, max_tokens, 0), False))
        except Runaway:
            out.append(("", True))
    return out


def batched(gen: Any, asked: list, size: int) -> tuple[list[tuple[str, bool]], int]:
    out, evaluated = [], 0
    for start in range(0, len(asked), size):
        chunk = [prompt_of(gen._llm, m, t, gen._grammar(s)) for m, s, t in asked[start:start + size]]
        answers, n = decode(gen, chunk)
        evaluated += n
        out += [("" if a.runaway else a.text, a.runaway) for a in answers]
    return out, evaluated


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", required=True, help="a store to plan on (dream_bench.py builds one per conversation)")
    ap.add_argument("--batch", type=int, default=16, help="prompts decoded together")
    ap.add_argument("--threads", type=int, default=1, help="llama.cpp threads (both paths)")
    ap.add_argument("--limit", type=int, default=0, help="only the first N first tries")
    args = ap.parse_args()
    from pmem.models.generate import load_generator

    asked = first_tries(Path(args.db))
    if args.limit:
        asked = asked[:args.limit]
    gen = load_generator("SmolLM2-135M-Instruct", threads=args.threads)
    figures: dict[str, Any] = {"first_tries": len(asked), "batch": args.batch, "threads": args.threads}
    c0 = time.process_time()
    ours, evaluated = batched(gen, asked, args.batch)
    c1 = time.process_time()
    gen._llm.reset()
    before = dict(gen.stats)
    theirs = plain(gen, asked)
    c2 = time.process_time()
    figures.update({
        "plain": {"cpu_s": round(c2 - c1, 1), "prompt_evaluated": gen.stats["prompt_evaluated"] - before["prompt_evaluated"],
                  "prompt_tokens": gen.stats["prompt_tokens"] - before["prompt_tokens"],
                  "written": gen.stats["completion_tokens"] - before["completion_tokens"]},
        "batched": {"cpu_s": round(c1 - c0, 1), "prompt_evaluated": evaluated},
        "load_1min": round(os.getloadavg()[0], 1),
        "differ": [{"call": i, "batched": a, "plain": b} for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]})
    print(json.dumps(figures, indent=1, ensure_ascii=False))
    return 0 if not figures["differ"] else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""The JSON grammar asked only where the model's own choice breaks it.

llama.cpp's grammar sampler checks the whole vocabulary (49,152 tokens for SmolLM2) against the
grammar at every token: a quarter of a dream's model time. A small model prompted for JSON mostly
writes JSON anyway, so, as llama.cpp's own `common_sampler_sample` does, the greedy token is
chosen first and only it is checked; the whole vocabulary is checked only when it breaks the
grammar. The answer is the one the grammar sampler gives, token for token: the greedy choice
among the tokens the grammar allows is the greedy choice when that is allowed
(docs/decisions/0061-dream-plan-with-the-model.md).

The repeat penalty is applied here too (the chain's own would go over the whole vocabulary
again), exactly as llama.cpp's penalties sampler does: over the tokens generated so far, the
last `last_n` of them, each once (a logit <= 0 multiplied by the penalty, else divided).
Sampling with a temperature (a retry) gets the whole grammar mask, so that the chain's top-k,
top-p and draw see what they saw with the grammar in the chain.

A small model sometimes falls into a loop of symbols inside the JSON string (emoji after emoji to
the token limit, and again on each retry): `runaway` turns true after RUNAWAY tokens in a row
without a letter or digit, and the answer ends there (the end-of-text token is the only one left);
the generator then tries again as for a cut-off answer (generate.Runaway). Of the 95 answers of a
dream of LoCoMo's conv-26, 86 had at most 3 such tokens in a row and 9 ran away (67 to 383): a
quarter of the plan's model time went into those 9.
"""

from __future__ import annotations

import ctypes
from typing import Any

RUNAWAY = 16  # tokens in a row without a letter or digit: the answer is a loop of symbols


class GrammarFirstTry:
    """A llama-cpp-python logits processor for one completion: penalties, then the greedy token
    checked against `grammar` (a LlamaGrammar), the whole vocabulary only when it fails.
    Counts in `checks` and `masks` the tokens checked alone and those that needed the mask."""

    def __init__(self, llama_cpp: Any, llm: Any, grammar: Any, *, greedy: bool, penalty: float, last_n: int):
        import numpy as np

        self._np, self._lib = np, llama_cpp
        self._sampler = llama_cpp.llama_sampler_init_grammar(
            llm._model.vocab, grammar._grammar.encode("utf-8"), grammar._root.encode("utf-8"))
        if not self._sampler:
            raise ValueError("the grammar does not parse")
        n_vocab = int(llm.n_vocab())
        kind = np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)])  # llama_token_data
        assert kind.itemsize == ctypes.sizeof(llama_cpp.llama_token_data)
        self._all = np.zeros(n_vocab, dtype=kind)
        self._all["id"] = np.arange(n_vocab, dtype=np.intc)
        self._one = np.zeros(1, dtype=kind)
        self._greedy, self._penalty, self._last_n = greedy, np.single(penalty), last_n
        self._start: int | None = None  # where the completion starts in input_ids
        self._accepted = 0  # tokens of the completion the grammar has accepted
        self.checks = self.masks = 0
        self._llm = llm
        self._wordy: dict[int, bool] = {}  # token -> whether its text has a letter or digit
        self._symbols = 0  # tokens in a row without one, up to the last accepted
        self.runaway = False

    def _has_word(self, token: int) -> bool:
        if token not in self._wordy:
            piece = self._llm.detokenize([token]).decode("utf-8", "ignore")
            self._wordy[token] = any(ch.isalnum() for ch in piece)
        return self._wordy[token]


    def _apply(self, tokens) -> None:
        """The grammar's verdict on `tokens` (a structured array): a logit -inf where it refuses."""
        lib = self._lib
        array = lib.llama_token_data_array(
            data=tokens.ctypes.data_as(ctypes.POINTER(lib.llama_token_data)), size=len(tokens), selected=-1,
            sorted=False)
        lib.llama_sampler_apply(self._sampler, ctypes.byref(array))

    def _advance(self, input_ids) -> None:
        """The grammar and the run of symbols moved on by what the last calls chose (now the end
        of `input_ids`); the first call comes right after the prompt."""
        n = len(input_ids)
        if self._start is None:
            self._start = n
        while self._start + self._accepted < n:
            token = int(input_ids[self._start + self._accepted])
            self._lib.llama_sampler_accept(self._sampler, token)
            self._accepted += 1
            self._symbols = 0 if self._has_word(token) else self._symbols + 1
            self.runaway = self.runaway or self._symbols >= RUNAWAY

    def _penalised(self, input_ids, scores):
        np = self._np
        n = len(input_ids)
        logits = np.array(scores, dtype=np.single)
        if self._last_n > 0 and self._penalty != 1:
            seen = np.unique(input_ids[max(self._start, n - self._last_n):n])
            if seen.size:
                v = logits[seen]
                logits[seen] = np.where(v <= 0, v * self._penalty, v / self._penalty)
        return logits

    def pick(self, input_ids, scores) -> int:
        """The greedy token after `input_ids` (the prompt and the answer so far) from the model's
        logits `scores`: what a greedy completion with this processor chooses (the end-of-text
        token once the answer ran away). pmem.models.batched decodes with it."""
        np = self._np
        self._advance(input_ids)
        if self.runaway:
            return int(self._llm.token_eos())
        logits = self._penalised(input_ids, scores)
        token = int(np.argmax(logits))  # the first of the largest, as llama.cpp's greedy sampler
        self.checks += 1
        self._one[0] = (token, 0.0, 0.0)
        self._apply(self._one)
        if self._one["logit"][0] == -np.inf:
            self.masks += 1
            self._all["logit"] = logits
            self._apply(self._all)
            token = int(np.argmax(self._all["logit"]))
        return token

    def __call__(self, input_ids, scores):
        np = self._np
        if self._greedy:
            token = self.pick(input_ids, scores)
            out = np.full(len(scores), -np.inf, dtype=np.single)
            out[token] = 0.0
            return out
        self._advance(input_ids)
        if self.runaway:  # end the answer here (the caller sees `runaway`)
            out = np.full(len(scores), -np.inf, dtype=np.single)
            out[self._llm.token_eos()] = 0.0
            return out
        logits = self._penalised(input_ids, scores)
        self.masks += 1
        self._all["logit"] = logits
        self._apply(self._all)
        return self._all["logit"].copy()

    def close(self) -> None:
        if self._sampler:
            self._lib.llama_sampler_free(self._sampler)
            self._sampler = None

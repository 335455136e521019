"""Text -> unit vectors: the Embedder protocol, the llama.cpp GGUF embedder, and a fast fake.

llama_cpp is imported only when a real model is loaded, so `import pmem` stays light.
"""

from __future__ import annotations

import math
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..errors import ModelError
from .cache import ModelCache, given

if TYPE_CHECKING:
    from .bert_int8 import BertInt8

# Tokens in a call from which its texts run in int8 (bert_int8): e5's SPLIT_TOKENS
BULK_TOKENS = 512


@runtime_checkable
class Embedder(Protocol):
    name: str
    dim: int

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One L2-normalised vector per text, in order."""
        ...


# --- fake ---------------------------------------------------------------------------------

_WORD = re.compile(r"\w+", re.UNICODE)


class FakeEmbedder:
    """Deterministic hashing embedder for tests: shared words and trigrams give high cosine.

    Uses blake2b rather than hash() so vectors are identical across processes and runs.
    """

    def __init__(self, dim: int = 64):
        if dim < 1:
            raise ValueError("dim must be positive")
        self.dim = dim
        self.name = f"fake-{dim}"

    def _features(self, text: str):
        low = text.lower()
        for word in _WORD.findall(low):
            yield "w:" + word, 1.0
        padded = f"  {' '.join(low.split())} "
        for i in range(len(padded) - 2):
            yield "c:" + padded[i : i + 3], 0.5

    def _one(self, text: str) -> list[float]:
        import hashlib  # here: a served command never embeds (docs/decisions/0040-command-start-up.md)

        vec = [0.0] * self.dim
        for feature, weight in self._features(text):
            h = int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "little")
            vec[h % self.dim] += weight if (h >> 63) & 1 else -weight
        norm = math.sqrt(sum(v * v for v in vec))
        if norm == 0.0:  # empty text: still a unit vector, the same one every time
            vec[0], norm = 1.0, 1.0
        return [v / norm for v in vec]

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [self._one(t) for t in texts]


# --- llama.cpp ----------------------------------------------------------------------------


class LlamaEmbedder:
    """A GGUF embedding model run by llama.cpp, many texts per forward pass.

    Texts are packed into one llama_encode call as separate sequences (non-causal attention
    keeps them apart) and pooled per sequence by llama.cpp. Packs stay small (pack_tokens)
    because attention over a pack costs its length squared. Texts longer than max_tokens are
    truncated, keeping the final separator token.

    Vectors are deterministic for a given batch; across batch compositions components differ
    by up to ~1e-4 (cosine > 0.9999999), from SIMD summation order over packed sequences.
    """

    @property
    def profile(self):
        """This model's profile (pmem.models.profiles): a registered one found by its file's stem,
        else one of its own, its dimension measured from the file and the rest defaults."""
        from .profiles import for_model

        return for_model(self.name, self.dim)

    def __init__(self, path: Path | str, threads: int = 0, max_tokens: int = 512, pack_tokens: int = 128):
        from .loading import default_threads, open_gguf_bindings  # ctypes: not for a command the server embeds for

        path, lib = open_gguf_bindings(path)  # the C API alone (loading.open_gguf_bindings: 0.1 s less)
        self._lib = lib
        self.path = path
        self.name = path.stem
        self._model = self._ctx = self._batch = None
        threads = threads or default_threads()
        self._model = self._load_model(path)
        self._ctx = self._context(path, threads, max_tokens, lib.LLAMA_POOLING_TYPE_UNSPECIFIED)
        if lib.llama_pooling_type(self._ctx) == lib.LLAMA_POOLING_TYPE_NONE:
            # The GGUF does not say how to pool: mean pooling is the sentence-embedding default.
            lib.llama_free(self._ctx)
            self._ctx = self._context(path, threads, max_tokens, lib.LLAMA_POOLING_TYPE_MEAN)
        if lib.llama_pooling_type(self._ctx) == lib.LLAMA_POOLING_TYPE_RANK:
            self.close()
            raise ModelError(f"{path.name} is a reranker, not an embedding model")
        self.dim = int(lib.llama_model_n_embd(self._model))
        n_batch = int(lib.llama_n_batch(self._ctx))
        self._n_batch = n_batch
        self._n_seq = int(lib.llama_n_seq_max(self._ctx))
        self._vocab = lib.llama_model_get_vocab(self._model)
        train = int(lib.llama_model_n_ctx_train(self._model)) or max_tokens
        self.max_tokens = min(max_tokens, train, n_batch)
        self._pack = max(1, min(pack_tokens, n_batch))
        self._batch = lib.llama_batch_init(n_batch, 0, 1)
        self._lock = threading.Lock()  # one llama context: one batch at a time
        self.threads = threads
        self._n_threads = threads  # what the context runs with now (embed's `threads` changes it)
        # calls of many texts through pmem.models.bert_int8 (a BERT GGUF's layers in int8): None
        # until one asks, False where it cannot run; `int8_bulk` from the setting embed_bulk
        self.int8_layers: "BertInt8 | bool | None" = None
        self.int8_bulk = True
        self.int8_calls = 0  # calls that ran in int8: a store marks their vectors (pmem.store.refine)

    _backend: list[bool] = []  # llama_backend_init, once per process

    def _load_model(self, path: Path):
        """The weights, as llama_cpp.Llama() would load them for pmem (no GPU layers, extra
        buffer types off: loading.EXTRA_BUFFER_TYPES), memory-mapped."""
        from .loading import EXTRA_BUFFER_TYPES, load_error, log_state

        lib = self._lib
        if not self._backend:
            lib.llama_backend_init()
            self._backend.append(True)
        params = lib.llama_model_default_params()
        params.n_gpu_layers = 0
        if "use_extra_bufts" in {name for name, _ in type(params)._fields_}:
            params.use_extra_bufts = EXTRA_BUFFER_TYPES
        log_state["errors"] = []
        model = lib.llama_model_load_from_file(str(path).encode("utf-8"), params)
        if not model:
            raise ModelError(f"cannot load {path.name}: {load_error(ValueError('failed to load model'))}")
        return model

    def _context(self, path: Path, threads: int, n_ctx: int, pooling: int):
        """A context of what Llama(embedding=True) makes: one batch of n_ctx tokens in one ubatch
        (non-causal models need a whole batch in one), as many sequences as fit."""
        from .loading import load_error, log_state

        lib = self._lib
        params = lib.llama_context_default_params()
        params.n_ctx = params.n_batch = params.n_ubatch = n_ctx
        params.n_threads = params.n_threads_batch = threads
        params.pooling_type = pooling
        params.embeddings = True
        params.n_seq_max = min(n_ctx, int(lib.llama_max_parallel_sequences()))
        fields = {name for name, _ in type(params)._fields_}
        if "kv_unified" in fields:
            params.kv_unified = True
        if "flash_attn_type" in fields:
            params.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
        log_state["errors"] = []
        ctx = lib.llama_init_from_model(self._model, params)
        if not ctx:
            self.close()
            raise ModelError(f"cannot load {path.name}: {load_error(ValueError('failed to create a context'))}")
        return ctx

    def tokenize(self, text: str) -> list[int]:
        """Model tokens with [CLS]/[SEP] (or BOS/EOS) added, cut to the context size."""
        lib = self._lib
        data = text.encode("utf-8", "replace")
        room = len(data) + 8  # a token takes a byte at least; the specials added
        buf = (lib.llama_token * room)()
        n = lib.llama_tokenize(self._vocab, data, len(data), buf, room, True, False)
        if n < 0:  # never for WordPiece, but the API allows it: -n is the room needed
            room = -n
            buf = (lib.llama_token * room)()
            n = lib.llama_tokenize(self._vocab, data, len(data), buf, room, True, False)
        tokens = list(buf[:max(n, 0)])
        if not tokens:
            tokens = [max(0, int(lib.llama_vocab_bos(self._vocab)))]
        if len(tokens) > self.max_tokens:
            tokens = tokens[: self.max_tokens - 1] + tokens[-1:]
        return tokens

    def embed(self, texts: list[str], threads: int = 0, pack_tokens: int = 0) -> list[list[float]]:
        """`threads` and `pack_tokens`, for this call only (0: the model's own): a caller that
        knows better than the load average (one query beside another model's forward pass) or
        embeds short texts in bulk (bigger packs, bigger matrix products) says so."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a list of texts")
        pack = max(1, min(pack_tokens, self._n_batch)) if pack_tokens else self._pack
        with self._lock:
            seqs = [self.tokenize(t) for t in texts]
            # many texts (a fill, an import's second vectors) in int8, as e5's bulk calls; a search's one never
            if self.int8_bulk and len(seqs) > 1 and sum(map(len, seqs)) >= BULK_TOKENS and self.int8_ready():
                self.int8_calls += 1
                return self.int8_layers.embed(seqs).tolist()  # type: ignore[union-attr]
            self._use_threads(threads or self.threads)
            return self._encode_all(seqs, pack)

    def _encode_all(self, seqs: list[list[int]], pack: int) -> list[list[float]]:
        """llama.cpp's unit vectors of token lists, in packs of at most `pack` tokens (the caller
        holds the lock)."""
        out: list[list[float]] = []
        group: list[list[int]] = []
        used = 0
        for tokens in seqs:
            if group and (used + len(tokens) > pack or len(group) >= self._n_seq):
                out.extend(self._encode(group))
                group, used = [], 0
            group.append(tokens)
            used += len(tokens)
        if group:
            out.extend(self._encode(group))
        return out

    def use_int8(self, on: bool) -> None:
        """Whether calls of many texts may run in int8 (the setting embed_bulk, passed by the store)."""
        self.int8_bulk = bool(on)

    def int8_ready(self) -> bool:
        if self.int8_layers is None:
            self.int8_layers = False
            from . import bert_int8, e5_int8

            if e5_int8.enabled():  # BertInt8 reads the file once and refuses another kind of GGUF
                try:
                    self.int8_layers = bert_int8.BertInt8(self.path, self.tokenize, self._reference)
                except Exception:  # noqa: BLE001  # a GGUF, runtime or graph it cannot run (refused): llama.cpp
                    self.int8_layers = False
        return bool(self.int8_layers)

    def _reference(self, seqs: list[list[int]]):
        """llama.cpp's vectors of token lists as a numpy array: what the int8 graph is measured against."""
        import numpy as np

        return np.array(self._encode_all(seqs, self._pack), np.float32)

    def _use_threads(self, n: int) -> None:
        if n != self._n_threads:  # a context's threads change per call; nothing is reloaded
            self._lib.llama_set_n_threads(self._ctx, n, n)
            self._n_threads = n

    def _encode(self, group: list[list[int]]) -> list[list[float]]:
        lib, batch = self._lib, self._batch
        k = 0
        for seq, tokens in enumerate(group):
            for pos, tok in enumerate(tokens):
                batch.token[k] = tok
                batch.pos[k] = pos
                batch.n_seq_id[k] = 1
                batch.seq_id[k][0] = seq
                batch.logits[k] = True
                k += 1
        batch.n_tokens = k
        rc = lib.llama_encode(self._ctx, batch)
        if rc != 0:
            raise ModelError(f"{self.name}: llama.cpp could not embed this batch (code {rc})")
        vectors = []
        for seq in range(len(group)):
            ptr = lib.llama_get_embeddings_seq(self._ctx, seq)
            if not ptr:
                raise ModelError(f"{self.name}: llama.cpp returned no pooled embedding")
            vec = ptr[: self.dim]
            norm = math.sqrt(sum(v * v for v in vec)) or 1.0
            vectors.append([v / norm for v in vec])
        return vectors

    def close(self) -> None:
        lib = getattr(self, "_lib", None)
        if lib is None:
            return
        if getattr(self, "_batch", None) is not None:
            lib.llama_batch_free(self._batch)
            self._batch = None
        if getattr(self, "_ctx", None) is not None:
            lib.llama_free(self._ctx)
            self._ctx = None
        if getattr(self, "_model", None) is not None:
            lib.llama_model_free(self._model)
            self._model = None

    def __del__(self):  # pragma: no cover - best effort at interpreter exit
        try:
            self.close()
        except Exception:
            pass


# --- memories embedded as queries ---------------------------------------------------------


class SymmetricEmbedder:
    """A query-aware model (e5) whose stored texts are embedded as search queries too: e5's
    authors advise "query: " on both sides for symmetric tasks, and a question against a short
    memory in other words is one (docs/decisions/0016-one-prefix-both-sides.md). Its own
    `name`, so that a store's vectors say which scheme made them; the query vectors are the
    model's own, so a store of its passage vectors keeps searching until `pmem reindex`."""

    query_aware = False  # every text is embedded one way: nothing to tell it

    def __init__(self, inner: Embedder, name: str):
        self.inner, self.name, self.dim = inner, name, inner.dim
        self.remote = bool(getattr(inner, "remote", False))  # a `pmem serve` client underneath

    def embed(self, texts: list[str], query: bool = False) -> list[list[float]]:
        return self.inner.embed(texts, query=True)  # type: ignore[call-arg]  # query_aware models take it

    def local(self) -> "SymmetricEmbedder":
        """The same scheme over the model loaded in this process (bulk work; see pmem.models.serve)."""
        return SymmetricEmbedder(self.inner.local(), self.name)  # type: ignore[attr-defined]


# --- choosing one -------------------------------------------------------------------------

_FAKE = re.compile(r"^fake(?:-(\d+))?$")


def is_fake(spec: str) -> bool:
    """Whether `spec` names the built-in fake embedder ("fake", "fake-N"), which needs no file."""
    return bool(_FAKE.match(spec.strip()))


def load_model_file(path: Path | str, threads: int = 0) -> Embedder:
    """The embedder for a provisioned model file, in this process: pmem's numpy engine for an
    E5S1 file (multilingual-e5-small), llama.cpp for a GGUF. The one loading path for commands and
    for `pmem serve`, so the server holds whatever model a command would load."""
    if Path(path).suffix == ".e5s1":
        from .e5 import E5Embedder

        return E5Embedder(path, threads=threads)
    return LlamaEmbedder(path, threads=threads)


def _local(key: tuple[str, int], cache: ModelCache) -> Embedder:
    """The model of `key` (resolved path, threads) loaded in this process, once."""
    with cache.loading(key):
        if key not in cache.embedders:
            cache.embedders[key] = load_model_file(key[0], threads=key[1])
        return cache.embedders[key]


def load_model_file_once(path: Path | str, threads: int = 0, *, cache: ModelCache | None = None) -> Embedder:
    """`load_model_file`, once per `cache` (default: the process's): the loader of `pmem serve`, so
    that a store it opens for a hook (load_embedder with server="never" and the server's threads)
    embeds with the very model it serves, not a second copy."""
    return _local((str(Path(path).resolve()), threads), given(cache))


def load_embedder(spec: str, models_dir: Path | str | None = None, threads: int = 0,
                  server: str = "never", idle_minutes: float = 15.0, *,
                  cache: ModelCache | None = None) -> Embedder:
    """"fake" / "fake-N" for tests; otherwise a known model name or a GGUF path (one per process).

    server="auto": when `pmem serve` is running, the model stays in that process and only texts
    and vectors cross its socket (see pmem.models.serve); when none answers, this process loads the model
    and starts a server in the background for the commands after it, which leaves after
    `idle_minutes` without a request. "always": the same, and that server stays until stopped.
    "never" (the default here: a library caller opts in): always load the model here. A server
    that does not answer within serve.first_wait() is not waited for: the model loads here.
    A scheme that embeds memories as queries (provision.memories_as_queries) wraps the model of
    its file in a SymmetricEmbedder; the model itself is loaded, or served, once for both.
    What is loaded is kept in `cache` (pmem.models.cache; default: the process's own)."""
    match = _FAKE.match(spec.strip())
    if match:
        return FakeEmbedder(int(match.group(1) or 64))
    from ..config import check_choice  # the one place a setting's choices (and old names) are checked
    from .provision import memories_as_queries, resolve_model

    server = check_choice("server", server)

    cache = given(cache)
    path = resolve_model(spec, "embed", models_dir)
    inner = _load_path(path, threads, server, idle_minutes, cache)
    if not memories_as_queries(spec):
        return inner
    from .provision import known_models

    name = next(n for n in known_models() if n.lower() == spec.strip().lower())
    with cache.lock:
        key = (name, id(inner))
        if key not in cache.symmetric:
            cache.symmetric[key] = SymmetricEmbedder(inner, name)
        return cache.symmetric[key]


STARTING_S = 60.0  # a server launched this long ago may still be loading its models


def _first_start(sock: str, cache: ModelCache) -> bool:
    """Whether to launch a server for `sock` now: not when this process launched one within
    STARTING_S (e5 and MiniLM load on two threads at once in a cold English search, each finding
    no server; two servers were launched for one home)."""
    import time

    with cache.lock:
        now = time.monotonic()
        if now - cache.started.get(sock, -STARTING_S) < STARTING_S:
            return False
        cache.started[sock] = now
        return True


def _load_path(path: Path, threads: int, server: str, idle_minutes: float, cache: ModelCache) -> Embedder:
    """The model file at `path`, loaded here once per cache, or served (load_embedder)."""
    key = (str(Path(path).resolve()), threads)
    loaded = cache.embedders
    with cache.loading(key):
        if key in loaded:
            return loaded[key]
        if server == "never":
            loaded[key] = load_model_file(key[0], threads=key[1])
            return loaded[key]
        from . import serve

        # The client gets its local fallback injected (pmem.models.serve never imports this module):
        # when the server stops answering, the model loads here, exactly as with server="never".
        found, how = serve.connect(Path(key[0]), threads, fallback=lambda: _local(key, cache),
                                   local=lambda: load_model_file(key[0], threads=key[1]))
        if how == "server":
            return found
        if how in ("none", "other") and _first_start(str(serve.socket_path()), cache):
            import sys

            word = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1].isalpha() else ""  # search, add, mcp, hook
            by = f"pmem {word}".strip()
            serve.start_in_background(None if server == "always" else idle_minutes, by=by)
        loaded[key] = found if how == "local" else load_model_file(key[0], threads=key[1])
        return loaded[key]

"""Chat models that answer in JSON: the Generator protocol and the llama.cpp GGUF generator.

Small local models fail at JSON in free text (the classic silent failure of memory tools), so
every answer is constrained by a grammar built from a JSON schema: the model can only produce
text that parses. Parsing is still checked, and a bad answer is retried before it becomes an
ExtractionError. llama_cpp is imported only when a model is loaded.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .errors import ExtractionError, ModelError
from .loading import default_threads

if TYPE_CHECKING:
    from .config import Settings

# Models at least this large may rewrite spans into third-person facts and judge conflicts;
# smaller ones only choose and label spans of the source (see extract.py).
STRONG_PARAMS = 1_000_000_000


@runtime_checkable
class Generator(Protocol):
    name: str

    def generate_json(self, messages: list[dict], schema: dict, max_tokens: int = 256) -> dict:
        """One JSON object that fits `schema`, or ExtractionError."""
        ...


class JsonGenerator:
    """Retry and parse logic shared by real generators; subclasses implement `_complete`."""

    name = "generator"
    strong = False  # may write facts and judge conflicts
    chooses = False  # may say which sentences hold no fact ("none"), not only label them
    retries = 2  # attempts after the first

    def _complete(self, messages: list[dict], schema: dict, max_tokens: int, attempt: int) -> str:
        raise NotImplementedError

    def generate_json(self, messages: list[dict], schema: dict, max_tokens: int = 256) -> dict:
        problem = "no answer"
        for attempt in range(1 + self.retries):
            text = self._complete(messages, schema, max_tokens, attempt)
            try:
                value = json.loads(text)
            except (json.JSONDecodeError, TypeError):
                # Usually an answer cut off at max_tokens: give the next try more room.
                problem = "output that is not JSON" if len(text or "") < max_tokens else "truncated JSON"
                max_tokens = int(max_tokens * 1.5)
                continue
            if isinstance(value, dict):
                return value
            problem = f"a JSON {type(value).__name__} instead of an object"
        raise ExtractionError(f"{self.name} returned {problem} after {1 + self.retries} tries")


class LlamaGenerator(JsonGenerator):
    """A GGUF chat model run by llama.cpp on the CPU, with its own chat template."""

    def __init__(self, path: Path | str, threads: int = 0, n_ctx: int = 4096):
        from .loading import load_error, log_state, open_gguf

        path, llama_cpp = open_gguf(path)
        self._lib = llama_cpp
        self.path = path
        self.name = path.stem
        threads = threads or default_threads()
        log_state["errors"] = []
        try:
            self._llm = llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_threads=threads,
                                        n_threads_batch=threads, n_gpu_layers=0, verbose=False)
        except (ValueError, RuntimeError, OSError) as exc:
            raise ModelError(f"cannot load {path.name}: {load_error(exc)}") from None
        self.n_ctx = n_ctx
        self.params = int(llama_cpp.llama_model_n_params(self._llm.model))
        self.strong = self.chooses = self.params >= STRONG_PARAMS
        self._grammars: dict[str, Any] = {}
        self._lock = threading.Lock()  # one llama context: one completion at a time

    def count_tokens(self, text: str) -> int:
        return len(self._llm.tokenize(text.encode("utf-8", "replace"), add_bos=False, special=False))

    def _grammar(self, schema: dict):
        key = json.dumps(schema, sort_keys=True)
        if key not in self._grammars:
            from llama_cpp.llama_grammar import LlamaGrammar

            self._grammars[key] = LlamaGrammar.from_json_schema(key, verbose=False)
        return self._grammars[key]

    def _complete(self, messages: list[dict], schema: dict, max_tokens: int, attempt: int) -> str:
        # Greedy first (reproducible); a retry samples a little so it does not repeat the failure.
        with self._lock:
            try:
                result = self._llm.create_chat_completion(
                    messages=messages, grammar=self._grammar(schema), max_tokens=max_tokens,
                    temperature=0.0 if attempt == 0 else 0.4, seed=attempt, repeat_penalty=1.1)
            except ValueError as exc:  # e.g. the prompt does not fit the context
                raise ExtractionError(f"{self.name}: {str(exc).splitlines()[0]}") from None
        return result["choices"][0]["message"].get("content") or ""

    def close(self) -> None:
        if getattr(self, "_llm", None) is not None:
            self._llm.close()
            self._llm = None


_cache: dict[str, LlamaGenerator] = {}
_cache_lock = threading.Lock()


def load_generator(spec: str | None = None, models_dir: Path | str | None = None, threads: int | None = None,
                   mode: str | None = None, *, settings: "Settings | None" = None) -> Generator:
    """A chat model (one instance per GGUF file and process).

    Args:
        spec: a known model name or a GGUF path (default: `settings.chat_model`).
        models_dir: where known models are provisioned (default paths.models_dir()).
        threads: CPU threads (default `settings.threads`; 0 picks by load).
        mode: `extract_mode`: "label" lets the model only label sentences the rules chose;
            "rewrite" lets it choose and rewrite sentences and judge conflicts; "auto" decides by
            size (STRONG_PARAMS). Every fact still goes through the grounding gate either way.
        settings: where the defaults come from (a store passes `store.config`); without it, the
            built-in defaults. The config file is never read here.

    Returns:
        The Generator. Raises UsageError for an unknown mode, ModelError when the model cannot be
        found, fetched or loaded.
    """
    from .config import Settings, check_choice
    from .provision import resolve_model

    settings = settings if settings is not None else Settings()
    spec = spec or settings.chat_model
    threads = threads if threads is not None else settings.threads
    mode = check_choice("extract_mode", mode if mode is not None else settings.extract_mode)
    path = resolve_model(spec, "chat", models_dir)
    key = str(Path(path).resolve())
    with _cache_lock:
        if key not in _cache:
            _cache[key] = LlamaGenerator(path, threads=threads)
        gen = _cache[key]
    gen.strong = gen.chooses = (gen.params >= STRONG_PARAMS) if mode == "auto" else (mode == "rewrite")
    return gen

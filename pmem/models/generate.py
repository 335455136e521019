"""Chat models that answer in JSON: the Generator protocol and the llama.cpp GGUF generator.

Small local models fail at JSON in free text (the classic silent failure of memory tools), so
every answer is constrained by a grammar built from a JSON schema: the model can only produce
text that parses. Parsing is still checked, and a bad answer is retried before it becomes an
ExtractionError. llama_cpp is imported only when a model is loaded.
"""

from __future__ import annotations

import json
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol, runtime_checkable

from ..errors import ExtractionError, ModelError
from .cache import ModelCache, given
from .loading import default_threads

if TYPE_CHECKING:
    from ..config import Settings

# Models at least this large may rewrite spans into third-person facts and judge conflicts;
# smaller ones only choose and label spans of the source (see extract.py).
STRONG_PARAMS = 1_000_000_000
REPEAT_PENALTY = 1.1  # over the last 64 tokens of an answer (llama-cpp-python's last_n_tokens_size)
# Contexts of one model answering at once, one thread each (LlamaGenerator.lanes), for models under
# LANE_PARAMS: a one-token decode of the 135M model keeps one core busy ~8 ms whatever the threads
# (decision 0067), and a larger model's context costs more memory than a lane earns.
LANES_MAX = 4
LANE_PARAMS = 1_000_000_000


@runtime_checkable
class Generator(Protocol):
    name: str

    def generate_json(self, messages: list[dict], schema: dict, max_tokens: int = 256) -> dict:
        """One JSON object that fits `schema`, or ExtractionError."""
        ...


class Runaway(ExtractionError):
    """An answer cut short in a loop of symbols (pmem.models.sampling.RUNAWAY): retried as a
    truncated one is."""


class JsonGenerator:
    """Retry and parse logic shared by real generators; subclasses implement `_complete`."""

    name = "generator"
    strong = False  # may write facts and judge conflicts
    chooses = False  # may say which sentences hold no fact ("none"), not only label them
    retries = 2  # attempts after the first

    def _complete(self, messages: list[dict], schema: dict, max_tokens: int, attempt: int) -> str:
        raise NotImplementedError

    def generate_json(self, messages: list[dict], schema: dict, max_tokens: int = 256) -> dict:
        return self._tries(lambda tokens, attempt: self._complete(messages, schema, tokens, attempt), max_tokens)

    def _tries(self, complete: Callable[[int, int], str], max_tokens: int) -> dict:
        """The first answer of `complete(max_tokens, attempt)` that parses as a JSON object."""
        problem = "no answer"
        for attempt in range(1 + self.retries):
            try:
                text = complete(max_tokens, attempt)
            except Runaway:  # cut short in a loop of symbols: the next try samples, with more room
                problem = "a loop of symbols"
                max_tokens = int(max_tokens * 1.5)
                continue
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
        from .loading import llama, load_error, log_state, open_gguf

        path, llama_cpp = open_gguf(path)
        self._lib = llama_cpp
        self.path = path
        self.name = path.stem
        threads = threads or default_threads()
        log_state["errors"] = []
        try:
            self._llm = llama(llama_cpp, model_path=str(path), n_ctx=n_ctx, n_threads=threads,
                              n_threads_batch=threads, n_gpu_layers=0, verbose=False)
        except (ValueError, RuntimeError, OSError) as exc:
            raise ModelError(f"cannot load {path.name}: {load_error(exc)}") from None
        self.n_ctx = n_ctx
        self.params = int(llama_cpp.llama_model_n_params(self._llm.model))
        self.strong = self.chooses = self.params >= STRONG_PARAMS
        self._grammars: dict[str, Any] = {}
        # llama contexts of this model, each answering one prompt at a time: the first always,
        # more while lanes() asks for them (one thread each)
        self._lanes: list[Any] = [self._llm]
        self._idle: list[Any] = [self._llm]
        self._turn = threading.Condition()
        self._stats_lock = threading.Lock()
        # what this model was asked in this process: calls, tokens in and out, and how many tokens
        # the grammar checked alone or had to mask the whole vocabulary for (benchmarks read it)
        # the prompt tokens llama.cpp evaluated (prompt_evaluated: the rest came from the KV cache)
        self.stats = dict.fromkeys(("calls", "prompt_tokens", "prompt_evaluated", "completion_tokens",
                                    "tokens_checked", "tokens_masked", "runaways"), 0)

    @property
    def llama(self) -> Any:
        """The llama-cpp-python `Llama` this generator completes with (benchmarks and tests ask it
        for prompts' tokens: `prompt_of`)."""
        return self._llm

    def lanes(self, n: int) -> int:
        """Up to `n` (at most LANES_MAX) contexts of this model that answer at once, one thread
        each; how many there are. One for a model of LANE_PARAMS or more, or where another
        context cannot be made. `release_lanes()` gives the others back."""
        from .loading import llama

        n = max(1, min(n, LANES_MAX)) if self.params < LANE_PARAMS else 1
        with self._turn:
            while len(self._lanes) < n:
                try:
                    llm = llama(self._lib, model_path=str(self.path), n_ctx=self.n_ctx, n_threads=1,
                                n_threads_batch=1, n_gpu_layers=0, verbose=False)
                except (ValueError, RuntimeError, OSError):
                    break
                self._lanes.append(llm)
                self._idle.append(llm)
            if len(self._lanes) > 1:
                self._lib.llama_set_n_threads(self._llm.ctx, 1, 1)
            return len(self._lanes)

    @property
    def lane_threads(self) -> list[int]:
        """The threads each open context of this model runs, as llama.cpp counts them (the first
        context's first)."""
        with self._turn:
            return [int(self._lib.llama_n_threads(llm.ctx)) for llm in self._lanes]

    def release_lanes(self) -> None:
        """Back to the first context alone, with its own threads (waits for answers under way)."""
        with self._turn:
            if len(self._lanes) == 1:  # none opened: the first keeps its threads
                return
            while len(self._idle) < len(self._lanes):
                self._turn.wait()
            for llm in self._lanes[1:]:
                llm.close()
            self._lanes, self._idle = [self._llm], [self._llm]
            own = int(self._llm.context_params.n_threads)
            self._lib.llama_set_n_threads(self._llm.ctx, own, int(self._llm.context_params.n_threads_batch))

    @contextmanager
    def _lane(self) -> Iterator[Any]:
        """A context no other answer is using, for the length of the block."""
        with self._turn:
            while not self._idle:
                self._turn.wait()
            llm = self._idle.pop()
        try:
            yield llm
        finally:
            with self._turn:
                self._idle.append(llm)
                self._turn.notify()

    @staticmethod
    def _prepare(llm: Any, messages: list[dict], attempt: int) -> int:
        """`llm`'s KV cache made ready for `messages`; the prompt tokens llama.cpp will evaluate.

        The cache keeps only the prompt's frame (all before the last message's own text), read
        alone: every answer reads its text after the same cached frame, so neither what a context
        answered before nor which lane answers changes an answer (a prompt read in other pieces
        may give other logits in the last digits, and a greedy choice between two nearly equal
        tokens flips). A retry (`attempt` > 0) keeps the prompt it has just read. Where the chat
        handler cannot be asked (a user's own GGUF's), llama-cpp-python keeps what it keeps, and
        the count is 0 (a figure for benchmarks, never a reason to fail)."""
        try:
            tokens, _ = prompt_of(llm, messages)
            frame, _ = prompt_of(llm, [*messages[:-1], {**messages[-1], "content": ""}])
        except Exception:  # noqa: BLE001 - a handler that cannot be asked: nothing prepared
            return 0
        held = _common(llm._input_ids[:llm.n_tokens], tokens)
        if attempt > 0 and held >= len(tokens) - 1:
            return evaluated_after(llm, tokens)
        k = max(0, min(_common(frame, tokens), len(tokens) - 1))
        if 0 < k <= held and getattr(llm, "_pmem_frame", None) == tokens[:k]:
            llm.n_tokens = k
            return len(tokens) - k
        llm.reset()
        if k:
            llm.eval(tokens[:k])
        llm._pmem_frame = tokens[:k]
        return len(tokens)

    def count_tokens(self, text: str) -> int:
        return len(self._llm.tokenize(text.encode("utf-8", "replace"), add_bos=False, special=False))

    def _grammar(self, schema: dict):
        key = json.dumps(schema, sort_keys=True)
        if key not in self._grammars:
            from llama_cpp.llama_grammar import LlamaGrammar

            self._grammars[key] = LlamaGrammar.from_json_schema(key, verbose=False)
        return self._grammars[key]

    def generate_json(self, messages: list[dict], schema: dict, max_tokens: int = 256) -> dict:
        with self._lane() as llm:  # a retry in the context that has just read the prompt
            return self._tries(lambda tokens, attempt: self.complete(messages, schema, tokens, attempt, llm=llm),
                               max_tokens)

    def _complete(self, messages: list[dict], schema: dict, max_tokens: int, attempt: int) -> str:
        return self.complete(messages, schema, max_tokens, attempt)

    def complete(self, messages: list[dict], schema: dict, max_tokens: int = 256, attempt: int = 0, *,
                 grammar: str = "first-try", fresh: bool = False, llm: Any = None) -> str:
        """One answer's raw text. Attempt 0 is greedy (reproducible); a retry samples a little so
        it does not repeat the failure.

        `grammar`: "first-try" (GrammarFirstTry: the grammar checked for the chosen token alone
        where it can be, the same answer) or "chain" (llama.cpp's grammar sampler in its chain,
        over the whole vocabulary at every token: what pmem did before, the reference the first is
        held to; it does not end loops of symbols). `fresh`: from an empty KV cache (the frame
        read again, then the rest: the same answer, every token of the prompt counted as
        evaluated; `_prepare`). `llm`: the context to answer in (one `_lane()` gave); by default
        a free one."""
        if llm is None:
            with self._lane() as free:
                return self.complete(messages, schema, max_tokens, attempt, grammar=grammar, fresh=fresh, llm=free)
        from llama_cpp import LogitsProcessorList

        from .sampling import RUNAWAY, GrammarFirstTry

        greedy = attempt == 0
        sampler = None
        try:
            if fresh:
                llm.reset()
                llm._pmem_frame = None
            evaluated = self._prepare(llm, messages, attempt)
            if grammar == "chain":
                result = llm.create_chat_completion(
                    messages=messages, grammar=self._grammar(schema), max_tokens=max_tokens,
                    temperature=0.0 if greedy else 0.4, seed=attempt, repeat_penalty=REPEAT_PENALTY)
            else:
                sampler = GrammarFirstTry(self._lib, llm, self._grammar(schema), greedy=greedy,
                                          penalty=REPEAT_PENALTY, last_n=llm.last_n_tokens_size)
                try:
                    result = llm.create_chat_completion(
                        messages=messages, max_tokens=max_tokens, temperature=0.0 if greedy else 0.4,
                        seed=attempt, repeat_penalty=1.0, logits_processor=LogitsProcessorList([sampler]))
                finally:
                    sampler.close()
        except ValueError as exc:  # e.g. the prompt does not fit the context
            raise ExtractionError(f"{self.name}: {str(exc).splitlines()[0]}") from None
        usage = result.get("usage", {})
        with self._stats_lock:
            self.stats["calls"] += 1
            self.stats["prompt_tokens"] += int(usage.get("prompt_tokens", 0))
            self.stats["prompt_evaluated"] += evaluated
            self.stats["completion_tokens"] += int(usage.get("completion_tokens", 0))
            if sampler is not None:
                self.stats["tokens_checked"] += sampler.checks
                self.stats["tokens_masked"] += sampler.masks
                self.stats["runaways"] += int(sampler.runaway)
        if sampler is not None and sampler.runaway:  # cut short (sampling.RUNAWAY); generate_json retries it
            raise Runaway(f"{self.name} wrote {RUNAWAY} tokens in a row without a letter or digit")
        return result["choices"][0]["message"].get("content") or ""

    def close(self) -> None:
        if getattr(self, "_llm", None) is not None:
            for llm in self._lanes:
                llm.close()
            self._llm = None
            self._lanes, self._idle = [], []


class _Captured(Exception):
    pass


class _Capture:
    """Stands in for the Llama object before its chat handler: takes what the handler asks it to
    complete (the prompt's tokens, the stop strings) without completing it."""

    verbose = False

    def __init__(self, llm: Any):
        self._llm = llm

    def tokenize(self, *args: Any, **kwargs: Any) -> list[int]:
        return self._llm.tokenize(*args, **kwargs)

    def create_completion(self, **kwargs: Any) -> None:
        raise _Captured(kwargs)


def prompt_of(llm: Any, messages: list[dict]) -> tuple[list[int], list[bytes]]:
    """The prompt tokens and the stop strings `llm.create_chat_completion(messages=...)` completes
    (its chat handler asked, the model not run)."""
    from llama_cpp import llama_chat_format

    handler = (llm.chat_handler or llm._chat_handlers.get(llm.chat_format)
               or llama_chat_format.get_chat_completion_handler(llm.chat_format))
    try:
        handler(llama=_Capture(llm), messages=messages)
    except _Captured as got:
        kwargs = got.args[0]
    else:  # pragma: no cover - every handler ends in create_completion
        raise ModelError("the chat handler asked for no completion")
    stop = kwargs.get("stop") or []
    return list(kwargs["prompt"]), [s.encode("utf-8") for s in ([stop] if isinstance(stop, str) else stop)]


def _common(a: Any, b: list[int]) -> int:
    """How many tokens `a` and `b` start with alike."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def evaluated_after(llm: Any, tokens: list[int]) -> int:
    """How many of `tokens` llama-cpp-python's generate() evaluates after what `llm`'s context
    holds: it keeps the longest common start, and a prompt held whole has its last token again."""
    n = _common(llm._input_ids[:llm.n_tokens], tokens)
    if n == len(tokens):
        n -= 1
    return len(tokens) - max(n, 0)


def load_generator(spec: str | None = None, models_dir: Path | str | None = None, threads: int | None = None,
                   mode: str | None = None, *, settings: "Settings | None" = None,
                   cache: ModelCache | None = None) -> Generator:
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
        cache: where the loaded model is kept (pmem.models.cache; default: the process's own).

    Returns:
        The Generator. Raises UsageError for an unknown mode, ModelError when the model cannot be
        found, fetched or loaded.
    """
    from ..config import Settings, check_choice
    from .provision import resolve_model

    settings = settings if settings is not None else Settings()
    spec = spec or settings.chat_model
    threads = threads if threads is not None else settings.threads
    mode = check_choice("extract_mode", mode if mode is not None else settings.extract_mode)
    path = resolve_model(spec, "chat", models_dir)
    key = str(Path(path).resolve())
    cache = given(cache)
    with cache.generator_lock:
        if key not in cache.generators:
            check_runs(path, threads=threads, cache=cache)  # a native crash would end this process: a child first
            cache.generators[key] = LlamaGenerator(path, threads=threads)
        gen = cache.generators[key]
    gen.strong = gen.chooses = (gen.params >= STRONG_PARAMS) if mode == "auto" else (mode == "rewrite")
    return gen


# --- a child process runs the model first --------------------------------------------------
#
# A llama.cpp build can die on a CPU (issue: the AMX kernels of a native build on some Xeons,
# SIGSEGV in decode). A signal cannot be caught in Python, so before the first load in a process
# a child runs the model once; its verdict is cached per model file, llama.cpp build and host.

class ModelCrash(ModelError):
    """llama.cpp died by a signal running a model in a child process: loading it here would kill
    this process the same way."""


# The portable build: no -march=native, so no AMX kernels (README: Install, last resort).
REBUILD = ('CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON" '
           'pip install --force-reinstall --no-cache-dir --no-deps llama-cpp-python')
PROBE_TIMEOUT = 180.0  # seconds: a 135M model answers in 1-2 s; a 7B one on a busy CPU can take a minute
PROBE_SIGNAL_ENV = "PMEM_TEST_PROBE_SIGNAL"  # tests: the child kills itself with this signal after loading
_CHECKS_FILE = ".runs-here.json"  # in the models directory, beside the files it vouches for

_CHILD = """
import os, signal, sys
from pmem.models.generate import LlamaGenerator, PROBE_SIGNAL_ENV
g = LlamaGenerator(sys.argv[1], threads=int(sys.argv[2]))
if os.environ.get(PROBE_SIGNAL_ENV):
    os.kill(os.getpid(), getattr(signal, os.environ[PROBE_SIGNAL_ENV]))
g._complete([{"role": "user", "content": "Is water wet? Answer in JSON."}],
            {"type": "object", "properties": {"yes": {"type": "boolean"}}, "required": ["yes"]}, 8, 0)
sys.stdout.flush()
os._exit(0)  # the verdict is the decode above; llama.cpp's teardown is not part of it
"""


def crash_message(model: str, signal_name: str) -> str:
    """The one line a person gets when llama.cpp dies running `model`."""
    return (f"the chat model {model} crashed llama.cpp on this CPU ({signal_name}); "
            f"rebuild llama-cpp-python for a portable instruction set: {REBUILD}")


def probe(path: Path | str, threads: int = 0) -> tuple[bool, str | None]:
    """Run the chat model at `path` once (load, a few tokens) in a child process.

    Returns (conclusive, signal): (True, None) when it ran; (True, "SIGSEGV") when a signal
    killed it; (False, None) when it failed otherwise (a load in this process then reports the
    error in its own words) or ran out of time."""
    import signal
    import subprocess
    import sys

    env = dict(os.environ)
    # The child imports this very pmem, wherever it was imported from.
    root = str(Path(__file__).resolve().parents[2])  # above pmem/models/
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        proc = subprocess.run([sys.executable, "-c", _CHILD, str(path), str(threads or default_threads())],
                              env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=PROBE_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired):
        return False, None
    if proc.returncode >= 0:
        return proc.returncode == 0, None
    try:
        return True, signal.Signals(-proc.returncode).name
    except ValueError:
        return True, f"signal {-proc.returncode}"


def _build_key(path: Path) -> str | None:
    """What the verdict on `path` depends on: the file, the llama.cpp build, the host. None when
    llama-cpp-python is not installed (the load then says so)."""
    import importlib.util
    import platform

    spec = importlib.util.find_spec("llama_cpp")  # finds it without importing it
    if spec is None or not spec.origin:
        return None
    parts = [str(path.resolve())]
    try:
        st = path.stat()
        parts.append(f"{st.st_size}:{st.st_mtime_ns}")
        lib = Path(spec.origin).parent / "lib"
        for f in sorted(lib.iterdir()) if lib.is_dir() else [Path(spec.origin)]:
            st = f.stat()
            parts.append(f"{f.name}:{st.st_size}:{st.st_mtime_ns}")
    except OSError:
        return None
    parts.append(platform.node())
    if os.environ.get(PROBE_SIGNAL_ENV):  # a test's crash is not this machine's verdict
        parts.append("test:" + os.environ[PROBE_SIGNAL_ENV])
    return "|".join(parts)


def _read_checks(file: Path) -> dict:
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_checks(file: Path, data: dict) -> None:
    from .. import paths

    try:
        paths.ensure_private_dir(file.parent)
        tmp = file.with_name(f"{file.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(tmp, file)
    except OSError:
        pass  # a cache: the next process asks a child again


def check_runs(path: Path | str, threads: int = 0, *, fresh: bool = False, cache: ModelCache | None = None) -> bool:
    """ModelCrash (one line: which model, which signal, the command that fixes it) when llama.cpp
    dies running the chat model at `path` on this machine. Asks a child process the first time for
    a model file and llama.cpp build (`fresh`: every time, for `pmem doctor`). Returns True when
    it ran, False when that is unknown (no llama-cpp-python, a load error, no answer in time).
    The verdict is kept in `cache` (default: the process's own) and in a file beside the model."""
    from .. import paths

    path = Path(path).expanduser()
    key = _build_key(path)
    if key is None:
        return False
    file = paths.models_dir() / _CHECKS_FILE
    cache = given(cache)
    verdicts = cache.verdicts
    with cache.verdict_lock:
        if not fresh and key not in verdicts:
            entry = _read_checks(file).get(key)
            if isinstance(entry, dict) and "signal" in entry:
                verdicts[key] = entry["signal"] if isinstance(entry["signal"], str) else None
        if fresh or key not in verdicts:
            conclusive, died = probe(path, threads)
            if not conclusive:
                return False
            verdicts[key] = died
            data = _read_checks(file)
            data = {k: v for k, v in data.items() if k.split("|", 1)[0] != key.split("|", 1)[0]}  # one per file
            data[key] = {"signal": died}
            _write_checks(file, data)
        died = verdicts[key]
    if died is not None:
        raise ModelCrash(crash_message(path.name, died))
    return True

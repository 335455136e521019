"""Loading GGUF files with llama.cpp, quietly: the glue the embedder and the generator share.

llama.cpp logs to stderr from C; inside the TUI that would write over the screen, and in a command
it buries the one line that matters. So its log goes nowhere, except error lines, which are kept in
`log_state["errors"]` for `load_error()` to turn a failed load into one readable line.

Nothing here imports llama_cpp until `open_gguf()` is called, so `import pmem` stays light.
"""

from __future__ import annotations

import ctypes
import math
import os
import threading
import time
from pathlib import Path

from ..errors import ModelError

_log_lock = threading.Lock()
# "callback": the ctypes callback handed to llama.cpp (kept referenced: C holds only a pointer);
# "errors": the error lines llama.cpp logged since a loader last cleared them.
log_state: dict = {"callback": None, "errors": []}


def _silence_llama_logs(llama_cpp) -> None:
    """Route llama.cpp's log to nowhere, keeping error lines for our own one-line message."""
    with _log_lock:
        if log_state["callback"] is not None:
            return

        @llama_cpp.llama_log_callback
        def _callback(level, text, user_data):  # pragma: no cover - called from C
            if level == 4 and text:  # GGML_LOG_LEVEL_ERROR
                line = text.decode("utf-8", "replace").strip()
                if line:
                    log_state["errors"].append(line)

        log_state["callback"] = _callback
        llama_cpp.llama_log_set(_callback, ctypes.c_void_p(0))


def load_error(exc: Exception) -> str:
    """The most telling line llama.cpp logged while failing to load, else the exception.

    Clear `log_state["errors"]` before the load this explains."""
    lines = log_state["errors"]
    for line in lines:
        if "error loading model:" in line:
            return line.split("error loading model:", 1)[1].strip()
    return lines[0] if lines else (str(exc).splitlines() or ["unknown error"])[0]


def check_gguf(path: Path) -> None:
    """ModelError unless `path` is a readable file that starts like a GGUF."""
    if not path.exists():
        raise ModelError(f"model file not found: {path}")
    if not path.is_file():
        raise ModelError(f"model path is not a file: {path}")
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise ModelError(f"cannot read model file {path}: {exc.strerror or exc}") from None
    if magic != b"GGUF":
        raise ModelError(f"not a GGUF file: {path}")


def open_gguf(path: Path | str):
    """Check a GGUF file and import llama_cpp (quietly) to run it: (path, llama_cpp module)."""
    path = Path(path).expanduser()
    check_gguf(path)
    try:
        import llama_cpp
    except ImportError:
        raise ModelError("llama-cpp-python is not installed; it is needed to run GGUF models") from None
    _silence_llama_logs(llama_cpp)
    return path, llama_cpp


_bindings_lock = threading.RLock()


def open_gguf_bindings(path: Path | str):
    """open_gguf for a caller of llama.cpp's C API alone (the embedder): (path, llama_cpp.llama_cpp).

    `import llama_cpp` runs the package's __init__, which imports the high-level `Llama`, its chat
    formats and jinja2: 0.1 s of CPU on top of the bindings' 0.025 s, in every cold English search
    and add (docs/decisions/0019-second-vector-cost.md). So where nothing has
    imported the package yet, it goes into sys.modules unexecuted and only its bindings module is
    run; the first name asked of the package itself (`llama_cpp.Llama`, by the generator) runs
    its __init__ then, so every other user sees the whole package."""
    path = Path(path).expanduser()
    check_gguf(path)
    try:
        low = _bindings()
    except ImportError:
        try:  # a package laid out otherwise: the whole of it, as open_gguf takes it
            import llama_cpp
            low = llama_cpp.llama_cpp
        except (ImportError, AttributeError):
            raise ModelError("llama-cpp-python is not installed; it is needed to run GGUF models") from None
    _silence_llama_logs(low)
    return path, low


def _bindings():
    import importlib.util
    import sys

    with _bindings_lock:
        if "llama_cpp" not in sys.modules:
            spec = importlib.util.find_spec("llama_cpp")
            if spec is None or spec.loader is None:
                raise ImportError("llama_cpp")
            package = importlib.util.module_from_spec(spec)
            loader = spec.loader

            def complete(name: str):
                with _bindings_lock:
                    if package.__dict__.pop("__getattr__", None) is not None:
                        loader.exec_module(package)
                return getattr(package, name)  # AttributeError where the package has no such name

            package.__dict__["__getattr__"] = complete
            sys.modules["llama_cpp"] = package
            try:
                import llama_cpp.llama_cpp as low
            except BaseException:
                sys.modules.pop("llama_cpp", None)
                raise
            return low
        import llama_cpp.llama_cpp as low

        return low



# llama.cpp's "extra buffer types" hold its repacked and AMX weight layouts. The AMX kernels of a
# natively built llama.cpp crash on some Intel Xeons (SIGSEGV in decode; SIGILL where the kernel
# does not grant AMX), so every model loads without them. What that costs was measured on and off:
# docs/decisions/0034-llama-extra-bufts.md.
EXTRA_BUFFER_TYPES = False
_params_lock = threading.Lock()


def llama(llama_cpp, **kwargs):
    """`llama_cpp.Llama(**kwargs)` with the model parameters pmem needs that `Llama()` does not
    take: `use_extra_bufts` off (EXTRA_BUFFER_TYPES). Llama() builds its parameters from
    `llama_model_default_params()`, so that is wrapped for the length of the load, under a lock
    (two loads at once must not see each other's wrapper). A llama-cpp-python without the field
    loads as it is."""
    low = llama_cpp.llama_cpp
    names = {name for name, _ in getattr(low.llama_model_params, "_fields_", ())}
    if "use_extra_bufts" not in names:
        return llama_cpp.Llama(**kwargs)
    with _params_lock:
        original = low.llama_model_default_params

        def defaults():
            params = original()
            params.use_extra_bufts = EXTRA_BUFFER_TYPES
            return params

        low.llama_model_default_params = defaults
        try:
            return llama_cpp.Llama(**kwargs)
        finally:
            low.llama_model_default_params = original


# Readings of the running count that default_threads averages, and the seconds between them: a
# look of ~3 ms at what runs now, where the 1-minute load average still shows a burst that ended
# (docs/decisions/0066-e5-data-parallel.md).
BUSY_SAMPLES = 4
BUSY_GAP = 0.001
LOADAVG = "/proc/loadavg"  # the running count, where Linux keeps it


def busy_now(samples: int = BUSY_SAMPLES, gap: float = BUSY_GAP) -> float | None:
    """Threads of other processes running or waiting for a core now: the kernel's running count
    (/proc/loadavg's fourth field) less this process's own running threads (pmem shares its cores
    among them itself: a MiniLM loading beside e5, pmem.store.english.BULK_SHARE), averaged over
    `samples` readings `gap` seconds apart. None where there is no such file (macOS, Windows)."""
    seen = 0
    for i in range(max(1, samples)):
        if i:
            time.sleep(gap)
        try:
            with open(LOADAVG, "rb") as f:
                running = int(f.read(256).split()[3].split(b"/")[0])
        except (OSError, ValueError, IndexError):
            return None
        seen += max(0, running - own_running())
    return seen / max(1, samples)


def own_running() -> int:
    """This process's threads in state R (running or ready to run), the asking one among them."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 1
    count = 0
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/stat", "rb") as f:
                stat = f.read(512)
        except OSError:
            continue  # a thread that has just ended
        end = stat.rfind(b")")  # the state follows the command name, which may hold anything
        count += stat[end + 2 : end + 3] == b"R"
    return max(1, count)


def default_threads(samples: int = BUSY_SAMPLES) -> int:
    """Threads for llama.cpp and e5 when the `threads` setting is 0: the cores that are idle now.

    llama.cpp's OpenMP threads spin while they wait, so a thread on a busy core stalls the rest:
    on this 2-core machine two threads were 1.5-2x faster than one when idle (embedding 77 vs 50
    texts/s, extraction 9 vs 15 s per 1k tokens) but 2-3x slower with the other core busy. So:
    all cores minus those busy now (`busy_now`: the threads running over the last few ms; the
    1-minute load average where the system has no /proc), at least half of them, at most 8.
    `samples` 1 reads the count once (`pmem serve`, before each request: no wait)."""
    cores = os.cpu_count() or 2
    load = busy_now(samples)
    if load is None:
        try:
            load = os.getloadavg()[0]
        except (AttributeError, OSError):  # no load average (Windows): be conservative
            load = cores / 2
    return max(1, min(8, max(cores // 2, math.ceil(cores - load))))

"""What one process has loaded, launched and learnt about its models, in one object that is passed in.

A model loads once per process (seconds, hundreds of MB), so the loaders keep what they loaded.
They keep it here, not in module globals: a store (`MemoryStore(models=...)`), `pmem serve` and the
loaders take a ModelCache, and the CLI, which is one process, uses the one in PROCESS. A test that
plays a second process, or must not see another test's models, makes its own ModelCache.

This module imports nothing of pmem: `import pmem` and a hook's process stay light.
"""

from __future__ import annotations

import threading
from typing import Any


class ModelCache:
    """The models of one process and what was learnt about them.

    embedders    (resolved model file, threads) -> the embedder loaded or served for it
    symmetric    (scheme name, id(inner embedder)) -> its SymmetricEmbedder
    started      server socket -> when (time.monotonic) this process last launched a server for it
    generators   resolved chat model file -> its LlamaGenerator
    verdicts     a chat model's build key -> the signal that killed its probe, or None (it ran)

    `lock` guards the dicts and is never held while a model loads; `loading(key)` is the lock one
    embedder's load holds, so that one model loading on a thread does not hold up another
    (docs/decisions/0019-second-vector-cost.md)."""

    def __init__(self) -> None:
        self.embedders: dict[tuple[str, int], Any] = {}
        self.symmetric: dict[tuple[str, int], Any] = {}
        self.started: dict[str, float] = {}
        self.generators: dict[str, Any] = {}
        self.verdicts: dict[str, str | None] = {}
        self.lock = threading.Lock()
        self.generator_lock = threading.Lock()  # held while a chat model loads: one copy per file
        self.verdict_lock = threading.Lock()  # held while a child process runs a chat model
        self._key_locks: dict[tuple[str, int], threading.RLock] = {}

    def loading(self, key: tuple[str, int]) -> threading.RLock:
        """The lock that loading the embedder of `key` holds."""
        with self.lock:
            return self._key_locks.setdefault(key, threading.RLock())


PROCESS = ModelCache()  # the CLI's: one process, one of each model


def given(cache: ModelCache | None) -> ModelCache:
    """`cache`, or the process's own when a caller passes none."""
    return cache if cache is not None else PROCESS

"""pmem: a personal memory for you and your LLM tools, in one local SQLite file.

    from pmem import MemoryStore, Filter, search, recall
    with MemoryStore() as store:
        memory, created = store.add("I am vegetarian", pinned=True)
        hits = search(store, "dinner plans")

Importing pmem loads no CLI, TUI or model code; models load when a vector is first needed.
"""

from .config import Config, Settings
from .config import load as load_config
from .errors import (
    AmbiguousId,
    DatabaseError,
    ExtensionError,
    ExtractionError,
    ModelError,
    ModelMismatch,
    NotFound,
    PmemError,
    UsageError,
)
from .recall import Recalled, estimate_tokens, recall, render
from .records import TIERS, Event, Hit, Memory, Operation
from .search import search
from .store import Filter, MemoryStore
from .version import __version__  # pmem's version; pyproject.toml reads it from pmem/version.py

__all__ = [
    "AmbiguousId", "Config", "DatabaseError", "Event", "ExtensionError", "ExtractionError", "Filter",
    "Hit", "Memory", "MemoryStore", "ModelError", "ModelMismatch", "NotFound", "Operation",
    "PmemError", "Recalled", "Settings", "TIERS", "UsageError", "estimate_tokens", "load_config", "recall",
    "render", "search", "__version__",
]

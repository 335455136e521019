"""pmem: a personal memory for you and your LLM tools, in one local SQLite file.

    from pmem import MemoryStore, Filter, search, recall
    with MemoryStore() as store:
        memory, created = store.add("I am vegetarian", pinned=True)
        hits = search(store, "dinner plans")

Importing pmem loads no CLI, TUI or model code; models load when a vector is first needed. The
names below are imported when first used (PEP 562), so a command, a hook or `pmem serve` that
imports one submodule does not pay for the store, search and config
(docs/decisions/0040-command-start-up.md).
"""

import sys
import types

from .version import __version__  # pmem's version; pyproject.toml reads it from pmem/version.py

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (~5 ms); type checkers read it as True
if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ imports these
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
    from .service import MemoryStore
    from .store import Filter

# public name -> (submodule, its name there)
_LAZY = {
    "Config": ("config", "Config"), "Settings": ("config", "Settings"), "load_config": ("config", "load"),
    **{name: ("errors", name) for name in ("AmbiguousId", "DatabaseError", "ExtensionError", "ExtractionError",
                                          "ModelError", "ModelMismatch", "NotFound", "PmemError", "UsageError")},
    **{name: ("recall", name) for name in ("Recalled", "estimate_tokens", "recall", "render")},
    **{name: ("records", name) for name in ("TIERS", "Event", "Hit", "Memory", "Operation")},
    "search": ("search", "search"),
    "Filter": ("store", "Filter"), "MemoryStore": ("service", "MemoryStore"),
}

__all__ = [
    "AmbiguousId", "Config", "DatabaseError", "Event", "ExtensionError", "ExtractionError", "Filter",
    "Hit", "Memory", "MemoryStore", "ModelError", "ModelMismatch", "NotFound", "Operation",
    "PmemError", "Recalled", "Settings", "TIERS", "UsageError", "estimate_tokens", "load_config", "recall",
    "render", "search", "__version__",
]


if not TYPE_CHECKING:  # hidden from type checkers, so that a misspelt `pmem.Serach` is still an error

    def __getattr__(name: str) -> object:
        try:
            module, attr = _LAZY[name]
        except KeyError:
            raise AttributeError(f"module 'pmem' has no attribute {name!r}") from None
        import importlib

        value = getattr(importlib.import_module(f".{module}", __name__), attr)
        globals()[name] = value  # the next access is a plain attribute
        return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """`import pmem.search` binds the submodule to the package's attribute of the same name; the
    public `pmem.search` and `pmem.recall` stay the functions, as when this file imported them."""

    def __setattr__(self, name: str, value: object) -> None:
        if name in ("search", "recall") and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

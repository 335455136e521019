"""The store: the only code that runs SQL, one noun per file over one connection.

connection.py (transactions, settings, ids, rows) < filter.py (Filter) < journal.py, keywords.py,
vectors.py (the indexes) < erase.py, migrations.py < memories.py (Storage; the verbs over it are
pmem.service.MemoryStore's, and the store never imports the service); inspection.py
(what `pmem doctor` asks of a file a store may not open) and glance.py (autosync's read-only look,
after every write command) stand beside them. The names other modules import are bound here on
first use (PEP 562), so that importing one small part (glance.py) does not load the rest; a
tunable constant is patched where it is used (pmem.store.vectors.EXACT_SCAN_MAX), never here; the
ranking's constants come from the profile passed in (pmem.ranking.profile)."""

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing; type checkers read it as True
if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ imports these
    from .connection import EXACT_BELOW, SAFE_PREFIX, Progress
    from .erase import UPKEEP_MIN_FREE
    from .filter import Filter
    from .keywords import KeywordIndex
    from .memories import Storage, Verbs
    from .validation import MAX_TEXT, MAX_THREAD
    from .vectors import BULK_EMBED, KNN_MAX, PartitionScan, VectorIndex, deserialize, serialize

# public name -> the submodule that defines it
_LAZY = {
    "EXACT_BELOW": "connection", "SAFE_PREFIX": "connection", "Progress": "connection",
    "UPKEEP_MIN_FREE": "erase",
    "Filter": "filter",
    "KeywordIndex": "keywords",
    "MAX_TEXT": "validation", "MAX_THREAD": "validation", "Storage": "memories", "Verbs": "memories",
    **{name: "vectors" for name in ("BULK_EMBED", "KNN_MAX", "PartitionScan", "VectorIndex", "deserialize",
                                    "serialize")},
}

__all__ = ["BULK_EMBED", "EXACT_BELOW", "KNN_MAX", "MAX_TEXT", "MAX_THREAD", "SAFE_PREFIX", "UPKEEP_MIN_FREE",
           "Filter", "KeywordIndex", "PartitionScan", "Progress", "Storage", "VectorIndex", "Verbs", "deserialize",
           "serialize"]


if not TYPE_CHECKING:  # hidden from type checkers, so that a misspelt name is still an error

    def __getattr__(name: str) -> object:
        try:
            module = _LAZY[name]
        except KeyError:
            raise AttributeError(f"module 'pmem.store' has no attribute {name!r}") from None
        import importlib

        value = getattr(importlib.import_module(f".{module}", __name__), name)
        globals()[name] = value  # the next access is a plain attribute
        return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

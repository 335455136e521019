"""The store: the only code that runs SQL, one noun per file over one connection.

connection.py (transactions, settings, ids, rows) < filter.py (Filter) < journal.py, keywords.py,
vectors.py (the indexes) < erase.py, migrations.py < memories.py (MemoryStore). The names other
modules import are re-exported here; a tunable constant is patched where it is used
(pmem.store.vectors.BIT_POOL), never here."""

from .connection import EXACT_BELOW, SAFE_PREFIX, Progress
from .erase import UPKEEP_MIN_FREE
from .filter import Filter
from .keywords import KeywordIndex
from .memories import MAX_TEXT, MAX_THREAD, MemoryStore
from .vectors import BULK_EMBED, KNN_MAX, PartitionScan, VectorIndex, deserialize, serialize

__all__ = ["BULK_EMBED", "EXACT_BELOW", "KNN_MAX", "MAX_TEXT", "MAX_THREAD", "SAFE_PREFIX", "UPKEEP_MIN_FREE",
           "Filter", "KeywordIndex", "MemoryStore", "PartitionScan", "Progress", "VectorIndex", "deserialize",
           "serialize"]

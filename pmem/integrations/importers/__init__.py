"""Importers for the histories people already have: chat exports, agent transcripts, other
memory tools' files and Markdown notes. One module per format; `registry` tells them apart.

    from pmem.integrations.importers import load, run_import
    plan = load("chatgpt-export.zip")              # nothing stored yet: plan.records, plan.kinds
    result = run_import(store, plan.records)        # one undoable operation, resumable

Conversations become episodic memories, one per turn, threaded by conversation; ids derive from
the source's ids, so importing again adds only what is new.
"""

from .base import Entry
from .registry import (
                       FORMATS,
                       IMPORTERS,
                       ImportPlan,
                       ImportResult,
                       detect,
                       entries,
                       get,
                       known_formats,
                       load,
                       load_bytes,
                       load_stream,
                       merge_due,
                       run_import,
)

__all__ = ["Entry", "FORMATS", "IMPORTERS", "ImportPlan", "ImportResult", "detect", "entries", "get",
           "known_formats", "load", "load_bytes", "load_stream", "merge_due",
           "run_import"]

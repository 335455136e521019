"""Cosine thresholds, per embedding model: what "close" means depends on the model's scale.

Every threshold pmem compares a cosine with was tuned on all-MiniLM-L6-v2. Another model puts
texts elsewhere on the scale: multilingual-e5-small puts unrelated texts near 0.86 (MiniLM near
0.43), so MiniLM's 0.2 recall cut-off would keep everything and its 0.92 dedup threshold would pair
unrelated facts. Each model therefore carries its own set, looked up by the name of the model the
vectors come from (`for_model`); a model pmem does not know gets MiniLM's, as before. The values
themselves are each model's, in its profile (pmem.models.profiles).

Where a setting exists (dedup_threshold, merge_threshold), a value the user set wins over the
model's (`effective`).
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from . import profiles
from .profiles import SCORE_CUT, Thresholds  # noqa: F401 - the record and its constant, imported from here

# Each model's values live in its profile (pmem.models.profiles), with how they were measured.
MINILM = profiles.MINILM.thresholds
E5_SMALL = profiles.E5_SMALL.thresholds
E5_SYMMETRIC = profiles.E5_SYMMETRIC.thresholds


def __getattr__(name: str) -> Any:
    """BY_MODEL: every registered profile's thresholds, by lower-case name (read when asked:
    profiles may be registered after this module is imported)."""
    if name == "BY_MODEL":
        return {p.name.lower(): p.thresholds for p in profiles.profiles()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# Settings that override a model's threshold when the user set them.
SETTINGS = {"dedup_threshold": "dedup", "merge_threshold": "merge"}


def for_model(name: str | None) -> Thresholds:
    """The thresholds of the model called `name` (a known name or a file stem); MiniLM's for
    any other model, or none."""
    return profiles.for_model(name).thresholds  # an unregistered model's are MiniLM's


def effective(model: str | None, settings: Any = None) -> Thresholds:
    """`for_model(model)`, with the dedup and merge settings where the user set them: a value
    whose origin is not "default", or one that differs from the setting's built-in default."""
    base = for_model(model)
    if settings is None:
        return base
    from ..config import is_set

    changes = {}
    for key, name in SETTINGS.items():
        value = getattr(settings, key, None)
        if value is None:
            continue
        if is_set(settings, key):
            changes[name] = float(value)
    return replace(base, **changes) if changes else base


def as_dict(t: Thresholds) -> dict[str, float]:
    return {f.name: getattr(t, f.name) for f in fields(t)}

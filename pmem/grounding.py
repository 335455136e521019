"""The grounding gate: is a text a model wrote supported by the sources it was written from?

Used by extraction (each fact against the turn it came from) and by dream (a merge or summary
against its members). Every number must occur in the sources, enough of the content words
must, and, when an embedder is given, the text must be close in meaning to one source sentence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from .config import DEFAULTS
from .text import content_words, has_digit, split_sentences, stem, words

if TYPE_CHECKING:
    from .models.embed import Embedder

MIN_SIMILARITY = 0.5  # a fact's embedding must be this close to some source sentence
MIN_SUPPORT: float = DEFAULTS["extract_min_support"][0]  # the setting's default


@dataclass
class Grounding:
    """The gate's verdict on one text."""

    ok: bool
    support: float  # share of the fact's content words found in the sources
    reason: str
    similarity: float | None = None  # best cosine with a source sentence, when an embedder was given


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity of two vectors (0.0 when either is all zeros)."""
    dot = sum(x * y for x, y in zip(a, b))
    na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


def check_grounding(fact: str, sources: list[str], embedder: "Embedder | None" = None, *,
                    min_support: float = MIN_SUPPORT, min_similarity: float = MIN_SIMILARITY) -> Grounding:
    """Is `fact` supported by `sources`?

    Args:
        fact: the text a model wrote.
        sources: the texts it must come from.
        embedder: when given, the fact's vector must be within `min_similarity` cosine of some
            source sentence.
        min_support: share of the fact's content words that must occur in the sources (a
            store's setting `extract_min_support`: pass `store.config.extract_min_support`).
        min_similarity: see `embedder`.

    Returns:
        A Grounding; `ok` is False when a number is missing from the sources, too few words
        occur there, or the meaning is too far from every source sentence. Raises nothing of its
        own (an embedder may raise ModelError).
    """
    fact_words = content_words(fact)
    if not fact_words:
        return Grounding(False, 0.0, "no content words")
    vocab = {stem(w) for s in sources for w in words(s)} | {w for s in sources for w in words(s)}
    missing_numbers = [w for w in fact_words if has_digit(w) and w not in vocab]
    found = [w for w in fact_words if w in vocab or stem(w) in vocab]
    support = len(found) / len(fact_words)
    if missing_numbers:
        return Grounding(False, support, f"number {missing_numbers[0]!r} is not in the source")
    if support < min_support:
        missing = [w for w in fact_words if w not in found]
        return Grounding(False, support, f"only {support:.0%} of its words are in the source "
                                         f"(need {min_support:.0%}; missing: {', '.join(missing[:5])})")
    if embedder is None:
        return Grounding(True, support, "words found in the source")
    pieces = [p for s in sources for p in split_sentences(s)] or list(sources)
    vectors = embedder.embed([fact, *pieces])
    best = max(cosine(vectors[0], v) for v in vectors[1:])
    if best < min_similarity:
        return Grounding(False, support, f"not close to any source sentence (cosine {best:.2f} < "
                                         f"{min_similarity:.2f})", best)
    return Grounding(True, support, "words and meaning found in the source", best)

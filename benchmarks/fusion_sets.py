"""The retrieval sets of benchmarks/retrieval.py --suite and benchmarks/fit_fusion.py, as stores.

- paraphrase: benchmarks/data/paraphrase.json (everyday memories asked for in other words) among
  the turns of LoCoMo's first dev conversation, stored as session threads, as distractors;
- multilingual: benchmarks/data/multilingual.json (ru, de, es, fr, en and cross-lingual), alone;
- locomo: the 5 dev conversations, one store each, session threads;
- mixed: one store holding every memory of the three at once, searched with every question.

A query is (set, group, split, question, targets): a hit at k when any target key is among the
first k results. Keys: a paraphrase or multilingual memory's id, "conv:dia_id" for a LoCoMo turn.
Vectors go through a disk cache (`CachedEmbedder`) so that a rerun embeds only what changed.
"""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass
from pathlib import Path

import locomo

HERE = Path(__file__).resolve().parent
PARAPHRASE = HERE / "data" / "paraphrase.json"
MULTILINGUAL = HERE / "data" / "multilingual.json"
SETS = ("paraphrase", "multilingual", "locomo", "mixed")


@dataclass(frozen=True)
class Query:
    set: str      # paraphrase, multilingual, locomo
    group: str    # a language, "cross", a LoCoMo category, or the paraphrase kind (paraphrase, name)
    split: str    # dev or held-out (LoCoMo and multilingual: dev)
    text: str
    targets: frozenset[str]


class CachedEmbedder:
    """`inner`, with every (query?, text) vector kept in a pickle at `path` between runs."""

    def __init__(self, inner, path: Path):
        self.inner, self.name, self.dim = inner, inner.name, inner.dim
        self.query_aware = getattr(inner, "query_aware", False)
        self.path = path
        self.cache: dict = pickle.loads(path.read_bytes()) if path.exists() else {}
        self.dirty = False

    def embed(self, texts, query: bool = False):
        keys = [(query, t) for t in texts]
        todo = [k for k in dict.fromkeys(keys) if k not in self.cache]
        if todo:
            kw = {"query": True} if query and self.query_aware else {}
            self.cache.update(zip(todo, self.inner.embed([t for _, t in todo], **kw)))
            self.dirty = True
        return [self.cache[k] for k in keys]

    def save(self) -> None:
        if self.dirty:
            tmp = self.path.with_suffix(".tmp")
            tmp.write_bytes(pickle.dumps(self.cache))
            tmp.replace(self.path)
            self.dirty = False


def embedder(model: str, cache_dir: Path | None):
    """`model` loaded here, its vectors cached in `cache_dir`; a scheme that embeds memories as
    queries (multilingual-e5-small-symmetric) shares its model's cache, as query vectors."""
    from pmem.models.embed import SymmetricEmbedder, load_embedder

    inner = load_embedder(model, server="off")
    engine = getattr(inner, "inner", inner)
    if hasattr(engine, "use_int8"):  # the setting embed_bulk, as a store applies it (here under the cache)
        from pmem import config

        engine.use_int8(config.load().embed_bulk != "float32")
    if cache_dir is None:
        return inner
    cache_dir.mkdir(parents=True, exist_ok=True)
    if isinstance(inner, SymmetricEmbedder):
        return SymmetricEmbedder(CachedEmbedder(inner.inner, cache_dir / f"vectors-{inner.inner.name}.pickle"),
                                 inner.name)
    return CachedEmbedder(inner, cache_dir / f"vectors-{inner.name}.pickle")


def paraphrase_records() -> tuple[list[dict], list[Query]]:
    data = json.loads(PARAPHRASE.read_text(encoding="utf-8"))
    records = [{"text": m["text"], "key": m["id"]} for m in data["memories"]]
    qs = [Query("paraphrase", q["kind"], q["split"], q["text"], frozenset([q["target"]]))
          for q in data["queries"]]
    return records, qs


def multilingual_records() -> tuple[list[dict], list[Query]]:
    data = json.loads(MULTILINGUAL.read_text(encoding="utf-8"))
    records = [{"text": m["text"], "key": m["id"]} for m in data["memories"]]
    qs = [Query("multilingual", "cross" if q["cross"] else q["lang"], "dev", q["text"], frozenset(q["targets"]))
          for q in data["queries"]]
    return records, qs


CATEGORY = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}


def locomo_records(conv: dict) -> tuple[list[dict], list[Query]]:
    sid = conv["sample_id"]
    records = [{**r, "key": f"{sid}:{r['meta']['dia_id']}"} for r in locomo.turn_records(conv, "session")]
    qs = [Query("locomo", CATEGORY[q["category"]], "dev", q["question"],
                frozenset(f"{sid}:{d}" for d in q["evidence"])) for q in locomo.questions(conv)]
    return records, qs


def distractors() -> list[dict]:
    """The turns of LoCoMo's first dev conversation (419), threaded as imported."""
    conv = locomo.load()[0]
    return [{**r, "key": f"{conv['sample_id']}:{r['meta']['dia_id']}"} for r in locomo.turn_records(conv, "session")]


def build(tmp: Path, name: str, records: list[dict], emb, english=None):
    """A store of `records`; returns (store, key by seq). `english`: the embedder of English
    memories' second vectors (pmem/store/english.py), where the store keeps them."""
    from pmem import Memory, MemoryStore

    store = MemoryStore(tmp / f"{name}.db", embedder=emb)
    if english is not None:
        store.vectors.english.embedder = english
    store.insert([Memory(id="", text=r["text"], created_at=r.get("created_at"), meta={**r.get("meta", {}), "key": r["key"]},
                         thread=r.get("thread"), thread_pos=r.get("thread_pos")) for r in records])
    keys = dict(store.conn.execute("SELECT seq, json_extract(meta, '$.key') FROM memories").fetchall())
    return store, keys


def stores(tmp: Path, emb, sets=SETS, english=None, conversations=None):
    """Yield (set name, store, key by seq, queries) for each of `sets`; each store is closed after.
    `english`: as for build. `conversations`: LoCoMo's sample ids to take (default: all 5)."""
    para, para_q = paraphrase_records()
    multi, multi_q = multilingual_records()
    convs = [locomo_records(c) for c in locomo.load()
             if conversations is None or c["sample_id"] in conversations]
    if "paraphrase" in sets:
        store, keys = build(tmp, "paraphrase", para + distractors(), emb, english)
        yield "paraphrase", store, keys, para_q
        store.close()
    if "multilingual" in sets:
        store, keys = build(tmp, "multilingual", multi, emb, english)
        yield "multilingual", store, keys, multi_q
        store.close()
    if "locomo" in sets:
        for i, (records, qs) in enumerate(convs):
            store, keys = build(tmp, f"locomo-{i}", records, emb, english)
            yield "locomo", store, keys, qs
            store.close()
    if "mixed" in sets:
        records = para + multi + [r for rs, _ in convs for r in rs]
        store, keys = build(tmp, "mixed", records, emb, english)
        yield "mixed", store, keys, para_q + multi_q + [q for _, qs in convs for q in qs]
        store.close()


# Dense sides fit_fusion.py compares: (model, memories embedded as queries) for each model of the
# side. e5's "query: " on both sides is what its authors advise for symmetric tasks.
DENSE = {
    "e5": (("multilingual-e5-small", False),),
    "e5-symmetric": (("multilingual-e5-small", True),),
    "minilm": (("all-MiniLM-L6-v2", False),),
    "minilm+e5": (("all-MiniLM-L6-v2", False), ("multilingual-e5-small", False)),
    "minilm+e5-symmetric": (("all-MiniLM-L6-v2", False), ("multilingual-e5-small", True)),
    "e5+e5-symmetric": (("multilingual-e5-small", False), ("multilingual-e5-small", True)),
}
SHIPPED = "e5-symmetric"  # the default model, multilingual-e5-small-symmetric

# Language-gated sides: the two models of DENSE[name]'s side combined (the first's weight, on
# floor-rescaled cosines) only where the gate says English, the second model alone elsewhere, on
# the same rescaled scale. Gate "pair": the question and the memory both guessed English (the
# store's own guess, pmem.stemming.index_language); "query": the question alone. Calibration
# "affine": the combined score moved onto the second model's rescaled scale by the affine map that
# matches their median and 99th percentile over LoCoMo turn pairs (`calibration`), so an English
# memory and one in another language compete on one scale; "quantile": MiniLM's cosine moved to
# the e5 cosine the same share of those pairs reaches, before the two are combined. Pool: above 0,
# only the second model's nearest `pool` memories of each question are scored (0: every memory).
GATED = {
    "en-minilm+e5-symmetric": (0.5, "pair", None, 0),
    "en-minilm+e5-symmetric-q": (0.5, "query", None, 0),
    **{f"en-minilm{w:.1f}+e5-symmetric": (w, "pair", None, 0) for w in (0.3, 0.4, 0.6, 0.7)},
    **{f"en-minilm{w:.1f}+e5-symmetric-affine": (w, "pair", "affine", 0) for w in (0.4, 0.5, 0.6)},
    **{f"en-minilm{w:.1f}+e5-symmetric-quantile": (w, "pair", "quantile", 0) for w in (0.4, 0.5, 0.6)},
    # the same, MiniLM rescoring only e5's nearest `pool` memories (no second index to search)
    **{f"en-minilm0.5+e5-symmetric-quantile-pool{p}": (0.5, "pair", "quantile", p) for p in (100, 200, 400)},
}


def _shipped_english() -> tuple:
    from pmem.ranking.profile import DEFAULT

    return DEFAULT.english_weight, "pair", "shipped", DEFAULT.english_pool


# What pmem ships where `embed_english = minilm` (pmem/store/english.py: its weight, its map of
# MiniLM's cosines onto e5's scale, its pool), searched with pmem.search.ENGLISH_TUNING.
ENGLISH = "e5-symmetric+minilm-en"
GATED[ENGLISH] = _shipped_english()
TUNING = {ENGLISH: "ENGLISH_TUNING"}  # the Tuning of pmem.search a dense side is searched with (default DEFAULT_TUNING)
DENSE.update({name: DENSE["minilm+e5-symmetric"] for name in GATED})


def floor(model: str, symmetric: bool) -> float:
    """The score floor of `model`'s vectors (pmem.models.thresholds), memories as queries or not."""
    from pmem.models.thresholds import for_model

    return for_model(model + "-symmetric" if symmetric else model).score_floor


def turn_pairs(model: str, symmetric: bool, per_conv: int = 60):
    """The cosines of every pair of the first `per_conv` turns of each LoCoMo dev conversation
    (44,850 pairs), as the thresholds were mapped (benchmarks/multilingual.py)."""
    import numpy as np

    texts = [r["text"] for c in locomo.load() for r in locomo.turn_records(c, "session")[:per_conv]]
    emb = embedder(model, Path(__import__("os").environ.get("PMEM_BENCH_CACHE", "/tmp/pmem-bench-cache")))
    v = np.asarray(emb.embed(texts, query=symmetric), np.float32)
    return (v @ v.T)[np.triu_indices(len(texts), 1)]

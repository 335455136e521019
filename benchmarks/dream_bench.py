"""What a dream does to a LoCoMo memory: size, planted-duplicate precision/recall, evidence R@10, speed.

    PMEM_MODELS_DIR=.models-cache python benchmarks/dream_bench.py            # MiniLM, no chat model
    PMEM_MODELS_DIR=.models-cache python benchmarks/dream_bench.py --chat      # + the chat model (merges)
    python benchmarks/dream_bench.py --embed fake-384                          # smoke run, no model

One store per conversation of ../shared/data/locomo_dev.json: every dialogue turn an episodic memory
("Speaker: text", dated by its session), every `observation` fact an archival memory (stand-ins for
extracted facts, each mapped to its evidence turns), plus a paraphrase of every 4th fact (planted
duplicates, made by fixed word-level rules below). The dream runs with now = 2026-01-01, so every
turn is older than compress_after_days. Evidence R@10: hybrid search over all tiers for each question
of categories 1-4; a hit when a top-10 memory maps to an evidence turn (a turn to itself, a fact to
its evidence, a merged or summarised memory to its members' turns).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from pmem import dream  # noqa: E402
from pmem.config import load as load_config  # noqa: E402
from pmem.recall import estimate_tokens  # noqa: E402
from pmem.records import TIERS  # noqa: E402
from pmem.search import search  # noqa: E402
from pmem.store import Filter, MemoryStore  # noqa: E402
from pmem.text import speaker_sentences  # noqa: E402

import locomo  # noqa: E402

NOW = "2026-01-01T00:00:00Z"
SYNONYMS = {
    "kids": "children", "children": "kids", "loves": "adores", "likes": "enjoys", "enjoys": "likes",
    "recently": "lately", "started": "began", "began": "started", "happy": "glad", "big": "large",
    "photo": "picture", "picture": "photo", "important": "significant", "beautiful": "lovely",
    "wants": "would like", "planning": "intending", "plans": "intends", "friends": "pals",
    "helps": "assists", "help": "assist", "really": "truly", "feels": "is feeling", "went": "headed",
    "painting": "artwork", "job": "work", "family": "relatives", "gift": "present", "trip": "journey",
}
PREFIXES = ("", "Apparently, ", "Note: ", "It seems ")


def paraphrase(text: str, n: int) -> str:
    """A fixed, deterministic paraphrase: up to two synonym swaps and a lead-in."""
    words = text.rstrip(".").split(" ")
    swapped = 0
    for i, w in enumerate(words):
        key = w.lower().strip(",")
        if key in SYNONYMS and swapped < 2:
            words[i] = SYNONYMS[key] + ("," if w.endswith(",") else "")
            swapped += 1
    body = " ".join(words)
    prefix = PREFIXES[n % len(PREFIXES)]
    if prefix and not prefix.startswith("Note"):
        body = body[0].lower() + body[1:] if body[:1].isupper() and not body.split(" ")[0].istitle() else body
    if swapped == 0 and not prefix:
        prefix = "Apparently, "
    return f"{prefix}{body}."


def build(store: MemoryStore, conv: dict) -> tuple[dict, list[tuple[str, str]]]:
    """Store a conversation; returns evidence map (memory id -> turn ids) and planted pairs."""
    from pmem.records import Memory

    turns = locomo.turn_records(conv)
    dates = {n: date for n, date, _ in locomo.sessions(conv)}
    items: list[Memory] = []
    for t in turns:
        items.append(store.new_memory(t["text"], tier="episodic", created_at=t["created_at"], meta=t["meta"],
                                      source=t["source"]))
    facts: list[tuple[str, list[str], str]] = []
    for key, speakers in sorted(conv["observation"].items(), key=lambda kv: int(kv[0].split("_")[1])):
        n = int(key.split("_")[1])
        for speaker in sorted(speakers):
            for fact in speakers[speaker]:
                text, evidence = fact[0], fact[1]
                evidence = [evidence] if isinstance(evidence, str) else list(evidence)
                facts.append((text, evidence, dates[n]))
    planted_idx = []
    for text, evidence, date in facts:
        items.append(store.new_memory(text, tier="archival", created_at=date, meta={"evidence": evidence}))
    for k, i in enumerate(range(0, len(facts), 4)):
        text, evidence, date = facts[i]
        items.append(store.new_memory(paraphrase(text, k), tier="archival", created_at=date,
                                      meta={"evidence": evidence, "planted_of": i}))
        planted_idx.append(i)
    stored = store.insert(items, kind="import", keep_ids=False)
    evidence: dict[str, list[str]] = {}
    fact_ids: list[str] = []
    planted: list[tuple[str, str]] = []
    for m in stored:
        if "dia_id" in m.meta:
            evidence[m.id] = [m.meta["dia_id"]]
        else:
            evidence[m.id] = m.meta["evidence"]
            if "planted_of" in m.meta:
                planted.append((fact_ids[m.meta["planted_of"]], m.id))
            else:
                fact_ids.append(m.id)
    return evidence, planted


def turns_of(store: MemoryStore, evidence: dict, memory_id: str, cache: dict, strict: bool = False) -> set[str]:
    """Turns a memory stands for: its own evidence plus that of every memory merged into it
    (dedup, merge, compress). `strict`: a summary stands only for members it quotes a sentence of."""
    key = (memory_id, strict)
    if key in cache:
        return cache[key]
    out = set(evidence.get(memory_id, ()))
    m = store.get(memory_id)
    absorbed = [r[0] for r in store.conn.execute("SELECT id FROM memories WHERE merged_into = ?", (memory_id,))]
    for a in absorbed:
        if strict and m.meta.get("dream") == "compress":
            member = store.get(a)
            if not any(s.split(": ", 1)[-1] in m.text for s in speaker_sentences(member.text)):
                continue
        out |= turns_of(store, evidence, a, cache, strict)
    cache[key] = out
    return out


def recall_at(store: MemoryStore, conv: dict, evidence: dict, k: int = 10,
              budget: int = 1500) -> tuple[int, int, int, int, int]:
    """(hits, strict hits, questions, tokens of all top-k results together, hits within `budget`
    tokens packed like `pmem recall`: the best 60 results, each taken if it still fits)."""
    hits = strict_hits = tokens = budget_hits = 0
    cache: dict = {}
    flt = Filter(tiers=TIERS)
    qs = locomo.questions(conv)
    for q in qs:
        found, strict = set(), set()
        results = search(store, q["question"], flt, limit=60)
        used, packed = 0, set()
        for h in results:
            cost = estimate_tokens(h.memory.text) + 8
            if used + cost <= budget:
                used += cost
                packed |= turns_of(store, evidence, h.memory.id, cache)
        budget_hits += bool(packed & set(q["evidence"]))
        for h in results[:k]:
            tokens += estimate_tokens(h.memory.text)
            found |= turns_of(store, evidence, h.memory.id, cache)
            strict |= turns_of(store, evidence, h.memory.id, cache, strict=True)
        hits += bool(found & set(q["evidence"]))
        strict_hits += bool(strict & set(q["evidence"]))
    return hits, strict_hits, len(qs), tokens, budget_hits


def cache_query_vectors(store: MemoryStore, cache: dict) -> None:
    """Embed each question once for the before and after searches."""
    embed_one = store.query_vector

    def query_vector(text: str) -> bytes:
        if text not in cache:
            cache[text] = embed_one(text)
        return cache[text]

    store.query_vector = query_vector


def active(store: MemoryStore) -> tuple[int, int]:
    ms = store.list_memories(Filter(tiers=TIERS), limit=None)
    return len(ms), sum(estimate_tokens(m.text) for m in ms)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--embed", default="all-MiniLM-L6-v2", help="embedding model (fake-384 for a smoke run)")
    ap.add_argument("--chat", action="store_true", help="use the configured chat model for merges and summaries")
    ap.add_argument("--convs", type=int, default=5, help="how many conversations")
    ap.add_argument("--keep", type=float, default=dream.COMPRESS_KEEP,
                    help="share of an episode's tokens an extractive summary keeps")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    dream.COMPRESS_KEEP = args.keep

    tmp = Path(tempfile.mkdtemp(prefix="pmem-dream-bench-"))
    os.environ["PMEM_HOME"] = str(tmp)
    os.environ["PMEM_EMBED_MODEL"] = args.embed
    cfg = load_config()
    totals = {k: 0 for k in ("mem_before", "mem_after", "tok_before", "tok_after", "hits_before", "hits_after",
                             "questions", "budget_before", "budget_after", "top10_tokens_before", "top10_tokens_after", "strict_before", "strict_after", "planted", "found_planted", "predicted_pairs", "correct_pairs",
                             "considered")}
    kinds: dict[str, int] = {}
    dropped = 0
    t_plan = t_apply = t_load = 0.0
    examples = []
    for conv in locomo.load()[: args.convs]:
        store = MemoryStore(tmp / f"{conv['sample_id']}.db", config=cfg)
        t0 = time.perf_counter()
        evidence, planted = build(store, conv)
        t_load += time.perf_counter() - t0
        n, tok = active(store)
        totals["mem_before"] += n
        totals["tok_before"] += tok
        qcache: dict = {}
        cache_query_vectors(store, qcache)
        h, hs, q, tk, bh = recall_at(store, conv, evidence)
        totals["budget_before"] += bh
        totals["top10_tokens_before"] += tk
        totals["hits_before"] += h
        totals["strict_before"] += hs
        totals["questions"] += q

        t0 = time.perf_counter()
        plan = dream.plan(store, now=NOW, generator=None if args.chat else False)
        t_plan += time.perf_counter() - t0
        totals["considered"] += plan.considered
        dropped += len(plan.dropped)
        t0 = time.perf_counter()
        dream.apply(store, plan, backup=False)
        t_apply += time.perf_counter() - t0
        for p in plan.proposals:
            kinds[p.kind] = kinds.get(p.kind, 0) + 1

        truth = {frozenset(p) for p in planted}
        predicted = set()
        for p in plan.proposals:
            if p.kind == "dedup":
                predicted |= {frozenset((a, b)) for i, a in enumerate(p.members) for b in p.members[i + 1:]}
        totals["planted"] += len(truth)
        totals["found_planted"] += len(truth & predicted)
        totals["predicted_pairs"] += len(predicted)
        totals["correct_pairs"] += len(truth & predicted)
        if len(examples) < 6:
            for pair in list(predicted - truth)[:3]:
                examples.append([store.get(i).text for i in pair])

        n, tok = active(store)
        totals["mem_after"] += n
        totals["tok_after"] += tok
        h, hs, _, tk, bh = recall_at(store, conv, evidence)
        totals["budget_after"] += bh
        totals["top10_tokens_after"] += tk
        totals["hits_after"] += h
        totals["strict_after"] += hs
        assert dream.plan(store, now=NOW, generator=False, only={"dedup", "supersede", "compress", "expire"}).proposals == []
        store.close()

    t = totals
    figures = {
        "embed_model": args.embed, "chat_model": cfg.chat_model if args.chat else None,
        "conversations": args.convs, "compress_keep": args.keep, "questions": t["questions"],
        "memories_before": t["mem_before"], "memories_after": t["mem_after"],
        "shrink": round(1 - t["mem_after"] / t["mem_before"], 3),
        "tokens_before": t["tok_before"], "tokens_after": t["tok_after"],
        "proposals": kinds, "dropped": dropped,
        "planted_pairs": t["planted"],
        "dedup_precision": round(t["correct_pairs"] / t["predicted_pairs"], 3) if t["predicted_pairs"] else None,
        "dedup_recall": round(t["found_planted"] / t["planted"], 3) if t["planted"] else None,
        "r10_before": round(t["hits_before"] / t["questions"], 3),
        "r10_after": round(t["hits_after"] / t["questions"], 3),
        "r10_after_strict": round(t["strict_after"] / t["questions"], 3),
        "r_at_1500_tokens_before": round(t["budget_before"] / t["questions"], 3),
        "r_at_1500_tokens_after": round(t["budget_after"] / t["questions"], 3),
        "top10_tokens_before": round(t["top10_tokens_before"] / t["questions"]),
        "top10_tokens_after": round(t["top10_tokens_after"] / t["questions"]),
        "seconds_per_1000_plan": round(t_plan / t["considered"] * 1000, 3),
        "seconds_per_1000_apply": round(t_apply / t["considered"] * 1000, 3),
        "seconds_load_and_embed": round(t_load, 1),
        "false_positive_examples": examples[:5],
    }
    if args.json:
        print(json.dumps(figures, indent=2, ensure_ascii=False))
    else:
        for k, v in figures.items():
            print(f"{k:24} {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What a dream does to a LoCoMo memory: size, planted-duplicate precision/recall, evidence R@10, speed.

    PMEM_MODELS_DIR=.models-cache python benchmarks/dream_bench.py            # MiniLM, no chat model
    PMEM_MODELS_DIR=.models-cache python benchmarks/dream_bench.py --chat      # + the chat model (merges)
    python benchmarks/dream_bench.py --embed fake-384                          # smoke run, no model
    PMEM_MODELS_DIR=.models-cache python benchmarks/dream_bench.py --pairs --json   # the paraphrase set
    PMEM_MODELS_DIR=.models-cache python benchmarks/dream_bench.py --plan-speed --against ../main --rounds 5

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
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from pmem import MemoryStore, dream  # noqa: E402
from pmem.config import load as load_config  # noqa: E402
from pmem.recall import estimate_tokens  # noqa: E402
from pmem.records import TIERS  # noqa: E402
from pmem.search import search  # noqa: E402
from pmem.store import Filter  # noqa: E402
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
              budget: int = 1500, per_question: list | None = None) -> tuple[int, int, int, int, int]:
    """(hits, strict hits, questions, tokens of all top-k results together, hits within `budget`
    tokens packed like `pmem recall`: the best 60 results, each taken if it still fits).
    `per_question` gets each question's [hit, strict hit, hit within budget], to pair two runs."""
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
        if per_question is not None:
            per_question.append({"question": q["question"], "hits": [bool(found & set(q["evidence"])),
                                 bool(strict & set(q["evidence"])), bool(packed & set(q["evidence"]))]})
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
    ap.add_argument("--dump", default="",
                    help="--chat: write every merge and compress proposal and dropped merge (its texts), and "
                         "each question's hits after the dream, to this JSON file: two chat models side by side")
    ap.add_argument("--pairs", action="store_true",
                    help="dedup recall and precision on benchmarks/data/dedup_pairs.json (both models)")
    ap.add_argument("--auto", type=json.loads, default={}, help='--pairs: {"model": auto threshold} to report')
    ap.add_argument("--review", type=json.loads, default={}, help='--pairs: {"model": review threshold}')
    ap.add_argument("--lexical", type=float, default=None, help="--pairs: the share of the rest a dedup needs")
    ap.add_argument("--synonym", type=json.loads, default={}, help='--pairs: {"model": swapped-word cosine}')
    ap.add_argument("--spare", type=json.loads, default={}, help='--pairs: {"model": stems left unmatched}')
    ap.add_argument("--bilingual", type=json.loads, default={},
                    help='--pairs: {"model": cosine of two texts embedded alike} for a pair in two languages')
    ap.add_argument("--close", type=json.loads, default={}, help='--pairs: {"model": the older word test from}')
    ap.add_argument("--stored-as-queries", action="store_true",
                    help="--pairs: every text and word embedded as a query (the symmetric identity's scale)")
    ap.add_argument("--bilingual-floor", type=json.loads, default={},
                    help='--pairs: {"model": stored cosine} from which a pair in two languages is compared')
    ap.add_argument("--chat-model", default="", help="--pairs --chat: the chat model asked yes/no")
    ap.add_argument("--turn-merges", action="store_true", help="merges of one conversation's turns (chat model)")
    ap.add_argument("--max-seconds", type=float, default=600, help="--turn-merges: planning time")
    ap.add_argument("--plan-speed", action="store_true",
                    help="the plan alone on one conversation's store, this tree and --against's interleaved")
    ap.add_argument("--against", default="", help="--plan-speed: the other tree (a checkout's root)")
    ap.add_argument("--rounds", type=int, default=5, help="--plan-speed: plans per tree")
    ap.add_argument("--conv", default="conv-26", help="--plan-speed: the conversation")
    ap.add_argument("--db", default="", help="--plan-speed: a store built before (else one is built and kept)")
    ap.add_argument("--synthetic", type=int, default=0,
                    help="--plan-speed: a store of this many memories (every conversation's, repeated, fake-384)")
    args = ap.parse_args()
    if args.plan_speed:
        return plan_speed_main(args)
    if args.turn_merges:
        return turn_merges_main(args)
    if args.pairs:
        return pairs_main(args)
    dream.COMPRESS_KEEP = args.keep

    tmp = Path(tempfile.mkdtemp(prefix="pmem-dream-bench-"))
    os.environ["PMEM_HOME"] = str(tmp)
    os.environ["PMEM_EMBED_MODEL"] = args.embed
    cfg = load_config()
    totals = {k: 0 for k in ("mem_before", "mem_after", "tok_before", "tok_after", "hits_before", "hits_after",
                             "questions", "budget_before", "budget_after", "top10_tokens_before", "top10_tokens_after", "strict_before", "strict_after", "planted", "found_planted", "predicted_pairs", "correct_pairs",
                             "considered")}
    kinds: dict[str, int] = {}
    second: dict[str, int] = {}  # proposals a second dream made that the first had not
    asked_again = 0  # the first dream's reviews, left by its --apply, that the second asks again
    dropped = 0
    chat = {"merges": 0, "summaries_by_model": 0, "summaries_extractive": 0, "merges_dropped": {}}
    dump: list[dict] = []  # --dump: the proposals' and dropped merges' texts, by conversation
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
        if args.chat:
            count_chat(chat, plan, store, conv["sample_id"], dump if args.dump else None)

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
        answered: list | None = [] if args.dump else None
        h, hs, _, tk, bh = recall_at(store, conv, evidence, per_question=answered)
        dump += [{"conv": conv["sample_id"], "kind": "question", **a} for a in answered or []]
        totals["budget_after"] += bh
        totals["top10_tokens_after"] += tk
        totals["hits_after"] += h
        totals["strict_after"] += hs
        again = dream.plan(store, now=NOW, generator=False, only={"dedup", "supersede", "compress", "expire"})
        asked = {p.id for p in plan.proposals if p.kind in dream.ASKED}
        # nothing new should come back, nor the reviews --apply left (asked again only by --full)
        for p in again.proposals:
            if p.id not in asked:
                second[p.kind] = second.get(p.kind, 0) + 1
            else:
                asked_again += 1
        store.close()

    t = totals
    figures = {
        "embed_model": args.embed, "chat_model": cfg.chat_model if args.chat else None,
        "conversations": args.convs, "compress_keep": args.keep, "questions": t["questions"],
        "memories_before": t["mem_before"], "memories_after": t["mem_after"],
        "shrink": round(1 - t["mem_after"] / t["mem_before"], 3),
        "tokens_before": t["tok_before"], "tokens_after": t["tok_after"],
        "proposals": kinds, "dropped": dropped, "second_dream_new": second, "second_dream_asked_again": asked_again,
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
    if args.chat:  # what the chat model contributed, and what it was asked (LlamaGenerator.stats)
        figures["chat"] = {**chat, "model": chat_stats()}
    if args.dump:
        Path(args.dump).write_text(json.dumps(dump, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps(figures, indent=2, ensure_ascii=False))
    else:
        for k, v in figures.items():
            print(f"{k:24} {v}")
    return 0


def count_chat(chat: dict, plan, store: MemoryStore, conv_id: str, dump: list | None) -> None:
    """Add one plan's merges, model-written vs extractive summaries and dropped merges (by the
    reason's first words) to `chat`; with `dump`, keep their texts (read before the plan is applied)."""
    for p in plan.proposals:
        if p.kind == "merge":
            chat["merges"] += 1
        elif p.kind == "compress":
            key = "summaries_extractive" if p.details.get("extractive") else "summaries_by_model"
            chat[key] += 1
        if dump is not None and p.kind in ("merge", "compress"):
            dump.append({"conv": conv_id, "kind": p.kind, "members": [store.get(i).text for i in p.members],
                         "text": p.result_text, "extractive": p.details.get("extractive"), "reason": p.reason})
    for d in plan.dropped:
        if d.get("kind") != "merge":
            continue
        why = " ".join(d.get("reason", "").split(":")[0].split()[:4])
        chat["merges_dropped"][why] = chat["merges_dropped"].get(why, 0) + 1
        if dump is not None:
            dump.append({"conv": conv_id, "kind": "dropped merge",
                         "members": [m.text for m in map(store.get, d.get("members", [])) if m],
                         "text": d.get("text"), "reason": d.get("reason")})


def chat_stats() -> dict:
    """The loaded chat models' stats (LlamaGenerator.stats), summed: calls, tokens, runaways."""
    from pmem.models.cache import PROCESS

    model: dict = {}
    for g in PROCESS.generators.values():
        for k, v in getattr(g, "stats", {}).items():
            model[k] = model.get(k, 0) + v
    return model


# -- the paraphrase set (--pairs) -----------------------------------------------------------------

PAIRS = Path(__file__).resolve().parent / "data" / "dedup_pairs.json"
MODELS = ("multilingual-e5-small", "all-MiniLM-L6-v2")
TODAY = {"multilingual-e5-small": 0.97, "all-MiniLM-L6-v2": 0.92}  # dedup thresholds before dedup by meaning
SAME_SCHEMA = {"type": "object", "properties": {"same": {"type": "boolean"}}, "required": ["same"]}


def today(a: str, b: str, cos: float, threshold: float, lexical: float = 0.5) -> bool:
    """dream's dedup rule before dedup by meaning: cosine, the same numbers, Jaccard of content
    stems ("every" and "always" aside) of at least 0.5, and not one content word swapped."""
    from pmem.text import content_stems, jaccard, numbers

    if cos < threshold or numbers(a) != numbers(b):
        return False
    wa, wb = content_stems(a) - {"every", "alway"}, content_stems(b) - {"every", "alway"}
    swapped = len(wa - wb) == 1 and len(wb - wa) == 1
    return jaccard(wa, wb) >= lexical and not swapped


def cosines(model: str, texts: list[str], as_queries: bool = False):
    """(text -> unit vector, word_cosine(x, y) under the same model, cached, text -> unit vector
    embedded as a query: e5's "query: " on both texts of a pair; the stored vectors for a model
    that embeds queries and texts alike). `as_queries`: every text and word embedded as a query,
    as a store of the symmetric identity (multilingual-e5-small-symmetric) holds them."""
    import numpy as np

    from pmem.models.embed import load_embedder

    emb = load_embedder(model, os.environ.get("PMEM_MODELS_DIR"), threads=int(os.environ.get("PMEM_THREADS", "0") or 0))

    def unit(ts: list[str], query: bool = False):
        v = np.array(emb.embed(ts, query=True) if query else emb.embed(ts), dtype=np.float32)  # type: ignore[call-arg]
        return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)

    words: dict = {}

    query = as_queries and getattr(emb, "query_aware", False)

    def word_cosine(x: str, y: str) -> float:
        for w in (x, y):
            if w not in words:
                words[w] = unit([w], query)[0]
        return float(words[x] @ words[y])

    stored = dict(zip(texts, unit(texts, query)))
    alike = dict(zip(texts, unit(texts, query=True))) if getattr(emb, "query_aware", False) else stored
    return stored, word_cosine, alike


def score(rows: list[dict], verdicts: list) -> dict:
    """Recall, precision and counts of `verdicts` ("dedup" / "review" / None, one a row) over `rows`."""
    out = {"pos": 0, "neg": 0, "tp": 0, "fp": 0, "review_pos": 0, "review_neg": 0, "missed": [], "wrong": []}
    for r, v in zip(rows, verdicts):
        out["pos" if r["same"] else "neg"] += 1
        if v == "dedup":
            out["tp" if r["same"] else "fp"] += 1
            if not r["same"]:
                out["wrong"].append(f"{r['kind']}: {r['a']} / {r['b']}")
        else:
            if r["same"]:
                out["missed"].append(f"{r['kind']}: {r['a']} / {r['b']}")
            if v == "review":
                out["review_pos" if r["same"] else "review_neg"] += 1
    out["recall"] = round(out["tp"] / out["pos"], 3) if out["pos"] else None
    out["precision"] = round(out["tp"] / (out["tp"] + out["fp"]), 3) if out["tp"] + out["fp"] else None
    return out


def pairs_main(args) -> int:
    from pmem.config import Settings
    from pmem.dream import sameness
    from pmem.models import thresholds

    rows = json.loads(PAIRS.read_text(encoding="utf-8"))["pairs"]
    texts = sorted({t for r in rows for t in (r["a"], r["b"])})
    models = list(MODELS)
    t0 = time.perf_counter()
    both = {m: cosines(m, texts, args.stored_as_queries) for m in models}
    vec = {m: both[m][0] for m in models}
    wcos = {m: both[m][1] for m in models}
    alike = {m: both[m][2] for m in models}
    embed_s = time.perf_counter() - t0
    facets = {t: sameness.facets(t) for t in texts}
    for r in rows:
        r["cos"] = {m: float(vec[m][r["a"]] @ vec[m][r["b"]]) for m in models}
        r["sym"] = {m: float(alike[m][r["a"]] @ alike[m][r["b"]]) for m in models}
    parts = {"dev": [r for r in rows if r["split"] == "dev"], "held": [r for r in rows if r["split"] == "held"],
             "all": rows}
    report: dict = {"pairs": len(rows), "positives": sum(r["same"] for r in rows),
                    "negatives": sum(not r["same"] for r in rows), "embed_seconds": round(embed_s, 1), "models": {}}
    for m in models:
        th = thresholds.for_model(m)
        mine: dict = {"dedup_threshold": th.dedup}

        def brief(s: dict) -> dict:
            return {k: s[k] for k in ("recall", "precision", "tp", "fp", "pos", "neg", "review_pos", "review_neg")}

        mine["today"] = {p: brief(score(rs, ["dedup" if today(r["a"], r["b"], r["cos"][m], TODAY[m]) else None
                                             for r in rs])) for p, rs in parts.items()}
        # the sweep, on the dev part only: auto threshold x lexical share
        sweep = []
        grid = [round(x / 100, 2) for x in range(70 if "MiniLM" in m else 85, 100)]
        synonyms = (2.0, 0.97, 0.95, 0.93) if "e5" in m else (2.0, 0.9, 0.8, 0.75, 0.7)
        for auto in grid:
            for lexical in (0.0, 0.3, 0.5):
                for synonym in synonyms:
                    for spare in (0, 1, 2, 99):
                        rule = sameness.Rule(auto=auto, review=auto, lexical=lexical, synonym=synonym, spare=spare)
                        s = score(parts["dev"], [sameness.verdict(facets[r["a"]], facets[r["b"]], r["cos"][m], rule,
                                                                  wcos[m])[0] for r in parts["dev"]])
                        sweep.append((auto, lexical, synonym, spare, s["recall"], s["precision"] or 0.0))
        ok = [x for x in sweep if x[5] >= 0.98]
        best = max(ok, key=lambda x: (x[4], x[0], x[1], -x[3], x[2])) if ok else max(sweep, key=lambda x: (x[5], x[4]))
        mine["sweep_best_on_dev"] = dict(zip(("auto", "lexical", "synonym", "spare", "recall", "precision"), best))
        mine["sweep_near_best"] = sorted((x for x in ok if x[4] >= best[4] - 0.05), key=lambda x: -x[4])[:12]
        lib = dream.planners.dedup_rule(th, Settings())  # the rule dream uses, unless told otherwise
        chosen = sameness.Rule(auto=args.auto.get(m, lib.auto), review=args.review.get(m, lib.review),
                               lexical=args.lexical if args.lexical is not None else lib.lexical,
                               synonym=args.synonym.get(m, lib.synonym), spare=args.spare.get(m, lib.spare),
                               close=args.close.get(m, lib.close), bilingual=args.bilingual.get(m, lib.bilingual),
                               bilingual_floor=args.bilingual_floor.get(m, lib.bilingual_floor))
        mine["rule"] = {"auto": chosen.auto, "review": chosen.review, "lexical": chosen.lexical,
                        "synonym": chosen.synonym, "spare": chosen.spare, "close": chosen.close,
                        "bilingual": chosen.bilingual, "bilingual_floor": chosen.bilingual_floor}
        verdicts = {id(r): sameness.verdict(facets[r["a"]], facets[r["b"]], r["cos"][m], chosen, wcos[m],
                                            r["sym"][m])[0] for r in rows}
        # pairs in two languages: which cosine judges them (the stored vectors', or both texts
        # embedded alike), its threshold swept on the dev part at the chosen floor
        across = [r for r in rows if sameness.two_languages(facets[r["a"]], facets[r["b"]])]
        mine["two_languages"] = {}
        for scale in ("stored", "alike"):
            judged = []
            for x in range(170, 200):  # 0.850 to 0.995 by 0.005
                rule = replace(chosen, bilingual=x / 200,
                               bilingual_floor=chosen.bilingual_floor if chosen.bilingual_floor <= 1.0 else 0.0)
                got = {}
                for p in ("dev", "held"):
                    part = [r for r in across if r["split"] == p]
                    got[p] = score(part, [sameness.verdict(facets[r["a"]], facets[r["b"]], r["cos"][m], rule, None,
                                                           r["cos" if scale == "stored" else "sym"][m])[0]
                                          for r in part])
                judged.append((rule.bilingual, got["dev"]["tp"], got["dev"]["fp"], got["held"]["tp"], got["held"]["fp"]))
            mine["two_languages"][scale] = {
                "pairs": len(across), "positives": sum(r["same"] for r in across),
                "dev_positives": sum(r["same"] for r in across if r["split"] == "dev"),
                "rows (threshold, dev tp, dev fp, held tp, held fp)": [j for j in judged if j[1] or j[3]]}
        for p, rs in parts.items():
            s = score(rs, [verdicts[id(r)] for r in rs])
            mine[p] = brief(s)
            if p == "all":
                mine["missed"], mine["wrong"] = s["missed"], s["wrong"]
        kinds: dict = {}
        for r in rows:
            k = kinds.setdefault(f"{'same' if r['same'] else 'differ'}:{r['kind']}", {"n": 0, "dedup": 0, "review": 0})
            k["n"] += 1
            v = verdicts[id(r)]
            if v:
                k[v] += 1
        mine["by_kind"] = kinds
        langs: dict = {}
        for r in rows:
            if r["lang"] != "en":
                k = langs.setdefault(r["lang"], {"same": 0, "same_dedup": 0, "differ": 0, "differ_dedup": 0})
                key = "same" if r["same"] else "differ"
                k[key] += 1
                k[key + "_dedup"] += verdicts[id(r)] == "dedup"
        mine["languages"] = langs
        report["models"][m] = mine
    if len(models) == 2:  # the agreement of two models: each past its own threshold
        a, b = models
        ta, tb = thresholds.for_model(a).dedup, thresholds.for_model(b).dedup
        agree = []
        for x in range(85, 99):
            for y in range(70, 95, 2):
                s = score(parts["dev"], ["dedup" if r["cos"][a] >= x / 100 and r["cos"][b] >= y / 100
                                         and sameness.differs(facets[r["a"]], facets[r["b"]]) is None else None
                                         for r in parts["dev"]])
                agree.append((x / 100, y / 100, s["recall"], s["precision"] or 0.0))
        ok = [x for x in agree if x[3] >= 0.98]
        best = max(ok, key=lambda x: (x[2], x[0])) if ok else max(agree, key=lambda x: (x[3], x[2]))
        report["two_models_with_keys_best_on_dev"] = {a: best[0], b: best[1], "recall": best[2], "precision": best[3]}
        s = score(rows, ["dedup" if r["cos"][a] >= ta and r["cos"][b] >= tb else None for r in rows])
        report["two_models_alone_at_their_thresholds"] = {"recall": s["recall"], "precision": s["precision"]}
    if args.chat:
        report["chat"] = chat_judge(rows, args)
    if args.json:
        print(json.dumps(report, indent=1, ensure_ascii=False))
    else:
        for m, mine in report["models"].items():
            print(m, "today", mine["today"]["all"], "\n  chosen", mine["rule"], "dev", mine["dev"], "held", mine["held"])
    return 0


def chat_judge(rows: list[dict], args) -> dict:
    """The chat model asked yes/no for each pair: is it better than chance?"""
    import math

    from pmem.models.generate import load_generator

    gen = load_generator(args.chat_model or None, os.environ.get("PMEM_MODELS_DIR"))
    system = ("You compare two notes. Answer with JSON {\"same\": true} when both state exactly the same fact, "
              "{\"same\": false} when they differ in any name, number, date, place, person or negation.")
    right = yes = 0
    t0 = time.perf_counter()
    for r in rows:
        msgs = [{"role": "system", "content": system},
                {"role": "user", "content": f"Note 1: {r['a']}\nNote 2: {r['b']}\nThe same fact?"}]
        try:
            said = bool(gen.generate_json(msgs, SAME_SCHEMA, max_tokens=16).get("same"))
        except Exception:  # noqa: BLE001 - a failed answer counts as "no"
            said = False
        yes += said
        right += said == r["same"]
    n = len(rows)
    base = max(sum(r["same"] for r in rows), n - sum(r["same"] for r in rows)) / n
    # one-sided binomial p of doing this well by guessing at the majority rate
    p = sum(math.comb(n, k) * base ** k * (1 - base) ** (n - k) for k in range(right, n + 1))
    return {"model": getattr(gen, "name", "?"), "accuracy": round(right / n, 3), "said_yes": yes, "pairs": n,
            "majority_baseline": round(base, 3), "p_better_than_majority": round(p, 4),
            "seconds_per_pair": round((time.perf_counter() - t0) / n, 2)}


# -- merging turns (--turn-merges) ----------------------------------------------------------------

def turn_merges_main(args) -> int:
    """Are turns of one conversation worth merging? One conversation's turns stored as archival
    notes outside a thread (so that merge may take them), merged by the configured chat model
    within --max-seconds: how many clusters form, how many merges the model writes that pass
    the grounding gate, and how many of those keep every content word of their members."""
    from pmem.records import Memory

    tmp = Path(tempfile.mkdtemp(prefix="pmem-dream-turns-"))
    os.environ["PMEM_HOME"] = str(tmp)
    os.environ["PMEM_EMBED_MODEL"] = args.embed
    conv = locomo.load()[0]
    with MemoryStore(tmp / "turns.db", config=load_config()) as store:
        turns = locomo.turn_records(conv)
        store.insert([Memory(id="", text=t["text"], tier="archival", created_at=t["created_at"], meta=t["meta"])
                      for t in turns], kind="import", keep_ids=False)
        t0 = time.perf_counter()
        plan = dream.plan(store, only={"merge"}, now=NOW, max_seconds=args.max_seconds)
        reasons: dict[str, int] = {}
        for d in plan.dropped:
            key = d["reason"].split(":")[0]
            reasons[key] = reasons.get(key, 0) + 1
        before = sum(estimate_tokens(store.get(i).text) for p in plan.proposals for i in p.members)
        after = sum(estimate_tokens(p.result_text or "") for p in plan.proposals)
        figures = {"turns": len(turns), "tokens": sum(estimate_tokens(t["text"]) for t in turns),
                   "model": plan.generator, "seconds": round(time.perf_counter() - t0, 1), "complete": plan.complete,
                   "clusters_tried": len(plan.proposals) + len(plan.dropped), "merges": len(plan.proposals),
                   "dropped": reasons, "tokens_saved": before - after,
                   "examples": [{"members": [store.get(i).text for i in p.members], "merged": p.result_text}
                                for p in plan.proposals[:3]],
                   "refused": [d.get("text") for d in plan.dropped if d["reason"].startswith("would drop")][:3]}
    print(json.dumps(figures, indent=1, ensure_ascii=False))
    return 0


# -- the plan alone, two trees interleaved (--plan-speed) ------------------------------------------

# Run in a child process with one tree's pmem first on PYTHONPATH: the plan of a copy of the store.
_PLAN_ONCE = """
import json, os, shutil, sys, tempfile, time
from pathlib import Path
src, chat = Path(sys.argv[1]), sys.argv[2] == "chat"
sys.path.append(sys.argv[3])  # this file's folder, after the tree's pmem
tmp = Path(tempfile.mkdtemp(prefix="pmem-plan-speed-"))
os.environ["PMEM_HOME"] = str(tmp / "home")
shutil.copy(src, tmp / src.name)
wall0, cpu0 = time.perf_counter(), time.process_time()
import pmem
from pmem import dream
from pmem.config import load
from pmem import MemoryStore
from dream_plan_compare import normalized
store = MemoryStore(tmp / src.name, config=load())
wall1, cpu1 = time.perf_counter(), time.process_time()
plan = dream.plan(store, now="2026-01-01T00:00:00Z", generator=None if chat else False)
wall2, cpu2 = time.perf_counter(), time.process_time()
model = {}  # what the chat model was asked, where the tree counts it (LlamaGenerator.stats)
try:
    from pmem.models.cache import PROCESS
except ImportError:  # a tree from before the ModelCache
    PROCESS = None
for g in getattr(getattr(store.vectors, "models", None) or PROCESS, "generators", {}).values():
    for k, v in getattr(g, "stats", {}).items():
        model[k] = model.get(k, 0) + v
print(json.dumps({"pmem": pmem.__file__, "plan_s": wall2 - wall1, "plan_cpu_s": cpu2 - cpu1,
                  "process_s": wall2 - wall0, "model": model, "load": os.getloadavg()[0],
                  "plan": normalized(store, plan)}, ensure_ascii=False))
store.close()
shutil.rmtree(tmp)
"""


def build_synthetic(store: MemoryStore, n: int) -> None:
    """`n` memories: every conversation's turns and facts (as build() stores them) again and again,
    each copy's texts told apart by a trailing number, each copy a year later."""
    from pmem.records import Memory

    base: list[tuple[str, str, str, dict]] = []
    for conv in locomo.load():
        for t in locomo.turn_records(conv):
            base.append((t["text"], "episodic", t["created_at"], t["meta"]))
        dates = {k: date for k, date, _ in locomo.sessions(conv)}
        for key, speakers in sorted(conv["observation"].items(), key=lambda kv: int(kv[0].split("_")[1])):
            for speaker in sorted(speakers):
                for fact in speakers[speaker]:
                    base.append((fact[0], "archival", dates[int(key.split("_")[1])], {}))
    items = []
    for i in range(n):
        text, tier, created, meta = base[i % len(base)]
        copy = i // len(base)
        if copy:
            text = f"{text} ({copy})"
            created = f"{int(created[:4]) - copy:04d}{created[4:]}"
        items.append(Memory(id="", text=text, tier=tier, created_at=created, meta=dict(meta)))
    for start in range(0, n, 2000):
        store.insert(items[start:start + 2000], kind="import", keep_ids=False)


def plan_differences(a: dict, b: dict) -> list[dict]:
    """Where two normalized plans differ: each proposal (or dropped merge) by its kind and members,
    the fields that differ with both values, and those only one plan has."""
    def keyed(plan: dict) -> dict:
        items = [("proposal", p) for p in plan.get("proposals", [])] + [("dropped", d) for d in plan.get("dropped", [])]
        return {(what, x.get("kind"), tuple(x.get("members", ()))): x for what, x in items}

    ka, kb = keyed(a), keyed(b)
    out = []
    for key in sorted(set(ka) | set(kb), key=str):
        x, y = ka.get(key), kb.get(key)
        if x == y:
            continue
        entry: dict = {"what": key[0], "kind": key[1], "first_member": key[2][0][:80] if key[2] else ""}
        if x is None or y is None:
            entry["only_in"] = "first" if y is None else "last"
        else:
            entry["fields"] = {f: [x.get(f), y.get(f)] for f in sorted(set(x) | set(y)) if x.get(f) != y.get(f)}
        out.append(entry)
    rest = {k: [a.get(k), b.get(k)] for k in sorted(set(a) | set(b)) if k not in ("proposals", "dropped")
            and a.get(k) != b.get(k)}
    return out + ([{"what": "plan", "fields": rest}] if rest else [])


def plan_speed_main(args) -> int:
    """The plan alone (no embedding: the store is built once, then copied for every plan), this
    tree's and --against's, one after the other in each round (the order alternating), so that
    both meet the same load: medians, and whether every round's plans were the same. --against is
    a checkout or a git revision (benchmarks/harness.py)."""
    from harness import Tree, median, schedule

    here = Path(__file__).resolve().parent
    trees = {"this tree": Tree("this tree", here.parent)}
    if args.against:
        import atexit
        import shutil

        work = tempfile.mkdtemp(prefix="pmem-plan-tree-")
        atexit.register(shutil.rmtree, work, True)
        trees["against"] = Tree.resolve(f"against={args.against}", Path(work))
    build_s = None
    if args.db:
        db = Path(args.db)
    else:
        tmp = Path(tempfile.mkdtemp(prefix="pmem-plan-speed-"))
        os.environ["PMEM_HOME"] = str(tmp / "home")
        if args.synthetic or "--embed" in sys.argv:  # else the default model (and MiniLM beside it)
            os.environ["PMEM_EMBED_MODEL"] = "fake-384" if args.synthetic else args.embed
        db = tmp / (f"synthetic-{args.synthetic}.db" if args.synthetic else f"{args.conv}.db")
        t0 = time.perf_counter()
        with MemoryStore(db, config=load_config()) as store:
            if args.synthetic:
                build_synthetic(store, args.synthetic)
            else:
                build(store, next(c for c in locomo.load() if c["sample_id"] == args.conv))
        build_s = round(time.perf_counter() - t0, 1)
    runs: dict[str, list[dict]] = {name: [] for name in trees}
    for _, name, _ in schedule(list(trees), args.rounds):  # the order alternating
        env = dict(os.environ, PYTHONPATH=str(trees[name].path))  # as it always ran (bytecode settings kept)
        # -P: the working directory is not put before PYTHONPATH's tree
        done = trees[name].run([sys.executable, "-P", "-c", _PLAN_ONCE, str(db), "chat" if args.chat else "",
                                str(here)], env=env, cwd=Path.cwd())
        runs[name].append(json.loads(done.stdout))
    plans = [run["plan"] for rs in runs.values() for run in rs]
    first = plans[0]
    figures = {"store": str(db), "memories": first["considered"], "build_and_embed_s": build_s, "chat": args.chat,
               "rounds": args.rounds, "same_plan": all(p == first for p in plans),
               "proposals": first["counts"] if "counts" in first else None}
    if not figures["same_plan"]:
        figures["differences"] = plan_differences(plans[0], plans[-1])
    for name, rs in runs.items():
        figures[name] = {"pmem": rs[0]["pmem"],
                         "plan_s_median": round(median([x["plan_s"] for x in rs]), 3),
                         "plan_cpu_s_median": round(median([x["plan_cpu_s"] for x in rs]), 3),
                         "process_s_median": round(median([x["process_s"] for x in rs]), 3),
                         "plan_s": [round(x["plan_s"], 2) for x in rs],
                         "plan_cpu_s": [round(x["plan_cpu_s"], 2) for x in rs],
                         "load_1min": [round(x.get("load", 0), 1) for x in rs], "model": rs[0].get("model")}
    print(json.dumps(figures, indent=1, ensure_ascii=False))
    return 0 if figures["same_plan"] else 1


if __name__ == "__main__":
    raise SystemExit(main())

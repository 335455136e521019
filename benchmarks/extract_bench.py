"""Extraction benchmark on LoCoMo (../shared/data/locomo_dev.json), session by session.

For each session the dialogue ("date" line, then "Speaker: text" lines) goes through
`pmem.extract.extract` into a fresh store per conversation (so later sessions reconcile against
earlier ones). Stored facts are compared with the session's reference `observation` facts:
a match is cosine >= --match (all-MiniLM-L6-v2). Reported:

  recall        share of reference observations matched by some stored fact
  precision     share of stored facts that match some reference observation
  ungrounded    stored facts that fail check_grounding against the session text, as said or with
                its relative dates resolved (target 0)
  rejected      facts the grounding gate refused
  s/1k tokens   extraction wall time per 1,000 input tokens (chat model tokenizer), median
  R@10          evidence recall@10 of hybrid search over the turns alone, and over the turns
                plus the stored facts (a fact counts as the turn it came from), categories 1-4,
                questions whose evidence lies in the sessions run; the facts either stand
                alone ("unlinked") or are derived_from their turn, so that search gives a
                fact and its turn one slot ("linked", the way pmem stores them)

Usage (from the repository root):

  python benchmarks/extract_bench.py --conversations conv-26 --sessions 4
  python benchmarks/extract_bench.py --model /path/to/other-chat.gguf --sessions 4
  python benchmarks/extract_bench.py --model rules      # no model: every candidate sentence
  python benchmarks/extract_bench.py --samples 5         # print matches to check by hand
  python benchmarks/extract_bench.py --retrieval-from out.json   # redo R@10 from a --json file
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pmem import MemoryStore  # noqa: E402
from pmem import extract as ex  # noqa: E402
from pmem.config import load as load_config  # noqa: E402
from pmem.search import search  # noqa: E402
from pmem.store import Filter  # noqa: E402


class RulesOnly:
    """Baseline without a model: every candidate sentence becomes a fact."""

    name = "rules-only"
    strong = False

    def generate_json(self, messages, schema, max_tokens=256):
        n = schema["properties"]["labels"]["minItems"]
        return {"labels": ["event"] * n}

    def count_tokens(self, text):
        return int(len(text) / 4)


def sessions(conv):
    c = conv["conversation"]
    i = 1
    while f"session_{i}" in c:
        yield i, c[f"session_{i}_date_time"], c[f"session_{i}"]
        i += 1


def _resolved(text: str, said: str) -> str:
    from pmem.dates import resolve_relative

    when = ex.parse_date(said) or said
    return resolve_relative(text, when)[0]


def cosine_matrix(a, b):
    import numpy as np

    return np.asarray(a) @ np.asarray(b).T if len(a) and len(b) else np.zeros((len(a), len(b)))


def retrieval(inputs: list[dict], tmp: Path, cfg) -> dict[str, list[int]]:
    """Evidence hits@10 over turns alone, turns + unlinked facts, turns + linked facts."""
    r10 = {"turns": [0, 0], "turns+facts unlinked": [0, 0], "turns+facts linked": [0, 0]}
    for item in inputs:
        for label in r10:
            rs = MemoryStore(tmp / f"{item['conversation']}-{label}.db", config=cfg)
            turns = [rs.new_memory(t, meta={"dia_id": d}, memory_id=f"t{i:05d}") for i, (t, d) in enumerate(item["turns"])]
            by_dia = {m.meta["dia_id"]: m.id for m in turns}
            facts = []
            if label != "turns":
                for t, d in item["facts"]:
                    linked = label.endswith(" linked")
                    facts.append(rs.new_memory(t, meta={"dia_id": d},
                                               derived_from=[by_dia[d]] if linked else ()))
            rs.insert(turns + facts)
            for q in item["questions"]:
                hits = search(rs, q["question"], Filter(), limit=10)
                ids = {h.memory.meta.get("dia_id") for h in hits}
                r10[label][0] += bool(ids & set(q["evidence"]))
                r10[label][1] += 1
            rs.close()
    return r10


def r10_figures(r10: dict[str, list[int]]) -> dict:
    out = {"questions": r10["turns"][1]}
    for label, (hit, total) in r10.items():
        out["r10_" + label.replace("+", "_").replace(" ", "_")] = round(hit / max(total, 1), 3)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "locomo_dev.json"))
    p.add_argument("--conversations", default="conv-26", help="comma-separated sample ids, or 'all'")
    p.add_argument("--sessions", type=int, default=4, help="first N sessions of each conversation (0: all)")
    p.add_argument("--model", default=None, help="chat model (default: config chat_model); 'rules' for none")
    p.add_argument("--mode", default=None, choices=("auto", "label", "rewrite"),
                   help="extract_mode for the chat model (default: config)")
    p.add_argument("--match", type=float, default=0.7, help="cosine for a fact to match an observation "
                   "(under --judge-model)")
    p.add_argument("--judge-model", default="all-MiniLM-L6-v2",
                   help="embedding model that judges fact/observation matches: fixed, so the figures do "
                        "not move with the store's embed_model (whose cosine scale differs)")
    p.add_argument("--samples", type=int, default=0, help="print N fact/observation pairs per session")
    p.add_argument("--json", dest="json_out", default=None, help="write the figures to this file")
    p.add_argument("--retrieval-from", default=None,
                   help="skip extraction: recompute R@10 from the turns and facts saved in this --json file")
    args = p.parse_args()

    data = json.load(open(args.data, encoding="utf-8"))
    wanted = None if args.conversations == "all" else set(args.conversations.split(","))
    convs = [c for c in data if wanted is None or c["sample_id"] in wanted]
    os.environ.setdefault("PMEM_MODELS_DIR", str(ROOT / ".models-cache"))
    tmp = Path(tempfile.mkdtemp(prefix="pmem-bench-"))
    os.environ["PMEM_HOME"] = str(tmp)
    cfg = load_config()
    if args.retrieval_from:
        saved = json.load(open(args.retrieval_from, encoding="utf-8"))
        print(json.dumps(r10_figures(retrieval(saved["retrieval_inputs"], tmp, cfg)), indent=2))
        return 0
    if args.model == "rules":
        gen = RulesOnly()
    else:
        from pmem.models.generate import load_generator

        gen = load_generator(args.model, threads=cfg.threads, mode=args.mode, settings=cfg)
    rows, totals = [], {"obs": 0, "found": 0, "stored": 0, "correct": 0, "ungrounded": 0, "rejected": 0}
    inputs = []
    from pmem.models.embed import load_embedder

    judge = load_embedder(args.judge_model, threads=cfg.threads)
    for conv in convs:
        store = MemoryStore(tmp / f"{conv['sample_id']}.db", config=cfg)
        emb = store.embedder
        turn_mems, fact_mems, done_ids = [], [], set()
        for n, date, turns in sessions(conv):
            if args.sessions and n > args.sessions:
                break
            text = date + "\n" + "\n".join(f"{t['speaker']}: {t['text']}" for t in turns)
            tokens = gen.count_tokens(text)
            t0 = time.perf_counter()
            result = ex.extract(store, text, generator=gen)
            secs = time.perf_counter() - t0
            parsed = ex.parse_input(text)
            stored = [f for f in result.facts if f.action in ("add", "update", "supersede")]
            obs = [o[0] for facts in conv["observation"].get(f"session_{n}_observation", {}).values() for o in facts]
            fv, ov = judge.embed([f.text for f in stored]), judge.embed(obs)
            sim = cosine_matrix(fv, ov)
            found = int((sim.max(axis=0) >= args.match).sum()) if len(stored) and obs else 0
            correct = int((sim.max(axis=1) >= args.match).sum()) if len(stored) and obs else 0
            # a fact's relative dates are resolved against when it was said ("yesterday" -> "on 7 May
            # 2023"), so it is checked against the session as said and as resolved (as import_bench audits)
            ungrounded = sum(not ex.check_grounding(store.get(f.id).text, [text, _resolved(text, f.date or date)],
                                                    emb, min_support=cfg.extract_min_support,
                                                    min_similarity=store.thresholds().grounding).ok
                             for f in stored)
            rows.append({"conversation": conv["sample_id"], "session": n, "tokens": tokens, "seconds": secs,
                         "s_per_1k": 1000 * secs / max(tokens, 1), "observations": len(obs), "stored": len(stored),
                         "found": found, "correct": correct, "rejected": len(result.rejected),
                         "ungrounded": ungrounded, "recall": found / len(obs) if obs else None,
                         "precision": correct / len(stored) if stored else None})
            for k, v in (("obs", len(obs)), ("found", found), ("stored", len(stored)), ("correct", correct),
                         ("ungrounded", ungrounded), ("rejected", len(result.rejected))):
                totals[k] += v
            print(f"{conv['sample_id']} s{n}: {len(stored)} stored, recall {found}/{len(obs)}, "
                  f"precision {correct}/{len(stored)}, rejected {len(result.rejected)}, "
                  f"{rows[-1]['s_per_1k']:.1f} s/1k tokens", file=sys.stderr)
            if args.samples and len(stored) and obs:
                for i, f in enumerate(stored[: args.samples]):
                    j = int(sim[i].argmax())
                    print(f"   {sim[i, j]:.2f}  {f.text!r}\n         ~ {obs[j]!r}", file=sys.stderr)
            by_turn = {t.index: turns[t.index]["dia_id"] for t in parsed}
            done_ids.update(t["dia_id"] for t in turns)
            turn_mems += [(f"{t['speaker']}: {t['text']}", t["dia_id"]) for t in turns]
            fact_mems += [(store.get(f.id).text, by_turn[f.turn]) for f in stored]
        store.close()
        qs = [{"question": q["question"], "evidence": q["evidence"]} for q in conv["qa"]
              if q.get("category") in (1, 2, 3, 4) and q.get("evidence") and set(q["evidence"]) <= done_ids]
        inputs.append({"conversation": conv["sample_id"], "turns": turn_mems, "facts": fact_mems, "questions": qs})
    r10 = retrieval(inputs, tmp, cfg)

    def med(key):
        vals = [r[key] for r in rows if r[key] is not None]
        return round(statistics.median(vals), 3) if vals else None

    summary = {
        "model": gen.name, "mode": "rewrite" if getattr(gen, "strong", False) else "label", "conversations": [c["sample_id"] for c in convs], "sessions": len(rows),
        "match_cosine": args.match, "min_support": cfg.extract_min_support,
        "recall_pooled": round(totals["found"] / max(totals["obs"], 1), 3),
        "precision_pooled": round(totals["correct"] / max(totals["stored"], 1), 3),
        "recall_median": med("recall"), "precision_median": med("precision"),
        "stored": totals["stored"], "ungrounded_stored": totals["ungrounded"], "gate_rejected": totals["rejected"],
        "s_per_1k_tokens_median": med("s_per_1k"),
        **r10_figures(r10),
    }
    print(json.dumps(summary, indent=2))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"summary": summary, "sessions": rows,
                                                   "retrieval_inputs": inputs}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

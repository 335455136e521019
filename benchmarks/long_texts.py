"""Long memories in multilingual-e5-small: which 510-token windows to embed, by retrieval.

    python benchmarks/long_texts.py --group 6 --data ../shared/data/locomo_dev.json

A memory longer than e5's 512 positions is cut into windows; embedding every one costs ~1.6 s a
window on this machine (a 50,000-character paste: 21 s), so pmem embeds at most
pmem.models.e5.MAX_WINDOWS of them. This builds long memories from LoCoMo (each `--group`
consecutive sessions of a conversation joined into one text, ~10 windows), embeds every window
once, and then scores ways of choosing windows by the questions whose evidence lies in a memory:
recall@1 and MRR of that memory among all of them, for every window (pmem's old way), the first
N, and N spread evenly over the text (the first, the last and evenly between). The vector is the
token-weighted mean of the chosen windows' mean-pooled states, as E5Embedder computes it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pmem.models import provision  # noqa: E402
from pmem.models.e5 import E5Embedder, spread  # noqa: E402

import locomo  # noqa: E402


def documents(convs: list[dict], group: int) -> tuple[list[str], dict[str, int]]:
    """Long texts (`group` sessions each) and which text holds each turn id."""
    texts, where = [], {}
    for conv in convs:
        sessions = locomo.sessions(conv)
        for start in range(0, len(sessions), group):
            lines = []
            for _, date, turns in sessions[start:start + group]:
                lines.append(f"[{date}]")
                for t in turns:
                    lines.append(f"{t['speaker']}: {t['text']}")
                    where[f"{conv['sample_id']}:{t['dia_id']}"] = len(texts)
            texts.append("\n".join(lines))
    return texts, where


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--group", type=int, default=6)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--data", type=Path, default=locomo.DATA)
    ap.add_argument("--convs", type=int, default=5, help="LoCoMo conversations used")
    args = ap.parse_args()
    convs = locomo.load(args.data)[:args.convs]
    texts, where = documents(convs, args.group)
    e = E5Embedder(provision.ensure_model("multilingual-e5-small", progress=False), threads=args.threads)
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    windows: list[np.ndarray] = []  # per text: [windows, dim] mean-pooled states
    weights: list[np.ndarray] = []
    t0 = time.perf_counter()
    n_windows = 0
    for text in texts:
        seqs = e.windows(e.tokenize(text))
        windows.append(np.concatenate([e._forward([s]) for s in seqs]))
        weights.append(np.array([max(1, len(s) - 2) for s in seqs], np.float64))
        n_windows += len(seqs)
        print(f"{len(windows)}/{len(texts)} texts, {n_windows} windows, {time.perf_counter() - t0:.0f} s",
              file=sys.stderr, flush=True)
    per_window = (time.perf_counter() - t0) / n_windows
    qs = [(q, where[f"{c['sample_id']}:{q['evidence'][0]}"]) for c in convs for q in locomo.questions(c)
          if q.get("evidence") and f"{c['sample_id']}:{q['evidence'][0]}" in where]
    qv = e.embed_array([q["question"] for q, _ in qs], query=True)

    def score(choose) -> dict:
        docs = []
        for w, k in zip(windows, weights):
            idx = choose(len(w))
            v = (w[idx] * k[idx, None]).sum(0) / k[idx].sum()
            docs.append(v / np.linalg.norm(v))
        sims = qv @ np.array(docs).T
        ranks = [int((row > row[target]).sum()) + 1 for row, (_, target) in zip(sims, qs)]
        return {"r@1": round(sum(r == 1 for r in ranks) / len(ranks), 3),
                "r@3": round(sum(r <= 3 for r in ranks) / len(ranks), 3),
                "mrr": round(statistics.mean(1 / r for r in ranks), 3)}

    result = {"texts": len(texts), "questions": len(qs), "windows_per_text": round(n_windows / len(texts), 1),
              "max_windows_per_text": max(len(w) for w in windows), "s_per_window": round(per_window, 2),
              "threads": args.threads, "uptime": uptime, "all windows": score(lambda n: list(range(n)))}
    for n in (1, 2, 3, 4, 6):
        result[f"first {n}"] = score(lambda m, n=n: list(range(min(n, m))))
        result[f"spread {n}"] = score(lambda m, n=n: spread(m, n))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

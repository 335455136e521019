"""all-MiniLM-L6-v2 against multilingual-e5-small, in one run: retrieval and speed.

    python benchmarks/multilingual.py                     # everything (LoCoMo takes a few minutes)
    python benchmarks/multilingual.py --skip-locomo       # the multilingual set and speed only
    python benchmarks/multilingual.py --models multilingual-e5-small --json

1. pmem's multilingual set (benchmarks/data/multilingual.json: 72 memories in Russian, German,
   Spanish, French and English, two paraphrased queries each, plus cross-lingual queries):
   top-1 and top-3 per retriever (dense, keyword, hybrid), monolingual by language, and
   cross-lingual (a hit when any of the listed memories ranks there). The set is checked first:
   no monolingual query may share a content word, in the same form, with its memory.
2. Dev LoCoMo (../shared/data/locomo_dev.json, one memory per turn): evidence R@5/R@10 for dense,
   keyword and hybrid, and hybrid re-tuned: every keyword weight 0-1 (step 0.05) of pmem's convex
   fusion (pmem.search) over the same candidate lists.
3. Speed: model load plus the first embedding, in a fresh process (median of 3), texts/s on
   200 LoCoMo turns with 1 and 2 threads (each in its own process), and (--only-speed) whole
   `pmem search` / `pmem add` processes with and without `pmem serve`, models alternating.
4. Cosine thresholds: the share of LoCoMo turn pairs above each of pmem's MiniLM thresholds, and
   the e5 cosine the same share reaches; paraphrase pairs' cosines under each model.
Keyword search is measured twice: pmem's FTS5 (porter, English stop words) and the prototype of
pmem.stemming (per-language stop words and Snowball stems, in a side FTS5 index).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import locomo  # noqa: E402

SET = HERE / "data" / "multilingual.json"
MODELS = ["all-MiniLM-L6-v2", "multilingual-e5-small"]
WEIGHTS = [round(0.05 * i, 2) for i in range(21)]
CANDIDATES = [20, 30, 50, 100]  # per list, as pmem.search.Tuning.candidates
SAVE = ""  # --save PREFIX: candidate lists pickled for fusion experiments

# Function words per language, for the dataset check only (search has its own).
STOP = {
    "ru": "а без в во где да для до же за и из или к как какая какие какой каком кого когда ко кто куда ли "
          "мне меня мой моя моё мои моим моим моей мы на над не нет ну о об от по под при про с со так там "
          "то у уже чем что это я ему его её их наш наша нам вы с какого какую сколько свой своя".split(),
    "de": "der die das den dem des ein eine einen einem einer und oder im in am an auf aus bei bis für fürs "
          "mit nach ohne um von vom zu zum zur ist sind wird wurde hat habe mich mir mein meine meiner "
          "meinen unser unsere ich wo wie wann was welche welchen welchem warum muss darf soll ins beim".split(),
    "es": "el la los las un una unos unas de del al a en con para por y o que qué cuál cuándo dónde quién "
          "cómo mi mis me le su es son está están hay tengo se lo".split(),
    "fr": "le la les l un une des de du d au aux à en et ou que qui quel quelle quels est sont je j me m "
          "mon ma mes ce s il elle dans pour par sur chez ne pas quand comment faut ai".split(),
    "en": [],
}


def content_words(text: str, lang: str) -> set[str]:
    from pmem.search import STOP_WORDS

    stop = set(STOP.get(lang, ())) | STOP_WORDS
    return {w for w in re.findall(r"\w+", text.lower()) if w not in stop and not w.isdigit()}


def check_set(data: dict) -> list[str]:
    by_id = {m["id"]: m for m in data["memories"]}
    problems = []
    for q in data["queries"]:
        if q["cross"]:
            continue
        m = by_id[q["targets"][0]]
        shared = content_words(q["text"], q["lang"]) & content_words(m["text"], m["lang"])
        if shared:
            problems.append(f"{m['id']}: {q['text']!r} shares {sorted(shared)}")
    return problems


# --- retrieval ----------------------------------------------------------------------------


def fuse(kw: list[tuple[int, float]], sem: list[tuple[int, float]], weight: float) -> list[int]:
    """pmem.search's hybrid score for one keyword weight: seqs best first."""
    from pmem.search import _minmax

    scores: dict[int, float] = {}
    for w, pairs in ((weight, [(s, -b) for s, b in kw]), (1.0 - weight, [(s, 1.0 - d) for s, d in sem])):
        for seq, norm in _minmax(pairs):
            scores[seq] = scores.get(seq, 0.0) + w * norm
    return [s for s, _ in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))]


class StemIndex:
    """The prototype of pmem.stemming: each memory's stems in an FTS5 index of their own (in
    memory, beside the store), queried with the query's stems OR-ed; BM25 as pmem's."""

    def __init__(self, store):
        import sqlite3

        from pmem import stemming

        self.stemming = stemming
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE VIRTUAL TABLE f USING fts5(body, tokenize='unicode61 remove_diacritics 0')")
        rows = store.conn.execute("SELECT seq, text FROM memories").fetchall()
        self.db.executemany("INSERT INTO f (rowid, body) VALUES (?, ?)",
                            [(seq, stemming.normalize(text)) for seq, text in rows])

    def ranks(self, query: str, n: int) -> list[tuple[int, float]]:
        terms = self.stemming.query_terms(query)
        if not terms:
            return []
        match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        return [(r[0], r[1]) for r in self.db.execute(
            "SELECT rowid, bm25(f) FROM f WHERE f MATCH ? ORDER BY bm25(f) LIMIT ?", (match, n))]


def candidate_lists(store, questions: list[str], n: int = 100, stems: bool = True):
    """Per question: (FTS5 keyword list, dense list, stemmed keyword list or [])."""
    from pmem.search import keyword_ranks, semantic_ranks
    from pmem.store import Filter

    index = StemIndex(store) if stems else None
    out = []
    for q in questions:
        kw = keyword_ranks(store, q, Filter(), n)
        sem = semantic_ranks(store, q, Filter(), n, vector=store.query_vector(q))
        out.append((kw, sem, index.ranks(q, n) if index else []))
    return out


def new_store(tmp: Path, name: str, embedder):
    from pmem import MemoryStore, config

    return MemoryStore(tmp / f"{name}.db", config=config.load(), embedder=embedder)


def multilingual_set(embedder, tmp: Path, weight: float) -> dict:
    from pmem import Memory

    data = json.loads(SET.read_text(encoding="utf-8"))
    store = new_store(tmp, f"ml-{embedder.name}-{weight}", embedder)
    store.insert([Memory(id="", text=m["text"], meta={"key": m["id"]}) for m in data["memories"]])
    seq_key = dict(store.conn.execute("SELECT seq, json_extract(meta, '$.key') FROM memories").fetchall())
    lists = candidate_lists(store, [q["text"] for q in data["queries"]])
    if SAVE:
        import pickle

        with open(f"{SAVE}.{embedder.name}.set.pickle", "wb") as f:
            pickle.dump([(q, [[(seq_key[x], v) for x, v in lst] for lst in lists_q])
                         for q, lists_q in zip(data["queries"], lists)], f)
    groups: dict[str, dict[str, list[tuple[int, int]]]] = {}
    for q, (kw, sem, kws) in zip(data["queries"], lists):
        group = "cross" if q["cross"] else q["lang"]
        targets = set(q["targets"])
        for mode, ranked in (("dense", [s for s, _ in sem]), ("keyword", [s for s, _ in kw]),
                             ("hybrid", fuse(kw, sem, weight)), ("keyword, stemmed", [s for s, _ in kws]),
                             ("hybrid, stemmed", fuse(kws, sem, weight))):
            keys = [seq_key[s] for s in ranked[:3]]
            hit1, hit3 = int(bool(keys[:1] and keys[0] in targets)), int(bool(targets & set(keys)))
            for g in (group, "monolingual" if not q["cross"] else None):
                if g:
                    groups.setdefault(mode, {}).setdefault(g, []).append((hit1, hit3))
    store.close()
    return {mode: {g: {"n": len(v), "top1": round(sum(a for a, _ in v) / len(v), 3),
                       "top3": round(sum(b for _, b in v) / len(v), 3)} for g, v in sorted(by.items())}
            for mode, by in groups.items()}


def locomo_dev(embedder, tmp: Path) -> dict:
    from pmem import Memory

    per_q = []  # (evidence, kw seqs->dia, sem, ...)
    t0 = time.perf_counter()
    for conv in locomo.load():
        store = new_store(tmp, f"{conv['sample_id']}-{embedder.name}", embedder)
        records = locomo.turn_records(conv)
        store.insert([Memory(id="", text=r["text"], created_at=r["created_at"], meta=r["meta"]) for r in records])
        dia = dict(store.conn.execute("SELECT seq, json_extract(meta, '$.dia_id') FROM memories").fetchall())
        qs = locomo.questions(conv)
        for q, (kw, sem, kws) in zip(qs, candidate_lists(store, [q["question"] for q in qs])):
            per_q.append((set(q["evidence"]), [(dia[s], v) for s, v in kw], [(dia[s], v) for s, v in sem],
                          [(dia[s], v) for s, v in kws]))
        store.close()
    seconds = time.perf_counter() - t0
    if SAVE:
        import pickle

        with open(f"{SAVE}.{embedder.name}.locomo.pickle", "wb") as f:
            pickle.dump(per_q, f)

    def recall(rankings: list[list[str]], k: int) -> float:
        return round(sum(bool(q[0] & set(r[:k])) for q, r in zip(per_q, rankings)) / len(per_q), 3)

    def both(rankings):
        return {"R@5": recall(rankings, 5), "R@10": recall(rankings, 10)}

    out = {"questions": len(per_q), "seconds": round(seconds, 1),
           "dense": both([[d for d, _ in q[2]] for q in per_q]),
           "keyword": both([[d for d, _ in q[1]] for q in per_q]),
           "keyword, stemmed": both([[d for d, _ in q[3]] for q in per_q])}
    for label, key in (("hybrid", 1), ("hybrid, stemmed", 3)):
        sweep = {(w, n): both([fuse(q[key][:n], q[2][:n], w) for q in per_q]) for w in WEIGHTS for n in CANDIDATES}
        best = max(sweep, key=lambda wn: (sweep[wn]["R@10"], sweep[wn]["R@5"], -abs(wn[0] - 0.6), wn[1] == 100))
        out[f"{label} (keyword weight 0.6)"] = sweep[(0.6, 100)]
        out[f"{label} re-tuned"] = {"keyword_weight": best[0], "candidates": best[1], **sweep[best]}
        out[f"{label} R@10 by weight (100 candidates)"] = {str(w): sweep[(w, 100)]["R@10"] for w in WEIGHTS}
        out[f"{label} best R@10 by candidates"] = {str(n): max(sweep[(w, n)]["R@10"] for w in WEIGHTS) for n in CANDIDATES}
    return out


# --- cosine thresholds -----------------------------------------------------------------------

# pmem's cosine thresholds, tuned on MiniLM (dream.py, extract.py, recall.py, config.py).
MINILM_THRESHOLDS = {"dedup": 0.92, "supersede / contained": 0.85, "merge": 0.80, "grounding": 0.5,
                     "compress topic": 0.35, "recall cut-off": 0.2}
PARAPHRASES = [
    ("I prefer dark mode in every code editor", "In code editors I always prefer dark mode"),
    ("My sister lives in Porto and works as an architect", "My sister is an architect living in Porto"),
    ("The dentist moved my appointment to Thursday at 3pm", "My dentist appointment is now Thursday, 3pm"),
    ("I stopped drinking coffee in January", "Since January I no longer drink coffee"),
    ("We keep the spare key under the blue flowerpot", "The spare key is under the blue flower pot"),
    ("Машина стоит на третьем уровне парковки", "Я оставил машину на третьем уровне парковки"),
    ("Я бросил курить в январе", "С января я не курю"),
    ("Meine Schwester wohnt in Hamburg", "Meine Schwester lebt in Hamburg"),
]


def cosine_profile(embedder, query: bool = False) -> dict:
    """Cosines of unrelated-or-related pairs (all pairs of 300 LoCoMo turns) and of paraphrases;
    `query`: every text embedded as a search query (e5's "query: " on both sides)."""
    import numpy as np

    kw = {"query": True} if query else {}
    texts = [r["text"] for r in locomo.turn_records(locomo.load()[0])][:300]
    v = np.asarray(embedder.embed(texts, **kw), np.float32)
    sims = (v @ v.T)[np.triu_indices(len(texts), 1)]
    a = np.asarray(embedder.embed([p[0] for p in PARAPHRASES], **kw), np.float32)
    b = np.asarray(embedder.embed([p[1] for p in PARAPHRASES], **kw), np.float32)
    return {"pairs": np.sort(sims), "paraphrases": [round(float(x), 3) for x in (a * b).sum(axis=1)]}


def map_thresholds(old: dict, new: dict) -> dict:
    """Each MiniLM threshold moved to the e5 cosine that the same share of turn pairs reaches."""
    import numpy as np

    out = {}
    for name, t in MINILM_THRESHOLDS.items():
        share = float((old["pairs"] >= t).mean())
        mapped = float(np.quantile(new["pairs"], 1 - share)) if share > 0 else float(new["pairs"][-1])
        out[name] = {"all-MiniLM-L6-v2": t, "share of turn pairs above": round(share, 5),
                     "multilingual-e5-small": round(mapped, 3)}
    return out


def map_symmetric(embedder) -> dict:
    """Each threshold of e5 with "passage: " memories (pmem.models.thresholds.E5_SMALL) moved to the cosine
    the same share of turn pairs reaches when every text is embedded with "query: ", as
    map_thresholds moved MiniLM's to e5's; a threshold above every passage pair (noop) keeps its
    distance below 1 in proportion to the highest pair's."""
    import numpy as np

    from pmem.models.thresholds import E5_SMALL, as_dict

    old, new = cosine_profile(embedder), cosine_profile(embedder, query=True)
    out = {}
    for name, t in as_dict(E5_SMALL).items():
        if t > 1:
            continue  # "never" stays never
        share = float((old["pairs"] >= t).mean())
        if share > 0:
            mapped = float(np.quantile(new["pairs"], 1 - share))
        else:
            mapped = 1 - (1 - t) * (1 - new["pairs"][-1]) / (1 - old["pairs"][-1])
        out[name] = {"passage": t, "share of turn pairs above": round(share, 5), "symmetric": round(mapped, 3)}
    return {"thresholds": out, "paraphrase cosines passage / symmetric": list(zip(old["paraphrases"], new["paraphrases"])),
            "turn-pair quantiles 50/90/99/99.9%, passage / symmetric": [
                [round(float(p[int(q * (len(p) - 1))]), 3) for q in (0.5, 0.9, 0.99, 0.999)]
                for p in (old["pairs"], new["pairs"])]}


# --- speed --------------------------------------------------------------------------------

_LOAD = """
import sys, time
t = time.perf_counter()
from pmem.models.embed import load_embedder
e = load_embedder(sys.argv[1], threads=int(sys.argv[2]), server="off")
e.embed(["warm up"])
print(time.perf_counter() - t)
"""

_RATE = """
import json, sys, time
sys.path.insert(0, sys.argv[3])
import locomo
from pmem.models.embed import load_embedder
texts = [r["text"] for r in locomo.turn_records(locomo.load()[0])][:200]
e = load_embedder(sys.argv[1], threads=int(sys.argv[2]), server="off")
e.embed(texts[:8])
t = time.perf_counter()
for i in range(0, len(texts), 32):
    e.embed(texts[i:i + 32])
print(len(texts) / (time.perf_counter() - t))
"""


def _run(code: str, *args: str) -> float:
    env = dict(os.environ, PYTHONPATH=str(HERE.parent) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"speed run failed: {r.stderr.strip().splitlines()[-1:]}")
    return float(r.stdout.strip().splitlines()[-1])


def speed(name: str) -> dict:
    load = sorted(_run(_LOAD, name, "1") for _ in range(3))
    return {"load+first embed s (median of 3)": round(load[1], 3),
            "texts/s 1 thread": round(_run(_RATE, name, "1", str(HERE)), 1),
            "texts/s 2 threads": round(_run(_RATE, name, "2", str(HERE)), 1)}


def processes(models: list[str], runs: int) -> dict:
    """Whole `pmem search` and `pmem add` processes on the 72-memory set, each model's store built
    with that model, models alternating within each round (so both see the same load): first with
    every process loading its model (PMEM_SERVER=off), then with `pmem serve` holding both. Medians."""
    import statistics

    from pmem import Memory, MemoryStore

    data = json.loads(SET.read_text(encoding="utf-8"))
    times: dict = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        home = tmp / "h"  # short: the server's socket path must fit in 104 bytes
        base = dict(os.environ, PMEM_HOME=str(home), PYTHONPATH=str(HERE.parent))
        base.pop("PYTHONDONTWRITEBYTECODE", None)  # as latency.py: users' Pythons cache bytecode
        for m in models:
            from pmem.models.embed import load_embedder

            with MemoryStore(tmp / f"{m}.db", embedder=load_embedder(m, server="off")) as st:
                st.insert([Memory(id="", text=x["text"]) for x in data["memories"]])

        def once(m: str, what: str, server: str) -> float:
            env = dict(base, PMEM_EMBED_MODEL=m, PMEM_SERVER=server)
            cmd = [sys.executable, "-m", "pmem", "--db", str(tmp / f"{m}.db")]
            cmd += (["search", "где я оставил автомобиль", "--limit", "3", "--json"] if what == "search"
                    else ["add", f"Я купил новый велосипед {time.time_ns()}"])
            t = time.perf_counter()
            subprocess.run(cmd, env=env, check=True, capture_output=True, cwd=tmp)
            return time.perf_counter() - t

        for server in ("off", "auto"):
            if server == "auto":
                subprocess.run([sys.executable, "-m", "pmem", "serve", "--detach", "--idle", "10m"],
                               env=base, check=True, capture_output=True, cwd=tmp)
                for m in models:
                    once(m, "search", server)  # the server loads each model once
            try:
                for _ in range(runs):
                    for m in models:
                        for what in ("search", "add"):
                            times.setdefault((m, what, server), []).append(once(m, what, server))
            finally:
                if server == "auto":
                    subprocess.run([sys.executable, "-m", "pmem", "serve", "--stop"], env=base, capture_output=True)
    return {f"{m} {what} ({'no server' if server == 'off' else 'pmem serve'}) median s":
            round(statistics.median(v), 3) for (m, what, server), v in times.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=MODELS)
    ap.add_argument("--skip-locomo", action="store_true")
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--only-speed", action="store_true", help="load time, texts/s and whole processes only")
    ap.add_argument("--runs", type=int, default=7, help="whole-process runs per command and model")
    ap.add_argument("--threads", type=int, default=0, help="threads for the retrieval runs (0: pmem's choice)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--map-symmetric", action="store_true",
                    help="only e5's thresholds moved to its \"query: \"-on-both-sides scale (map_symmetric)")
    ap.add_argument("--save", default="", help="pickle the candidate lists to PREFIX.MODEL.*.pickle")
    args = ap.parse_args()
    global SAVE
    SAVE = args.save
    problems = check_set(json.loads(SET.read_text(encoding="utf-8")))
    if problems:
        print("multilingual set: queries share words with their memories:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    from pmem.models.embed import load_embedder

    if args.map_symmetric:
        e5 = load_embedder("multilingual-e5-small", threads=args.threads, server="off")
        print(json.dumps({"load average": round(os.getloadavg()[0], 2), **map_symmetric(e5)}, indent=2))
        return 0
    if args.only_speed:
        print(json.dumps({"load average": round(os.getloadavg()[0], 2), **{m: speed(m) for m in args.models},
                          "processes": processes(args.models, args.runs),
                          "load average after": round(os.getloadavg()[0], 2)}, indent=2 if args.json else None))
        return 0
    result: dict = {"load average": round(os.getloadavg()[0], 2)}
    profiles: dict = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        os.environ["PMEM_HOME"] = str(tmp / "home")
        for name in args.models:
            embedder = load_embedder(name, threads=args.threads, server="off")
            r: dict = {}
            weight = 0.6
            if not args.skip_locomo:
                r["locomo"] = locomo_dev(embedder, tmp)
                weight = r["locomo"]["hybrid re-tuned"]["keyword_weight"]  # (candidates stay 100 here)
            r["multilingual set (hybrid keyword weight %s)" % weight] = multilingual_set(embedder, tmp, weight)
            if weight != 0.6:
                r["multilingual set, hybrid at 0.6"] = multilingual_set(embedder, tmp, 0.6)["hybrid"]
            profile = cosine_profile(embedder)
            profiles[name] = profile
            r["paraphrase cosines"] = profile["paraphrases"]
            r["turn-pair cosine quantiles 50/90/99/99.9%"] = [
                round(float(profile["pairs"][int(q * (len(profile["pairs"]) - 1))]), 3) for q in (0.5, 0.9, 0.99, 0.999)]
            if not args.skip_speed:
                r["speed"] = speed(name)
            result[name] = r
            print(json.dumps({name: r}, ensure_ascii=False), file=sys.stderr, flush=True)
    if set(MODELS) <= set(profiles):
        result["thresholds mapped by share of turn pairs"] = map_thresholds(*(profiles[m] for m in MODELS))
    result["load average after"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result, indent=2, ensure_ascii=False) if args.json else json.dumps(result, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A question is not an answer: memories that are themselves questions, on the dense side.

    python benchmarks/questions.py share                       # how many memories and evidence turns are questions
    python benchmarks/questions.py suite --penalty 0 --cache /tmp/pmem-bench-cache   # retrieval.py --suite at a penalty
    python benchmarks/questions.py scale --db /tmp/pmem-scale/scale-100000.db        # search() with it and without

A quarter of LoCoMo's turns ask ("That's so nice! What pet do you have?"), and e5's "query: " on
both sides puts a question nearest to the turns that ask the same, ahead of the memory that
answers it. pmem.search.asking moves every dense candidate that is a question back by
Tuning.question_penalty of the model's rescaled scale before the fusion. `suite` runs
benchmarks/retrieval.py's suite with the default tunings' penalty set to --penalty (0: search as
before it); `scale` times search() on a copy of a scale.py store (fake-384 vectors; a memory is a
pair of LoCoMo turns, so about a quarter end with a question) with the penalty and without,
interleaved, and MemoryStore.questions alone on each query's dense candidates (the rule's one read).
(`PMEM_LOCOMO_DEV`, `PMEM_MODELS_DIR`, `PMEM_BENCH_CACHE` as for retrieval.py.)
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import runpy
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import fusion_sets  # noqa: E402

import locomo  # noqa: E402


def share() -> dict:
    """Of each set's memories, and of LoCoMo's evidence turns, how many are questions (the test
    of MemoryStore.questions, on a store of each)."""
    from pmem import Memory, MemoryStore
    from pmem.config import load

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        sets = {"paraphrase": fusion_sets.paraphrase_records()[0], "multilingual": fusion_sets.multilingual_records()[0]}
        evidence: set[str] = set()
        turns = []
        for conv in locomo.load():
            records, qs = fusion_sets.locomo_records(conv)
            turns += records
            evidence.update(k for q in qs for k in q.targets)
        sets["locomo"] = turns
        for name, records in sets.items():
            store = MemoryStore(Path(tmp) / f"{name}.db", config=load().with_values(embed_model="fake-64"))
            ms = store.insert([Memory(id="", text=r["text"], meta={"key": r["key"]}) for r in records])
            seq = dict(store.conn.execute("SELECT id, seq FROM memories").fetchall())
            asked = store.questions(seq.values())
            key = {seq[m.id]: r["key"] for m, r in zip(ms, records)}
            cell = {"memories": len(ms), "questions": len(asked)}
            if name == "locomo":
                held = [s for s, k in key.items() if k in evidence]
                cell.update({"evidence turns": len(held), "evidence turns that are questions":
                             sum(s in asked for s in held)})
            out[name] = cell
            store.close()
    return out


def suite(penalty: float, rest: list[str]) -> None:
    s = importlib.import_module("pmem.search")
    from pmem.ranking import profile

    # search() without a profile takes its model's from the registry (for_model): every one there,
    # and the fallback, with this penalty; the names benchmarks pass explicitly too
    profile.DEFAULT = replace(profile.DEFAULT, question_penalty=penalty)
    profile.PROFILES = {name: replace(p, question_penalty=penalty) for name, p in profile.PROFILES.items()}
    s.DEFAULT_TUNING = replace(s.DEFAULT_TUNING, question_penalty=penalty)
    s.ENGLISH_TUNING = replace(s.ENGLISH_TUNING, question_penalty=penalty)
    sys.argv = ["retrieval.py", "--suite", *rest]
    runpy.run_path(str(HERE / "retrieval.py"), run_name="__main__")


def scale(db: Path, count: int, rounds: int) -> dict:
    from pmem import MemoryStore
    from pmem.config import load

    from scale_corpus import NOW, questions, with_and_without

    s = importlib.import_module("pmem.search")
    off = replace(s.DEFAULT_TUNING, question_penalty=0.0)
    qs = questions(count) + [q.text for q in fusion_sets.paraphrase_records()[1]][:count]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "store.db"
        shutil.copy(db, path)
        store = MemoryStore(path, config=load().with_values(embed_model="fake-384"), clock=lambda: NOW)

        asked: list[float] = []

        def questions_of(seqs):
            asked.append(len(store.questions(seqs)) / max(1, len(seqs)))

        times = with_and_without(store, "question penalty", s.DEFAULT_TUNING, off,
                                 ("MemoryStore.questions of the dense candidates, alone", questions_of), qs, rounds)
        memories = store.count()
        store.close()
    return {"memories": memories, "questions": len(qs), "rounds": rounds,
            "share of the dense candidates that are questions": round(sum(asked) / len(asked), 3),
            "ms per query (median)": times, "load average": round(os.getloadavg()[0], 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["share", "suite", "scale"])
    ap.add_argument("--penalty", type=float, default=None, help="suite: Tuning.question_penalty (default: the shipped)")
    ap.add_argument("--db", type=Path, default=None, help="scale: a store scale.py built")
    ap.add_argument("--questions", type=int, default=16, help="scale: LoCoMo questions, and as many paraphrase ones")
    ap.add_argument("--rounds", type=int, default=3, help="scale: rounds after the first (cold) one")
    args, rest = ap.parse_known_args()
    if args.what == "share":
        print(json.dumps(share(), indent=1))
    elif args.what == "suite":
        from pmem.ranking.profile import DEFAULT

        suite(DEFAULT.question_penalty if args.penalty is None else args.penalty, rest)
    else:
        if args.db is None:
            ap.error("scale needs --db")
        print(json.dumps(scale(args.db, args.questions, args.rounds), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

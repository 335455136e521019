"""LoCoMo's temporal questions on `pmem extract`'s path (no chat model, dry run, all 5 conversations).

Each session's text (its date line, then "Speaker: text" lines) goes through `pmem.extract.extract`
as extract_bench feeds it; for each temporal question (category 2) with a date as the answer
(import_bench's `_answer_forms`), do the facts extracted from its evidence turns state the answer's
date? Compare with `import_bench.py --temporal` (the evidence sentences themselves, resolved).

  python benchmarks/temporal_extract_bench.py
"""

import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
os.environ["PMEM_HOME"] = tempfile.mkdtemp(prefix="pmem-temporal-")
os.environ.setdefault("PMEM_MODELS_DIR", str(ROOT / ".models-cache"))

from extract_bench import RulesOnly, sessions  # noqa: E402
from import_bench import _answer_forms  # noqa: E402

from pmem import MemoryStore  # noqa: E402
from pmem import extract as ex  # noqa: E402
from pmem.config import load as load_config  # noqa: E402

import locomo  # noqa: E402

cfg = load_config()
gen = RulesOnly()
total = dated = hits = no_fact = resolved = 0
for conv in locomo.load():
    store = MemoryStore(Path(os.environ["PMEM_HOME"]) / f"{conv['sample_id']}.db", config=cfg)
    facts_by_dia: dict[str, list[str]] = {}
    for _n, date, turns in sessions(conv):
        text = date + "\n" + "\n".join(f"{t['speaker']}: {t['text']}" for t in turns)
        r = ex.extract(store, text, generator=gen, dry_run=True)
        resolved += len(getattr(r, "dates", []))
        for f in r.facts + r.rejected:
            if f.action == "rejected":
                continue
            facts_by_dia.setdefault(turns[f.turn]["dia_id"], []).append(f.text)
    store.close()
    for q in locomo.questions(conv, (2,)):
        total += 1
        forms = _answer_forms(q["answer"])
        if forms is None or not q["evidence"]:
            continue
        dated += 1
        facts = [t for e in q["evidence"] for t in facts_by_dia.get(e, [])]
        no_fact += not facts
        hits += any(f in t for f in forms for t in facts)
    print(conv["sample_id"], total, dated, hits, file=sys.stderr)
print(json.dumps({"temporal_questions": total, "with_a_date_answer": dated, "answer_stated_in_extracted_facts": hits,
                  "evidence_without_a_fact": no_fact, "dates_resolved_in_facts": resolved}))

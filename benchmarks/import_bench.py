"""Importing a chat export: a synthetic ChatGPT export, imported, then imported again.

    PMEM_EMBED_MODEL=fake-384 python benchmarks/import_bench.py                  # 1,000 conversations, 30,000 messages
    python benchmarks/import_bench.py --conversations 20 --messages 30 --model all-MiniLM-L6-v2   # the real model's rate

Writes a ChatGPT export zip (`conversations.json` with a `mapping` tree per conversation, a
regenerated answer, a hidden system message and a tool call in each, as in tests/export_fixtures.py),
then times `pmem.integrations.importers.load` (parse) and `run_import` into a new database, with
the time spent embedding measured inside it (the rest is SQLite: rows, FTS5, vec0, events). Then
imports the same export again (nothing may be added) and reports its time as a share of the first.
With `--via cli` both imports run as `pmem import` processes instead (whole-process times).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))
from export_fixtures import chatgpt_conversation, chatgpt_zip  # noqa: E402

WORDS = ("the a my our this that next last new old small big early late good long short "
         "trip train flight hotel dinner lunch recipe garden tomato bread coffee tea bike run swim "
         "book film song guitar piano class lesson exam project deadline meeting report budget plan "
         "sister brother mother father friend neighbour colleague doctor dentist teacher "
         "Monday Tuesday Friday weekend morning evening week month year summer winter "
         "Lisbon Oslo Kyoto Porto Berlin Denver Austin "
         "want need like love try start finish book move buy cook visit call write read learn fix "
         "because although when before after since until while and but so").split()


def sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(6, 18))]
    return " ".join(words).capitalize() + rng.choice(".?!")


def message(rng: random.Random) -> str:
    return " ".join(sentence(rng) for _ in range(rng.randint(1, 4)))


def build(path: Path, conversations: int, messages: int, seed: int = 7) -> int:
    rng = random.Random(seed)
    convs = []
    for c in range(conversations):
        turns = [("user" if i % 2 == 0 else "assistant", message(rng)) for i in range(messages)]
        convs.append(chatgpt_conversation(f"bench-{c:05d}", turns, title=f"Chat {c}",
                                          start=1_735_689_600 + c * 3600))
    chatgpt_zip(path, convs)
    return conversations * messages


def via_lib(export: Path, db: Path) -> dict:
    from pmem import MemoryStore
    from pmem.config import load as load_config
    from pmem.integrations.importers import load, run_import

    out: dict = {}
    with MemoryStore(db, config=load_config()) as store:
        _ = store.embedder  # load the model before timing (a real one takes ~0.1-0.3 s)
        embed_time = [0.0]
        real_embed = store.embed

        def timed_embed(texts, progress=None, batch=64):
            t = time.perf_counter()
            try:
                return real_embed(texts, progress=progress, batch=batch)
            finally:
                embed_time[0] += time.perf_counter() - t

        store.embed = timed_embed  # type: ignore[method-assign]
        for round_ in ("first", "again"):
            embed_time[0] = 0.0
            t0 = time.perf_counter()
            plan = load(export)
            t1 = time.perf_counter()
            result = run_import(store, plan.records, summary=f"import {export.name}")
            t2 = time.perf_counter()
            out[round_] = {"read": len(plan.records), "imported": result.imported,
                           "skipped_existing": result.skipped_existing, "parse_s": round(t1 - t0, 3),
                           "embed_s": round(embed_time[0], 3), "store_s": round(t2 - t1 - embed_time[0], 3),
                           "total_s": round(t2 - t0, 3)}
        out["model"] = store.embedder.name
        out["stored"] = store.count(__import__("pmem").Filter.everything())
    return out


def via_cli(export: Path, db: Path) -> dict:
    out: dict = {}
    env = dict(os.environ, PMEM_DB=str(db), PYTHONPATH=str(ROOT))
    for round_ in ("first", "again"):
        t = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "pmem", "import", str(export), "--json"], env=env,
                              capture_output=True, text=True)
        elapsed = time.perf_counter() - t
        if proc.returncode:
            raise SystemExit(f"pmem import failed: {proc.stderr.strip()}")
        out[round_] = {**json.loads(proc.stdout), "total_s": round(elapsed, 3)}
    return out


def _answer_forms(answer: str) -> list[str] | None:
    """What a resolved sentence must contain to answer a LoCoMo temporal question, in pmem.dates'
    wording; None when the answer is not a date (a duration, "10 years ago")."""
    import calendar
    from datetime import datetime, timedelta

    a = " ".join(str(answer).split()).rstrip(".")
    day = r"(\d{1,2} [A-Z][a-z]+,? \d{4})"
    m = re.fullmatch(r"(?i)the (week|weekend|monday|tuesday|wednesday|thursday|friday|saturday|sunday) before " + day, a)
    if m:
        d = datetime.strptime(m.group(2).replace(",", ""), "%d %B %Y").date()
        unit = m.group(1).lower()
        if unit == "week":
            monday = d - timedelta(days=d.weekday()) - timedelta(weeks=1)
            return [f"the week of {monday.day} {calendar.month_name[monday.month]} {monday.year}"]
        if unit == "weekend":
            sat = d - timedelta(days=(d.weekday() - 5) % 7 or 7)
            return [f"the weekend of {sat.day} {calendar.month_name[sat.month]} {sat.year}"]
        target = list(calendar.day_name).index(unit.capitalize())
        x = d - timedelta(days=(d.weekday() - target) % 7 or 7)
        return [f"{x.day} {calendar.month_name[x.month]} {x.year}"]
    if re.fullmatch(day, a):
        d = datetime.strptime(a.replace(",", ""), "%d %B %Y").date()
        return [f"{d.day} {calendar.month_name[d.month]} {d.year}"]
    if re.fullmatch(r"[A-Z][a-z]+,? \d{4}", a) and a.split()[0].rstrip(",") in calendar.month_name[1:]:
        return [a.replace(",", "")]
    if re.fullmatch(r"\d{4}", a):
        return [a]
    return None


def temporal() -> dict:
    """pmem.dates on LoCoMo's temporal questions (category 2): does the evidence sentence, with its
    relative dates resolved against its session's date, state the answer's date?"""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from pmem.dates import resolve_relative

    import locomo

    total = dated = raw_hits = resolved_hits = changed = 0
    samples: list[dict] = []
    for conv in locomo.load():
        turns = {t["dia_id"]: (date, t["text"]) for _, date, ts in locomo.sessions(conv) for t in ts}
        for q in locomo.questions(conv, (2,)):
            total += 1
            forms = _answer_forms(q["answer"])
            evidence = [turns[e] for e in q["evidence"] if e in turns]
            if forms is None or not evidence:
                continue
            dated += 1
            raw = " ".join(text for _, text in evidence)
            resolved = []
            for date, text in evidence:
                new, changes = resolve_relative(text, date)
                changed += len(changes)
                resolved.append(new)
                if changes and len(samples) < 8:
                    samples.append({"said": date[:10], "answer": q["answer"],
                                    "changes": [(c.phrase, c.text) for c in changes]})
            raw_hits += any(f in raw for f in forms)
            resolved_hits += any(f in " ".join(resolved) for f in forms)
    return {"temporal_questions": total, "with_a_date_answer": dated, "answer_stated_in_evidence_as_said": raw_hits,
            "answer_stated_after_resolution": resolved_hits, "phrases_resolved": changed, "sample": samples}


def extract_locomo(conv_id: str, sessions: int, chat: str | None = None) -> dict:
    """`pmem import --extract` on LoCoMo sessions written as a Claude.ai export (one conversation per
    session, the first speaker as the person, the second as the assistant): facts stored, the
    gate's refusals, an audit of every stored fact against its (date-resolved) source sentence, and
    the relative dates resolved."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from pmem import MemoryStore
    from pmem.config import load as load_config
    from pmem.dates import resolve_relative
    from pmem.extract import check_grounding
    from pmem.integrations.importers import load, run_import
    from pmem.integrations.importers.facts import extract_conversations
    from pmem.store import Filter

    import locomo

    conv = next(c for c in locomo.load() if c["sample_id"] == conv_id)
    person = conv["conversation"]["speaker_a"]
    export = []
    for n, date, turns in locomo.sessions(conv)[:sessions]:
        messages = [{"uuid": t["dia_id"], "sender": "human" if t["speaker"] == person else "assistant",
                     "text": t["text"], "content": [{"type": "text", "text": t["text"]}],
                     "created_at": date} for t in turns]
        export.append({"uuid": f"{conv_id}-session-{n}", "name": f"session {n}", "created_at": date,
                       "chat_messages": messages})
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "conversations.json"
        path.write_text(json.dumps(export))
        records = load(path).records
        with MemoryStore(Path(tmp) / "x.db", config=load_config()) as store:
            t = time.perf_counter()
            run_import(store, records)
            t_import = time.perf_counter() - t
            t = time.perf_counter()
            generator = None
            if chat == "rules":
                from extract_bench import RulesOnly  # every candidate sentence, no model

                generator = RulesOnly()
            summary = extract_conversations(store, records, generator=generator)
            t_extract = time.perf_counter() - t
            facts = [m for m in store.list_memories(Filter(), limit=None)
                     if isinstance(m.meta.get("extract"), dict) and m.meta["extract"].get("role") != "source"]
            ungrounded = []
            for m in facts:
                span = m.meta["extract"].get("span") or ""
                source = resolve_relative(span, m.created_at)[0] if m.created_at else span
                g = check_grounding(m.text, [source, span], store.embedder)
                if not g.ok:
                    ungrounded.append({"fact": m.text, "span": span, "why": g.reason})
    return {"conversation": conv_id, "sessions": sessions, "chat": chat or "configured", "person": person, "turns_imported": len(records),
            "person_turns": sum(1 for r in records if r.meta.get("role") == "user"),
            "import_s": round(t_import, 1), "extract_s": round(t_extract, 1), "counts": summary["counts"],
            "facts_stored": len(facts), "stored_ungrounded": len(ungrounded), "ungrounded": ungrounded[:5],
            "dates_resolved": summary["dates_resolved"], "resolved_sample": summary["resolved"][:8]}


def granularity(ks: tuple[int, ...] = (1, 2, 3)) -> dict:
    """Sessions as memories (the alternative to one memory per turn): evidence recall@k of hybrid
    search on LoCoMo when each session is one memory, and the text that k results hand over. The
    turn figures to compare with are retrieval.py's (R@5 0.646, R@10 0.737)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from pmem import Memory, MemoryStore
    from pmem import search as lib_search
    from pmem.config import load as load_config

    import locomo

    hits = {k: 0 for k in ks}
    chars = {k: 0 for k in ks}
    total = turn_chars = turns = 0
    with tempfile.TemporaryDirectory() as tmp:
        for conv in locomo.load():
            sessions = locomo.sessions(conv)
            items = [Memory(id="", text="\n".join(f"{t['speaker']}: {t['text']}" for t in ts), created_at=date,
                            tier="archival", meta={"dia_ids": [t["dia_id"] for t in ts]})
                     for _, date, ts in sessions]
            for _, _, ts in sessions:
                turns += len(ts)
                turn_chars += sum(len(f"{t['speaker']}: {t['text']}") for t in ts)
            with MemoryStore(Path(tmp) / f"{conv['sample_id']}.db", config=load_config()) as store:
                stored = store.insert(items)
                dia = {m.id: set(m.meta["dia_ids"]) for m in stored}
                size = {m.id: len(m.text) for m in stored}
                for q in locomo.questions(conv):
                    ranked = [h.memory.id for h in lib_search(store, q["question"], limit=max(ks))]
                    total += 1
                    for k in ks:
                        chars[k] += sum(size[i] for i in ranked[:k])
                        if any(set(q["evidence"]) & dia[i] for i in ranked[:k]):
                            hits[k] += 1
    mean_turn = turn_chars / turns
    return {"questions": total, "sessions_R@k": {k: round(hits[k] / total, 3) for k in ks},
            "sessions_chars_returned@k": {k: round(chars[k] / total) for k in ks},
            "turns_chars_returned@10": round(10 * mean_turn), "turns_R@10_retrieval_py": 0.737}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conversations", type=int, default=1000)
    ap.add_argument("--messages", type=int, default=30, help="visible messages per conversation")
    ap.add_argument("--model", help="embedding model (default: PMEM_EMBED_MODEL or the configured one)")
    ap.add_argument("--via", choices=("lib", "cli"), default="lib")
    ap.add_argument("--temporal", action="store_true",
                    help="instead: relative dates resolved on LoCoMo's temporal questions (no database)")
    ap.add_argument("--extract-locomo", metavar="CONV", help="instead: import --extract on LoCoMo conversation "
                                                             "CONV (e.g. conv-26) written as a Claude.ai export")
    ap.add_argument("--sessions", type=int, default=4, help="with --extract-locomo: how many sessions")
    ap.add_argument("--chat", help="with --extract-locomo: 'rules' for no chat model (default: the configured one)")
    ap.add_argument("--granularity", action="store_true",
                    help="instead: LoCoMo retrieval with one memory per session (compare with retrieval.py's turns)")
    args = ap.parse_args()
    if args.granularity:
        print(json.dumps(granularity(), indent=2))
        return
    if args.extract_locomo:
        print(json.dumps(extract_locomo(args.extract_locomo, args.sessions, args.chat), indent=2))
        return
    if args.temporal:
        print(json.dumps(temporal(), indent=2))
        return
    if args.model:
        os.environ["PMEM_EMBED_MODEL"] = args.model
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("PMEM_HOME", tmp)
        export = Path(tmp) / "chatgpt-export.zip"
        t = time.perf_counter()
        n = build(export, args.conversations, args.messages)
        built = time.perf_counter() - t
        result = (via_lib if args.via == "lib" else via_cli)(export, Path(tmp) / "bench.db")
        first, again = result["first"], result["again"]
        report = {"conversations": args.conversations, "messages": n, "export_bytes": export.stat().st_size,
                  "build_s": round(built, 2), "via": args.via, **result,
                  "again_share_of_first": round(again["total_s"] / first["total_s"], 4)}
        if args.via == "lib":
            per_k = 1000 / max(first["imported"], 1)
            report["per_1000_messages_s"] = {k: round(first[f"{k}_s"] * per_k, 3) for k in ("parse", "embed", "store")}
            report["messages_per_s"] = round(first["imported"] / first["total_s"], 1)
        assert again.get("imported", 0) == 0, "a re-import added memories"
        print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

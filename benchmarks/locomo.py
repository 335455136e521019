"""Load the LoCoMo development conversations (../shared/data/locomo_dev.json) as pmem records."""

from __future__ import annotations

import json
import os
import re
from datetime import datetime
from pathlib import Path

# PMEM_LOCOMO_DEV: the file elsewhere (a git worktree outside the checkout's folder).
DATA = Path(os.environ.get("PMEM_LOCOMO_DEV") or Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo_dev.json")


def load(path: Path = DATA) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))


def session_date(text: str) -> str:
    """'1:56 pm on 8 May, 2023' -> '2023-05-08T13:56:00Z'."""
    dt = datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y")
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


def sessions(conv: dict) -> list[tuple[int, str, list[dict]]]:
    c = conv["conversation"]
    out = []
    for key in c:
        m = re.fullmatch(r"session_(\d+)", key)
        if m and isinstance(c[key], list):
            n = int(m.group(1))
            out.append((n, session_date(c[f"session_{n}_date_time"]), c[key]))
    return sorted(out)


THREADS = ("session", "conversation", "none")


def turn_records(conv: dict, thread: str = "none") -> list[dict]:
    """One memory per dialogue turn, "Speaker: text", dated by its session. `thread` "session"
    puts each session's turns in a thread of their own, "conversation" the whole conversation's
    in one; `thread_pos` is the turn's place in it."""
    records = []
    for n, date, turns in sessions(conv):
        for i, t in enumerate(turns):
            r = {"text": f"{t['speaker']}: {t['text']}", "created_at": date,
                 "meta": {"dia_id": t["dia_id"], "session": n}, "source": f"locomo:{conv['sample_id']}"}
            if thread == "session":
                r["thread"], r["thread_pos"] = f"locomo:{conv['sample_id']}:session_{n}", i
            elif thread == "conversation":
                r["thread"], r["thread_pos"] = f"locomo:{conv['sample_id']}", len(records)
            records.append(r)
    return records


def questions(conv: dict, categories=(1, 2, 3, 4)) -> list[dict]:
    return [q for q in conv["qa"] if q.get("category") in categories and q.get("evidence")]

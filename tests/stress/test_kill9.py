"""kill -9 at random moments during import, dream --apply, reindex, extract, purge and upkeep
leaves no store corrupt and no operation half-applied.

It was benchmarks/kill9.py; its figures are in docs/decisions/0008-trust-concurrency-kill9.md.
Bounded here to 3 kills per operation (seeded), after one unkilled run each.

One seeded store (1,500 memories, 60 near-duplicate pairs for dream; fake embedder and a fake
chat model, so the kills land in pmem's code and SQLite, not in a model) is copied for every
trial. A child process runs one operation through the library, as the commands do; the parent
kills it with SIGKILL after a random delay within the operation's measured duration (one
unkilled run per operation first: it must pass the same checks, and gives that duration).

After every kill the store is opened again (SQLite recovers its WAL) and checked:

- corrupt: PRAGMA integrity_check is not "ok", the FTS5 index fails its integrity-check, or
  memories and vectors do not match one to one;
- half-applied: a memory row differs from the `after` of its latest event not undone (or a row
  has no event, or an event says the memory exists and it does not); an import with some but not
  all of its memories; a vector table from two models after reindex; a purge that removed a
  memory's row but not its text from the events (or the reverse); an operation with no events;
  a memory derived from or merged into one that does not exist; a listed backup that is not a
  whole database.

It also reports, for purges that committed before the kill, whether the purged text was still
in the database file or its -wal after the store was opened again (a purge killed between its
commit and its VACUUM leaves a `purge_pending` setting; the next open finishes the rewrite).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.stress, pytest.mark.slow]
KILLS = 3
OPS = ("import", "dream", "reindex", "extract", "purge", "upkeep")
PURGE_TOKEN = "Zorblaxcanary"  # in the memories a purge erases
NOW = "2026-01-01T00:00:00Z"

CHILD = r"""
import json, re, sys, time
from pathlib import Path
from pmem.service import MemoryStore

op, db, data = sys.argv[1], sys.argv[2], Path(sys.argv[3])
store = MemoryStore(db)
print("ready", flush=True)
if op == "import":
    from pmem import transfer
    with open(data / "import.jsonl", encoding="utf-8") as f:
        items = transfer.parse(f, "jsonl")
    store.insert(items, kind="import", summary="import kill9")
elif op == "dream":
    from pmem import dream
    plan = dream.plan(store, only={"dedup"}, now=%(now)r, generator=False)
    dream.apply(store, plan, backup=True)
elif op == "reindex":
    store.reindex()
elif op == "extract":
    from pmem import extract

    class Labeller:  # labels every sentence a fact, as a small chat model does
        name = "fake-chat"
        def generate_json(self, messages, schema, max_tokens=256):
            props = schema["properties"]
            if "relation" in props:
                return {"relation": "unrelated"}
            lines = re.findall(r"^\d+\. (.*)$", messages[-1]["content"], re.M)
            if "labels" in props:
                return {"labels": ["event" for _ in lines]}
            return {"facts": []}

    extract.extract(store, (data / "chat.txt").read_text(encoding="utf-8"), generator=Labeller())
elif op == "purge":
    ids = json.loads((data / "purge.json").read_text())
    store.purge(ids)
elif op == "upkeep":  # the keyword index merged a few pages a transaction, as dream's upkeep does
    store.merge_keyword_index(step=1, pause=0)  # 8 transactions on this store; kills land in them
    store.upkeep()
print("done", flush=True)
""" % {"now": NOW}


def build_base(tmp: Path, n: int) -> Path:
    from pmem.records import Memory
    from pmem.service import MemoryStore

    base = tmp / "base.db"
    store = MemoryStore(base)
    rng = random.Random(0)
    topics = ["garden", "deploys", "cabin", "pottery", "running", "books", "taxes", "camping", "music", "cooking"]
    items = [Memory(id="", text=f"Note {i}: something about {rng.choice(topics)} and {rng.choice(topics)} "
                                f"on day {rng.randrange(365)}", tags=[rng.choice(topics)]) for i in range(n)]
    for i in range(60):
        text = f"Reminder {i}: water the {i} orchids on the balcony"
        items.append(Memory(id="", text=text, created_at="2024-01-01T00:00:00Z"))
        items.append(Memory(id="", text=text + "!", created_at="2024-02-01T00:00:00Z"))
    items += [Memory(id="", text=f"{PURGE_TOKEN}{i} is a private note to erase") for i in range(20)]
    for start in range(0, len(items), 200):  # a write a batch: the keyword index in several segments
        store.insert(items[start:start + 200])
    purge_ids = [m.id for m in store.list_memories(limit=None) if m.text.startswith(PURGE_TOKEN)]
    store.checkpoint()
    store.close()
    data = tmp / "data"
    data.mkdir()
    (data / "purge.json").write_text(json.dumps(purge_ids))
    with open(data / "import.jsonl", "w", encoding="utf-8") as f:
        for i in range(1500):
            f.write(json.dumps({"text": f"Imported memory {i} about {rng.choice(topics)}", "tags": ["kill9"]}) + "\n")
    lines = ["1:56 pm on 8 May, 2023"]
    for i in range(150):
        who = rng.choice(["Caroline", "Melanie"])
        lines.append(f"{who}: I went to the {rng.choice(topics)} class on day {i} and liked it a lot.")
    (data / "chat.txt").write_text("\n".join(lines), encoding="utf-8")
    return base


def check(db: Path, op: str, data: Path) -> dict:
    from pmem.backup import list_backups
    from pmem.service import MemoryStore

    problems: dict[str, list[str]] = {"corrupt": [], "half": []}
    store = MemoryStore(db)
    q = store.conn.execute
    if q("PRAGMA integrity_check").fetchone()[0] != "ok":
        problems["corrupt"].append("integrity_check")
    try:
        q("INSERT INTO memories_fts(memories_fts) VALUES ('integrity-check')")
    except Exception as exc:
        problems["corrupt"].append(f"fts: {exc}")
    rows = {r[0] for r in q("SELECT seq FROM memories")}
    vecs = {r[0] for r in q("SELECT seq FROM memory_vec")} if store.vectors.exists() else set()
    if rows != vecs:
        problems["corrupt"].append(f"vectors: {len(rows - vecs)} missing, {len(vecs - rows)} orphaned")
    undone = {r[0] for r in q("SELECT id FROM operations WHERE undone_at IS NOT NULL")}
    latest: dict[str, dict | None] = {}
    for mid, after, op_id in q("SELECT memory_id, after, op_id FROM events ORDER BY seq"):
        if op_id not in undone:
            latest[mid] = json.loads(after) if after else None
    skip = {"access_count", "last_accessed_at"}
    current = {m.id: m for m in store.iter_all()}
    for mid, m in current.items():
        state = latest.get(mid)
        row = {k: v for k, v in asdict(m).items() if k not in skip}
        if state is None:
            problems["half"].append(f"row {mid} without a live event")
        elif {k: v for k, v in state.items() if k not in skip} != row:
            problems["half"].append(f"row {mid} differs from its last event")
    for mid, state in latest.items():
        if state is not None and mid not in current:
            problems["half"].append(f"event says {mid} exists; it does not")
    for op_id, n in q("SELECT o.id, (SELECT count(*) FROM events e WHERE e.op_id = o.id) FROM operations o"):
        if n == 0:
            problems["half"].append(f"operation {op_id} without events")
    for m in current.values():
        for ref in [*m.derived_from, *([m.merged_into] if m.merged_into else [])]:
            if ref not in current:
                problems["half"].append(f"{m.id} points at missing {ref}")
    if op == "import":
        n = q("SELECT count(*) FROM memories WHERE tags LIKE '%kill9%'").fetchone()[0]
        if n not in (0, 1500):
            problems["half"].append(f"import stored {n} of 1500")
    if op == "reindex" and store.vector_model()[0] is None and rows:
        problems["half"].append("reindex left no model setting")
    text_left = False
    if op == "purge":
        for mid in json.loads((data / "purge.json").read_text()):
            row = mid in current
            texts = q("SELECT count(*) FROM events WHERE memory_id = ? AND (before IS NOT NULL OR after IS NOT NULL)",
                      (mid,)).fetchone()[0]
            purged = q("SELECT count(*) FROM events WHERE memory_id = ? AND action = 'purge'", (mid,)).fetchone()[0]
            if not ((row and texts and not purged) or (not row and not texts and purged)):
                problems["half"].append(f"purge of {mid} half done")
        committed = q("SELECT count(*) FROM operations WHERE kind = 'purge'").fetchone()[0]
        if committed:
            raw = b"".join(p.read_bytes() for p in (db, db.with_name(db.name + "-wal")) if p.exists())
            text_left = PURGE_TOKEN.encode() in raw or PURGE_TOKEN.lower().encode() in raw
    for backup in list_backups(db.parent / "home" / "backups"):
        head = backup.read_bytes()[:16]
        if head != b"SQLite format 3\x00":
            problems["half"].append(f"backup {backup.name} is not a database")
    events = q("SELECT count(*) FROM events").fetchone()[0]
    store.close()
    return {**problems, "purge_text_left": text_left, "events": events}


def trial(base: Path, data: Path, work: Path, op: str, delay: float | None, env: dict) -> dict:
    if work.exists():
        shutil.rmtree(work)
    work.mkdir()
    db = work / "pmem.db"
    shutil.copy(base, db)
    env = {**env, "PMEM_HOME": str(work / "home")}
    proc = subprocess.Popen([sys.executable, "-c", CHILD, op, str(db), str(data)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    start = time.perf_counter()
    killed = False
    if delay is None:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"{op} failed without a kill: {err.strip()[-500:]}"
    else:
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            killed = True
        proc.communicate(timeout=60)
    elapsed = time.perf_counter() - start
    result = check(db, op, data)
    return {"op": op, "delay_s": None if delay is None else round(delay, 3), "killed": killed,
            "elapsed_s": round(elapsed, 3), **result}


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    """The seeded store every trial copies, built once; and the environment of the children."""
    tmp = tmp_path_factory.mktemp("kill9")
    env = {**os.environ, "PMEM_HOME": str(tmp / "home"), "PMEM_EMBED_MODEL": "fake-384",
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PMEM_HOME", env["PMEM_HOME"])
        mp.setenv("PMEM_EMBED_MODEL", "fake-384")
        base = build_base(tmp, 1500)
    return tmp, base, env


@pytest.mark.parametrize("op", OPS)
def test_a_kill_leaves_nothing_corrupt_or_half_applied(op, seeded, tmp_path, monkeypatch):
    tmp, base, env = seeded
    monkeypatch.setenv("PMEM_EMBED_MODEL", "fake-384")
    rng = random.Random(f"{op}-1")
    full = trial(base, tmp / "data", tmp_path / "work", op, None, env)  # runs to the end: gives the duration
    trials = [full] + [trial(base, tmp / "data", tmp_path / "work", op, rng.uniform(0, full["elapsed_s"]), env)
                       for _ in range(KILLS)]
    problems = [(t["delay_s"], t["corrupt"] + t["half"]) for t in trials if t["corrupt"] or t["half"]]
    assert not problems, f"{op}: {problems}"
    assert not [t for t in trials if t["killed"] and t["purge_text_left"]], "purged text left after reopening"

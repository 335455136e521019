"""apply(): each accepted proposal in its own transaction, all under one undoable operation."""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator

from .. import secretscan
from ..errors import PmemError
from ..records import Memory
from .marks import _dealt_with
from .records import APPLY_ORDER, ASKED, ApplyResult, Budget, Plan, Progress, Proposal, _fingerprint

if TYPE_CHECKING:
    from ..service import MemoryStore


@contextmanager
def _joined(store: "MemoryStore", op_id: str, summary: str) -> Iterator[None]:
    """One transaction whose events belong to the dream's single operation `op_id`."""
    with store.operation("dream", summary, op_id=op_id):
        yield


def _stale(store: "MemoryStore", p: Proposal) -> str | None:
    current = {m.id: m for m in store.get_many(p.members)}
    for mid in p.members:
        m = current.get(mid)
        if m is None:
            return f"memory {mid} no longer exists"
        want = p.fingerprints.get(mid)
        if want is not None and _fingerprint(m) != want:
            return f"memory {mid} changed since the plan"
    return None


def _apply_one(store: "MemoryStore", p: Proposal, result: ApplyResult) -> None:
    ms = {m.id: m for m in store.get_many(p.members)}
    if p.kind == "expire":
        m = ms[p.members[0]]
        store.set_fields(m.id, "expire", meta={**m.meta, "expired_at": m.expires_at})
    elif p.kind == "purge":
        store.delete(ms[p.members[0]].id, action="purge")
    elif p.kind in ("dedup", "review"):
        canon = ms[p.target]
        members = list(ms.values())
        tags = sorted(set().union(*(m.tags for m in members)))
        created = min(m.created_at for m in members)
        store.set_fields(canon.id, "dedup", tags=tags, created_at=created)
        for mid in p.members:
            if mid != canon.id:
                store.set_fields(mid, "dedup", merged_into=canon.id)
    elif p.kind == "supersede":
        store.supersede(p.members[0], p.members[1])
    elif p.kind in ("merge", "compress"):
        members = [ms[i] for i in p.members]
        # It stands where its earliest member stood, as a summary stands for its span.
        threaded = [m for m in members if m.thread is not None]
        first = min(threaded, key=lambda m: (m.created_at, m.thread_pos or 0, m.id)) if threaded else None
        new = store.new_memory(
            p.result_text or "", tags=sorted(set().union(*(m.tags for m in members))),
            tier=p.details.get("tier", "archival" if p.kind == "merge" else "episodic"),
            created_at=min(m.created_at for m in members), derived_from=p.members,
            source="pmem dream", meta=_sources_meta(p, members),
            thread=first.thread if first else None, thread_pos=first.thread_pos if first else None)
        new = store.insert([new], kind="dream", summary=f"dream {p.kind}", keep_ids=False,
                           allow_secret=_secrets_already_stored(new.text, members))[0]
        for m in members:
            store.set_fields(m.id, p.kind, merged_into=new.id)
        result.created[p.id] = new.id
    else:  # pragma: no cover - guarded by Proposal
        raise ValueError(p.kind)


def _sources_meta(p: Proposal, members: list[Memory]) -> dict[str, Any]:
    """What a merge or summary keeps of its members, for `pmem show`, `pmem why` and the exports:
    who said it (when they all share one speaker), and each member's id, speaker, source, place
    and meta."""
    from .sameness import speaker_of

    said = [speaker_of(m.text, m.meta) for m in members]
    meta: dict[str, Any] = {"dream": p.kind, "proposal": p.id}
    if said and said[0] and all(s == said[0] for s in said):
        meta["speaker"] = said[0]
    meta["sources"] = [{k: v for k, v in (("id", m.id), ("speaker", s), ("source", m.source), ("thread", m.thread),
                                          ("thread_pos", m.thread_pos), ("created_at", m.created_at),
                                          ("meta", m.meta or None)) if v is not None}
                       for m, s in zip(members, said)]
    return meta


def _secrets_already_stored(text: str, members: list[Memory]) -> bool:
    """Every machine secret in `text` is held verbatim by a member: stored with its owner's
    permission (`--allow-secret`), so a merge or summary repeating it stores nothing new. A secret
    no member holds (one the model wrote) is still refused."""
    return all(any(text[s.start:s.end] in m.text for m in members) for s in secretscan.find_secrets(text))


def apply(store: "MemoryStore", plan: Plan, *, accept: set[str] | None = None, progress: Progress | None = None,
          backup: bool = True, max_seconds: float | None = None) -> ApplyResult:
    """Apply the accepted proposals (all by default), each in its own transaction, all under one
    undoable operation. A proposal whose members changed since the plan is skipped."""
    import secrets

    budget = Budget(max_seconds)
    result = ApplyResult()
    chosen = [p for p in plan.proposals if (p.id in accept if accept is not None else p.kind not in ASKED)]
    chosen.sort(key=lambda p: APPLY_ORDER.index(p.kind))
    if not chosen:
        _dealt_with(store, plan, result)
        result.elapsed_s = budget.elapsed()
        return result
    if backup:
        from ..backup import backup_database

        result.backup = str(backup_database(store, label="dream"))
    counts: dict[str, int] = {}
    for p in chosen:
        counts[p.kind] = counts.get(p.kind, 0) + 1
    summary = "dream: " + ", ".join(f"{n} {k}" for k, n in counts.items())
    result.op_id = secrets.token_hex(4)
    total = len(chosen)
    if progress:
        progress(0, total)
    for done, p in enumerate(chosen, start=1):
        if budget.over():
            result.complete = False
            result.skipped.extend({"id": q.id, "reason": "time limit"} for q in chosen[done - 1:])
            break
        try:  # a merge's or summary's text is embedded before its write transaction starts
            with store.prepared_vectors([(p.result_text or "").strip()]), _joined(store, result.op_id, summary):
                why = _stale(store, p)
                if why is None:
                    _apply_one(store, p, result)
        except PmemError as exc:  # rolled back: this proposal is not applied, the others go on
            why = f"failed: {exc}"
            result.created.pop(p.id, None)
        if why is None:
            result.applied.append(p.id)
        else:
            result.skipped.append({"id": p.id, "reason": why})
        if progress:
            progress(done, total)
    if not result.applied:
        result.op_id = None
    _dealt_with(store, plan, result)
    result.elapsed_s = budget.elapsed()
    return result


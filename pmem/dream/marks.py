"""What a dream has dealt with: the mark an applied dream leaves, so that the next one on a large
store compares only what changed since (MemoryStore.dream_mark / set_dream_mark)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..errors import PmemError
from ..models.thresholds import Thresholds
from .records import ASKED, PAIR_KINDS, ApplyResult, Plan

# The dedup rule's version: pairs decided under an older rule are compared again (sameness.py).
DEDUP_RULE = "keys+words/2"

if TYPE_CHECKING:
    from ..service import MemoryStore


def _basis(store: "MemoryStore", thresholds: Thresholds) -> str:
    """What decides which pairs qualify and which merges are grounded: the vectors' model and
    the thresholds. A mark recorded under another basis (a reindex, a changed setting) is not
    used: every pair is compared again."""
    return json.dumps([*store.vector_model(), thresholds.dedup, thresholds.supersede, thresholds.merge,
                       float(store.config.dedup_lexical), thresholds.grounding,
                       float(store.config.extract_min_support), thresholds.synonym, thresholds.dedup_close, DEDUP_RULE])



def _dealt_with(store: "MemoryStore", plan: Plan, result: ApplyResult) -> None:
    """After a dream that planned every pair kind to the end (or on a large store, to where the
    time limit stopped it), the next dream of a large store compares only what changes after the
    plan's mark (what a person did not accept was turned down), and the memories never compared
    from where the plan stopped. Looked at again then: the members of proposals skipped (changed
    since the plan, failed, or left by the time limit), those a later slice left to the next
    dream, changed memories the time limit left, and of merges dropped for want of a working
    chat model (once a plan may use one). A merge dropped as not grounded would be dropped again
    while its members, the model and the settings stay as they are. Best effort: the dream is
    committed, and a mark not recorded only means more to compare."""
    declined = _declined(plan, result)
    if not (plan.mark and (plan.complete or plan.resume) and set(PAIR_KINDS) <= set(plan.kinds)):
        # a dream of some kinds: what changed is not dealt with, but what a person left is
        current = store.dream_mark()
        if declined or (current or {}).get("declined"):
            try:  # event 0 under no basis: every pair compared again, as with no mark
                store.set_dream_mark({**(current or {"event": 0, "basis": ""}), "declined": declined})
            except PmemError:
                pass
        return
    skipped = {s["id"] for s in result.skipped}
    revisit = {m for p in plan.proposals if p.id in skipped for m in p.members} | set(plan.revisit)
    waiting = set(plan.waiting)
    waiting.update(m for d in plan.dropped if not d["reason"].startswith(("not grounded", "would drop"))
                   for m in d.get("members", ()))
    mark: dict[str, Any] = {"event": plan.mark, "basis": plan.basis, "revisit": sorted(revisit),
                            "waiting": sorted(waiting), "declined": declined}
    if plan.through is not None:
        mark["through"] = plan.through
    try:
        store.set_dream_mark(mark, undone=plan.undone)
    except PmemError:
        pass


def _declined(plan: Plan, result: ApplyResult) -> list[list[str]]:
    """The reviews a person has left: those the plan did not ask again (Plan.declined), and its
    own that were neither applied nor skipped, each as its members stood when it was planned
    (records.declined_key), so that a member changed since is asked about again."""
    done = set(result.applied) | {s["id"] for s in result.skipped}
    left = {tuple(e) for e in plan.declined}
    for p in plan.proposals:
        if p.kind in ASKED and p.id not in done and all(m in p.fingerprints for m in p.members):
            left.add(tuple(x for m in sorted(p.members) for x in (m, p.fingerprints[m])))
    return [list(e) for e in sorted(left)]

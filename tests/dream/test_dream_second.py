"""A second dream right after an applied one proposes nothing new: a question about a memory a
dedup took is asked about the memory it kept, and a review a person left is not asked again while
both its memories stay as they were (pmem.dream.marks._declined)."""

from __future__ import annotations

import pytest

from pmem import dream
from pmem.store import Filter

NOW = "2026-01-01T00:00:00Z"


@pytest.fixture
def loose(store):
    """Every pair of the fake embedder's vectors is a candidate: the rule alone decides."""
    store.config = store.config.with_values(dedup_threshold=-1.0)
    return store


def _plan(store, **kw):
    return dream.plan(store, now=NOW, generator=False, **kw)


def _everything(store):
    return [m.to_dict() for m in store.list_memories(Filter.everything(), sort="id", limit=None)]


def _deploys(store):
    """Two wordings of one fact (a dedup) and a third with one word that may or may not differ
    (a review, the same against either wording)."""
    a, _ = store.add("Production deploys must be approved by Dana", allow_duplicate=True)
    b, _ = store.add("Deploys to production need approval from Dana", allow_duplicate=True)
    c, _ = store.add("Production deploys must be signed by Dana", allow_duplicate=True)
    return a, b, c


def test_a_second_dream_proposes_nothing_new_after_a_dedup(loose):
    a, b, c = _deploys(loose)
    pinned, _ = loose.add("Deploys to production need approval from Dana", allow_duplicate=True, pinned=True)
    before = _everything(loose)
    plan = _plan(loose)
    (dedup,) = [p for p in plan.proposals if p.kind == "dedup"]
    (review,) = [p for p in plan.proposals if p.kind == "review"]
    # asked now, about the memory the dedup keeps, not left for the next dream to find
    assert review.target == dedup.target and set(review.members) == {dedup.target, c.id}
    result = dream.apply(loose, plan, backup=False)
    assert result.applied == [dedup.id]
    again = _plan(loose)
    assert again.proposals == [], [(p.kind, p.members, p.reason) for p in again.proposals]
    assert all(pinned.id not in p.members for p in plan.proposals) and loose.get(pinned.id).merged_into is None
    loose.undo()
    assert _everything(loose) == before


def test_a_review_left_unaccepted_is_asked_again_only_when_a_member_changes(loose):
    a, _ = loose.add("Anna loves hiking in the Alps", allow_duplicate=True)
    b, _ = loose.add("Anna adores hiking in the Alps", allow_duplicate=True)
    (review,) = _plan(loose).proposals
    assert review.kind == "review"
    dream.apply(loose, _plan(loose), backup=False)  # --apply --yes: a review is left, not applied
    assert _plan(loose).proposals == [] and _plan(loose).proposals == []  # not every night
    # the TUI's "plan again comparing everything" asks it again, and a yes there applies it
    (asked,) = _plan(loose, full=True).proposals
    assert asked.id == review.id
    loose.edit(b.id, text="Anna adores hiking in the Alps every summer")
    plan = _plan(loose)
    (changed,) = plan.proposals
    assert changed.kind == "review" and set(changed.members) == {a.id, b.id}
    result = dream.apply(loose, plan, accept={changed.id}, backup=False)  # a person's yes
    assert result.applied == [changed.id]
    assert loose.get(changed.members[1]).merged_into == changed.target


def test_a_review_a_person_declines_in_a_dream_of_dedup_alone_is_not_asked_again(loose):
    loose.add("Anna loves hiking in the Alps", allow_duplicate=True)
    loose.add("Anna adores hiking in the Alps", allow_duplicate=True)
    plan = _plan(loose, only={"dedup"})
    assert [p.kind for p in plan.proposals] == ["review"]
    dream.apply(loose, plan, accept=set(), backup=False)  # the TUI: nothing accepted
    assert _plan(loose, only={"dedup"}).proposals == [] and _plan(loose).proposals == []

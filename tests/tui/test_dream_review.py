"""The dream review screen (pmem/tui/dream_review.py): accept, apply, plan again, failures."""

from __future__ import annotations

import pytest

pytest.importorskip("textual")


from .pilot import make, running, screen_text, select, settle  # noqa: E402
from fakes import FakeDream, FakePlan, FakeProposal  # noqa: E402


async def open_review(app, pilot) -> None:
    """`D`: the dream review screen, once its plan is made."""
    await pilot.press("D")
    await settle(app, pilot)


async def test_dream_review_accepts_and_applies(tstore):
    fake = FakeDream()
    app = make(tstore, dream=fake)
    async with running(app) as pilot:
        await open_review(app, pilot)
        from pmem.tui.dream_review import DreamScreen

        assert isinstance(app.screen, DreamScreen)
        assert "[bold]cabin[/]" in screen_text(app)
        await pilot.press("space")  # accept p1, move to p2 (left rejected)
        await pilot.press("y")
        await settle(app, pilot)
        assert fake.applied == {"p1"}
        assert tstore.get("a5").forgotten_at is not None
        assert tstore.get("a4").expires_at is None
        assert not isinstance(app.screen, DreamScreen)
        assert "a5" in app.table.ids() or app.total == 4


async def test_dream_review_plans_again_comparing_everything(tstore):
    fake = FakeDream()
    app = make(tstore, dream=fake)
    async with running(app) as pilot:
        await open_review(app, pilot)
        await pilot.press("space", "space")  # p1 and p2 accepted
        assert app.screen.accepted == {"p1", "p2"}
        await pilot.press("f")
        await settle(app, pilot)
        await pilot.press("f")  # once is enough
        await settle(app, pilot)
        assert fake.planned == [False, True]
        assert app.screen.accepted == {"p1"}  # p2 is not in the new plan
        await pilot.press("y")
        await settle(app, pilot)
        assert fake.applied == {"p1"}


async def test_list_keys_do_nothing_under_the_dream_screen(tstore):
    app = make(tstore, dream=FakeDream())
    async with running(app) as pilot:
        select(app, "a3")
        await open_review(app, pilot)
        await pilot.press("p", "d", "x", "u")
        await settle(app, pilot)
        assert not tstore.get("a3").pinned and tstore.get("a3").forgotten_at is None
        assert tstore.operations(1)[0].kind == "import"


async def test_dream_plan_failure_is_shown(tstore):
    class Broken:
        def plan(self, *a, **k):
            raise ImportError("no dream")

    app = make(tstore, dream=Broken())
    async with running(app) as pilot:
        await open_review(app, pilot)
        assert "could not plan: no dream" in screen_text(app)
        await pilot.press("escape")
        await pilot.pause()
        assert app.table.row_count == 5



class AskingDream(FakeDream):
    """A plan of one dedup and one review ("review" proposals: a person's yes is the only way one
    is applied)."""

    def plan(self, store, *, only=None, now=None, generator=None, max_seconds=None, full=False):
        return FakePlan([FakeProposal("p1", "dedup", ["a2", "a5"], None, "the same cabin fact"),
                         FakeProposal("r1", "review", ["a3", "a4"], None, "one fact twice? loves / adores")])


async def test_accept_all_leaves_the_reviews_to_a_persons_own_yes(tstore):
    fake = AskingDream()
    app = make(tstore, dream=fake)
    async with running(app, size=(100, 30)) as pilot:
        await open_review(app, pilot)
        assert "1 review" in screen_text(app)
        await pilot.press("a", "y")  # accept all, then apply
        await settle(app, pilot)
    assert fake.applied == {"p1"}


async def test_space_on_a_review_says_yes_to_it(tstore):
    fake = AskingDream()
    app = make(tstore, dream=fake)
    async with running(app, size=(100, 30)) as pilot:
        await open_review(app, pilot)
        await pilot.press("down", "space", "y")  # the review: yes, then apply
        await settle(app, pilot)
    assert fake.applied == {"r1"}

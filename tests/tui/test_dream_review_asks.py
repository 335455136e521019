"""The TUI's dream review and the pairs dream asks about ("review" proposals): a person's yes,
one at a time, is the only way one is applied."""

from __future__ import annotations

import asyncio
import functools

import pytest

pytest.importorskip("textual")

from fakes import TUI_NOW as NOW  # noqa: E402
from fakes import FakeDream, FakePlan, FakeProposal  # noqa: E402


class AskingDream(FakeDream):
    """A plan of one dedup and one review."""

    def plan(self, store, *, only=None, now=None, generator=None, max_seconds=None, full=False):
        return FakePlan([FakeProposal("p1", "dedup", ["a2", "a5"], None, "the same cabin fact"),
                         FakeProposal("r1", "review", ["a3", "a4"], None, "one fact twice? loves / adores")])


def make(store, dream):
    from pmem.tui import make_app

    return make_app(store, now=NOW, search_debounce=0, detail_throttle=0, dream=dream)


async def settle(app, pilot) -> None:
    await pilot.pause()
    await app.workers.wait_for_complete()
    await pilot.pause()


def text(app) -> str:
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


async def test_accept_all_leaves_the_reviews_to_a_persons_own_yes(tstore):
    fake = AskingDream()
    app = make(tstore, fake)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        await pilot.press("D")
        await settle(app, pilot)
        assert "1 review" in text(app)
        await pilot.press("a")  # accept all
        await pilot.press("y")
        await settle(app, pilot)
    assert fake.applied == {"p1"}


async def test_space_on_a_review_says_yes_to_it(tstore):
    fake = AskingDream()
    app = make(tstore, fake)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        await pilot.press("D")
        await settle(app, pilot)
        await pilot.press("down")  # the review
        await pilot.press("space")
        await pilot.press("y")
        await settle(app, pilot)
    assert fake.applied == {"r1"}


def _sync(fn):  # no async plugin: each test runs in its own event loop, as in test_tui.py
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return asyncio.run(fn(*args, **kwargs))

    return wrapper


test_accept_all_leaves_the_reviews_to_a_persons_own_yes = _sync(test_accept_all_leaves_the_reviews_to_a_persons_own_yes)
test_space_on_a_review_says_yes_to_it = _sync(test_space_on_a_review_says_yes_to_it)

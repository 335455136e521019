"""Search and filters on the main screen: debounced, stale results dropped, scope, tiers, tags."""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("textual")

from pmem.records import Memory  # noqa: E402
from pmem.store import Filter  # noqa: E402

from .pilot import make, running, screen_text, select, settle  # noqa: E402


async def test_search_narrows_the_list(tstore):
    app = make(tstore, search_mode="keyword")
    async with running(app) as pilot:
        await pilot.press("slash", *"cabin")
        await settle(app, pilot)
        assert set(app.table.ids()) == {"a2", "a5"}
        assert "2 results" in screen_text(app)
        await pilot.press("escape")
        await pilot.pause()
        assert app.table.row_count == 5


async def test_hybrid_search_ranks_the_match_first(app):
    async with running(app) as pilot:
        await pilot.press("slash")
        await settle(app, pilot)  # the (fake) model loads in a worker
        assert app.model_state == "ready"
        await pilot.press(*"deploys")
        await settle(app, pilot)
        assert app.table.current_id() == "a3" or app.table.ids()[0] == "a3"


async def test_the_model_is_asked_of_a_running_server_first(app, monkeypatch):
    """The TUI loads the embedding model the way every command does: through `pmem serve` when
    the `server` setting allows it, so a served model answers the first search at once."""
    import pmem.models.embed

    asked = []
    real = pmem.models.embed.load_embedder
    monkeypatch.setattr(pmem.models.embed, "load_embedder", lambda spec, **kw: asked.append(kw) or real(spec, **kw))
    async with running(app) as pilot:
        await pilot.press("slash")
        await settle(app, pilot)
        assert app.model_state == "ready"
    assert asked and asked[0]["server"] == app.store.config.server
    assert asked[0]["idle_minutes"] == app.store.config.server_idle_minutes


async def test_search_highlights_the_best_result_and_p_pins_it(tstore):
    """Issue 10, defect 13: the highlight used to stay on the memory highlighted before the
    search, wherever it landed in the results, and `p` then pinned that one."""
    from pmem.search import search

    ranked = [h.memory.id for h in search(tstore, "cabin", mode="keyword", collapse=False)]
    assert len(ranked) == 2
    best, other = ranked
    app = make(tstore, search_mode="keyword")
    async with running(app) as pilot:
        select(app, other)  # highlighted before the search, and among its results
        await pilot.pause()
        await pilot.press("slash", *"cabin", "enter")
        await settle(app, pilot)
        assert app.table.ids() == [best, other]
        assert app.table.cursor_row == 0 and app.table.current_id() == best
        assert best in screen_text(app)  # the detail pane shows it too
        await pilot.press("p")
        await pilot.pause()
        assert tstore.get(best).pinned and not tstore.get(other).pinned
        # The same query run again (here a reload) keeps the memory the person moved to.
        await pilot.press("down")
        await pilot.press("ctrl+r")
        await settle(app, pilot)
        assert app.table.current_id() == other


async def test_search_is_debounced(tstore):
    calls = []

    def counting(store, query, flt, **kw):
        from pmem.search import search

        calls.append(query)
        return search(store, query, flt, **kw)

    # a debounce well above Pilot's ~60 ms a key, so a busy machine cannot split the typing
    app = make(tstore, search_debounce=1.0, search_mode="keyword", search_fn=counting)
    async with running(app) as pilot:
        await pilot.press("slash", *"cabin")
        await pilot.pause(1.3)
        await settle(app, pilot)
        assert calls == ["cabin"]


async def test_stale_search_results_are_dropped(tstore):
    from pmem.search import search

    started, release = threading.Event(), threading.Event()

    def slow_for_dana(store, query, flt, **kw):
        hits = search(store, query, flt, **kw)
        if query == "dana":
            started.set()
            release.wait(5)
        return hits

    app = make(tstore, search_mode="keyword", search_fn=slow_for_dana, search_debounce=0.3)
    async with running(app) as pilot:
        await pilot.press("slash", *"dana")
        await pilot.pause(0.5)
        assert started.wait(5)
        # A newer query is typed while the old search is still running ...
        app.query_one("#search").value = "cabin"
        await pilot.pause()
        release.set()
        await app.workers.wait_for_complete()
        await pilot.pause()
        # ... so the old results (a3 only) never replace the list.
        assert set(app.table.ids()) != {"a3"}
        await pilot.pause(0.5)
        await settle(app, pilot)
        assert set(app.table.ids()) == {"a2", "a5"}


async def test_filters_forgotten_and_tier_and_tag(tstore):
    from textual.widgets import Checkbox, Input

    tstore.forget("a3")
    tstore.edit("a4", tier="episodic")
    app = make(tstore)
    async with running(app) as pilot:
        assert set(app.table.ids()) == {"a1", "a2", "a5"}
        await pilot.press("f")
        await pilot.pause()
        app.screen.query_one("#include-forgotten", Checkbox).value = True
        app.screen.query_one("#tier-episodic", Checkbox).value = True
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert set(app.table.ids()) == {"a1", "a2", "a3", "a4", "a5"}
        assert "forgotten" in screen_text(app)
        await pilot.press("f")
        await pilot.pause()
        app.screen.query_one("#filter-tags", Input).value = "home"
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert set(app.table.ids()) == {"a2"}


async def test_expired_filter(tstore):
    tstore.expire("a3", at="2025-02-01T00:00:00Z")
    app = make(tstore)
    async with running(app) as pilot:
        assert "a3" not in app.table.ids()
        app.flt = Filter(include_expired=True)
        app.reload()
        await pilot.pause()
        assert "a3" in app.table.ids()


async def test_S_limits_list_and_search_to_global_and_this_project(tstore, tmp_path):
    project = str(tmp_path / "proj")
    other = str(tmp_path / "other")
    tstore.insert([Memory(id="p1", text="cabin rules for this project", scope=project,
                          created_at="2025-03-01T09:00:00Z", updated_at="2025-03-01T09:00:00Z"),
                   Memory(id="o1", text="cabin rules elsewhere", scope=other,
                          created_at="2025-03-01T10:00:00Z", updated_at="2025-03-01T10:00:00Z")], kind="import")
    app = make(tstore, project=project, search_mode="keyword")
    async with running(app, (140, 40)) as pilot:
        assert set(app.table.ids()) == {"a1", "a2", "a3", "a4", "a5", "p1", "o1"}
        assert "scope" not in app.query_one("#status").render().plain
        await pilot.press("S")
        await pilot.pause()
        assert set(app.table.ids()) == {"a1", "a2", "a3", "a4", "a5", "p1"}
        assert "scope: global + proj" in app.query_one("#status").render().plain
        select(app, "p1")
        await pilot.pause()
        assert project in "".join(app.query_one("#detail").text().split())  # the path may wrap
        await pilot.press("slash", *"rules")
        await settle(app, pilot)
        assert app.table.ids() == ["p1"]
        await pilot.press("escape", "S")
        await pilot.pause()
        assert set(app.table.ids()) == {"a1", "a2", "a3", "a4", "a5", "p1", "o1"}
        await pilot.press("S", "f")  # the filter dialog keeps the scope
        await pilot.pause()
        await pilot.press("escape")
        await pilot.pause()
        assert app.flt.scope == project


async def test_S_outside_a_project_shows_global_only(tstore):
    tstore.insert([Memory(id="p1", text="somewhere", scope="/some/project",
                          created_at="2025-03-01T09:00:00Z", updated_at="2025-03-01T09:00:00Z")], kind="import")
    app = make(tstore, project=None)
    async with running(app) as pilot:
        assert "p1" in app.table.ids()
        await pilot.press("S")
        await pilot.pause()
        assert "p1" not in app.table.ids() and app.total == 5
        assert "scope: global only" in app.query_one("#status").render().plain


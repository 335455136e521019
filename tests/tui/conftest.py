"""The TUI tests' shared fixtures: the seeded store, the app on it, and async tests run without an
async plugin (each in its own event loop)."""

from __future__ import annotations

import asyncio
import inspect

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """Run an `async def` test in a new event loop (Pilot needs one; no plugin is installed for it)."""
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    args = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    asyncio.run(pyfuncitem.obj(**args))
    return True


def seed_tui_store(store) -> None:
    """Five memories covering what the TUI draws: pinned, expiring, with meta, markup-like text
    and escapes, derived."""
    from pmem.records import Memory

    store.insert([
        Memory(id="a1", text="I am vegetarian", tier="core", pinned=True, tags=["food"],
               created_at="2025-01-01T09:00:00Z", updated_at="2025-01-01T09:00:00Z"),
        Memory(id="a2", text="The cabin wifi password is hunter2", tags=["home"],
               created_at="2025-02-20T09:00:00Z", updated_at="2025-02-20T09:00:00Z",
               expires_at="2025-03-10T00:00:00Z"),
        Memory(id="a3", text="Dana approves deploys to production", tags=["work"], source="slack",
               meta={"channel": "#ops"}, created_at="2025-02-25T09:00:00Z", updated_at="2025-02-25T09:00:00Z"),
        Memory(id="a4", text="[bold red]x[/] \x1b[31mred\x1b[0m is not markup",
               created_at="2025-02-27T09:00:00Z", updated_at="2025-02-27T09:00:00Z"),
        Memory(id="a5", text="Trips to the cabin happen in winter", derived_from=["a2"],
               created_at="2025-02-28T09:00:00Z", updated_at="2025-02-28T09:00:00Z"),
    ], kind="import", summary="seed")


@pytest.fixture
def tstore(fake_config, tmp_path):
    """The seeded store the TUI tests use, its clock fixed at fakes.TUI_NOW."""
    from pmem.service import MemoryStore

    from fakes import TUI_NOW

    s = MemoryStore(tmp_path / "tui.db", config=fake_config, clock=lambda: TUI_NOW)
    seed_tui_store(s)
    yield s
    s.close()


@pytest.fixture
def app(tstore):
    """The TUI on the seeded store (pilot.make's defaults: fixed now, no debounce or throttle)."""
    from .pilot import make

    return make(tstore)

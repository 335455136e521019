"""pmem as an llm plugin, through llm's own plugin machinery (its pluggy manager and registries)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

llm = pytest.importorskip("llm", reason='llm is an extra: pip install ".[llm]"')

from llm.plugins import pm  # noqa: E402

from pmem.service import MemoryStore  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def plugin(fake_config):
    """Register the plugin module the way llm's docs test plugins: pm.register, then unregister."""
    from llm.plugins import load_plugins

    from pmem.integrations import llm_plugin

    load_plugins()  # the entry points first: with pmem installed, llm has registered it already
    already = pm.is_registered(llm_plugin)
    if not already:
        pm.register(llm_plugin, name="pmem-test")
    yield llm_plugin
    if not already:
        pm.unregister(name="pmem-test")


@pytest.fixture
def seeded(fake_config, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not a project: reads see global memories
    with MemoryStore(config=fake_config) as s:
        s.add("I am vegetarian", pinned=True)
        s.add("We are planning a trip to Kyoto in April", tags=["travel"])


def test_hooks_match_llm_hookspecs(plugin):
    from llm import hookspecs

    for name in ("register_fragment_loaders", "register_tools"):
        assert hasattr(hookspecs, name), f"llm {metadata.version('llm')} has no hook {name}"
        assert [h.plugin for h in pm.hook.__getattribute__(name).get_hookimpls() if h.plugin is plugin]


def test_fragment_loader(plugin, seeded):
    loaders = llm.get_fragment_loaders()
    assert "pmem" in loaders
    fragment = loaders["pmem"]("trip plans")
    assert isinstance(fragment, llm.Fragment)
    assert "Kyoto" in fragment and "vegetarian" in fragment
    assert fragment.source == "pmem:trip plans"
    assert "vegetarian" in loaders["pmem"]("")  # no query: core and most recent


def test_toolbox_search_recall_remember(plugin, seeded, pmem_home):
    tools = llm.get_tools()
    assert "Pmem" in tools
    box = tools["Pmem"]()
    by_name = {t.name: t for t in box.tools()}
    assert set(by_name) == {"Pmem_search", "Pmem_recall", "Pmem_remember"}
    for t in by_name.values():
        assert t.description and t.input_schema["properties"]
    assert by_name["Pmem_search"].input_schema["properties"]["limit"]["type"] == "integer"
    assert by_name["Pmem_remember"].input_schema["required"] == ["text"]

    found = json.loads(by_name["Pmem_search"].implementation(query="Kyoto trip"))
    assert found["results"][0]["text"].startswith("We are planning a trip to Kyoto")
    assert "vegetarian" in by_name["Pmem_recall"].implementation(topic="dinner")
    stored = json.loads(by_name["Pmem_remember"].implementation(text="I moved to Lisbon"))
    assert stored["created"] is True and stored["memory"]["source"] == "llm"
    assert "scope" not in stored["memory"]  # the user's everywhere
    local = json.loads(by_name["Pmem_remember"].implementation(text="This repo uses tabs", project=True))
    assert local["memory"]["scope"] == str(Path.cwd().resolve())
    with MemoryStore(pmem_home / "pmem.db") as s:
        assert [e.action for e, _ in s.history(stored["memory"]["id"])] == ["add"]


def test_tool_errors_are_one_line(plugin, seeded):
    box = llm.get_tools()["Pmem"]()
    search = {t.name: t for t in box.tools()}["Pmem_search"]
    with pytest.raises(Exception) as info:
        search.implementation(query="   ")
    assert "empty" in str(info.value) and "\n" not in str(info.value)


DISTRIBUTION = "pmem-cli"  # the name on the package index (pyproject.toml); `llm install pmem-cli`


def _entry_point_installed() -> bool:
    try:
        eps = metadata.distribution(DISTRIBUTION).entry_points
    except metadata.PackageNotFoundError:
        return False
    return any(ep.group == "llm" and ep.value == "pmem.integrations.llm_plugin" for ep in eps)


@pytest.mark.skipif(not _entry_point_installed(),
                    reason="pmem's llm entry point is not in the installed metadata (pip install -e . again)")
def test_installed_entry_point_loads_in_llm(pmem_home):
    """What `llm install pmem-cli` gives: llm finds the plugin by its entry point, in a fresh process."""
    code = ("import json, llm; loaders = sorted(llm.get_fragment_loaders()); "
            "print(json.dumps([llm.get_plugins(), loaders, sorted(llm.get_tools())]))")
    env = {**os.environ, "LLM_LOAD_PLUGINS": DISTRIBUTION, "PYTHONPATH": str(ROOT), "LLM_USER_PATH": str(pmem_home)}
    r = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    plugins, loaders, tools = json.loads(r.stdout)
    assert any(p["name"] == DISTRIBUTION and "register_tools" in p["hooks"] for p in plugins)
    assert "pmem" in loaders and "Pmem" in tools


def test_fragment_says_what_is_true_when_nothing_matches(plugin, fake_config, tmp_path, monkeypatch):
    """The fragment said "(nothing stored yet)" with memories stored that matched nothing."""
    monkeypatch.chdir(tmp_path)
    loader = llm.get_fragment_loaders()["pmem"]
    assert "(nothing stored yet)" in str(loader("dinner"))
    with MemoryStore(config=fake_config) as s:
        s.add("A conversation we had", tier="episodic")  # stored, but not what recall offers
    fragment = str(loader("dinner"))
    assert "nothing stored yet" not in fragment and "no stored memory is relevant to: dinner" in fragment


def test_remember_tool_pins_text_already_stored(plugin, seeded, pmem_home):
    remember = {t.name: t for t in llm.get_tools()["Pmem"]().tools()}["Pmem_remember"]
    again = json.loads(remember.implementation(text="We are planning a trip to Kyoto in April", pin=True))
    assert again["created"] is False and again["memory"]["tier"] == "core"
    with MemoryStore(pmem_home / "pmem.db") as s:
        assert s.get(again["memory"]["id"]).pinned


def test_remember_tool_starts_the_background_sync_only_when_asked(plugin, seeded, pmem_home, monkeypatch):
    """sync_auto = on: a fact the model stores through llm travels like one from `pmem add`;
    search and recall start nothing, and with the setting off nothing starts at all."""
    from pmem import autosync

    kicked: list = []
    monkeypatch.setattr(autosync, "kick", lambda db: kicked.append(Path(db)) or True)
    tools = {t.name: t for t in llm.get_tools()["Pmem"]().tools()}
    monkeypatch.setenv("PMEM_SYNC_AUTO", "on")
    tools["Pmem_search"].implementation(query="Kyoto trip")
    tools["Pmem_recall"].implementation(topic="dinner")
    assert kicked == []
    tools["Pmem_remember"].implementation(text="I moved to Lisbon")
    assert kicked == [pmem_home / "pmem.db"]
    monkeypatch.setenv("PMEM_SYNC_AUTO", "off")
    tools["Pmem_remember"].implementation(text="I moved to Porto")
    assert kicked == [pmem_home / "pmem.db"]

"""The hosts' home variables: `pmem hook install` and uninstall write where the host reads
(CLAUDE_CONFIG_DIR, CODEX_HOME, GEMINI_CLI_HOME), and nothing under the home folder then."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pmem.integrations import clients, hooks, hosts

ROOT = Path(__file__).resolve().parents[2]

# Where each host reads its user hooks when its variable is set to D (from the hosts' sources:
# see pmem/integrations/hosts.py): Gemini CLI makes .gemini inside GEMINI_CLI_HOME.
UNDER = {"claude-code": "settings.json", "codex": "hooks.json", "gemini": ".gemini/settings.json"}


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def run_cli(args, env):
    full = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run([sys.executable, "-m", "pmem", *args], capture_output=True, text=True, env=full,
                          timeout=60, check=False)


@pytest.mark.parametrize("client", clients.HOOK_CLIENTS)
def test_install_writes_where_the_variable_points_and_nothing_under_home(client, tmp_path):
    home, moved = tmp_path / "home", tmp_path / "moved"
    home.mkdir()
    r = run_cli(["hook", "install", client], {"HOME": str(home), hosts.VARIABLES[client]: str(moved)})
    assert r.returncode == 0, r.stderr
    target = moved / UNDER[client]
    data = json.loads(target.read_text())
    assert set(hooks.EVENT_NAMES[client].values()) <= set(data["hooks"])
    assert str(target) in r.stderr
    assert files_under(home) == []  # nothing at ~/.claude, ~/.codex or ~/.gemini

    r = run_cli(["hook", "uninstall", client], {"HOME": str(home), hosts.VARIABLES[client]: str(moved)})
    assert r.returncode == 0, r.stderr
    assert "hooks" not in json.loads(target.read_text())
    assert files_under(home) == []


@pytest.mark.parametrize("client", clients.HOOK_CLIENTS)
def test_without_the_variable_the_file_is_under_home(client, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    default = {"claude-code": ".claude/settings.json", "codex": ".codex/hooks.json", "gemini": ".gemini/settings.json"}
    assert clients.settings_path(client) == tmp_path / default[client]
    monkeypatch.setenv(hosts.VARIABLES[client], "")  # empty is unset, as for the hosts
    assert clients.settings_path(client) == tmp_path / default[client]


def test_a_project_file_is_the_projects_whatever_the_variables(tmp_path, monkeypatch):
    for name in hosts.VARIABLES.values():
        monkeypatch.setenv(name, str(tmp_path / "elsewhere"))
    assert clients.settings_path("codex", project=tmp_path / "p") == tmp_path / "p" / ".codex" / "hooks.json"
    assert clients.settings_path("gemini", project=tmp_path / "p") == tmp_path / "p" / ".gemini" / "settings.json"


def test_a_relative_variable_is_taken_from_the_current_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CODEX_HOME", "codex-home")
    assert hosts.user_dir("codex") == tmp_path / "codex-home"


def test_codex_mcp_snippet_names_codex_home(tmp_path, monkeypatch):
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "cx"))
    _, where = clients.mcp_config("codex")
    assert str(tmp_path / "cx" / "config.toml") in where
    monkeypatch.delenv("CODEX_HOME")
    assert "~/.codex/config.toml" in clients.mcp_config("codex")[1]


def test_doctor_reads_the_hooks_where_the_host_does(tmp_path, monkeypatch):
    home, moved = tmp_path / "home", tmp_path / "moved"
    assert clients.hook_checks(home=home, environ={}) == []  # nothing installed: nothing said
    clients.install_hooks("codex", home=home)  # under ~, before CODEX_HOME was set
    monkeypatch.setenv("CODEX_HOME", str(moved))
    found = clients.hook_checks(home=home)
    assert len(found) == 1 and "CODEX_HOME is set" in found[0].detail and found[0].level == "info"
    assert "pmem hook uninstall codex" in found[0].fix
    clients.install_hooks("codex", home=home)  # now where Codex reads
    details = [c.detail for c in clients.hook_checks(home=home)]
    assert any(str(moved / "hooks.json") in d and "SubagentStart" in d for d in details)


def test_doctor_names_events_a_newer_pmem_adds(tmp_path):
    path = clients.settings_path("claude-code", home=tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"hooks": {"SessionStart": [{"hooks": [
        {"type": "command", "command": "pmem hook claude-code session-start"}]}]}}))
    [check] = clients.hook_checks(home=tmp_path, environ={})
    assert "not UserPromptSubmit, SubagentStart" in check.detail and check.fix.startswith("pmem hook install")

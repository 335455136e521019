"""Other tools' files: hook entries in the hosts' settings (checked against the schemas they
publish, tests/data/hosts/), their removal, links kept, and the MCP snippets' env."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from pmem.integrations import clients, hooks, jsonc

ROOT = Path(__file__).resolve().parents[2]
HOSTS = Path(__file__).resolve().parents[1] / "data" / "hosts"
SCHEMAS = {"claude-code": "claude-code-settings.schema.json", "codex": "codex-hooks.schema.json",
           "gemini": "gemini-settings.schema.json"}

# What a person's files look like before pmem touches them (keys each host documents).
THEIRS = {
    "claude-code": {"model": "opus", "permissions": {"allow": ["Read"]},
                    "hooks": {"PreToolUse": [{"matcher": "Bash",
                                              "hooks": [{"type": "command", "command": "echo hi"}]}]}},
    "codex": {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify-send done", "timeout": 5}]}]}},
    "gemini": {"general": {"vimMode": True}, "ui": {"theme": "GitHub"},
               "hooks": {"BeforeTool": [{"matcher": "run_shell_command",
                                         "hooks": [{"name": "audit", "type": "command", "command": "audit.sh"}]}]}},
}

GEMINI_WITH_COMMENTS = """\
// Gemini CLI settings: see https://geminicli.com/docs/get-started/configuration/
{
  "general": {
    "vimMode": true, // muscle memory
    "preferredEditor": "vim"
  },
  /* the theme is picked in /theme */
  "ui": { "theme": "GitHub" },
  "hooks": {
    // audit every shell command
    "BeforeTool": [
      {
        "matcher": "run_shell_command",
        "hooks": [{ "name": "audit", "type": "command", "command": "audit.sh" }]
      }
    ]
  }
}
"""


def run_cli(args, stdin: str = "", env=None, timeout=60):
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "pmem", *args], check=False, input=stdin, capture_output=True,
                          text=True, env=full_env, timeout=timeout)


def validate(client: str, data: dict) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((HOSTS / SCHEMAS[client]).read_text())
    jsonschema.validators.validator_for(schema)(schema).validate(data)


def pmem_commands(data: dict, client: str) -> list[str]:
    return [h["command"] for groups in data.get("hooks", {}).values() for g in groups for h in g["hooks"]
            if clients.pmem_event(h, client)]


# -- the hosts' schemas -----------------------------------------------------------------------


@pytest.mark.parametrize("client", clients.HOOK_CLIENTS)
def test_installed_settings_pass_the_hosts_own_schema(client, tmp_path):
    path = clients.settings_path(client, home=tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(THEIRS[client], indent=2))
    validate(client, THEIRS[client])  # the starting point is valid, so what follows tests pmem's part
    clients.install_hooks(client, program="/opt/pmem venv/bin/pmem", home=tmp_path)
    data = json.loads(path.read_text())
    validate(client, data)
    assert set(hooks.EVENT_NAMES[client].values()) <= set(data["hooks"])
    # each command runs pmem with the hook's arguments, however the path is quoted
    for command in pmem_commands(data, client):
        assert shlex.split(command)[:3] == ["/opt/pmem venv/bin/pmem", "hook", client]


def test_codex_and_gemini_get_a_compaction_hook():
    """Neither sends SessionStart "compact" (Codex only from newer releases): pmem hears of a
    compaction through Codex's PostCompact and Gemini CLI's PreCompress."""
    assert hooks.EVENT_NAMES["codex"]["compact"] == "PostCompact"
    assert hooks.EVENT_NAMES["gemini"]["compact"] == "PreCompress"
    codex = json.loads((HOSTS / "codex-hooks.schema.json").read_text())
    gemini = json.loads((HOSTS / "gemini-settings.schema.json").read_text())
    assert "PostCompact" in codex["properties"]["hooks"]["properties"]
    assert "PreCompress" in gemini["properties"]["hooks"]["properties"]


# -- comments (Gemini CLI) --------------------------------------------------------------------


def test_gemini_settings_with_comments_are_read_and_kept(tmp_path):
    path = clients.settings_path("gemini", home=tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(GEMINI_WITH_COMMENTS)
    result = clients.install_hooks("gemini", home=tmp_path)
    assert result.changed and result.added == ["SessionStart", "BeforeAgent", "PreCompress"]
    text = path.read_text()
    assert text.startswith(GEMINI_WITH_COMMENTS.split("\n  \"hooks\"")[0])  # everything before hooks, byte for byte
    for comment in ("// muscle memory", "/* the theme is picked in /theme */", "// audit every shell command"):
        assert comment in text
    data = jsonc.loads(text)
    validate("gemini", data)
    assert data["ui"] == {"theme": "GitHub"} and data["hooks"]["BeforeTool"][0]["hooks"][0]["name"] == "audit"
    assert not clients.install_hooks("gemini", home=tmp_path).changed  # idempotent, comments and all

    undone = clients.uninstall_hooks("gemini", home=tmp_path)
    assert [r.removed for r in undone] == [["SessionStart", "BeforeAgent", "PreCompress"]]
    assert path.read_text() == GEMINI_WITH_COMMENTS


def test_cli_hook_install_gemini_with_comments(tmp_path):
    path = tmp_path / "p" / ".gemini" / "settings.json"
    path.parent.mkdir(parents=True)
    path.write_text(GEMINI_WITH_COMMENTS)
    r = run_cli(["hook", "install", "gemini", "--project", str(tmp_path / "p")])
    assert r.returncode == 0, r.stderr
    assert "// muscle memory" in path.read_text() and "pmem hook gemini user-prompt" in path.read_text()


def test_claude_and_codex_files_stay_plain_json(tmp_path):
    """Only Gemini CLI reads comments; a commented Claude Code file is refused, untouched."""
    path = clients.settings_path("claude-code", home=tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text('{"model": "opus"} // mine\n')
    with pytest.raises(Exception, match="not valid JSON"):
        clients.install_hooks("claude-code", home=tmp_path)
    assert path.read_text() == '{"model": "opus"} // mine\n'


# -- uninstall --------------------------------------------------------------------------------


@pytest.mark.parametrize("client", clients.HOOK_CLIENTS)
def test_uninstall_removes_exactly_pmem_entries_and_keeps_later_edits(client, tmp_path):
    path = clients.settings_path(client, home=tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(THEIRS[client], indent=4) + "\n")
    clients.install_hooks(client, program="/opt/bin/pmem", home=tmp_path)

    # Later, by hand: a setting, a hook of their own beside pmem's in its group, a new event.
    data = json.loads(path.read_text())
    data["later"] = {"kept": True}
    event = hooks.EVENT_NAMES[client]["user-prompt"]
    data["hooks"][event][0]["hooks"].append({"type": "command", "command": "log-prompt.sh"})
    data["hooks"].setdefault("Notification", []).append({"hooks": [{"type": "command", "command": "say hi"}]})
    path.write_text(json.dumps(data, indent=4) + "\n")
    edited = path.read_text()

    dry = clients.uninstall_hooks(client, home=tmp_path, dry_run=True)
    assert dry[0].changed and path.read_text() == edited

    results = clients.uninstall_hooks(client, home=tmp_path)
    assert results[0].changed and results[0].backup.read_text() == edited  # the file as it was just now
    after = json.loads(path.read_text())
    assert pmem_commands(after, client) == []
    expected = json.loads(json.dumps(THEIRS[client]))
    expected["later"] = {"kept": True}
    group = {k: v for k, v in data["hooks"][event][0].items() if k != "hooks"}  # its matcher, if any, stays
    expected["hooks"][event] = [{**group, "hooks": [{"type": "command", "command": "log-prompt.sh"}]}]
    expected["hooks"].setdefault("Notification", []).append({"hooks": [{"type": "command", "command": "say hi"}]})
    assert after == expected
    assert not clients.uninstall_hooks(client, home=tmp_path)[0].changed


def test_uninstall_of_a_fresh_install_leaves_the_file_as_it_was(tmp_path):
    path = clients.settings_path("claude-code", home=tmp_path)
    path.parent.mkdir(parents=True)
    original = '{\n    "model": "opus",\n    "env": {"A": "1"}\n}\n'
    path.write_text(original)
    clients.install_hooks("claude-code", home=tmp_path)
    assert "SessionStart" in path.read_text()
    clients.uninstall_hooks("claude-code", home=tmp_path)
    assert path.read_text() == original


def test_cli_hook_uninstall(tmp_path):
    proj = tmp_path / "p"
    proj.mkdir()
    assert run_cli(["hook", "install", "codex", "--project", str(proj)]).returncode == 0
    path = proj / ".codex" / "hooks.json"
    before = path.read_text()
    dry = run_cli(["hook", "uninstall", "codex", "--project", str(proj), "--dry-run"])
    assert dry.returncode == 0 and "would remove" in dry.stderr and path.read_text() == before
    r = run_cli(["hook", "uninstall", "codex", "--project", str(proj)])
    assert r.returncode == 0 and "removed" in r.stderr, r.stderr
    assert json.loads(path.read_text()) == {}
    again = run_cli(["hook", "uninstall", "codex", "--project", str(proj)])
    assert again.returncode == 0 and "nothing changed" in again.stderr
    bad = run_cli(["hook", "uninstall", "emacs"])
    assert bad.returncode == 2 and bad.stderr.startswith("pmem: error:")


# -- links ------------------------------------------------------------------------------------


def test_install_writes_through_a_symlinked_settings_file(tmp_path):
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    real = dotfiles / "claude-settings.json"
    real.write_text('{"model": "opus"}\n')
    real.chmod(0o640)
    link = clients.settings_path("claude-code", home=tmp_path)
    link.parent.mkdir(parents=True)
    link.symlink_to(os.path.relpath(real, link.parent))

    clients.install_hooks("claude-code", home=tmp_path)
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert "SessionStart" in json.loads(real.read_text())["hooks"]
    assert real.stat().st_mode & 0o777 == 0o640
    clients.uninstall_hooks("claude-code", home=tmp_path)
    assert link.is_symlink() and json.loads(real.read_text()) == {"model": "opus"}

    # a dangling link: its target is created, the link stays
    gemini = clients.settings_path("gemini", home=tmp_path)
    gemini.parent.mkdir(parents=True)
    gemini.symlink_to(dotfiles / "gemini" / "settings.json")
    clients.install_hooks("gemini", home=tmp_path)
    created = dotfiles / "gemini" / "settings.json"
    assert gemini.is_symlink() and "BeforeAgent" in json.loads(created.read_text())["hooks"]


# -- Claude Code: the shared project file gets no one's own path ------------------------------


def test_claude_project_install_with_a_full_path_goes_to_the_local_file(tmp_path):
    proj = tmp_path / "p"
    proj.mkdir()
    local = clients.install_hooks("claude-code", program="/home/ana/.venvs/pmem/bin/pmem", project=proj)
    assert local.path == proj / ".claude" / "settings.local.json"
    assert not (proj / ".claude" / "settings.json").exists()
    validate("claude-code", json.loads(local.path.read_text()))
    shared = clients.install_hooks("claude-code", program="pmem", project=proj)
    assert shared.path == proj / ".claude" / "settings.json"
    assert shared.elsewhere == local.path  # both files' hooks run: the CLI says so
    assert pmem_commands(json.loads(shared.path.read_text()), "claude-code")[0] == "pmem hook claude-code session-start"
    # uninstall looks in both
    removed = [r.path.name for r in clients.uninstall_hooks("claude-code", project=proj) if r.changed]
    assert removed == ["settings.json", "settings.local.json"]


def test_codex_install_says_to_trust_the_hooks(tmp_path):
    """Hooks are on by default in Codex now (`codex_hooks` is a deprecated alias of
    `[features] hooks`), and a hook no admin manages runs only once trusted in /hooks."""
    r = run_cli(["hook", "install", "codex"], env={"HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    assert "/hooks" in r.stderr and "trust" in r.stderr
    assert "codex_hooks" not in r.stderr
    page = (ROOT / "docs" / "agents" / "codex.md").read_text(encoding="utf-8")
    assert "codex_hooks = true" not in page and "/hooks" in page


# -- MCP snippets: the env that finds the same store ------------------------------------------


@pytest.mark.parametrize("client", clients.MCP_CLIENTS)
def test_print_config_carries_the_store_location(client, tmp_path):
    env = {"PMEM_HOME": str(tmp_path / "elsewhere"), "PMEM_DB": "~/notes/pmem.db"}
    r = run_cli(["mcp", "--print-config", client], env=env)
    assert r.returncode == 0, r.stderr
    want = {"PMEM_HOME": str(tmp_path / "elsewhere"), "PMEM_DB": str(Path("~/notes/pmem.db").expanduser())}
    if client == "claude-code":
        words = shlex.split(r.stdout)
        name = words.index("pmem")
        pairs = [words[i + 1] for i, w in enumerate(words[:name]) if w == "--env"]  # options before the name
        got = dict(p.split("=", 1) for p in pairs)
    elif client == "codex":
        got = tomllib.loads(r.stdout)["mcp_servers"]["pmem"]["env"]
    else:
        data = json.loads(r.stdout)
        got = data["servers" if client == "vscode" else "mcpServers"]["pmem"]["env"]
    assert {k: got[k] for k in want} == want


def test_print_config_env_makes_an_sdk_client_open_the_same_store(tmp_path, fake_config):
    """stdio_client passes the server only a few variables (HOME, PATH...): the printed env is
    what brings it to the store the person uses."""
    pytest.importorskip("mcp.client.stdio", reason='the MCP SDK is an extra: pip install ".[mcp]"')
    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from pmem.service import MemoryStore

    db = tmp_path / "work" / "notes.db"
    db.parent.mkdir()
    with MemoryStore(db, config=fake_config) as s:
        s.add("The quarterly report is due on the third Friday")
    r = run_cli(["--db", str(db), "mcp", "--print-config", "claude-desktop"])
    server = json.loads(r.stdout)["mcpServers"]["pmem"]
    env = {**server.get("env", {}), "HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT),
           "PMEM_EMBED_MODEL": "fake-64"}
    params = StdioServerParameters(command=sys.executable, args=["-m", "pmem", *server["args"]], env=env,
                                   cwd=str(tmp_path))

    async def main():
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return await session.call_tool("search", {"query": "quarterly report"})

    result = anyio.run(main)
    assert not result.is_error
    assert "third Friday" in result.content[0].text

"""`pmem import --discover`: every tool's history found where the tool keeps it, its home
variables honoured (fake homes only), and `--pick` importing it, then only what is new."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from export_fixtures import claude_code_session, llm_db_new, write_jsonl

from pmem.integrations.importers import discover as disc
from pmem.integrations.importers.registry import FORMATS

ROOT = Path(__file__).resolve().parents[3]
ALL = dict.fromkeys(disc.KEYS)  # every format registered, for the location tests


def touch(path: Path, text: str = "x\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def found(home, environ=None, cwd=None, platform="linux", formats=ALL, **kw):
    histories = disc.discover(environ=environ or {}, home=home, cwd=cwd or home, platform=platform, formats=formats,
                              **kw)
    return {h.key: h for h in histories}


def names(h) -> list[str]:
    return sorted(str(f.path.relative_to(h.root)) if f.path.is_relative_to(h.root) else f.path.name
                  for f in h.files)


# -- where each tool keeps it -----------------------------------------------------------------


def test_an_empty_home_has_no_history(tmp_path):
    assert found(tmp_path) == {}


def test_default_places_under_home(tmp_path):
    home = tmp_path
    touch(home / ".claude/projects/-work-app/s1.jsonl")
    touch(home / ".claude/projects/-work-app/s1/subagents/agent-1.jsonl")
    touch(home / ".claude/settings.json")  # not a history
    touch(home / ".codex/sessions/2026/11/01/rollout-2026-11-01T10-00-00-abc.jsonl")
    touch(home / ".codex/archived_sessions/rollout-2026-10-01T10-00-00-def.jsonl")
    touch(home / ".gemini/tmp/9f3a/chats/session-2026-11-01T10-00-abcd1234.jsonl")
    touch(home / ".gemini/tmp/9f3a/chats/parent-session/sub-agent.jsonl")
    touch(home / ".gemini/tmp/9f3a/logs.json")  # Gemini CLI's prompt log, not a chat
    touch(home / ".gemini/tmp/bin/chats.json")
    touch(home / ".config/io.datasette.llm/logs.db")
    touch(home / ".aider.chat.history.md")
    touch(home / ".config/Cursor/User/globalStorage/state.vscdb")
    touch(home / ".npm/_npx/4b1e/node_modules/@modelcontextprotocol/server-memory/dist/memory.jsonl")
    got = found(home)
    assert list(got) == list(disc.KEYS)
    assert names(got["claude-code"]) == ["-work-app/s1.jsonl", "-work-app/s1/subagents/agent-1.jsonl"]
    assert got["claude-code"].root == home / ".claude/projects" and got["claude-code"].variable is None
    assert len(got["codex"].files) == 2 and got["codex"].format == "codex"
    assert names(got["gemini"]) == ["9f3a/chats/parent-session/sub-agent.jsonl",
                                    "9f3a/chats/session-2026-11-01T10-00-abcd1234.jsonl"]
    assert got["llm"].root == home / ".config/io.datasette.llm/logs.db"
    assert got["cursor"].root.name == "state.vscdb" and got["mcp-memory"].root.name == "memory.jsonl"


def test_home_variables_move_each_tool_and_home_is_not_read(tmp_path):
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    for rel in (".claude/projects/p/a.jsonl", ".codex/sessions/2026/01/01/rollout-a.jsonl",
                ".gemini/tmp/p/chats/session-a.json", ".config/io.datasette.llm/logs.db"):
        touch(home / rel)  # what the variables hide: never listed
    env = {"CLAUDE_CONFIG_DIR": str(elsewhere / "claude"), "CODEX_HOME": str(elsewhere / "codex"),
           "GEMINI_CLI_HOME": str(elsewhere / "g"), "LLM_USER_PATH": str(elsewhere / "llm"),
           "MEMORY_FILE_PATH": str(elsewhere / "graph.jsonl"),
           "AIDER_CHAT_HISTORY_FILE": str(elsewhere / "aider.md")}
    touch(elsewhere / "claude/projects/p/b.jsonl")
    touch(elsewhere / "codex/sessions/2026/02/02/rollout-b.jsonl")
    touch(elsewhere / "g/.gemini/tmp/p/chats/session-b.json")  # GEMINI_CLI_HOME holds .gemini
    touch(elsewhere / "llm/logs.db")
    touch(elsewhere / "graph.jsonl")
    touch(elsewhere / "aider.md")
    got = found(home, env)
    for key, variable in (("claude-code", "CLAUDE_CONFIG_DIR"), ("codex", "CODEX_HOME"),
                          ("gemini", "GEMINI_CLI_HOME"), ("llm", "LLM_USER_PATH"), ("mcp-memory", "MEMORY_FILE_PATH"),
                          ("aider", "AIDER_CHAT_HISTORY_FILE")):
        assert got[key].variable == variable
        assert all(f.path.is_relative_to(elsewhere) for f in got[key].files), key


@pytest.mark.slow
def test_llm_path_is_the_one_llm_itself_prints(tmp_path):
    """The real llm, run with a fake home: `llm logs path` and pmem agree, with and without
    XDG_CONFIG_HOME and LLM_USER_PATH (pmem computes it without importing llm or click)."""
    llm = shutil.which("llm", path=str(Path(sys.executable).parent))
    if llm is None:
        pytest.skip("llm is not installed (pip install '.[llm]')")
    home = tmp_path / "home"
    home.mkdir()
    for extra in ({}, {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}, {"LLM_USER_PATH": str(tmp_path / "llm-user")}):
        env = {"HOME": str(home), "PATH": os.environ.get("PATH", ""), **extra}
        printed = subprocess.run([llm, "logs", "path"], env=env, capture_output=True, text=True, timeout=60,
                                 check=True).stdout.strip()
        folder, _ = disc.llm_user_dir(env, home, sys.platform)
        assert Path(printed) == folder / "logs.db"


def test_platform_folders(tmp_path):
    home = tmp_path
    mac = touch(home / "Library/Application Support/Cursor/User/globalStorage/state.vscdb")
    assert found(home, platform="darwin")["cursor"].root == mac
    win = touch(tmp_path / "Roaming/Cursor/User/globalStorage/state.vscdb")
    assert found(home, {"APPDATA": str(tmp_path / "Roaming")}, platform="win32")["cursor"].root == win
    xdg = touch(tmp_path / "xdg/Cursor/User/globalStorage/state.vscdb")
    assert found(home, {"XDG_CONFIG_HOME": str(tmp_path / "xdg")})["cursor"].root == xdg


def test_aider_in_the_git_root_the_folder_and_home(tmp_path):
    home, repo = tmp_path / "home", tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    touch(repo / ".aider.chat.history.md")
    touch(home / ".aider.chat.history.md")
    got = found(home, cwd=repo / "src")
    assert sorted(str(f.path) for f in got["aider"].files) == sorted(
        [str(repo / ".aider.chat.history.md"), str(home / ".aider.chat.history.md")])


def test_mcp_memory_relative_and_tilde_paths(tmp_path):
    home = tmp_path
    dist = home / ".npm/_npx/77/node_modules/@modelcontextprotocol/server-memory/dist"
    touch(dist / "mine.jsonl")
    assert found(home, {"MEMORY_FILE_PATH": "mine.jsonl"})["mcp-memory"].root == dist / "mine.jsonl"
    touch(home / "notes/graph.jsonl")
    assert found(home, {"MEMORY_FILE_PATH": "~/notes/graph.jsonl"})["mcp-memory"].root == home / "notes/graph.jsonl"


def test_a_format_not_registered_is_listed_not_importable(tmp_path):
    touch(tmp_path / ".codex/sessions/2026/01/01/rollout-a.jsonl")
    touch(tmp_path / ".claude/projects/p/a.jsonl")
    got = found(tmp_path, formats={"claude-code": object()})
    assert got["claude-code"].importable and not got["codex"].importable
    assert got["codex"].to_dict()["importable"] is False


def test_links_are_not_followed_and_walks_are_bounded(tmp_path):
    home = tmp_path / "home"
    secret = touch(tmp_path / "outside/secret.jsonl")
    projects = home / ".claude/projects"
    touch(projects / "p/real.jsonl")
    (projects / "p/link.jsonl").symlink_to(secret)
    (projects / "linked-dir").symlink_to(tmp_path / "outside", target_is_directory=True)
    assert names(found(home)["claude-code"]) == ["p/real.jsonl"]
    for i in range(5):
        touch(projects / f"q/{i}.jsonl")
    h = found(home, limit=3)["claude-code"]
    assert len(h.files) == 3 and h.truncated
    (home / ".config/io.datasette.llm").mkdir(parents=True)
    (home / ".config/io.datasette.llm/logs.db").symlink_to(secret)
    assert "llm" not in found(home)


def test_picks(tmp_path):
    touch(tmp_path / ".claude/projects/p/a.jsonl")
    touch(tmp_path / ".aider.chat.history.md")
    hs = disc.discover(environ={}, home=tmp_path, cwd=tmp_path, platform="linux", formats=ALL)
    assert [h.key for h in disc.parse_picks("aider, 1", hs)] == ["aider", "claude-code"]
    assert disc.parse_picks("all", hs) == hs and disc.parse_picks("", hs) == []
    for bad, message in (("codex", "no codex history"), ("9", "use names"), ("nope", "use names")):
        with pytest.raises(Exception, match=message):
            disc.parse_picks(bad, hs)


# -- the command ------------------------------------------------------------------------------


def run_cli(args, env):
    full = {**os.environ, "PYTHONPATH": str(ROOT), "PMEM_EMBED_MODEL": "fake-64", **env}
    return subprocess.run([sys.executable, "-m", "pmem", *args], capture_output=True, text=True, env=full,
                          timeout=120, check=False)


@pytest.fixture
def machine(tmp_path):
    """A fake home holding a Claude Code transcript and an llm logs.db, and a Codex session
    (listed; importable once a codex importer is registered)."""
    home = tmp_path / "home"
    write_jsonl(home / ".claude/projects/-work-parser/sess-1.jsonl", claude_code_session("sess-1", "/work/parser"))
    (home / ".config/io.datasette.llm").mkdir(parents=True)
    llm_db_new(home / ".config/io.datasette.llm/logs.db")
    touch(home / ".codex/sessions/2026/11/01/rollout-x.jsonl", "")
    return {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}


def test_discover_lists_with_counts_and_dates(machine):
    r = run_cli(["import", "--discover", "--json"], machine)
    assert r.returncode == 0, r.stderr
    got = {h["key"]: h for h in json.loads(r.stdout)["histories"]}
    assert set(got) == {"claude-code", "codex", "llm"}
    cc = got["claude-code"]
    assert cc["files"] == 1 and cc["new_files"] == 1 and cc["bytes"] > 0 and cc["newest"][:4] >= "2026"
    assert cc["path"].endswith(".claude/projects") and cc["importable"] is True
    assert got["codex"]["importable"] is ("codex" in FORMATS)

    text = run_cli(["import", "--discover"], machine)
    assert text.returncode == 0 and "claude-code" in text.stdout and "--pick" in text.stderr


def test_pick_imports_then_only_what_is_new(machine):
    r = run_cli(["import", "--discover", "--pick", "claude-code,llm", "--json"], machine)
    assert r.returncode == 0, r.stderr
    done = {h["key"]: h for h in json.loads(r.stdout)["histories"]}
    assert done["claude-code"]["result"]["imported"] > 0 and done["llm"]["result"]["imported"] == 6  # 3 turns

    again = run_cli(["import", "--discover", "--pick", "claude-code,llm", "--json"], machine)
    done = {h["key"]: h for h in json.loads(again.stdout)["histories"]}
    assert done["claude-code"]["skipped"] == "nothing new since the last import"  # not even read
    assert done["llm"]["new_files"] == 0

    # a transcript that grew is read again, and only its new turn is stored
    path = Path(machine["HOME"]) / ".claude/projects/-work-parser/sess-1.jsonl"
    lines = claude_code_session("sess-1", "/work/parser")
    extra = {**lines[-1], "uuid": "u5", "type": "user", "timestamp": "2026-03-01T10:04:00.000Z",
             "message": {"role": "user", "content": "Thanks, ship it."}}
    write_jsonl(path, [*lines, extra])
    third = run_cli(["import", "--discover", "--pick", "claude-code", "--json"], machine)
    result = json.loads(third.stdout)["histories"][0]["result"]
    assert result["imported"] == 1 and result["skipped_existing"] > 0


def test_an_undone_import_counts_as_new(machine):
    assert run_cli(["import", "--discover", "--pick", "llm"], machine).returncode == 0
    assert run_cli(["undo"], machine).returncode == 0
    r = run_cli(["import", "--discover", "--pick", "llm", "--json"], machine)
    assert json.loads(r.stdout)["histories"][0]["result"]["imported"] == 6


def test_dry_run_remembers_nothing(machine):
    r = run_cli(["import", "--discover", "--pick", "llm", "--dry-run", "--json"], machine)
    assert json.loads(r.stdout)["histories"][0]["result"]["would_import"] == 6
    r = run_cli(["import", "--discover", "--json"], machine)
    assert {h["key"]: h for h in json.loads(r.stdout)["histories"]}["llm"]["new_files"] == 1


def test_usage_errors(machine):
    for args, message in ((["import"], "--discover"), (["import", "x.jsonl", "--discover"], "no PATH"),
                          (["import", "--discover", "--format", "llm"], "no --format"),
                          (["import", "--pick", "bogus"], "use names")):
        r = run_cli(args, machine)
        assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)

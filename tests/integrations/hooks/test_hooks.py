"""Agent hooks (`pmem hook`), their installation in clients' settings files, and the AGENTS.md block."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from pmem.integrations import clients, context, hooks
from pmem.service import MemoryStore

ROOT = Path(__file__).resolve().parents[3]


def run_cli(args, stdin: str = "", env=None, timeout=60):
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "pmem", *args], check=False, input=stdin, capture_output=True,
                          text=True, env=full_env, timeout=timeout)


def prompt_json(prompt: str, session="s1", cwd=None, **extra) -> str:
    return json.dumps({"session_id": session, "prompt": prompt, "cwd": str(cwd or "/"),
                       "hook_event_name": "UserPromptSubmit", **extra})


def _open(cfg):
    return lambda: MemoryStore(config=cfg)


# -- the hook itself ------------------------------------------------------------------------


def test_user_prompt_prints_relevant_memories_once_per_session(seeded, fake_config, project):
    def run(p, s="s1"):
        return hooks.run_hook("claude-code", "user-prompt", prompt_json(p, s, project), _open(fake_config))

    first = run("what do we usually eat for dinner on Fridays?")
    assert "pasta with friends" in first
    assert "hunter2" not in first
    again = run("dinner on Fridays again: pasta?")
    assert "pasta with friends" not in again  # already given in this session
    assert "pasta with friends" in run("dinner on Fridays?", s="another-session")


def test_nothing_relevant_prints_nothing(seeded, fake_config):
    out = hooks.run_hook("claude-code", "user-prompt", prompt_json("qxz vvv jjj"), _open(fake_config))
    assert out == ""
    assert hooks.run_hook("claude-code", "user-prompt", "", _open(fake_config)) == ""
    assert hooks.run_hook("gemini", "user-prompt", prompt_json("qxz vvv jjj"), _open(fake_config)) == "{}"


def test_output_stays_within_the_budget(fake_config, pmem_home):
    with MemoryStore(config=fake_config) as s:
        for i in range(40):
            s.add(f"Budget note {i}: the garden shed roof " + "leaks badly " * 40)
        s.add("pinned " + "x" * 9000, pinned=True)
    for budget in (300, 1000, 4000):
        settings = hooks.HookSettings(budget=budget, limit=40)
        out = hooks.run_hook("claude-code", "user-prompt", prompt_json("garden shed roof leaks", f"b{budget}"),
                             _open(fake_config), settings=settings)
        assert 0 < len(out) <= budget
        start = hooks.run_hook("claude-code", "session-start", json.dumps({"session_id": f"c{budget}"}),
                               _open(fake_config), settings=settings)
        assert 0 < len(start) <= budget
    assert hooks.HookSettings().budget < 8000


def test_session_start_gives_core_and_project_memories_and_scope_applies(seeded, fake_config, project, tmp_path):
    from pmem.scope import auto_scope, read_filter

    def make_filter(data):
        p = auto_scope(data.cwd)
        return read_filter(p), p

    inside = hooks.run_hook("claude-code", "session-start",
                            json.dumps({"session_id": "p1", "cwd": str(project), "source": "startup"}),
                            _open(fake_config), make_filter=make_filter)
    assert "vegetarian" in inside and "tomato beds" in inside
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    outside = hooks.run_hook("claude-code", "user-prompt",
                             prompt_json("watering the tomato beds", "p2", elsewhere),
                             _open(fake_config), make_filter=make_filter)
    assert "tomato beds" not in outside  # another project's memory


def test_codex_and_gemini_get_json_with_additional_context(seeded, fake_config):
    for client, name in (("codex", "UserPromptSubmit"), ("gemini", "BeforeAgent")):
        out = hooks.run_hook(client, "user-prompt", prompt_json("dinner on Fridays", client), _open(fake_config))
        data = json.loads(out)
        assert data["hookSpecificOutput"]["hookEventName"] == name
        assert "pasta" in data["hookSpecificOutput"]["additionalContext"]


def test_timeout_prints_nothing_and_logs(fake_config, pmem_home):
    def slow_store():
        time.sleep(3)
        return MemoryStore(config=fake_config)

    started = time.perf_counter()
    out = hooks.run_hook("claude-code", "user-prompt", prompt_json("anything"), slow_store,
                         settings=hooks.HookSettings(timeout=0.5))
    assert out == "" and time.perf_counter() - started < 2
    assert "gave up after 0.5 s" in hooks.log_path().read_text()


@pytest.mark.slow
def test_cli_hook_never_fails_the_prompt(seeded, pmem_home, tmp_path):
    """A broken database: exit 0, nothing on stdout or stderr, the error logged, doctor shows it."""
    env = {"PMEM_EMBED_MODEL": "fake-64"}
    ok = run_cli(["hook", "claude-code", "user-prompt"], prompt_json("dinner on Fridays"), env)
    assert ok.returncode == 0 and "pasta" in ok.stdout and ok.stderr == ""

    bad_db = tmp_path / "broken.db"
    bad_db.write_bytes(b"this is not sqlite" * 100)
    broken = run_cli(["hook", "claude-code", "user-prompt"], prompt_json("dinner"), {**env, "PMEM_DB": str(bad_db)})
    assert broken.returncode == 0 and broken.stdout == "" and broken.stderr == ""
    chosen = run_cli(["--db", str(pmem_home / "pmem.db"), "hook", "claude-code", "user-prompt"],
                     prompt_json("dinner on Fridays", "s2"), {**env, "PMEM_DB": str(bad_db)})
    assert chosen.returncode == 0 and "pasta" in chosen.stdout  # --db reaches the hook's worker thread
    garbage = run_cli(["hook", "claude-code", "user-prompt"], "\x00\xff{not json", env)
    assert garbage.returncode == 0 and garbage.stderr == ""
    unknown = run_cli(["hook", "claude-code", "pre-tool"], "{}", env)
    assert unknown.returncode == 0 and unknown.stdout == "" and unknown.stderr == ""

    log = hooks.log_path().read_text()
    assert "broken.db" in log and "unknown event" in log
    doctor = run_cli(["doctor"], env={**env, "PMEM_DB": str(pmem_home / "pmem.db")})
    assert "agent hooks" in doctor.stdout and "unknown event" in doctor.stdout


# -- installing the hooks -------------------------------------------------------------------


@pytest.mark.parametrize("client", clients.HOOK_CLIENTS)
def test_install_merges_is_idempotent_and_keeps_a_backup(client, tmp_path):
    home = tmp_path / "home"
    path = clients.settings_path(client, home=home)
    path.parent.mkdir(parents=True)
    theirs = {"model": "opus", "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
        {"type": "command", "command": "echo hi"}]}]}, "permissions": {"allow": ["Read"]}}
    path.write_text(json.dumps(theirs, indent=4))
    path.chmod(0o640)

    first = clients.install_hooks(client, program="/opt/bin/pmem", home=home)
    assert first.changed and first.backup is not None
    assert json.loads(first.backup.read_text()) == theirs
    data = json.loads(path.read_text())
    for key in ("model", "permissions"):
        assert data[key] == theirs[key]
    assert data["hooks"]["PreToolUse"] == theirs["hooks"]["PreToolUse"]
    names = hooks.EVENT_NAMES[client]
    commands = [h["command"] for event in names.values() for g in data["hooks"][event] for h in g["hooks"]]
    assert commands == [f"/opt/bin/pmem hook {client} {event}" for event in names]
    assert path.stat().st_mode & 0o777 == 0o640

    before = path.read_text()
    second = clients.install_hooks(client, program="/opt/bin/pmem", home=home)
    assert not second.changed and path.read_text() == before
    assert len(list(path.parent.glob(path.name + ".bak-*"))) == 1

    moved = clients.install_hooks(client, program="/usr/local/bin/pmem", home=home)  # pmem moved: update in place
    data = json.loads(path.read_text())
    assert moved.changed and sum(len(g["hooks"]) for e in names.values() for g in data["hooks"][e]) == len(names)


def test_install_refuses_a_file_it_cannot_parse(tmp_path):
    home = tmp_path / "home"
    path = clients.settings_path("claude-code", home=home)
    path.parent.mkdir(parents=True)
    path.write_text("{ this is: not json")
    with pytest.raises(Exception, match="not valid JSON"):
        clients.install_hooks("claude-code", home=home)
    assert path.read_text() == "{ this is: not json"
    path.write_text('{"hooks": ["wrong"]}')
    with pytest.raises(Exception, match="not an object"):
        clients.install_hooks("claude-code", home=home)


def test_cli_hook_install_for_a_project(tmp_path):
    proj = tmp_path / "p"
    proj.mkdir()
    r = run_cli(["hook", "install", "claude-code", "--project", str(proj)])
    assert r.returncode == 0, r.stderr
    data = json.loads((proj / ".claude" / "settings.json").read_text())
    assert data["hooks"]["UserPromptSubmit"][0]["hooks"][0]["command"].endswith("hook claude-code user-prompt")
    r2 = run_cli(["hook", "install", "claude-code", "--project", str(proj)])
    assert r2.returncode == 0 and "nothing changed" in r2.stderr
    bad = run_cli(["hook", "install", "emacs"])
    assert bad.returncode == 2 and bad.stderr.startswith("pmem: error:")


# -- MCP config snippets --------------------------------------------------------------------


@pytest.mark.parametrize("client", clients.MCP_CLIENTS)
def test_mcp_print_config_parses(client):
    r = run_cli(["mcp", "--print-config", client])
    assert r.returncode == 0, r.stderr
    text = r.stdout
    if client == "claude-code":
        assert text.startswith("claude mcp add") and text.rstrip().endswith(" mcp")
        return
    if client == "codex":
        data = tomllib.loads(text)
        server = data["mcp_servers"]["pmem"]
    else:
        data = json.loads(text)
        server = data["servers" if client == "vscode" else "mcpServers"]["pmem"]
    assert server["args"] == ["mcp"] and server["command"].endswith("pmem")
    if client == "claude-desktop":
        assert server["command"] == "pmem" or os.path.isabs(server["command"])


# -- AGENTS.md block ------------------------------------------------------------------------


def test_context_block_owns_only_its_lines(tmp_path):
    path = tmp_path / "AGENTS.md"
    original = "# Project rules\r\n\r\nUse tabs.\r\n"
    path.write_text(original, newline="")
    assert context.write_block(path, "## About the user\n- likes tea")
    text = path.read_bytes().decode()
    assert text.startswith(original) and "- likes tea\r\n" in text and context.END in text
    assert not context.write_block(path, "## About the user\n- likes tea")  # idempotent

    # The user adds text after the block; an update replaces only the block.
    path.write_bytes(path.read_bytes() + b"\r\nMore rules after.\r\n")
    assert context.write_block(path, "## About the user\n- likes coffee")
    text = path.read_bytes().decode()
    assert text.startswith(original) and text.endswith("\r\nMore rules after.\r\n")
    assert "likes coffee" in text and "likes tea" not in text
    assert text.count(context.END) == 1

    broken = tmp_path / "CLAUDE.md"
    broken.write_text(context.BEGIN + "\nno end marker\n")
    with pytest.raises(Exception, match="markers are broken"):
        context.write_block(broken, "x")


def test_cli_context_write(fake_config, seeded, project):
    agents = project / "AGENTS.md"
    agents.write_text("# Rules\n")
    r = run_cli(["context", "--write", str(agents)], env={"PMEM_EMBED_MODEL": "fake-64"})
    assert r.returncode == 0, r.stderr
    text = agents.read_text()
    assert text.startswith("# Rules\n") and "vegetarian" in text
    assert "tomato" not in text  # not core


@pytest.mark.parametrize("client", ["claude-desktop", "vscode", "codex"])
def test_docs_show_the_exact_snippets(client):
    """The agent pages' per-client snippets (docs/agents/) are what `pmem mcp --print-config`
    prints (with pmem on PATH); README's quick start shows Claude Code's."""
    pages = "\n".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs" / "agents").glob("*.md")))
    assert clients.mcp_config(client, "pmem")[0] in pages
    assert clients.mcp_config("claude-code", "pmem")[0] in pages
    assert clients.mcp_config("claude-code", "pmem")[0] in (ROOT / "README.md").read_text(encoding="utf-8")


# -- reading stdin, a writer's lock ------------------------------------------------------------


def _hook_process(args, env):
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "PMEM_EMBED_MODEL": "fake-64", **env}
    return subprocess.Popen([sys.executable, "-m", "pmem", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=full_env)


def _output_while_stdin_open(proc, limit: float = 30) -> bytes | None:
    """All the hook prints, or None if it has not exited within `limit` s, our end of its stdin open."""
    import threading

    box: dict[str, bytes] = {}
    reader = threading.Thread(target=lambda: box.setdefault("out", proc.stdout.read()), daemon=True)
    reader.start()
    reader.join(limit)
    try:
        return box.get("out") if proc.wait(timeout=1) == 0 else None
    except subprocess.TimeoutExpired:
        return None
    finally:
        proc.kill()
        proc.stdin.close()
        proc.wait()


def test_hook_answers_while_the_host_keeps_stdin_open(seeded):
    """A host may write the JSON and keep the pipe open: the hook reads one object, not to EOF."""
    proc = _hook_process(["hook", "claude-code", "user-prompt"], {})
    proc.stdin.write((prompt_json("what do we eat for dinner on Fridays?") + "\n").encode())
    proc.stdin.flush()
    out = _output_while_stdin_open(proc)
    assert out is not None, "the hook waited for its stdin to close"
    assert b"pasta with friends" in out


def test_hook_gives_up_within_its_timeout_on_a_silent_open_stdin(seeded):
    proc = _hook_process(["hook", "gemini", "user-prompt"], {"PMEM_HOOK_TIMEOUT": "1"})
    started = time.perf_counter()
    out = _output_while_stdin_open(proc)
    assert out is not None, "the hook waited for its stdin to close"
    assert out.strip() == b"{}"  # Gemini's "nothing", within the limit (plus start-up)
    assert "gave up after 1 s" in hooks.log_path().read_text()
    assert time.perf_counter() - started < 20


def test_read_input_stops_at_the_first_json_value():
    import io

    class Pipe(io.RawIOBase):  # chunks as a pipe hands them over; reading past them would block
        def __init__(self, chunks):
            self.chunks = list(chunks)

        def readable(self):
            return True

        def read1(self, n=-1):
            if not self.chunks:
                raise AssertionError("read past the JSON object: this would wait for EOF")
            return self.chunks.pop(0)

    text = hooks.read_input(Pipe([b'{"prompt": "a } inside", ', b'"nested": {"x": [1]}}\n']))
    assert hooks.parse_input(text).prompt == "a } inside"
    typed = hooks.read_input(io.BytesIO(b"plan dinner for six"))  # by hand: to EOF
    assert hooks.parse_input(typed).prompt == "plan dinner for six"
    assert hooks.parse_input('{"prompt": "x"}{"prompt": "y"}').prompt == "x"


class held_lock:
    """Another process holding `db`'s write lock (BEGIN IMMEDIATE), as an import or a dream does
    while it writes. A process, not a connection here: POSIX locks do not conflict within one."""

    def __init__(self, db):
        code = ("import sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
                "c.execute('BEGIN IMMEDIATE'); print('held', flush=True); sys.stdin.read()")
        self.proc = subprocess.Popen([sys.executable, "-c", code, str(db)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def __enter__(self):
        assert self.proc.stdout.readline().strip() == "held"
        return self

    def __exit__(self, *exc):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def test_session_start_answers_while_a_writer_holds_the_lock(seeded, pmem_home):
    """touch() used to wait 5 s for the lock, past the hook's 4 s: the session started with
    nothing. The hook now skips the access count and makes it up at its next run."""
    import sqlite3

    db = pmem_home / "pmem.db"
    with held_lock(db):
        started = time.perf_counter()
        r = run_cli(["hook", "claude-code", "session-start"], json.dumps({"session_id": "locked", "source": "startup"}),
                    {"PMEM_EMBED_MODEL": "fake-64"})
        elapsed = time.perf_counter() - started
    assert r.returncode == 0 and "vegetarian" in r.stdout, r.stdout
    assert not hooks.log_path().exists() or "gave up" not in hooks.log_path().read_text()
    assert elapsed < 30  # well under it on an idle machine; the point is the output above

    def counted():
        con = sqlite3.connect(db)
        try:
            return con.execute("SELECT access_count FROM memories WHERE text LIKE 'I am vegetarian%'").fetchone()[0]
        finally:
            con.close()

    assert counted() == 0  # not counted while the lock was held...
    run_cli(["hook", "claude-code", "user-prompt"], prompt_json("nothing relevant qqq", "locked"),
            {"PMEM_EMBED_MODEL": "fake-64"})
    assert counted() == 1  # ...but at the session's next hook


def test_touch_without_waiting_gives_up_at_once_on_a_held_lock(store):
    m, _ = store.add("counted when the database is free")
    with held_lock(store.path):
        started = time.perf_counter()
        assert store.touch([m.id], wait=False) is False
        assert time.perf_counter() - started < 1.0
    assert store.touch([m.id], wait=False) is True
    assert store.get(m.id).access_count == 1
    busy = store.conn.execute("PRAGMA busy_timeout").fetchone()[0]
    assert busy == 5000  # the store's own wait is back for everything else


# -- compaction: what was given may be given again --------------------------------------------


def _validate(schema_name: str, data) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((ROOT / "tests" / "data" / "hosts" / schema_name).read_text())
    jsonschema.validators.validator_for(schema)(schema).validate(data)


def test_codex_post_compact_lets_memories_come_back(seeded, fake_config):
    def prompt(text):
        payload = {"session_id": "cx", "turn_id": "t1", "transcript_path": None, "cwd": "/", "model": "gpt-5",
                   "permission_mode": "default", "hook_event_name": "UserPromptSubmit", "prompt": text}
        _validate("codex-user-prompt-submit.input.schema.json", payload)
        out = hooks.run_hook("codex", "user-prompt", json.dumps(payload), _open(fake_config))
        if out:
            _validate("codex-user-prompt-submit.output.schema.json", json.loads(out))
        return out

    assert "pasta with friends" in prompt("dinner on Fridays?")
    assert "pasta with friends" not in prompt("dinner on Fridays, again?")
    compact = {"session_id": "cx", "turn_id": "t2", "transcript_path": None, "cwd": "/", "model": "gpt-5",
               "hook_event_name": "PostCompact", "trigger": "auto"}
    _validate("codex-post-compact.input.schema.json", compact)
    assert hooks.run_hook("codex", "compact", json.dumps(compact), _open(fake_config)) == ""  # Codex ignores it
    assert "pasta with friends" in prompt("dinner on Fridays, after the compaction?")

    start = hooks.run_hook("codex", "session-start", json.dumps({"session_id": "cx2", "source": "compact"}),
                           _open(fake_config))
    _validate("codex-session-start.output.schema.json", json.loads(start))


def test_gemini_resets_on_a_manual_compress_and_bounds_the_rest_by_prompts(seeded, fake_config):
    def run(event, **payload):
        base = {"session_id": "gm", "transcript_path": "/tmp/t.json", "cwd": "/",
                "timestamp": "2026-12-01T10:00:00Z", **payload}
        out = hooks.run_hook("gemini", event, json.dumps(base), _open(fake_config))
        data = json.loads(out)  # Gemini wants JSON on stdout, always
        return data.get("hookSpecificOutput", {}).get("additionalContext", "")

    def prompt(text):
        return run("user-prompt", hook_event_name="BeforeAgent", prompt=text)

    assert "pasta with friends" in prompt("dinner on Fridays?")
    run("compact", hook_event_name="PreCompress", trigger="auto")  # sent before every turn's check
    assert "pasta with friends" not in prompt("dinner on Fridays again?")
    run("compact", hook_event_name="PreCompress", trigger="manual")  # /compress
    assert "pasta with friends" in prompt("dinner on Fridays, after /compress?")

    for i in range(hooks.DEDUP_TURNS["gemini"] - 1):
        assert "pasta with friends" not in prompt(f"dinner on Fridays, turn {i}?")
    assert "pasta with friends" in prompt("dinner on Fridays, many turns later?")


def test_claude_code_keeps_memories_given_however_long_the_session(seeded, fake_config):
    """Claude Code says when it compacts (SessionStart "compact"): no bound by prompts there."""
    def prompt(text):
        return hooks.run_hook("claude-code", "user-prompt", prompt_json(text, "cc"), _open(fake_config))

    assert "pasta with friends" in prompt("dinner on Fridays?")
    for i in range(25):
        assert "pasta with friends" not in prompt(f"dinner on Fridays, turn {i}?")
    hooks.run_hook("claude-code", "session-start", json.dumps({"session_id": "cc", "source": "compact"}),
                   _open(fake_config))
    assert "pasta with friends" in prompt("dinner on Fridays, after /compact?")


# -- the budget's ceiling, and context through a link -----------------------------------------


def test_hook_budget_stays_under_what_claude_code_shows_in_full():
    from pmem import config
    from pmem.errors import UsageError

    assert config.load(environ={"PMEM_HOOK_BUDGET": "9000"}).hook_budget == 9000
    with pytest.raises(UsageError, match="between 200 and 9000"):
        config.load(environ={"PMEM_HOOK_BUDGET": "20000"})
    r = run_cli(["config", "set", "hook_budget", "12000"])
    assert r.returncode == 2 and "9000" in r.stderr
    assert "10,000" in config.help_text("hook_budget")


def test_context_write_keeps_a_symlinked_conventions_file_a_link(tmp_path):
    agents = tmp_path / "AGENTS.md"
    agents.write_text("# Rules\n")
    claude = tmp_path / "CLAUDE.md"
    claude.symlink_to("AGENTS.md")
    assert context.write_block(claude, "## About the user\n- likes tea")
    assert claude.is_symlink() and os.readlink(claude) == "AGENTS.md"
    assert agents.read_text().startswith("# Rules\n") and "likes tea" in agents.read_text()

    dangling = tmp_path / "GEMINI.md"
    dangling.symlink_to(tmp_path / "shared" / "GEMINI.md")
    assert context.write_block(dangling, "## About the user\n- likes tea")
    assert dangling.is_symlink() and "likes tea" in (tmp_path / "shared" / "GEMINI.md").read_text()


@pytest.mark.parametrize("state", ['{"given": [[1], {"a": 2}]}', '{"given": {"x": "y"}, "turn": "z"}', "[]", "{"])
def test_a_damaged_session_file_starts_the_session_afresh(seeded, fake_config, state):
    hooks.SessionState("dmg").save()
    hooks.SessionState("dmg").path.write_text(state)
    out = hooks.run_hook("claude-code", "user-prompt", prompt_json("dinner on Fridays?", "dmg"), _open(fake_config))
    assert "pasta with friends" in out

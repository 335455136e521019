"""The agent hook with `pmem serve` answering: the hook's process hands its input to the server,
which runs the whole hook (search, session file, access counts) against the same database, and
the process imports no store, search or model. It prints what the hook run in-process prints,
byte for byte; without a working server it does the work itself, in time.

Real server processes on a real socket: `pmem serve` with the real default model (marked model),
and, for the rest, `serve.Server` with the CLI's hook op and the fake embedder (SERVER below)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from pmem.display import prompt_safe
from pmem.integrations import hook_wire, hooks
from pmem.models import serve as srv
from pmem.service import MemoryStore

pytestmark = pytest.mark.skipif(not srv.SUPPORTED, reason="needs Unix sockets")
ROOT = Path(__file__).resolve().parents[3]
# What the hook's process must not import when the server answers: the model, the database driver
# and what only the work itself needs.
HEAVY = ("numpy", "llama_cpp", "pmem.models.embed", "pmem.models.e5", "pmem.models.provision", "pmem.scope", "sqlean",
         "sqlite3", "_sqlite3", "sqlite_vec")
DRIVERS = {"sqlean", "sqlite3"}
HOSTILE = "Hotel booking note osc52[\x1b]52;c;SGk=\x07] rlo[\u202e] zwsp[\u200b] tags[\U000e0069\U000e0067] end"
MEMORIES = ["We go camping at the lake with the kids every August", "The cabin wifi password is hunter2",
            "Dinner on Fridays is usually pasta with friends", HOSTILE]
PROMPTS = ["plans for camping with the kids", "what is the cabin wifi password", "hotel booking note",
           "pasta dinner on friday"]
SERVER = """
import sys
from pmem.models import serve
from pmem.models.embed import FakeEmbedder
from pmem.integrations.hooks import serve_hook, warm_hook
server = serve.Server(loader=lambda path, threads=0: FakeEmbedder(16), ops={"hook": serve_hook},
                      build=sys.argv[1] or None, warm=warm_hook)
server.bind()
print("serving", flush=True)
server.serve()
"""


@pytest.fixture
def home(monkeypatch, tmp_path):
    """A short PMEM_HOME (the socket path must fit) and a project folder to run hooks in."""
    path = Path(tempfile.mkdtemp(prefix="pmem-", dir="/tmp"))
    monkeypatch.setenv("PMEM_HOME", str(path))
    monkeypatch.setenv("PMEM_HOOK_TIMEOUT", "3")
    project = tmp_path / "trip-planner"
    (project / ".git").mkdir(parents=True)
    try:
        yield path, project
    finally:
        if (path / "pmem.sock").exists():
            srv.stop(path / "pmem.sock", timeout=1.0)
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def seeded(home, fake_config):
    """The home's default store with MEMORIES (the first pinned, the last the project's)."""
    path, project = home
    with MemoryStore(config=fake_config) as s:
        for i, text in enumerate(MEMORIES):
            s.add(text, pinned=i == 0, scope=str(project.resolve()) if i == len(MEMORIES) - 1 else None)
    return path, project


@pytest.fixture
def start_server(spawned):
    """Start a real server process (SERVER) of this build, or advertising `build`; stopped after."""
    def start(build: str = "") -> subprocess.Popen:
        proc = spawned(SERVER, build, ready="serving", env={**os.environ, "PYTHONPATH": str(ROOT)})
        for _ in range(600):  # what a hook needs loaded (Server's `warm`): a first hook racing it waits on it
            info = srv.status()
            if info is not None and info.get("warm"):
                break
            time.sleep(0.05)
        return proc

    return start


class Ran:
    def __init__(self, r: subprocess.CompletedProcess, seconds: float):
        self.out, self.seconds = r.stdout, seconds
        names = {line.rsplit("|", 1)[1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
        self.imported = names | {name.split(".")[0] for name in names}  # sqlean.dbapi2 counts as sqlean

    @property
    def served(self) -> bool:
        """Whether the server did the work: this process imported nothing of HEAVY."""
        return not self.imported & set(HEAVY)

    @property
    def local(self) -> bool:
        return bool(self.imported & DRIVERS)


def hook(client: str, event: str, payload: dict, server: str = "auto", cwd: Path | None = None, **env) -> Ran:
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "pmem", "hook", client, event],
                       input=json.dumps(payload), capture_output=True, text=True, timeout=120, cwd=cwd,
                       env={**os.environ, "PYTHONPATH": str(ROOT), "PMEM_SERVER": server, **env})
    assert r.returncode == 0, r.stderr[-2000:]
    return Ran(r, time.monotonic() - t0)


def payload(event: str, session: str, project: Path, prompt: str = "") -> dict:
    if event == "session-start":
        return {"session_id": session, "cwd": str(project), "source": "startup"}
    return {"session_id": session, "cwd": str(project), "prompt": prompt}


def requests(home: Path) -> int:
    info = srv.status(home / "pmem.sock")
    assert info is not None
    return info["requests"]


# -- the same bytes -------------------------------------------------------------------------


def _same_bytes(project: Path, prompts: list[str]) -> dict[str, str]:
    """Every client and event, served and in-process, each in a session of its own; returns the
    served outputs after checking each against its in-process twin."""
    outputs = {}
    for client in hooks.CLIENTS:
        for event in ("session-start", "user-prompt"):
            for i, prompt in enumerate(prompts if event == "user-prompt" else [""]):
                key = f"{client} {event} {i}"
                served = hook(client, event, payload(event, f"served {key}", project, prompt), "auto")
                local = hook(client, event, payload(event, f"local {key}", project, prompt), "never")
                assert served.served and local.local, key
                assert served.out == local.out, key
                outputs[key] = served.out
    return outputs


@pytest.mark.slow
def test_served_and_in_process_hooks_print_the_same_bytes(seeded, start_server):
    home, project = seeded
    start_server()
    outputs = _same_bytes(project, PROMPTS)
    gated = prompt_safe(HOSTILE)
    assert gated in outputs[f"claude-code user-prompt {PROMPTS.index('hotel booking note')}"]
    assert "camping at the lake" in outputs["claude-code session-start 0"]  # the pinned one
    assert json.loads(outputs["gemini user-prompt 1"])["hookSpecificOutput"]["hookEventName"] == "BeforeAgent"
    for text in outputs.values():
        assert not set("\x1b\x07\u202e\u200b\U000e0069") & set(text)


@pytest.mark.model
@pytest.mark.slow
def test_pmem_serve_with_the_real_model_prints_what_the_hook_prints_itself(home, monkeypatch):
    """The real default model: `pmem serve` embeds the prompts, and the memories it picks are the
    ones the hook picks with the model loaded in its own process."""
    path, project = home
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PMEM_SERVER": "never"}
    env.pop("PMEM_EMBED_MODEL", None)
    monkeypatch.delenv("PMEM_EMBED_MODEL", raising=False)
    lines = "".join(json.dumps({"text": t}) + "\n" for t in MEMORIES)
    subprocess.run([sys.executable, "-m", "pmem", "import", "-"], input=lines, env=env, check=True,
                   capture_output=True, text=True, timeout=300)
    # the import left its English vectors to a background fill: wait for it (reindex --missing waits
    # for a running fill and fills the rest), or a fill ending between the served hook and its local
    # twin would change what the second one finds, and its CPU would slow the server past the wait
    subprocess.run([sys.executable, "-m", "pmem", "reindex", "--missing"], env=env, check=True,
                   capture_output=True, text=True, timeout=300)
    ask = payload("user-prompt", "first", project, "camping")
    assert hook("claude-code", "user-prompt", ask, "never").local
    time.sleep(1.0)
    assert not (path / "pmem.sock").exists()  # never: no server started
    assert hook("claude-code", "user-prompt", {**ask, "session_id": "second"}, "auto").local
    deadline = time.monotonic() + 120
    while not (srv.status(path / "pmem.sock") or {}).get("warm"):  # the one it started in the background
        assert time.monotonic() < deadline
        time.sleep(0.2)
    outputs = _same_bytes(project, PROMPTS[:3])
    assert "camping at the lake" in outputs["claude-code user-prompt 0"]
    assert "hunter2" in outputs["codex user-prompt 1"]
    assert prompt_safe(HOSTILE) in outputs["claude-code user-prompt 2"]


# -- one session, wherever it runs ------------------------------------------------------------


def test_a_session_keeps_what_was_given_across_served_and_in_process_hooks(seeded, start_server):
    home, project = seeded
    start_server()
    first = hook("claude-code", "user-prompt", payload("user-prompt", "s1", project, "cabin wifi password"))
    assert first.served and "hunter2" in first.out
    again = hook("claude-code", "user-prompt", payload("user-prompt", "s1", project, "the wifi password please"),
                 "never")
    assert again.local and "hunter2" not in again.out  # given already, by the server
    other = hook("claude-code", "user-prompt", payload("user-prompt", "s2", project, "the wifi password please"),
                 "never")
    assert "hunter2" in other.out  # another session: given again
    third = hook("claude-code", "user-prompt", payload("user-prompt", "s2", project, "wifi password?"))
    assert third.served and "hunter2" not in third.out  # given in-process: the server knows
    state = json.loads(hooks.SessionState("s2").path.read_text())
    assert state["turn"] == 2


# -- without a working server -----------------------------------------------------------------


def test_a_stopped_server_costs_the_hook_its_wait_and_keeps_nothing_of_the_request(seeded, start_server):
    home, project = seeded
    proc = start_server()
    assert hook("codex", "user-prompt", payload("user-prompt", "warm", project, "pasta")).served
    os.kill(proc.pid, signal.SIGSTOP)
    ran = hook("codex", "user-prompt", payload("user-prompt", "stopped", project, "cabin wifi password"))
    assert ran.local and "hunter2" in ran.out
    assert ran.seconds < hooks.SERVER_WAIT_MAX + 3  # its wait, then the work here; not the 3 s limit
    state = hooks.SessionState("stopped").path
    written = state.read_bytes()
    os.kill(proc.pid, signal.SIGCONT)  # the server reads the request now: the hook left long ago
    time.sleep(0.5)
    assert srv.status(home / "pmem.sock") is not None
    assert state.read_bytes() == written and json.loads(written)["turn"] == 1


def _locks_held(pid: int, home: Path) -> list[str]:
    """The POSIX locks process `pid` holds on the home's database files (pmem.db, -wal, -shm)."""
    inodes = {str(p.stat().st_ino) for p in home.glob("pmem.db*")}
    return [line for line in Path("/proc/locks").read_text().splitlines()
            if line.split()[4] == str(pid) and line.split()[5].rsplit(":", 1)[-1] in inodes]


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="reads the kernel's table of file locks")
def test_a_server_holds_no_lock_on_the_database_once_it_has_answered(seeded, start_server):
    """Stopped the moment its answer arrives, a server holds no lock that the next hook, working
    itself, would wait on: it closed the database (a checkpoint under an exclusive lock) before
    replying. Closed after the reply, a SIGSTOP there cost the next hook its whole time, nothing printed."""
    home, project = seeded
    proc = start_server()
    ask = json.dumps(payload("user-prompt", "locks", project, "cabin wifi password"))
    for _ in range(5):
        block, how = hook_wire.ask_server("codex", "user-prompt", ask, None, 5.0)
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            held = _locks_held(proc.pid, home)
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        assert how == "served" and block is not None
        assert held == []


def test_a_server_of_another_build_or_a_dead_one_is_not_used(seeded, start_server):
    home, project = seeded
    proc = start_server()
    ask = payload("user-prompt", "ours", project, "cabin wifi password")
    assert hook("gemini", "user-prompt", ask).served
    proc.kill()
    proc.wait(10)
    assert (home / "pmem.sock").exists()  # a killed server leaves its socket behind
    dead = hook("gemini", "user-prompt", payload("user-prompt", "dead", project, "cabin wifi password"))
    assert dead.local and "hunter2" in dead.out and dead.seconds < 3
    start_server("0.0.1+other")
    before = requests(home)
    other = hook("gemini", "user-prompt", payload("user-prompt", "other", project, "cabin wifi password"))
    assert other.local and "hunter2" in other.out and other.seconds < 3
    assert requests(home) == before + 2  # asked, refused (and this status)
    mine = hook("gemini", "user-prompt", payload("user-prompt", "mine", project, "cabin wifi password"), "never")
    assert other.out == dead.out == mine.out


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads the server's mapped files in /proc")
def test_the_first_hook_after_a_start_is_served(seeded, start_server):
    """The server loads what a hook needs (its modules, the sqlite driver and sqlite-vec) before any
    request asks: without, a server's first hook took 0.1-0.3 s longer than the next (under load,
    past its wait: it then worked itself)."""
    home, project = seeded
    proc = start_server()
    assert srv.status()["warm"]
    assert "sqlean" in Path(f"/proc/{proc.pid}/maps").read_text()  # the driver, loaded before anyone asked
    before = requests(home)
    first = hook("claude-code", "user-prompt", payload("user-prompt", "a", project, "cabin wifi password"))
    assert first.served and "hunter2" in first.out
    assert requests(home) == before + 2  # the hook, and this status


def test_server_never_contacts_no_server(seeded, start_server):
    home, project = seeded
    start_server()
    before = requests(home)
    served = hook("claude-code", "user-prompt", payload("user-prompt", "a", project, "cabin wifi password"))
    assert served.served and "hunter2" in served.out
    assert requests(home) == before + 2  # the hook, and this status
    ran = hook("claude-code", "user-prompt", payload("user-prompt", "b", project, "cabin wifi password"), "never")
    assert ran.local and ran.out == served.out
    assert requests(home) == before + 3  # this status only


# -- the thin process -----------------------------------------------------------------------

MODULES = """
import sys
sys.argv = ["pmem", "hook", "claude-code", "user-prompt"]
before = set(sys.modules)
import pmem
package = set(sys.modules)
from pmem.cli import main
try:
    main()
finally:
    import json
    with open({out!r}, "w") as f:
        json.dump({{"package": sorted(package - before), "all": sorted(sys.modules)}}, f)
"""


def test_a_served_hooks_process_imports_no_store_search_or_model(seeded, start_server, tmp_path):
    home, project = seeded
    start_server()
    out = tmp_path / "modules.json"
    r = subprocess.run([sys.executable, "-c", MODULES.format(out=str(out))], capture_output=True, text=True,
                       input=json.dumps(payload("user-prompt", "thin", project, "cabin wifi")), timeout=60,
                       env={**os.environ, "PYTHONPATH": str(ROOT), "PMEM_SERVER": "auto"})
    assert r.returncode == 0 and "hunter2" in r.stdout, r.stderr
    modules = json.loads(out.read_text())
    loaded = set(modules["all"]) | {name.split(".")[0] for name in modules["all"]}
    assert not loaded & set(HEAVY)
    # what `import pmem` itself loads is its business (pmem/__init__.py); the hook adds none of it
    added = loaded - set(modules["package"])
    assert not {m for m in added if m.startswith(("pmem.store", "pmem.search", "pmem.recall", "pmem.db"))}


# What the served process does not import either: what made it ~100 ms of CPU before every prompt
# (docs/decisions/0041-hook-process-lean.md), the CLI, and what only the work needs.
LEAN_OUT = ("dataclasses", "inspect", "pathlib", "platformdirs", "typing", "json", "re", "enum", "socket",
            "selectors", "threading", "tomllib", "typer", "pmem.config", "pmem.paths", "pmem.models.serve",
            "pmem.integrations.hooks", "pmem.cli.app")
CONSOLE_SCRIPT = "import sys\nfrom pmem.cli import main\nsys.exit(main())"  # what the `pmem` script runs


def _bare_modules(env: dict) -> set[str]:
    """What this interpreter has loaded before any code runs (site, sitecustomize...)."""
    out = subprocess.run([sys.executable, "-c", "import sys; print(repr(sorted(sys.modules)))"],
                         capture_output=True, text=True, env=env, check=True).stdout
    return set(eval(out))  # noqa: S307 - our own repr of a list of names


@pytest.fixture
def xdg_home(monkeypatch, fake_config):
    """A user without PMEM_HOME: the data and config in the XDG folders of a HOME of its own, a
    seeded store there, and a project folder."""
    base = Path(tempfile.mkdtemp(prefix="px-", dir="/tmp"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDG_") and k != "PMEM_HOME"}
    env.update(HOME=str(base), XDG_DATA_HOME=str(base / "d"), XDG_CONFIG_HOME=str(base / "c"),
               PYTHONPATH=str(ROOT), PMEM_SERVER="auto", PMEM_HOOK_TIMEOUT="3")
    project = base / "trip-planner"
    (project / ".git").mkdir(parents=True)
    data = base / "d" / "pmem"
    data.mkdir(parents=True, mode=0o700)
    with MemoryStore(data / "pmem.db", config=fake_config) as s:
        s.add("The cabin wifi password is hunter2")
    proc = subprocess.Popen([sys.executable, "-c", SERVER, ""], env={**env, "PMEM_SERVER": "never"},
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "serving"
        assert (data / "pmem.sock").exists()
        yield env, project, data
    finally:
        proc.kill()
        proc.wait(10)
        shutil.rmtree(base, ignore_errors=True)


def test_a_served_hooks_process_is_lean(xdg_home, tmp_path):
    """Started as the `pmem` script starts it, by a user with no PMEM_HOME: the process finds the
    socket, asks and prints, and imports none of LEAN_OUT (on top of what a bare interpreter has)."""
    env, project, data = xdg_home
    out = tmp_path / "modules.json"
    code = CONSOLE_SCRIPT.replace("sys.exit(main())", "try:\n    main()\nfinally:\n"
                                  f"    open({str(out)!r}, 'w').write(repr(sorted(sys.modules)))")
    r = subprocess.run([sys.executable, "-c", code, "hook", "claude-code", "user-prompt"], capture_output=True,
                       text=True, env=env, cwd=project, timeout=60,
                       input=json.dumps(payload("user-prompt", "lean", project, "cabin wifi password")))
    assert r.returncode == 0 and "hunter2" in r.stdout, r.stderr
    loaded = set(eval(out.read_text()))  # noqa: S307 - our own repr of a list of names
    assert not (loaded - _bare_modules(env)) & set(LEAN_OUT)
    assert not loaded & set(HEAVY)
    assert json.loads((data / "hook-sessions" / os.listdir(data / "hook-sessions")[0]).read_text())["turn"] == 1


def test_a_served_hook_answers_while_the_host_keeps_stdin_open(xdg_home):
    env, project, data = xdg_home
    proc = subprocess.Popen([sys.executable, "-X", "importtime", "-c", CONSOLE_SCRIPT, "hook", "codex", "user-prompt"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            cwd=project)
    try:
        proc.stdin.write(json.dumps(payload("user-prompt", "open", project, "cabin wifi password")).encode() + b"\n")
        proc.stdin.flush()
        out, err = proc.stdout.read(), proc.stderr.read()  # to the process's end; its stdin stays open
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
    assert "hunter2" in json.loads(out)["hookSpecificOutput"]["additionalContext"]
    imported = {line.rsplit("|", 1)[1].strip() for line in err.decode().splitlines() if line.startswith("import time:")}
    # served, by the lean path; what the interpreter loads before any code (an editable install's finder) aside
    assert not (imported - _bare_modules(env)) & set(LEAN_OUT)


def test_a_served_hook_gives_up_in_time_on_a_silent_open_stdin(xdg_home):
    env, project, data = xdg_home
    proc = subprocess.Popen([sys.executable, "-c", CONSOLE_SCRIPT, "hook", "gemini", "user-prompt"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={**env, "PMEM_HOOK_TIMEOUT": "1"},
                            cwd=project)
    started = time.monotonic()
    try:
        out = proc.stdout.read()  # the process leaves with stdin still open
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.stdin.close()
    assert out.strip() == b"{}" and time.monotonic() - started < 10
    assert "gave up after 1 s" in (data / "hook-errors.log").read_text()


def test_config_files_that_set_the_hooks_own_settings_are_read_whole(seeded, start_server):
    """config.toml naming server or hook_timeout: the process reads it with config.load (its
    server = never is obeyed: nothing asked); a file naming neither is the server's to read."""
    home, project = seeded
    start_server()
    (home / "config.toml").write_text('server = "never"\n')
    before = requests(home)
    ran = hook("claude-code", "user-prompt", payload("user-prompt", "c1", project, "cabin wifi password"), "")
    assert ran.local and "hunter2" in ran.out
    assert requests(home) == before + 1  # this status only
    (home / "config.toml").write_text('server = "always"\nhook_timeout = 3\n')
    ran = hook("claude-code", "user-prompt", payload("user-prompt", "c2", project, "cabin wifi password"), "")
    assert ran.served and "hunter2" in ran.out
    (home / "config.toml").write_text("hook_budget = 200\n")  # the server applies it
    small = hook("codex", "user-prompt", payload("user-prompt", "c3", project, "cabin wifi password"), "")
    alone = hook("codex", "user-prompt", payload("user-prompt", "c4", project, "cabin wifi password"), "never")
    assert small.served and small.out == alone.out
    assert len(json.loads(small.out)["hookSpecificOutput"]["additionalContext"]) <= 200


# -- the server's side --------------------------------------------------------------------------


class Replies:
    def __init__(self):
        self.sent: list[dict] = []

    def __call__(self, header: dict) -> None:
        self.sent.append(header)


def _request(project: Path, **changes) -> dict:
    from pmem import paths

    req = {"op": "hook", "build": srv.build_id(), "client": "claude-code", "event": "user-prompt",
           "input": json.dumps(payload("user-prompt", "unit", project, "cabin wifi password")),
           "db": str(paths.db_path()), "cwd": str(project), "home": str(paths.data_dir()),
           "models": str(paths.models_dir()), "config": str(paths.config_path()),
           "env": hooks.settings_env(os.environ), "deadline": time.time() + 5}
    return {**req, **changes}


@pytest.fixture
def server(home):
    return srv.Server(home[0] / "pmem.sock", loader=lambda path, threads=0: None)


def test_the_server_runs_the_hook_the_process_would(seeded, server, fake_config):
    home, project = seeded
    sent = Replies()
    hooks.serve_hook(server, _request(project), sent)
    assert sent.sent[0]["ok"] is True and sent.sent[0]["build"] == server.build
    data = hooks.parse_input(json.dumps(payload("user-prompt", "in-process", project, "cabin wifi password")))
    with MemoryStore(config=fake_config) as s:
        local = hooks.build_context(s, "user-prompt", data, hooks.settings_for(fake_config, "claude-code"),
                                    *hooks.hook_filter(data))
    assert sent.sent[0]["block"] == local and "hunter2" in local


def test_the_server_gives_a_subagent_its_own_session_start(seeded, server, fake_config):
    """SubagentStart is served like a session start, in the subagent's own session file."""
    home, project = seeded
    text = json.dumps({"session_id": "parent", "agent_id": "a-1", "agent_type": "Explore", "cwd": str(project),
                       "hook_event_name": "SubagentStart"})
    sent = Replies()
    hooks.serve_hook(server, _request(project, event="subagent-start", input=text), sent)
    assert sent.sent[0]["ok"] is True and "camping at the lake" in sent.sent[0]["block"]
    start = hooks.parse_input(json.dumps(payload("session-start", "in-process", project)))
    with MemoryStore(config=fake_config) as s:
        local = hooks.build_context(s, "session-start", start, hooks.settings_for(fake_config, "claude-code"),
                                    *hooks.hook_filter(start))
    assert sent.sent[0]["block"] == local


@pytest.mark.parametrize("change, why", [
    ({"build": "0.0.1+other"}, "another build"),
    ({"home": "/elsewhere"}, "another home"),
    ({"home": 5}, "another home"),
    ({"home": ""}, "another home"),
    ({"config": "/elsewhere/config.toml"}, "another config"),
    ({"env": {"PMEM_SYNC_PASSPHRASE": "x"}}, "settings' variables only"),
    ({"db": "relative.db"}, "absolute"),
    ({"event": "compact"}, "unknown client or event"),
    ({"deadline": 0}, "stopped waiting"),
])
def test_the_server_refuses_what_is_not_this_hooks_work(seeded, server, change, why):
    home, project = seeded
    sent = Replies()
    try:
        hooks.serve_hook(server, _request(project, **change), sent)
        error = sent.sent[0]["error"]
        assert sent.sent[0]["ok"] is False
    except Exception as exc:  # the server replies with the error's line
        error = str(exc)
    assert why in error
    assert not hooks.state_dir().exists() or not list(hooks.state_dir().iterdir())  # nothing kept


def test_the_server_takes_the_home_as_the_process_found_it(seeded, server):
    """pmem.dirs gives the home as the variable holds it (no pathlib to normalise it): the same
    folder written another way is the same home."""
    home, project = seeded
    sent = Replies()
    hooks.serve_hook(server, _request(project, home=str(home) + "//", config=str(home) + "/./config.toml"), sent)
    assert sent.sent[0]["ok"] is True and "hunter2" in sent.sent[0]["block"]


def test_the_server_opens_only_an_existing_database_of_its_user(seeded, server, tmp_path):
    from pmem.errors import UsageError

    home, project = seeded
    missing = tmp_path / "nothing-here.db"
    with pytest.raises(UsageError, match="no database"):
        hooks.serve_hook(server, _request(project, db=str(missing)), Replies())
    assert not missing.exists()  # the server creates no file: the hook does, in its own process
    with pytest.raises(UsageError, match="not a file"):
        hooks.serve_hook(server, _request(project, db=str(tmp_path)), Replies())
    if os.geteuid() != 0:
        return  # only root can give a file away
    theirs = tmp_path / "theirs.db"
    shutil.copyfile(home / "pmem.db", theirs)
    os.chown(theirs, 65534, 65534)
    with pytest.raises(UsageError, match="not a file of this server's user"):
        hooks.serve_hook(server, _request(project, db=str(theirs)), Replies())

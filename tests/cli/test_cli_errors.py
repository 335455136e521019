"""The CLI boundary: every foreseeable failure is one `pmem: error:` line and its documented exit
code (1 error, 2 usage), never a traceback, and never costs a stored memory (issue 10)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pmem.cli.app import app

runner = CliRunner()
CANARY = "canary: the spare key is under the blue flowerpot"
BIG = "9" * 20  # past SQLite's 64-bit integers


@pytest.fixture(autouse=True)
def fake_model(monkeypatch, pmem_home):
    monkeypatch.setenv("PMEM_EMBED_MODEL", "fake-64")


@pytest.fixture
def canary(pmem_home):
    r = runner.invoke(app, ["add", CANARY, "--tag", "canary"])
    assert r.exit_code == 0, r.output
    return r.stdout.strip()


def pmem(*args, input=None):
    return runner.invoke(app, [str(a) for a in args], input=input)


def assert_one_line_error(r, code: int | tuple, fragment: str = "") -> None:
    codes = code if isinstance(code, tuple) else (code,)
    assert r.exit_code in codes, (r.exit_code, r.output, r.exception)
    assert "Traceback" not in r.output
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pmem: error: "), lines
    assert fragment in lines[0], lines[0]


def assert_canary(canary_id: str) -> None:
    r = pmem("show", canary_id, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["text"] == CANARY


def write_jsonl(path: Path, *records) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records), encoding="utf-8")
    return path


DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("args,code,fragment", [
    # invalid UTF-8 in arguments (Python hands it over as lone surrogates)
    (["add", "caf\udce9 au lait"], 2, "not valid UTF-8"),
    (["add", "fine", "--tag", "t\udcff"], 2, "not valid UTF-8"),
    (["edit", "{canary}", "caf\udce9"], 2, "not valid UTF-8"),
    (["edit", "{canary}", "--tag", "\udcff"], 2, "not valid UTF-8"),
    (["search", "\udcff"], 2, "not valid UTF-8"),
    # dates and durations past the calendar
    (["add", "x", "--ttl", "9000y"], 2, "years 1 to 9999"),
    (["add", "x", "--expires", "99999999d"], 2, "too long"),
    (["list", "--since", "99999999d"], 2, "too long"),
    (["search", "x", "--since", "99999999d"], 2, "too long"),
    (["expire", "{canary}", "--in", "9000y"], 2, "years 1 to 9999"),
    (["add", "x", "--at", "0000-01-01"], 2, "years 1 to 9999"),
    (["add", "x", "--at", "10000-01-01"], 2, "years 1 to 9999"),
    (["add", "x", "--at", "0001-01-01T00:00:00+01:00"], 2, "years 1 to 9999"),
    # counts past SQLite's integers, and counts that mean nothing
    (["search", "x", "-k", BIG], 2, "too large"),
    (["search", "x", "-k", "0"], 2, "--limit must be 1 or more"),
    (["list", "-n", BIG], 2, "too large"),
    (["list", "-n", "-1"], 2, "--limit must be 0 or more"),
    (["list", "--offset", BIG], 2, "too large"),
    (["log", "-n", BIG], 2, "too large"),
    (["recall", "x", "--budget", BIG], 2, "too large"),
    (["dream", "--no-model", "--max-seconds", "nan"], 2, "positive"),
    # typer's own usage errors are one line too
    (["search", "x", "-k", "abc"], 2, "not a valid int"),
    (["--no-such-option"], 2, "No such option"),
    (["frobnicate"], 2, "No such command"),
    (["add", "x", "--meta", "k=" + "[" * 50_000 + "]" * 50_000], 2, "nested too deeply"),
])
def test_bad_arguments(canary, args, code, fragment):
    r = pmem(*[a.replace("{canary}", canary) for a in args])
    assert_one_line_error(r, code, fragment)
    assert_canary(canary)


@pytest.mark.parametrize("records,fragment", [
    ([{"text": "fine"}, DEEP], "line 2: JSON nested too deeply"),
    (['{"text": "x", "meta": ' + '{"a": ' * 100_000 + "1" + "}" * 100_000 + "}"], "line 1: JSON nested too deeply"),
    ([{"text": "x", "created_at": "99999999d"}], "too long"),
    ([{"text": "x", "created_at": "10000-01-01T00:00:00Z"}], "years 1 to 9999"),
    ([{"text": "x", "expires_at": "9000y"}], "years 1 to 9999"),
    (['{"text": "caf\\udce9"}'], "not valid UTF-8"),
    ([{"text": "x", "access_count": 2**64}], "whole number"),
])
def test_bad_import_files_change_nothing(canary, tmp_path, records, fragment):
    f = write_jsonl(tmp_path / "in.jsonl", *records)
    r = pmem("import", f)
    assert_one_line_error(r, 2, fragment)
    assert_canary(canary)
    assert len(json.loads(pmem("list", "--all", "--json").stdout)) == 1
    r = pmem("import", "-", "--format", "jsonl", input=f.read_bytes())
    assert_one_line_error(r, 2, fragment)


def test_export_to_places_that_are_not_files(canary, tmp_path):
    assert_one_line_error(pmem("export", "-o", tmp_path / "missing" / "out.jsonl"), 2, "does not exist")
    assert not (tmp_path / "missing").exists()
    assert_one_line_error(pmem("export", "-o", tmp_path), 2, "is a folder")
    if Path("/proc/version").exists():  # root may open it, then writing fails: 1; others may not: 2
        assert_one_line_error(pmem("export", "-o", "/proc/version"), (1, 2), "/proc/version")
    if Path("/dev/full").exists():
        assert_one_line_error(pmem("export", "-o", "/dev/full"), 1, "No space left")
    assert_canary(canary)


def test_config_set_with_a_config_that_does_not_parse(canary, pmem_home):
    cfg = pmem_home / "config.toml"
    cfg.write_text("recall_budget = = 3\n")
    r = pmem("config", "set", "recall_budget", "800")
    if r.exit_code != 0:  # config.py may repair the file instead; then the value must be set
        assert_one_line_error(r, 2, "config.toml")
    else:
        assert pmem("config", "get", "recall_budget").stdout.strip() == "800"
    assert "Traceback" not in r.output


def _damage_vector_pages(db: Path) -> None:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    roots = [r[0] for r in conn.execute("SELECT rootpage FROM sqlite_master WHERE name LIKE 'memory_vec%' "
                                        "AND rootpage > 0")]
    page = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    data = bytearray(db.read_bytes())
    for root in roots:
        data[(root - 1) * page: root * page] = b"\xa5" * page
    db.write_bytes(bytes(data))


def test_damaged_vector_pages_are_one_line(canary, pmem_home):
    _damage_vector_pages(pmem_home / "pmem.db")
    assert_one_line_error(pmem("search", "flowerpot"), 1, "database disk image is malformed")
    assert_one_line_error(pmem("dream", "--no-model"), 1, "malformed")
    r = pmem("list", "--json")  # the memories themselves are intact
    assert r.exit_code == 0 and json.loads(r.stdout)[0]["text"] == CANARY


# -- defect 8: years before 1000 -------------------------------------------------------------

def test_years_before_1000_are_padded_ordered_and_round_trip(canary, tmp_path):
    old = pmem("add", "the old news", "--at", "0999-06-01", "--json")
    assert old.exit_code == 0, old.output
    assert json.loads(old.stdout)["created_at"] == "0999-06-01T00:00:00Z"
    pmem("add", "the older news", "--at", "0099-01-01")
    since = [m["text"] for m in json.loads(pmem("list", "--since", "0500-01-01", "--json").stdout)]
    assert "the old news" in since and "the older news" not in since and CANARY in since
    until = [m["text"] for m in json.loads(pmem("list", "--until", "1000-01-01", "--json").stdout)]
    assert sorted(until) == ["the old news", "the older news"]
    dump = pmem("export").stdout
    r = pmem("--db", tmp_path / "other.db", "import", "-", input=dump)
    assert r.exit_code == 0, r.output
    again = pmem("--db", tmp_path / "other.db", "export").stdout
    assert sorted(again.splitlines()) == sorted(dump.splitlines())


# -- defect 12: smaller CLI items ----------------------------------------------------------------

def test_version_alone_exits_zero():
    from pmem import __version__

    r = pmem("--version")
    assert r.exit_code == 0 and r.stdout.strip() == f"pmem {__version__}"


def test_db_into_a_missing_folder_is_not_created_for_reading(tmp_path):
    target = tmp_path / "no" / "such" / "folder" / "p.db"
    for args in (["list"], ["search", "x"], ["export"], ["stats"], ["log"]):
        assert_one_line_error(pmem("--db", target, *args), 1, "does not exist")
    assert not (tmp_path / "no").exists()
    assert pmem("--db", target, "add", "a first memory").exit_code == 0  # writing creates it, as before
    assert target.exists()


def _make_read_only(folder: Path) -> bool:
    """Make the database and its folder unwritable; as root that takes chattr +i."""
    (folder / "pmem.db").chmod(0o444)
    folder.chmod(0o555)
    if os.geteuid() == 0:
        if not shutil.which("chattr") or subprocess.run(["chattr", "+i", str(folder / "pmem.db"), str(folder)],
                                                        capture_output=True).returncode:
            return False
    return not os.access(folder / "pmem.db", os.W_OK)


def _make_writable(folder: Path) -> None:
    if os.geteuid() == 0 and shutil.which("chattr"):
        subprocess.run(["chattr", "-i", str(folder), str(folder / "pmem.db")], capture_output=True)
    folder.chmod(0o700)
    (folder / "pmem.db").chmod(0o600)


def test_a_read_only_database_can_be_listed_and_searched(tmp_path):
    folder = tmp_path / "ro"
    db = folder / "pmem.db"
    mid = pmem("--db", db, "add", CANARY).stdout.strip()
    if not _make_read_only(folder):
        _make_writable(folder)
        pytest.skip("cannot make a file read-only here")
    try:
        assert json.loads(pmem("--db", db, "list", "--json").stdout)[0]["id"] == mid
        r = pmem("--db", db, "search", "flowerpot", "--json")
        assert r.exit_code == 0 and json.loads(r.stdout)[0]["id"] == mid
        assert pmem("--db", db, "show", mid).exit_code == 0
        r = pmem("--db", db, "recall", "flowerpot", "--format", "json")  # recall counts an access: a write
        assert r.exit_code == 0 and mid in r.stdout
        assert_one_line_error(pmem("--db", db, "add", "more"), 1, "read-only")
    finally:
        _make_writable(folder)


def test_doctor_reports_a_chat_model_not_fetched_yet_as_information(tmp_path, monkeypatch):
    gguf = tmp_path / "embed.gguf"
    gguf.write_bytes(b"GGUF" + bytes(60))
    monkeypatch.setenv("PMEM_EMBED_MODEL", str(gguf))
    monkeypatch.setenv("PMEM_MODELS_DIR", str(tmp_path / "empty-models"))
    monkeypatch.setenv("PMEM_CHAT_MODEL", "SmolLM2-135M-Instruct")
    r = pmem("doctor", "--json")
    checks = {c["name"]: c for c in json.loads(r.stdout)}
    assert checks["chat_model"]["level"] == "info" and checks["chat_model"]["ok"]
    assert r.exit_code == 0, r.stdout
    text = pmem("doctor").stdout
    assert "[info] chat_model" in text and "[FAIL]" not in text


def test_doctor_checks_the_config_file_mode(pmem_home):
    pmem_home.mkdir(parents=True, exist_ok=True)
    cfg = pmem_home / "config.toml"
    cfg.write_text("recall_budget = 800\n")
    cfg.chmod(0o644)
    checks = {c["name"]: c for c in json.loads(pmem("doctor", "--json").stdout)}
    assert checks["config permissions"]["level"] == "fail"
    assert "chmod 600" in checks["config permissions"]["fix"]


# -- whole processes: bytes on the command line, SIGINT, a closed pipe ---------------------------

def run_pmem(*args, input=b"", env_extra=None):
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "pmem", *args], capture_output=True, input=input, env=env,
                          timeout=60)


def test_real_process_invalid_utf8_argument(canary):
    r = run_pmem("add", b"caf\xe9")
    assert r.returncode == 2 and b"Traceback" not in r.stderr
    assert r.stderr.decode().count("\n") == 1 and r.stderr.startswith(b"pmem: error:")
    assert_canary(canary)


def _default_sigint() -> None:
    """Ctrl-C as a terminal delivers it: a test run started in the background (`cmd &` in a script)
    ignores SIGINT, and a child inherits that, so it would never see the signal."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


_READ = {"x86_64": "0", "aarch64": "63"}  # the read system call's number, for /proc/PID/syscall


def _wait_reading_stdin(pid: int, timeout: float = 60) -> None:
    """Until the process `pid` blocks reading its stdin (where Linux says so; else 1.5 s)."""
    import platform
    import time

    number = _READ.get(platform.machine())
    deadline = time.monotonic() + timeout
    while number is not None and time.monotonic() < deadline:
        try:
            fields = Path(f"/proc/{pid}/syscall").read_text().split()
        except OSError:
            break
        if fields[:2] == [number, "0x0"]:
            return
        time.sleep(0.02)
    else:
        if number is not None:
            raise AssertionError("the process never read its stdin")
    time.sleep(1.5)


def test_an_interrupt_before_the_command_runs_is_one_line():
    """Ctrl-C after pmem's entry point started but before a command's own handler is in place
    (typer and the command's module still loading) is `interrupted`, 130, never a traceback."""
    code = ("import os, signal, sys\n"
            "import pmem.cli as cli\n"
            "real = cli._main\n"
            "def interrupted(argv):\n"
            "    os.kill(os.getpid(), signal.SIGINT)\n"  # the handler raises here, before typer
            "    real(argv)\n"
            "cli._main = interrupted\n"
            "cli.main(['add', 'never stored'])\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60, preexec_fn=_default_sigint)
    assert b"Traceback" not in r.stderr, r.stderr
    assert r.returncode == 130 and r.stderr.decode().splitlines() == ["pmem: error: interrupted"]


def test_real_process_interrupt_is_130(canary):
    import signal

    p = subprocess.Popen([sys.executable, "-m", "pmem", "add"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, preexec_fn=_default_sigint)
    _wait_reading_stdin(p.pid)  # a fixed sleep lost the race on a loaded machine
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 130, err
    assert err.decode().splitlines() == ["pmem: error: interrupted"]
    assert_canary(canary)


def test_doctor_uses_the_settings_it_is_given_and_reports_a_broken_config(pmem_home, tmp_path):
    from pmem.config import Settings
    from pmem.doctor import run_checks
    from pmem.errors import UsageError

    missing = tmp_path / "nowhere.gguf"  # the environment says fake-64; doctor must check what it was given
    checks = {c.name: c for c in run_checks(Settings().with_values(embed_model=str(missing)))}
    assert not checks["embed_model"].ok and str(missing) in checks["embed_model"].detail
    checks = {c.name: c for c in run_checks(UsageError("config.toml: cannot read config"))}
    assert not checks["config"].ok and "cannot read config" in checks["config"].detail
    assert "database" not in checks  # the checks that need settings stop there

    pmem_home.mkdir(parents=True, exist_ok=True)
    (pmem_home / "config.toml").write_text('recall_budget = "a\nb"\n', encoding="utf-8")
    r = pmem("doctor", "--json")
    assert r.exit_code == 1 and not {c["name"]: c for c in json.loads(r.stdout)}["config"]["ok"]


def test_config_set_says_when_it_repaired_the_file(pmem_home):
    pmem_home.mkdir(parents=True, exist_ok=True)
    (pmem_home / "config.toml").write_text('recall_budget = 800\nchat_model = "a\nb"\n', encoding="utf-8")
    r = pmem("config", "set", "extract_mode", "label")
    assert r.exit_code == 0, r.output
    assert "did not parse" in r.stderr and "kept there as comments" in r.stderr


def test_a_read_only_database_from_an_older_pmem_says_how_to_upgrade_it(tmp_path):
    from conftest import schema_before

    folder = tmp_path / "ro-old"
    folder.mkdir()
    db = folder / "pmem.db"
    schema_before(db, "m011_text_start").close()  # as the previous release left it
    if not _make_read_only(folder):
        _make_writable(folder)
        pytest.skip("cannot make a file read-only here")
    try:
        for args in (["list"], ["search", "flowerpot"], ["stats"]):
            assert_one_line_error(pmem("--db", db, *args), 1, "written by an older pmem")
        assert pmem("--db", db, "list").stderr.count("write access") == 1
    finally:
        _make_writable(folder)
    assert pmem("--db", db, "list", "--json").exit_code == 0  # with write access it is upgraded and read


@pytest.mark.parametrize("args,fragment", [
    (["import", "{missing}", "--tier", "bogus"], "unknown tier 'bogus'"),
    (["import", "{missing}", "--format", "yaml"], "unknown format 'yaml'"),
    (["import", "{missing}", "--since", "whenever"], "whenever"),
    (["import", "{missing}", "--until", "10000-01-01"], "years 1 to 9999"),
    (["import", "{missing}", "--tag", " "], "--tag needs a name"),
    (["import", "{missing}", "--tag", "ghp_1234567890abcdefghijklmnopqrstuvwxyzAB"], "--tag contains"),
    (["extract", "{missing}", "--at", "whenever"], "whenever"),
    (["extract", "{missing}", "--source", "ghp_1234567890abcdefghijklmnopqrstuvwxyzAB"], "--source contains"),
    (["export", "--format", "yaml", "-o", "{missing}/out.jsonl"], "unknown format 'yaml'"),
])
def test_options_are_checked_before_the_input_is_read(canary, tmp_path, args, fragment):
    """The input named does not exist: an error about the option shows it was checked first."""
    r = pmem(*[a.replace("{missing}", str(tmp_path / "missing")) for a in args])
    assert_one_line_error(r, 2, fragment)
    assert_canary(canary)


def test_import_of_a_chat_export_with_a_bogus_tier_is_refused(canary, tmp_path):
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([{"id": "c", "current_node": "n", "mapping": {"n": {
        "id": "n", "parent": None, "children": [],
        "message": {"id": "m", "author": {"role": "user"}, "content": {"content_type": "text", "parts": ["hi"]}}}}}]))
    assert_one_line_error(pmem("import", path, "--tier", "bogus"), 2, "unknown tier 'bogus'")
    assert len(json.loads(pmem("list", "--all", "--json").stdout)) == 1

"""The CLI contract: commands, output modes, exit codes, and bad input that changes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from pmem.cli.app import app

runner = CliRunner()


@pytest.fixture(autouse=True)
def fake_model(monkeypatch, pmem_home):
    monkeypatch.setenv("PMEM_EMBED_MODEL", "fake-64")


def pmem(*args, input=None):
    result = runner.invoke(app, list(args), input=input)
    return result


def ok(*args, input=None):
    r = pmem(*args, input=input)
    assert r.exit_code == 0, (args, r.output, r.exception)
    return r


def test_add_search_recall_flow():
    mid = ok("add", "The wifi password at the cabin is hunter2", "--tag", "home").stdout.strip()
    assert len(mid) == 8
    ok("add", "-", "--tag", "work", "--ttl", "30d", input="Deploys need approval from Dana\n")
    ok("add", "I am vegetarian", "--pin")
    hits = json.loads(ok("search", "cabin wifi password", "--json", "--limit", "5").stdout)
    assert hits[0]["id"] == mid
    for key in ("id", "text", "score", "tier", "tags", "created_at", "meta"):
        assert key in hits[0]
    plain = ok("search", "cabin wifi password").stdout.splitlines()
    assert plain[0].split("\t")[0] == mid  # piped output: plain tab-separated lines
    rec = ok("recall", "plan dinner", "--budget", "800").stdout
    assert rec.index("I am vegetarian") < rec.index("## Relevant") if "## Relevant" in rec else "I am vegetarian" in rec
    work = json.loads(ok("list", "--tag", "work", "--json").stdout)
    assert [m["text"] for m in work] == ["Deploys need approval from Dana"]
    assert work[0]["expires_at"] is not None


def test_add_json_and_duplicate_notice():
    first = json.loads(ok("add", "same text", "--json").stdout)
    assert first["created"] is True
    again = pmem("add", "same text", "--json")
    assert again.exit_code == 0 and json.loads(again.stdout)["created"] is False


def test_fts_syntax_is_searched_not_parsed():
    ok("add", "NEAR the lake AND the forest")
    for q in ['"NEAR(" AND *', "AND OR NOT", "*", '"', "col:value", "a^b", "(((", "--"]:
        r = pmem("search", q, "--json") if not q.startswith("-") else pmem("search", "--json", "--", q)
        assert r.exit_code == 0, (q, r.output)
        assert isinstance(json.loads(r.stdout), list)


@pytest.mark.parametrize("args,code,fragment", [
    (["show", "zzzz"], 1, "no memory"),
    (["pin", "0000"], 1, "no memory"),
    (["add", "x", "--ttl", "forever"], 2, "invalid duration"),
    (["add", "x", "--tier", "nope"], 2, "unknown tier"),
    (["search", "x", "--mode", "magic"], 2, "unknown search mode"),
    (["search", "   "], 2, "empty query"),
    (["list", "--since", "last tuesday-ish"], 2, "invalid date"),
    (["recall", "x", "--budget", "0"], 2, "budget"),
    (["recall", "x", "--format", "yaml"], 2, "unknown format"),
    (["import", "/does/not/exist.jsonl"], 2, "no such file"),
    (["undo"], 1, "nothing to undo"),
    (["config", "set", "nonsense", "1"], 2, "unknown setting"),
])
def test_errors_are_one_line_with_exit_codes(args, code, fragment):
    r = pmem(*args)
    assert r.exit_code == code, r.output
    assert fragment in r.stderr
    assert "Traceback" not in r.output
    assert len(r.stderr.strip().splitlines()) == 1


def test_stdin_empty_binary_and_invalid_utf8_rejected():
    for data in [b"", b"   \n", b"\x00\x01\x02binary", b"caf\xe9 au lait"]:
        r = runner.invoke(app, ["add"], input=data)
        assert r.exit_code != 0
        assert "Traceback" not in r.output
    assert json.loads(ok("list", "--all", "--json").stdout) == []


def test_huge_stdin_refused():
    r = runner.invoke(app, ["add"], input="x" * 400_005)
    assert r.exit_code == 2 and "pmem extract" in r.stderr


def test_edit_pin_expire_forget_restore_history_undo():
    mid = ok("add", "The cabin wifi password is hunter2").stdout.strip()
    ok("edit", mid[:5], "The cabin wifi password is hunter3")
    ok("edit", mid, "--tag", "home")
    ok("pin", mid)
    ok("expire", mid, "--in", "3d")
    ok("forget", mid)
    assert json.loads(ok("list", "--json").stdout) == []
    ok("restore", mid)
    shown = json.loads(ok("show", mid, "--json").stdout)
    assert shown["text"].endswith("hunter3") and shown["pinned"] and shown["tags"] == ["home"]
    hist = json.loads(ok("history", mid, "--json").stdout)
    assert [h["action"] for h in hist] == ["add", "edit", "retag", "pin", "expire", "forget", "restore"]
    ok("undo")  # restore
    ok("undo")  # forget
    ok("undo")  # expire
    assert json.loads(ok("show", mid, "--json").stdout)["expires_at"] is None
    text_lines = ok("history", mid).stdout.splitlines()
    assert "(undone)" in text_lines[-1]


def test_expire_now_hides_and_include_expired_shows():
    mid = ok("add", "short lived").stdout.strip()
    ok("expire", mid, "--now")
    assert json.loads(ok("search", "short lived", "--json").stdout) == []
    hits = json.loads(ok("search", "short lived", "--json", "--include-expired").stdout)
    assert hits[0]["id"] == mid


def test_export_import_roundtrip_is_lossless(tmp_path):
    ok("add", "one", "--tag", "a", "--meta", "n=3", "--meta", "who=me", "--at", "2023-05-08")
    ok("add", "two", "--pin", "--source", "chat")
    mid = ok("add", "three").stdout.strip()
    ok("forget", mid)
    assert "three" not in ok("export").stdout  # forgotten memories leave only on request
    dump = ok("export", "--include-forgotten").stdout
    records = [json.loads(line) for line in dump.splitlines()]
    assert {r["text"] for r in records} == {"one", "two", "three"}
    assert next(r for r in records if r["text"] == "one")["meta"] == {"n": 3, "who": "me"}
    other = tmp_path / "other.db"
    ok("--db", str(other), "import", "-", input=dump)
    again = ok("--db", str(other), "export", "--include-forgotten").stdout
    assert sorted(again.splitlines()) == sorted(dump.splitlines())
    # importing the same file again adds nothing
    r = ok("--db", str(other), "import", "-", "--json", input=dump)
    assert json.loads(r.stdout)["imported"] == 0


def test_import_is_one_undo_and_broken_file_changes_nothing(tmp_path):
    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(json.dumps({"text": f"fact {i}", "tags": ["bulk"]}) for i in range(50)) + "\n")
    ok("import", str(good))
    assert len(json.loads(ok("list", "--tag", "bulk", "-n", "0", "--json").stdout)) == 50
    ok("undo")
    assert json.loads(ok("list", "--json").stdout) == []
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": "also fine"}\n{not json\n')
    r = pmem("import", str(bad))
    assert r.exit_code == 2 and "line 3" in r.stderr
    bad.write_text('{"text": "fine"}\n{"tags": ["no text"]}\n')
    r = pmem("import", str(bad))
    assert r.exit_code == 2 and "line 2" in r.stderr
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(b"\xff\xfe\x00\x00garbage")
    assert pmem("import", str(binary)).exit_code == 2
    assert json.loads(ok("list", "--all", "--json").stdout) == []


def test_import_markdown(tmp_path):
    md = tmp_path / "notes.md"
    md.write_text("# Notes\n\n## Travel\n\n- Lisbon trip in May #2024\n- Pack the adapter\n\n"
                  "## 2023-05-08\n\nMet Dana at the conference.\nShe runs deploys.\n")
    ok("import", str(md))
    items = {m["text"]: m for m in json.loads(ok("list", "--json").stdout)}
    assert items["Lisbon trip in May"]["tags"] == ["2024", "travel"]
    assert items["Met Dana at the conference. She runs deploys."]["created_at"].startswith("2023-05-08")


def test_markdown_export_reimports(tmp_path):
    ok("add", "Lisbon in May", "--tag", "travel")
    ok("add", "I am vegetarian", "--pin")
    md = ok("export", "--format", "md").stdout
    other = tmp_path / "o.db"
    ok("--db", str(other), "import", "-", "--format", "md", input=md)
    got = {m["text"]: m for m in json.loads(ok("--db", str(other), "list", "--json").stdout)}
    assert got["Lisbon in May"]["tags"] == ["travel"]
    assert got["I am vegetarian"]["pinned"] is True


def test_path_stats_config_doctor(pmem_home):
    paths = json.loads(ok("path", "--json").stdout)
    assert paths["db"] == str(pmem_home / "pmem.db")
    assert paths["models"]  # conftest points models elsewhere
    ok("add", "hello")
    stats = json.loads(ok("stats", "--json").stdout)
    assert stats["memories"] == 1 and stats["embed_model"] == "fake-64"
    ok("config", "set", "recall_budget", "800")
    assert ok("config", "get", "recall_budget").stdout.strip() == "800"
    assert pmem("config", "set", "recall_budget", "lots").exit_code == 2
    cfg = json.loads(ok("config", "--json").stdout)
    assert cfg["recall_budget"] == {"value": 800, "from": str(pmem_home / "config.toml")}
    bad = pmem("config", "set", "server", "sometimes")
    assert bad.exit_code == 2 and "auto, always, never" in bad.output
    ok("config", "set", "extract_mode", "label")
    assert ok("config", "get", "extract_mode").stdout.strip() == "label"


def test_every_command_has_help_with_an_example():
    from pmem.cli.docs import command_tree, every_command

    for node in every_command(command_tree()):
        if node.children:
            continue
        r = pmem(*node.path[1:], "--help")
        assert r.exit_code == 0
        assert "Example" in r.stdout, node.path


def test_markup_in_memory_is_printed_literally():
    ok("add", "[bold red]x[/] and \x1b[31mred\x1b[0m")
    out = ok("list").stdout
    assert "[bold red]x[/]" in out


def run_pmem(*args, env_extra=None, input=None):
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "pmem", *args], capture_output=True, input=input, env=env,
                          timeout=60)


def test_real_process_exit_codes_and_no_traceback():
    r = run_pmem("show", "nope")
    assert r.returncode == 1 and r.stderr.decode().startswith("pmem: error:")
    r = run_pmem("--no-such-option")
    assert r.returncode == 2
    r = run_pmem("add", input=b"\x00\xff")
    assert r.returncode == 2 and b"Traceback" not in r.stderr
    r = run_pmem("list", "--json")
    assert r.returncode == 0 and json.loads(r.stdout) == []


def test_terminal_output_is_literal(monkeypatch):
    from pmem.cli import output

    monkeypatch.setattr(output, "is_tty", lambda: True)
    ok("add", "[bold red]x[/] \x1b[31mred")
    r = ok("list")
    assert "[bold red]x[/]" in r.stdout
    assert "\x1b[31m" not in r.stdout and "\\x1b[31mred" in r.stdout


def test_models_lists_known_installed_and_found(tmp_path, monkeypatch):
    models = tmp_path / "models"
    models.mkdir()
    (models / "all-MiniLM-L6-v2.f16.gguf").write_bytes(b"GGUF" + b"\0" * 60)
    monkeypatch.setenv("PMEM_MODELS_DIR", str(models))
    home = tmp_path / "home"
    hub = home / ".cache" / "huggingface" / "hub" / "models--x--y" / "snapshots" / "abc"
    hub.mkdir(parents=True)
    (hub / "tiny-chat.Q4_K_M.gguf").write_bytes(b"GGUF" + b"\0" * 60)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    data = json.loads(ok("models", "--json").stdout)
    known = {m["name"]: m for m in data["known"]}
    assert known["all-MiniLM-L6-v2"]["installed"] is True
    assert known["all-MiniLM-L6-v2"]["kind"] == "embed"
    assert known["SmolLM2-135M-Instruct"]["installed"] is False
    assert any(f["path"].endswith("tiny-chat.Q4_K_M.gguf") for f in data["found"])
    text = ok("models").stdout
    assert "all-MiniLM-L6-v2" in text and "tiny-chat.Q4_K_M.gguf" in text


def test_doctor_passes_and_reports_a_bad_model_path(tmp_path, monkeypatch):
    ok("add", "hello")
    r = pmem("doctor", "--json")
    checks = {c["name"]: c for c in json.loads(r.stdout)}
    assert checks["sqlite-vec"]["ok"] and checks["database"]["ok"] and checks["permissions"]["ok"]
    # the tests' fake embedder needs no file: information, not a failure
    assert checks["embed_model"]["ok"] and "built-in fake embedder" in checks["embed_model"]["detail"]
    assert r.exit_code == 0
    monkeypatch.setenv("PMEM_CHAT_MODEL", str(tmp_path / "missing.gguf"))
    r = pmem("doctor")
    assert r.exit_code == 1
    assert "missing or not a GGUF" in r.stdout and "fix:" in r.stdout


def test_extract_file_checks_match_stdin(tmp_path, monkeypatch):
    from pmem import extract as extract_module

    monkeypatch.setattr(extract_module, "MAX_INPUT", 100)
    big = tmp_path / "big.txt"
    big.write_text("word " * 200)
    r = pmem("extract", str(big))
    assert r.exit_code == 2 and "larger than 100 characters" in r.stderr
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(b"caf\xe9")
    r = pmem("extract", str(bad))
    assert r.exit_code == 2 and "not valid UTF-8" in r.stderr
    assert json.loads(ok("list", "--all", "--json").stdout) == []


def test_search_collapses_a_fact_with_its_source_unless_asked():
    src = ok("add", "Caroline: I went to the pottery class on Sunday", "--json")
    src_id = json.loads(src.stdout)["id"]
    from pmem.service import MemoryStore

    with MemoryStore() as store:
        store.add("Caroline went to the pottery class on Sunday", derived_from=[src_id])
    both = json.loads(ok("search", "pottery class", "--json", "--no-collapse").stdout)
    assert len(both) == 2
    one = json.loads(ok("search", "pottery class", "--json").stdout)
    assert [h["id"] for h in one] == [both[0]["id"]]


def test_one_group_translates_errors_for_every_registered_command():
    import typer

    from pmem.cli.app import make_app
    from pmem.cli.common import PmemGroup, open_store
    from pmem.errors import NotFound, UsageError

    throwaway = make_app()
    raised = {"usage": UsageError("bad value for --x"), "missing": NotFound("no such thing"),
              "interrupt": KeyboardInterrupt()}

    @throwaway.command("boom")
    def boom(kind: str) -> None:
        raise raised[kind]

    @throwaway.command("malformed")
    def malformed() -> None:
        with open_store() as store:
            store.list_memories()
            from pmem import db

            raise db.driver().DatabaseError("database disk image is malformed")

    sub = typer.Typer(cls=PmemGroup)

    @sub.command("deep")
    def deep() -> None:
        raise NotFound("nothing down here")

    throwaway.add_typer(sub, name="sub")
    for args, code, message in [(["boom", "usage"], 2, "bad value for --x"), (["boom", "missing"], 1, "no such thing"),
                                (["boom", "interrupt"], 130, "interrupted"),
                                (["malformed"], 1, "database error: database disk image is malformed"),
                                (["sub", "deep"], 1, "nothing down here")]:
        r = runner.invoke(throwaway, args)
        assert r.exit_code == code, (args, r.output, r.exception)
        assert r.stderr.splitlines() == [f"pmem: error: {message}"], args
        assert "Traceback" not in r.output


def test_db_option_reaches_every_command(tmp_path, pmem_home):
    other = tmp_path / "other.db"
    mid = ok("--db", str(other), "add", "only in the other database").stdout.strip()
    assert json.loads(ok("list", "--json").stdout) == []
    assert json.loads(ok("--db", str(other), "show", mid, "--json").stdout)["id"] == mid
    assert json.loads(ok("--db", str(other), "path", "--json").stdout)["db"] == str(other)
    assert not (pmem_home / "pmem.db").exists() or json.loads(ok("stats", "--json").stdout)["memories"] == 0


def test_export_reads_in_batches_what_it_read_whole(tmp_path):
    """Export streams from one snapshot (it held 1,000,000 memories, 1.2 GB, before writing): every
    tier and status as before, JSONL in storage order, --active oldest first, Markdown by tier."""
    ids = {}
    for text, args in (("episode one", ["--tier", "episodic", "--at", "2024-03-01"]),
                       ("core fact", ["--pin", "--at", "2024-01-01"]),
                       ("old archive", ["--at", "2023-01-01"]), ("short lived", ["--at", "2024-02-01"]),
                       ("gone now", ["--at", "2024-04-01"]), ("new archive", ["--at", "2025-01-01"])):
        ids[text] = ok("add", text, *args).stdout.strip()
    ok("expire", ids["short lived"], "--now")
    ok("forget", ids["gone now"])

    def texts(*args):
        return [json.loads(line)["text"] for line in ok("export", *args).stdout.splitlines()]

    stored = ["episode one", "core fact", "old archive", "short lived", "new archive"]
    assert texts() == stored
    assert texts("--include-forgotten") == stored[:4] + ["gone now", "new archive"]
    assert texts("--active") == ["old archive", "core fact", "episode one", "new archive"]
    md = ok("export", "--format", "md").stdout
    order = [line.split(" <!--")[0][2:] for line in md.splitlines() if line.startswith("- ")]
    assert order == ["core fact", "old archive", "short lived", "new archive", "episode one"]
    assert md.index("## core") < md.index("## archival") < md.index("## episodic")
    active_md = ok("export", "--format", "md", "--active").stdout
    assert "short lived" not in active_md and "gone now" not in active_md and "new archive" in active_md
    ok("export", "-o", str(tmp_path / "all.jsonl"))
    assert (tmp_path / "all.jsonl").read_text().count("\n") == 5

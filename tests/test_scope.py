"""Project scope: global memories everywhere, project memories in their project only."""

from __future__ import annotations

import json

import pytest

from pmem import db
from pmem.errors import UsageError
from pmem.scope import auto_scope, parse_scope, project_root, read_filter
from pmem.service import MemoryStore
from pmem.store import Filter, migrations


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / "src" / "deep").mkdir(parents=True)
    return root.resolve()


def test_project_is_the_git_root_or_the_directory(repo, tmp_path, monkeypatch):
    assert project_root(repo / "src" / "deep") == repo
    plain = tmp_path / "notes"
    plain.mkdir()
    assert project_root(plain) == plain.resolve()
    monkeypatch.setenv("HOME", str(tmp_path))
    assert project_root(tmp_path) is None  # the home directory is nobody's project
    assert auto_scope("/") is None
    assert parse_scope("global") is None and parse_scope(None) is None
    assert parse_scope("auto", repo / "src") == str(repo)
    assert parse_scope(str(repo / "src")) == str(repo)
    with pytest.raises(UsageError):
        parse_scope(str(tmp_path / "missing"))


def test_reads_see_global_plus_their_project(store, repo, tmp_path):
    other = str(tmp_path)
    g, _ = store.add("global: I prefer tabs")
    mine, _ = store.add("repo: deploys go through staging", scope=str(repo))
    theirs, _ = store.add("other: deploys go straight to prod", scope=other)
    def ids(flt):
        return {m.id for m in store.list_memories(flt)}

    assert ids(Filter()) == {g.id, mine.id, theirs.id}  # no scope given: everything
    assert ids(read_filter(str(repo))) == {g.id, mine.id}
    assert ids(read_filter(None)) == {g.id}

    from pmem import recall, search

    hits = search(store, "deploys", read_filter(str(repo)))
    assert hits[0].memory.id == mine.id and theirs.id not in {h.memory.id for h in hits}
    block = recall(store, "deploys", flt=read_filter(other))
    assert theirs.id in {m.id for m in block.memories()}
    assert mine.id not in {m.id for m in block.memories()}


def test_scope_survives_export_import_and_undo(store, repo, tmp_path, fake_config):
    from pmem import transfer

    m, _ = store.add("repo fact", scope=str(repo))
    assert store.get(m.id).scope == str(repo)
    store.edit(m.id, text="repo fact, edited")
    store.undo()
    assert store.get(m.id).scope == str(repo)

    lines = list(transfer.export_jsonl(store.iter_all()))
    rows = [json.loads(x) for x in lines]
    assert [r["scope"] for r in rows] == [str(repo)]
    back = transfer.parse_jsonl(lines)
    assert back[0].scope == str(repo)


def test_migration_makes_existing_memories_global(tmp_path, fake_config):
    path = tmp_path / "old.db"
    conn = db.connect(path)
    conn.execute("CREATE TABLE IF NOT EXISTS _pmem_migrations (name TEXT PRIMARY KEY, applied_at TEXT)")
    for name, fn in migrations.MIGRATIONS:
        if name == "m003_scope":
            break
        fn(conn)
        conn.execute("INSERT INTO _pmem_migrations (name) VALUES (?)", (name,))
    conn.execute("INSERT INTO memories (id, text, created_at, updated_at) VALUES ('abcd1234', 'old memory', "
                 "'2025-01-01T00:00:00Z', '2025-01-01T00:00:00Z')")
    conn.close()
    with MemoryStore(path, config=fake_config) as s:
        m = s.get("abcd1234")
        assert m.scope is None
        assert s.count(read_filter("/some/project")) == 1
        assert "m003_scope" in migrations.applied(s.conn)


def test_cli_scope_options(repo, tmp_path, monkeypatch, fake_config):
    from typer.testing import CliRunner

    from pmem.cli.app import app

    runner = CliRunner()

    def ok(*args):
        r = runner.invoke(app, list(args))
        assert r.exit_code == 0, (args, r.output, r.exception)
        return r.stdout

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(repo / "src")
    mine = ok("add", "repo deploys go through staging", "--scope", "auto").strip()
    glob = ok("add", "I deploy on Tuesdays only").strip()
    other = ok("add", "elsewhere deploys go to prod", "--scope", str(elsewhere)).strip()

    def ids(out):
        return {m["id"] for m in json.loads(out)}

    assert ids(ok("search", "deploys", "--json")) == {mine, glob}  # default: global + this project
    assert ids(ok("search", "deploys", "--json", "--scope", "global")) == {glob}
    assert ids(ok("search", "deploys", "--json", "--scope", "all")) == {mine, glob, other}
    assert ids(ok("list", "--json")) == {mine, glob, other}  # list shows everything by default
    assert ids(ok("list", "--json", "--scope", "auto")) == {mine, glob}
    assert "elsewhere" not in ok("recall", "deploys")
    assert "elsewhere" in ok("recall", "deploys", "--scope", str(elsewhere))
    exported = [json.loads(x) for x in ok("export", "--scope", str(elsewhere)).splitlines()]
    assert {m["id"] for m in exported} == {glob, other}
    assert {m["scope"] for m in exported} == {None, str(elsewhere.resolve())}

    monkeypatch.chdir(elsewhere)
    assert ids(ok("search", "deploys", "--json")) == {glob, other}
    bad = runner.invoke(app, ["add", "x", "--scope", str(tmp_path / "nope")])
    assert bad.exit_code == 2 and "--scope" in bad.output

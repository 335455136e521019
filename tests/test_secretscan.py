"""The secret scanner's shapes of passwords in URLs and connection strings, and the fields it
covers: every string a memory stores (text, tags, source, meta however deep), not only the text."""

from __future__ import annotations

import json

import pytest
from export_fixtures import chatgpt_conversation

from pmem.secretscan import find_secrets, first_secret

KEY = "ghp_1234567890abcdefghijklmnopqrstuvwxyzAB"


@pytest.mark.parametrize("text,kind", [
    ("REDIS_URL=redis://:SuperSecret42@cache.internal:6379/0", "password in a URL"),
    ("postgresql://db.example.com/app?user=app&password=Xk9mPq2vL", "password in a URL"),
    ("postgres://db.example.com:5432/app?sslmode=require&password=Xk9mPq2vL&user=app", "password in a URL"),
    ("jdbc:sqlserver://db.example.com:1433;databaseName=app;user=sa;password=Str0ng!Pass;", "password in a URL"),
    ("connect with ;user=sa;password=Str0ng!Pass;", "password in a connection string"),
])
def test_passwords_without_a_user_in_a_query_string_or_in_jdbc_are_found(text, kind):
    found = first_secret(text)
    assert found is not None and found.kind == kind


@pytest.mark.parametrize("text", [
    "https://example.com/reset?password=", "https://example.com/forgot_password?user=sam",
    "https://example.com/login?next=/password", "redis://localhost:6379/0", "redis://cache:6379",
    "postgresql://host/db?user=app", "postgresql://host/db?user=app&password=${PGPASSWORD}",
    "https://example.com/?password=****", "jdbc:postgresql://localhost:5432/db?user=app",
    "http://localhost:8080/x@y", "https://user@example.com/", "the user=sam line, and the password is hunter2",
    "Server=db;Database=app;Password=${DB_PASSWORD};", "mailto:dana@example.com?subject=password",
    "see https://en.wikipedia.org/wiki/Password?action=history",
])
def test_innocent_urls_and_placeholders_are_no_secret(text):
    assert find_secrets(text) == []


def test_every_stored_field_is_scanned():
    from pmem.records import Memory
    from pmem.secretscan import memory_secret

    assert memory_secret(Memory(id="", text="fine")) is None
    for field, memory in [
        ("tags", Memory(id="", text="fine", tags=["ok", KEY])),
        ("source", Memory(id="", text="fine", source=f"https://x.example/?token={KEY}")),
        ("meta.title", Memory(id="", text="fine", meta={"title": f"my key {KEY}"})),
        ("meta.a.b", Memory(id="", text="fine", meta={"a": {"b": [1, {"c": 2}, f"deep {KEY}"]}})),
        ("meta", Memory(id="", text="fine", meta={KEY: 1})),
        ("thread", Memory(id="", text="fine", thread=f"t {KEY}")),
    ]:
        found = memory_secret(memory)
        assert found is not None and found[0] == field and found[2].kind == "GitHub token", field
    before = Memory(id="", text=f"kept on purpose {KEY}")
    after = Memory(id="", text=f"kept on purpose {KEY}", tags=["new"])
    assert memory_secret(after, before) is None  # an edit that keeps an allowed secret is not refused for it
    assert memory_secret(Memory(id="", text="x", meta={"k": KEY}), before) is not None


@pytest.fixture
def cli(monkeypatch, pmem_home):
    from typer.testing import CliRunner

    from pmem.cli.app import app

    monkeypatch.setenv("PMEM_EMBED_MODEL", "fake-64")
    runner = CliRunner()
    return lambda *args, input=None: runner.invoke(app, [str(a) for a in args], input=input)


def _one_error(r, fragment: str) -> None:
    assert r.exit_code == 2, r.output
    (line,) = r.stderr.strip().splitlines()
    assert fragment in line and KEY not in line and KEY[:10] not in line, line


def test_add_and_edit_refuse_a_key_in_meta_tags_or_source(cli):
    _one_error(cli("add", "fine text", "--meta", f"token={KEY}"), "the meta value 'token' contains what looks like")
    _one_error(cli("add", "fine text", "--tag", KEY), "a tag contains")
    _one_error(cli("add", "fine text", "--source", f"https://ci.example/?t={KEY}"), "the source contains")
    assert json.loads(cli("list", "--all", "--json").stdout) == []
    mid = cli("add", "fine text").stdout.strip()
    _one_error(cli("edit", mid, "--meta", f"token={KEY}"), "the meta value 'token' contains")
    assert json.loads(cli("show", mid, "--json").stdout)["meta"] == {}
    assert cli("add", "kept", "--meta", f"token={KEY}", "--allow-secret").exit_code == 0


def test_a_key_in_a_chat_title_or_pmem_meta_is_not_imported(cli, tmp_path):
    convs = [chatgpt_conversation("t1", [("user", "How do I rotate it?"), ("assistant", "In settings.")],
                                  title=f"token {KEY}", extras=False, branch=False),
             chatgpt_conversation("t2", [("user", "Fine chat")], extras=False, branch=False)]
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(convs))
    r = cli("import", path, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["imported"] == 1 and json.loads(r.stdout)["skipped_secrets"] == 2
    stored = json.dumps(json.loads(cli("list", "--all", "--json").stdout))
    assert "ghp_" not in stored
    jsonl = tmp_path / "mine.jsonl"
    jsonl.write_text(json.dumps({"text": "fine"}) + "\n" + json.dumps({"text": "fine too", "meta": {"k": KEY}}) + "\n")
    _one_error(cli("import", jsonl), "record 2 of 2: the meta value 'k' contains what looks like a GitHub token")

"""Trust: concurrent writers lose nothing, backups are atomic, secrets stay out, purge erases.

Concurrency tests run real processes against one SQLite file (the way users' shells do)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from pmem.service import MemoryStore


def run_workers(db, code: str, n: int = 4) -> list[str]:
    """Start `n` Python processes at once, each running `code` with `store` open on `db` and
    `w` its number; returns their stdout. A failure in any of them fails the test."""
    prelude = textwrap.dedent(f"""
        import sys, time
        from pmem.service import MemoryStore
        store = MemoryStore({str(db)!r})
        w = int(sys.argv[1])
        sys.stdin.read()  # wait for the start signal, so all processes race
    """)
    env = {**os.environ, "PMEM_EMBED_MODEL": "fake-64"}
    procs = [subprocess.Popen([sys.executable, "-c", prelude + textwrap.dedent(code), str(w)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for w in range(n)]
    outs = []
    for p in procs:  # release them together
        p.stdin.close()
        p.stdin = None
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        outs.append(out)
    return outs


@pytest.fixture
def db(store):
    return store.path


def test_concurrent_tag_edits_all_land_and_undo_is_exact(store, db):
    m, _ = store.add("one memory everyone tags")
    run_workers(db, f"""
        for i in range(10):
            store.edit({m.id!r}, add_tags=[f"w{{w}}-{{i}}"])
    """)
    got = store.get(m.id)
    assert len(got.tags) == 40
    events = [e for e, _ in store.history(m.id) if e.action == "retag"]
    assert len(events) == 40
    # Each event's before is the row it changed: the tags grow by one each time.
    assert [len(e.before["tags"]) for e in events] == list(range(40))
    store.undo()
    assert len(store.get(m.id).tags) == 39


def test_concurrent_pin_forget_restore_keep_every_change(store, db):
    ms = [store.add(f"memory number {i}")[0] for i in range(4)]
    ids = [m.id for m in ms]
    run_workers(db, f"""
        ids = {ids!r}
        for i in range(5):
            store.edit(ids[w], add_tags=[f"t{{i}}"])
            store.pin(ids[(w + 1) % 4])
            store.edit(ids[(w + 2) % 4], add_tags=[f"o{{w}}-{{i}}"])
    """)
    for m in store.get_many(ids):
        assert m.pinned and m.tier == "core"
        assert len(m.tags) == 10  # 5 own + 5 from another worker


def test_concurrent_metadata_edits_keep_every_key(store, db):
    m, _ = store.add("one memory everyone annotates")
    run_workers(db, f"""
        for i in range(5):
            store.edit({m.id!r}, update_meta={{f"w{{w}}-{{i}}": i}})
    """)
    assert len(store.get(m.id).meta) == 20


def test_concurrent_adds_of_the_same_text_store_it_once(store, db):
    run_workers(db, """
        for i in range(10):
            store.add(f"the same note {i}")
    """)
    from pmem.store import Filter

    assert store.count(Filter.everything()) == 10


def test_concurrent_undos_never_revert_one_operation_twice(store, db):
    for i in range(20):
        store.add(f"note to undo {i}")
    outs = run_workers(db, """
        from pmem.errors import NotFound
        for i in range(6):
            try:
                print(store.undo().id)
            except NotFound:
                print("nothing")
    """)
    undone = [line for out in outs for line in out.split() if line != "nothing"]
    assert len(undone) == len(set(undone)) == 20
    assert sum(out.split().count("nothing") for out in outs) == 4
    from pmem.store import Filter

    assert store.count(Filter.everything()) == 0




# -- backups -------------------------------------------------------------------------------

def test_a_backup_killed_mid_write_leaves_no_backup_and_nothing_readable(store, db, tmp_path):
    """A dream killed while writing its backup left a 0-byte 'backup' that counted as one and a
    0644 journal. Now: no file that looks like a backup, nothing readable by others, and the
    next backup cleans up and counts one."""
    import stat

    from pmem.backup import backup_database, list_backups

    for i in range(50):
        store.add(f"something worth backing up {i}")
    backups = tmp_path / "backups"
    code = f"""
        import os
        from pathlib import Path
        from pmem.backup import backup_database

        class Dies:  # the kill lands while pages are being copied
            def __init__(self, conn):
                self.conn = conn
            def backup(self, dest, **kw):
                dest.execute("CREATE TABLE half(x)")
                dest.execute("BEGIN")
                dest.execute("INSERT INTO half VALUES (randomblob(100000))")
                os.kill(os.getpid(), 9)

        store.conn = Dies(store.conn)
        backup_database(store, label="dream", directory=Path({str(backups)!r}))
    """
    prelude = f"from pmem.service import MemoryStore\nstore = MemoryStore({str(db)!r})\n"
    p = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True,
                       env={**os.environ, "PMEM_EMBED_MODEL": "fake-64"})
    assert p.returncode == -9
    assert list_backups(backups) == []
    left = list(backups.rglob("*"))
    assert left  # the kill did leave its partial folder behind
    for path in left:
        mode = stat.S_IMODE(path.stat().st_mode)
        inside_private = any(stat.S_IMODE(d.stat().st_mode) == 0o700 for d in path.parents
                             if d != backups and backups in d.parents)
        assert mode & 0o077 == 0 or inside_private, (path, oct(mode))
    # An empty or truncated file with a backup's name (what older versions left) is no backup.
    (backups / "pmem-20260101T000000Z-dream.db").write_bytes(b"")
    assert list_backups(backups) == []
    made = backup_database(store, label="dream", directory=backups)
    assert list_backups(backups) == [made]
    assert stat.S_IMODE(made.stat().st_mode) == 0o600
    assert not [p for p in backups.iterdir() if p.name.startswith(".partial-")]
    copy = MemoryStore(made, config=store.config)
    assert copy.count() == 50
    copy.close()


# -- secrets -------------------------------------------------------------------------------

SECRETS = {
    "AWS access key": "the staging key is AKIAIOSFODNN7EXAMPLE",
    "AWS secret key": "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "GitHub token": "deploy with ghp_1234567890abcdefghijklmnopqrstuvwxyzAB",
    "Slack token": "bot token xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "OpenAI API key": "OPENAI_API_KEY=sk-proj-AbCdEf1234567890GhIjKlMnOpQrStUvWxYz12",
    "Anthropic API key": "key sk-ant-api03-AbCdEf1234567890GhIjKlMnOpQrStUvWxYz-1234567890abcdef",
    "Google API key": "maps key AIzaSyA-1234567890abcdefghijklmnopqrstu",
    "Stripe key": "stripe sk_live_51H8abcdefGHIJKLmnopqrstu",
    "private key": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----",
    "JSON Web Token": "auth eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
                      "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
    "password in a URL": "DATABASE_URL=postgres://admin:s3cr3tP4ss@db.example.com:5432/app",
    "password in a connection string": "Server=tcp:db.example.com;Database=app;User ID=sa;Password=Hunter2Secret!;",
}

ORDINARY = [
    "the wifi password is hunter2", "password: hunter2 (the router in the hall)",
    "memory 3f2a9c1e was merged", "fixed in commit 9fceb02d0ae598e95dc970b74767f19372d61af8",
    "request 550e8400-e29b-41d4-a716-446655440000 failed",
    "sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "use sk-learn or scikit-learn-contrib-extra-packages-for-ml", "https://example.com/path?q=1",
    "postgres://localhost/db", "postgres://user@host/db", "postgres://user:${PGPASSWORD}@host/db",
    "postgres://user:****@host/db", "AKIA is the prefix of AWS access keys", "ghp_ tokens are GitHub's",
    "-----BEGIN PUBLIC KEY-----", "-----BEGIN CERTIFICATE-----",
    "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7 me@host", "email dana@example.com",
    "aGVsbG8gd29ybGQgdGhpcyBpcyBiYXNlNjQgdGV4dA==", "http://localhost:8080/x@y", "sk-1234",
    "hf_transfer speeds downloads", "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", "eyJ is how base64 JSON starts",
    "Caroline: I went to the pottery class on Sunday", "my pin is 4711 and my locker is 22",
]


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_each_kind_of_secret_is_found_and_named(kind):
    from pmem.secretscan import first_secret

    found = first_secret(SECRETS[kind])
    assert found is not None and found.kind == kind


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_text_is_no_secret(text):
    from pmem.secretscan import find_secrets

    assert find_secrets(text) == []


def test_a_real_conversation_corpus_holds_no_secret():
    """LoCoMo's 16,000 turns, summaries and observations: ordinary text, so 0 findings."""
    import json

    from conftest import SHARED

    from pmem.secretscan import find_secrets

    path = SHARED / "data" / "locomo_dev.json"
    if not path.exists():
        pytest.skip("LoCoMo data not provisioned")
    texts: list[str] = []

    def walk(o):
        if isinstance(o, str):
            texts.append(o)
        elif isinstance(o, dict):
            for v in o.values():
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)

    walk(json.loads(path.read_text(encoding="utf-8")))
    assert len(texts) > 10_000
    assert [(t[:60], s.kind) for t in texts for s in find_secrets(t)] == []


def test_add_import_and_edit_refuse_secrets_unless_allowed(store):
    from pmem.errors import UsageError
    from pmem.records import Memory
    from pmem.secretscan import SecretFound
    from pmem.store import Filter

    text = SECRETS["AWS access key"]
    with pytest.raises(SecretFound, match="AWS access key") as err:
        store.add(text)
    assert isinstance(err.value, UsageError) and err.value.exit_code == 2
    assert "AKIAIOSFODNN7EXAMPLE" not in str(err.value)  # the message does not repeat the secret
    with pytest.raises(SecretFound, match=r"memory 2 of 2 \(id aaaa0002\).*GitHub token"):
        store.insert([Memory(id="aaaa0001", text="fine"), Memory(id="aaaa0002", text=SECRETS["GitHub token"])])
    assert store.count(Filter.everything()) == 0  # an import with one secret stores nothing
    m, _ = store.add("the wifi password is hunter2")
    with pytest.raises(SecretFound, match="private key"):
        store.edit(m.id, text=SECRETS["private key"])
    kept, created = store.add(text, allow_secret=True)
    assert created and kept.text == text
    assert store.insert([Memory(id="", text=SECRETS["Stripe key"])], allow_secret=True)


def test_extraction_never_makes_a_fact_of_a_secret(store):
    from test_extract import FakeGenerator

    from pmem import extract as ex
    from pmem.secretscan import SecretFound, find_secrets
    from pmem.store import Filter

    chat = ("Dana: I moved to Lisbon in March. My staging key is AKIAIOSFODNN7EXAMPLE and I went "
            "to the staging party yesterday.")
    with pytest.raises(SecretFound, match="AWS access key"):
        ex.extract(store, chat, generator=FakeGenerator())
    assert store.count(Filter.everything()) == 0
    # Stored on purpose: the source is kept, yet the sentence with the key becomes no fact.
    r = ex.extract(store, chat, generator=FakeGenerator(), allow_secret=True)
    assert len(r.facts) == 1 and "Lisbon" in r.facts[0].text
    assert [f.reason for f in r.rejected] == ["contains a secret"]
    facts = store.list_memories(Filter(), limit=None)
    assert facts and not any(find_secrets(m.text) for m in facts)


# -- erasure -------------------------------------------------------------------------------

CANARY = "Quokkazebra93517 is the locker code at the gym"


def raw_bytes(path) -> bytes:
    """The database file and its -wal, as a disk forensics tool would read them."""
    data = b""
    for p in (path, path.with_name(path.name + "-wal")):
        if p.exists():
            data += p.read_bytes()
    return data


def assert_gone(path, needles):
    data = raw_bytes(path)
    for needle in needles:
        assert needle not in data, needle


def test_purge_removes_text_and_vector_from_every_table_and_the_file(store, db):
    from pmem.store import Filter

    for i in range(300):  # neighbours on the same pages
        store.add(f"ordinary memory number {i} about gardening and tools")
    m, _ = store.add(CANARY, tags=["gym"])
    store.edit(m.id, text=CANARY + ", row 4")  # events now hold two texts and the old vector
    store.pin(m.id)
    store.forget(m.id)
    vector = store.vectors([m.id])[m.id]
    other, _ = store.add("Dana likes the gym too")
    assert CANARY.encode() in raw_bytes(db)

    result = store.purge([m.id[:6]])
    assert result["purged"] == [m.id] and result["checkpointed"]
    assert store.count(Filter.everything()) == 301
    assert store.get(other.id).text == "Dana likes the gym too"
    events = [e for e, _ in store.history(m.id)]
    assert events[-1].action == "purge"
    assert all(e.before is None and e.after is None for e in events)
    assert all("Quokka" not in op.summary for op in store.operations(100))
    assert store.conn.execute("SELECT count(*) FROM memories_fts WHERE memories_fts MATCH 'quokkazebra93517'"
                              ).fetchone()[0] == 0
    store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert_gone(db, [b"Quokkazebra93517", b"quokkazebra93517", b"locker code at the gym", vector])
    assert store.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

    # A purge is not undone; undo goes on to the operations before it.
    op = store.undo()
    assert op.kind == "add" and "Dana" in op.summary
    store.close()
    assert_gone(db, [b"Quokkazebra93517", vector])


def test_purge_reaches_texts_left_only_in_events(store, db):
    m, _ = store.add(CANARY)
    store.undo()  # the row is gone, the add event still holds the text
    assert CANARY.encode() in raw_bytes(db)
    store.purge([m.id])
    assert_gone(db, [b"Quokkazebra93517", b"quokkazebra93517"])
    from pmem.errors import NotFound

    with pytest.raises(NotFound):
        store.purge(["ffffffff"])


@pytest.mark.parametrize("mode", ["rewrite", "remove"])
def test_purge_reaches_backups_on_request(store, db, tmp_path, mode):
    from pmem.backup import backup_database, backups_holding, list_backups, purge_backups

    backups = tmp_path / "backups"
    keep, _ = store.add("a memory that stays")
    old = backup_database(store, directory=backups)  # before the canary: untouched
    m, _ = store.add(CANARY)
    held = backup_database(store, directory=backups)
    store.purge([m.id])
    assert backups_holding([m.id], backups) == [held]
    assert CANARY.encode() in held.read_bytes()
    assert purge_backups([m.id], mode=mode, directory=backups, config=store.config) == [held]
    assert backups_holding([m.id], backups) == []
    if mode == "remove":
        assert list_backups(backups) == [old]
    else:
        assert list_backups(backups) == [old, held]
        for p in held.parent.iterdir():
            if p.name.startswith(held.name):
                assert b"Quokkazebra93517" not in p.read_bytes() and b"quokkazebra93517" not in p.read_bytes()
        assert held.read_bytes()[18:20] == b"\x01\x01"  # rollback journal again, self-contained
        assert not held.with_name(held.name + "-wal").exists()
        copy = MemoryStore(held, config=store.config)
        assert copy.get(keep.id).text == "a memory that stays"
        copy.close()


# -- the CLI for secrets and erasure -----------------------------------------------------------

@pytest.fixture
def cli(monkeypatch, pmem_home):
    from typer.testing import CliRunner

    from pmem.cli.app import app

    monkeypatch.setenv("PMEM_EMBED_MODEL", "fake-64")
    runner = CliRunner()
    return lambda *args, input=None: runner.invoke(app, list(args), input=input)


def test_cli_refuses_secrets_in_one_line_with_exit_2(cli, tmp_path):
    r = cli("add", SECRETS["GitHub token"])
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines() if hasattr(r, "stderr") else r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pmem: error:") and "GitHub token" in lines[0]
    assert "Traceback" not in r.output
    assert cli("add", SECRETS["GitHub token"], "--allow-secret").exit_code == 0
    f = tmp_path / "in.jsonl"
    f.write_text('{"text": "fine"}\n{"text": "%s"}\n' % SECRETS["AWS access key"])
    r = cli("import", str(f))
    assert r.exit_code == 2 and "AWS access key" in r.output
    assert cli("import", str(f), "--allow-secret").exit_code == 0
    assert cli("add", "the wifi password is hunter2").exit_code == 0


def test_cli_forget_purge_asks_erases_and_rewrites_backups(cli, pmem_home):
    from pmem.backup import backup_database, list_backups
    from pmem.service import MemoryStore

    mid = cli("add", CANARY).stdout.strip()
    keep = cli("add", "a memory that stays").stdout.strip()
    db = pmem_home / "pmem.db"
    with MemoryStore(db) as s:
        held = backup_database(s)
    r = cli("forget", "--purge", mid)  # no terminal to ask on, no --yes
    assert r.exit_code == 2 and "--yes" in r.output
    r = cli("forget", "--purge", mid[:5], "--yes")
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == mid and "rewrote 1 backups" in r.output
    assert cli("show", mid).exit_code == 1
    assert_gone(db, [b"Quokkazebra93517", b"quokkazebra93517"])
    assert list_backups() == [held]
    assert b"Quokkazebra93517" not in held.read_bytes()
    assert cli("show", keep).exit_code == 0


def test_default_export_leaves_forgotten_memories_out(cli):
    gone = cli("add", "forgotten on purpose").stdout.strip()
    cli("add", "still here")
    assert cli("forget", gone).exit_code == 0
    assert "forgotten on purpose" not in cli("export").stdout
    assert "forgotten on purpose" in cli("export", "--include-forgotten").stdout


def test_a_purge_killed_after_its_commit_is_finished_by_the_next_open(store, db):
    for i in range(200):
        store.add(f"ordinary memory number {i} about gardening and tools")
    m, _ = store.add(CANARY)
    store.edit(m.id, text=CANARY + ", row 4")
    store.close()
    code = f"""
        import os
        from pmem.store import erase
        from pmem.service import MemoryStore
        erase.finish_purge = lambda db: os.kill(os.getpid(), 9)  # killed before VACUUM
        store = MemoryStore({str(db)!r})
        store.purge([{m.id!r}])
    """
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       env={**os.environ, "PMEM_EMBED_MODEL": "fake-64"})
    assert p.returncode == -9
    with MemoryStore(db, config=store.config) as again:
        assert again.setting("purge_pending") is None
        assert again.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert_gone(db, [b"Quokkazebra93517", b"quokkazebra93517"])


def test_a_purge_killed_before_its_last_checkpoint_leaves_no_text_in_the_files(store, db):
    """Killed once the rewrite is done and its setting cleared, before the -wal is emptied: the
    rewritten pages are already in the file (a store this small never filled SQLite's 1,000
    pages that checkpoint on their own, so the file still held the old pages with the text)."""
    for i in range(200):
        store.add(f"ordinary memory number {i} about gardening and tools")
    m, _ = store.add(CANARY)
    store.close()
    code = f"""
        import os
        from pmem.service import MemoryStore
        from pmem.store.connection import Connection
        real = Connection.checkpoint
        calls = []

        def checkpoint(self, attempts=5):
            calls.append(1)
            if self.setting("purge_pending") is None:  # the last one, after the setting went
                os.kill(os.getpid(), 9)
            return real(self, attempts)

        Connection.checkpoint = checkpoint
        store = MemoryStore({str(db)!r})
        store.purge([{m.id!r}])
    """
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       env={**os.environ, "PMEM_EMBED_MODEL": "fake-64"})
    assert p.returncode == -9, p.stderr
    assert_gone(db, [b"Quokkazebra93517", b"quokkazebra93517"])  # before any reopening
    with MemoryStore(db, config=store.config) as again:
        assert again.setting("purge_pending") is None
        assert again.conn.execute("SELECT count(*) FROM memories WHERE id = ?", (m.id,)).fetchone()[0] == 0
        assert again.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

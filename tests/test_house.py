"""House rules that live in pyproject.toml stay complete as modules are added."""

from __future__ import annotations

import pkgutil
from pathlib import Path

import pytest

import pmem

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def contracts() -> dict[str, dict]:
    try:
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = data["tool"]["importlinter"]["contracts"]
    found = {c["type"]: c for c in contracts if c.get("containers", ["pmem"]) == ["pmem"]}
    found["store layers"] = next(c for c in contracts if c.get("containers") == ["pmem.store"])
    return found


def library_modules() -> set[str]:
    """Every module and package directly under pmem, except the two interfaces."""
    names = {m.name for m in pkgutil.iter_modules(pmem.__path__)}
    return names - {"cli", "tui", "__main__"}


def test_every_library_module_is_forbidden_the_ui(contracts):
    listed = {m.removeprefix("pmem.") for m in contracts["forbidden"]["source_modules"]}
    assert listed == library_modules()


def test_every_module_has_a_layer(contracts):
    placed = {name.strip() for layer in contracts["layers"]["layers"]
              for name in layer.replace(":", "|").split("|")}
    assert placed == library_modules() | {"cli", "tui"}


def test_every_store_module_has_a_layer(contracts):
    import pmem.store

    placed = {name.strip() for layer in contracts["store layers"]["layers"] for name in layer.split("|")}
    assert placed == {m.name for m in pkgutil.iter_modules(pmem.store.__path__)}


def test_only_the_store_reaches_into_a_store():
    """No module outside pmem/store/ uses a MemoryStore's connection or a private store name."""
    import re

    reach = re.compile(r"\b(?:store|copy|self\.store|s)\.(?:conn\b|_[a-z])")
    offenders = []
    for path in sorted((ROOT / "pmem").rglob("*.py")):
        if path.parent.name == "store":
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if reach.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []


def test_no_two_modules_import_each_other():
    """The import graph has no mutual pair (issue 9), inside a layer as well as across layers."""
    grimp = pytest.importorskip("grimp")  # comes with import-linter (the dev extra)
    graph = grimp.build_graph("pmem")
    mutual = {tuple(sorted((a, b))) for a in graph.modules for b in graph.find_modules_directly_imported_by(a)
              if a in graph.find_modules_directly_imported_by(b)}
    assert mutual == set()


# Where SQL may run outside pmem/store/ and pmem/db.py, each with its reason. A path ending in "/"
# is a folder. Every entry must still be needed (the test fails on one that no longer is).
SQL_ELSEWHERE = {
    "pmem/integrations/importers/": "reads other tools' own SQLite files (llm's logs.db; a Cursor importer would "
                                    "read its state.vscdb), read-only: they are not pmem's store",
}
_SQL_CALLS = {"execute", "executemany", "executescript", "query"}
_DRIVERS = {"sqlite3", "sqlean", "pysqlite3", "dbapi2", "db", "sqlite_utils"}
_SQL_WORDS = ("select", "insert", "update", "delete", "pragma", "create", "drop", "alter", "with", "begin",
              "commit", "rollback", "vacuum", "attach", "replace")


def _runs_sql(call) -> bool:
    """A call that runs SQL or opens a database connection."""
    import ast

    func = call.func
    if not isinstance(func, ast.Attribute):
        return False
    if func.attr in _SQL_CALLS:
        if func.attr == "query" and call.args and isinstance(call.args[0], ast.Constant) \
                and isinstance(call.args[0].value, str) \
                and not call.args[0].value.lstrip().lower().startswith(_SQL_WORDS):
            return False  # a Textual DOM query ("#keys-slot"), not SQL
        return True
    if func.attr in ("connect", "Database"):
        target = func.value
        if isinstance(target, ast.Call):  # db.driver().connect(...)
            target = target.func.attr if isinstance(target.func, ast.Attribute) else target.func
            return getattr(target, "id", target) == "driver"
        return isinstance(target, ast.Name) and target.id in _DRIVERS or \
            isinstance(target, ast.Attribute) and target.attr in _DRIVERS
    return False


def sql_outside_the_store() -> list[str]:
    import ast

    found = []
    for path in sorted((ROOT / "pmem").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("pmem/store/") or rel == "pmem/db.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), rel)):
            if isinstance(node, ast.Call) and _runs_sql(node):
                found.append((rel, node.lineno, f"{rel}:{node.lineno}: {ast.unparse(node.func)}(...)"))
    return [where for _, _, where in sorted(found)]


def _allowed(where: str) -> str | None:
    path = where.split(":", 1)[0]
    return next((key for key in SQL_ELSEWHERE if path == key or key.endswith("/") and path.startswith(key)), None)


def test_only_the_store_and_db_run_sql():
    """The store is storage: doctor, autosync, backups and the rest ask its nouns (pmem/store/),
    never a connection of their own. The exceptions are listed above, each with its reason."""
    found = sql_outside_the_store()
    assert [f for f in found if _allowed(f) is None] == []
    assert {_allowed(f) for f in found} == set(SQL_ELSEWHERE)  # no exception outlives its need


def test_the_sql_scan_sees_what_it_must():
    """The scan itself: it finds each way of running SQL, and passes over a Textual DOM query."""
    import ast

    def calls(source: str) -> list[bool]:
        return [_runs_sql(n) for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute) and n.func.attr not in ("fetchone", "close")]

    assert calls("conn.execute('SELECT 1')") == [True]
    assert calls("x.executescript(sql)") == [True]
    assert calls("sqlite3.connect(path)") == [True]
    assert calls("db.connect(':memory:')") == [True]
    assert calls("db.driver().connect(uri, uri=True)") == [True, False]
    assert calls("sqlite_utils.Database(conn)") == [True]
    assert calls("db.query(f'SELECT {cols} FROM t')") == [True]
    assert calls("db.query(sql)") == [True]
    assert calls("main.query('#keys-slot')") == [False]
    assert calls("socket.connect(addr)") == [False]

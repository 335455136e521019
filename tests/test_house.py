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


# Tests reach pmem's private names (module._helper, obj._attr, "pmem.x._y") at most this often: a
# test goes through a seam (a public function, parameter, setting or constant; the CLI or the store)
# so that the code behind it may change. The reaches left are listed by test_private_reaches_stay_few.
PRIVATE_REACHES_MAX = 15


def _pmem_private_names() -> set[str]:
    """Every single-underscore name pmem defines: functions, classes, assignments, attributes."""
    import ast

    names = set()
    for path in (ROOT / "pmem").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
    return {n for n in names if _private(n)}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and len(name) > 1


def private_reaches(source: str, where: str, pmem_names: set[str]) -> list[str]:
    """Where `source` reaches a private name of pmem: an attribute (`embed._cache`, `store._side`;
    not `self._x`, a test double's own), a dotted string ("pmem.models.embed._cache"), an import
    (`from pmem.cli.docs import _tree`), or a name handed to setattr/getattr/monkeypatch.setattr
    (`setattr(embed, "_cache", {})`). Names pmem
    does not define (textual's, ctypes' `_fields_`) are not pmem's to offer a seam for."""
    import ast
    import re

    dotted = re.compile(r"^pmem(?:\.\w+)+$")
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and _private(node.attr) and node.attr in pmem_names:
            root = node.value
            while isinstance(root, (ast.Attribute, ast.Call, ast.Subscript)):
                root = root.func if isinstance(root, ast.Call) else root.value
            if not (isinstance(root, ast.Name) and root.id in ("self", "cls")):
                found.append((node.lineno, f"{where}:{node.lineno}: {ast.unparse(node)}"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and dotted.match(node.value) \
                and any(_private(part) and part in pmem_names for part in node.value.split(".")):
            found.append((node.lineno, f"{where}:{node.lineno}: {node.value!r}"))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pmem"):
            found.extend((node.lineno, f"{where}:{node.lineno}: from {node.module} import {alias.name}")
                         for alias in node.names if _private(alias.name) and alias.name in pmem_names)
        elif isinstance(node, ast.Call) and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) \
                and isinstance(node.args[1].value, str) and _private(node.args[1].value) \
                and node.args[1].value in pmem_names:
            found.append((node.lineno, f"{where}:{node.lineno}: {ast.unparse(node.func)}(..., {node.args[1].value!r})"))
    return [reach for _, reach in sorted(found)]


def test_private_reaches_stay_few():
    """Run this file with -s to see the reaches (python -m pytest tests/test_house.py -k private -s)."""
    names = _pmem_private_names()
    found = [reach for path in sorted((ROOT / "tests").rglob("*.py"))
             for reach in private_reaches(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)), names)]
    print("\n".join(found))
    assert len(found) <= PRIVATE_REACHES_MAX, f"{len(found)} reaches of private names:\n" + "\n".join(found)


def test_the_private_reach_count_sees_each_kind():
    names = {"_cache", "_load", "_x"}
    source = """if True:
        embed._cache = {}
        monkeypatch.setattr("pmem.models.embed._cache", {})
        monkeypatch.setattr(embed, "_load", None)
        self._x
        embed._unknown
        embed.__name__
        from pmem.models.embed import _x, load_embedder
        "pmem.models.embed.load_embedder"
        "pmem.version.__version__"
        "a docstring that names pmem.models.embed._cache in passing"
    """
    assert private_reaches(source, "t.py", names) == [
        "t.py:2: embed._cache", "t.py:3: 'pmem.models.embed._cache'", "t.py:4: monkeypatch.setattr(..., '_load')",
        "t.py:8: from pmem.models.embed import _x"]

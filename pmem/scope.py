"""Project scope: memories for one project, kept apart from the personal ones that go everywhere.

A memory's `scope` is NULL (global) or a project: the absolute path of the git root that holds a
directory, or of the directory itself outside git. Reading inside a project sees the global
memories plus that project's; `--scope global` sees only global ones.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import UsageError

GLOBAL = "global"
AUTO = "auto"
ALL = "all"


def project_root(cwd: str | os.PathLike | None = None) -> Path | None:
    """The git root above `cwd` (or `cwd` itself when there is none); None for the home directory
    or the filesystem root, which are nobody's project."""
    start = Path(cwd if cwd is not None else os.getcwd()).expanduser()
    try:
        start = start.resolve()
    except OSError:
        return None
    if not start.is_dir():
        return None
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return None if _not_a_project(folder) else folder
    return None if _not_a_project(start) else start


def _not_a_project(folder: Path) -> bool:
    try:
        home = Path.home().resolve()
    except (OSError, RuntimeError):
        home = None
    return folder == home or folder.parent == folder


def auto_scope(cwd: str | os.PathLike | None = None) -> str | None:
    """The scope `--scope auto` means in `cwd`: its project, or None (global) outside any."""
    root = project_root(cwd)
    return str(root) if root is not None else None


def parse_scope(value: str | None, cwd: str | os.PathLike | None = None) -> str | None:
    """A `--scope` value to a stored scope: "global" -> None, "auto" -> the current project,
    a path -> that project (its git root). Raises UsageError for a path that is not a directory."""
    if value is None:
        return None
    v = value.strip()
    if v in ("", GLOBAL):
        return None
    if v == AUTO:
        return auto_scope(cwd)
    path = Path(v).expanduser()
    if not path.is_absolute():
        path = Path(cwd if cwd is not None else os.getcwd()) / path
    if not path.is_dir():
        raise UsageError(f"--scope {value!r}: use global, auto or a project directory")
    root = project_root(path)
    if root is None:
        raise UsageError(f"--scope {value!r} is not a project (the home or root directory)")
    return str(root)


def read_filter(scope: str | None, *, base=None):
    """A Filter that sees global memories plus `scope`'s (just global ones when scope is None)."""
    from dataclasses import replace

    from .store import Filter

    return replace(base or Filter(), scope=scope if scope is not None else GLOBAL)


def filter_scope(value: str | None, cwd: str | os.PathLike | None = None) -> str | None:
    """A reading `--scope` to `Filter.scope`: "all" (or None) -> every memory; "global" -> global
    ones; "auto" -> global plus the current project's (global only outside a project); a
    directory -> global plus that project's."""
    if value is None or value.strip() == ALL:
        return None
    project = parse_scope(value, cwd)
    return project if project is not None else GLOBAL


def in_scope(scope_of_memory: str | None, wanted: str | None) -> bool:
    """Whether a memory with `scope_of_memory` passes `Filter.scope == wanted` (for code that
    filters memories it already holds, like export of every memory)."""
    if wanted is None:
        return True
    if wanted == GLOBAL:
        return scope_of_memory is None
    return scope_of_memory is None or scope_of_memory == wanted

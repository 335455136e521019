"""Writing other tools' files in place: through symbolic links, atomically, with their mode kept.

A dotfiles repository links ~/.claude/settings.json to its own copy, and a project links
CLAUDE.md to AGENTS.md. A rename onto the link would replace it with a regular file, and the two
would drift apart without a word; so pmem writes to the end of the chain of links (creating a
dangling link's target), through a temporary file beside it and one rename.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import UsageError
from ..paths import write_atomic

MAX_LINKS = 40  # what Linux's own path resolution follows before ELOOP


def link_target(path: Path) -> Path:
    """The file a write to `path` changes: `path`, or the end of its chain of symbolic links."""
    path = Path(path)
    hops = 0
    while path.is_symlink():
        hops += 1
        if hops > MAX_LINKS:
            raise UsageError(f"{path}: too many levels of symbolic links (a loop?); pmem changed nothing")
        target = Path(os.readlink(path))
        path = target if target.is_absolute() else path.parent / target
    return path


def write_through(path: Path, data: bytes, *, new_mode: int = 0o600) -> Path:
    """Replace the contents of `path` (or of the file its links lead to) with `data`, atomically.

    An existing file keeps its mode; a new one gets `new_mode`. Returns the file written."""
    target = link_target(path)
    if target.exists() and not target.is_file():
        raise UsageError(f"{path} is not a file")
    target.parent.mkdir(parents=True, exist_ok=True)
    mode = target.stat().st_mode & 0o777 if target.exists() else new_mode
    write_atomic(target, data, mode=mode, prefix=target.name + ".")
    return target

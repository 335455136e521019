"""A block of memories inside a conventions file (AGENTS.md, CLAUDE.md, GEMINI.md...).

Tools that read only such a file get the user's core memories from a block pmem owns, between
two marker lines. `write_block` replaces that block (or appends one) and leaves every other byte
of the file as it was: line endings, the text before and after, the file's mode, and the symbolic
link it may be (the write goes to the link's target).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from .. import ownblocks
from ..display import prompt_safe
from ..errors import UsageError

if TYPE_CHECKING:
    from ..service import MemoryStore
    from ..store import Filter

BEGIN = "<!-- pmem:begin (written by `pmem context --write`; edits between these lines are replaced) -->"
END = "<!-- pmem:end -->"
_BEGIN_PREFIX = "<!-- pmem:begin"
MAX_FILE = 5_000_000


def render_block(store: MemoryStore, *, budget: int = 4000, flt: Filter | None = None) -> str:
    """The block's body: core memories, newest first, within `budget` characters, between
    pmem's own markers (pmem.ownblocks)."""
    from ..store import Filter

    flt = flt or Filter()
    core = store.list_memories(replace(flt, pinned=True, tiers=("core",)), sort="created", reverse=True, limit=None)
    lines = ["## About the user (from pmem)", ""]
    used = sum(len(x) + 1 for x in lines) + ownblocks.OVERHEAD
    shown = 0
    for m in core:
        line = "- " + " ".join(prompt_safe(m.text).split())  # the one gate for text a model reads
        if used + len(line) + 1 > budget:
            break
        lines.append(line)
        used += len(line) + 1
        shown += 1
    if shown == 0:
        lines.append("(no core memories yet: `pmem pin ID` makes one)")
    if shown < len(core):
        lines.append(f"({len(core) - shown} more: `pmem list --tier core`)")
    return ownblocks.mark("\n".join(lines))


def _find(lines: list[str]) -> tuple[int, int] | None:
    starts = [i for i, ln in enumerate(lines) if ln.strip().startswith(_BEGIN_PREFIX)]
    ends = [i for i, ln in enumerate(lines) if ln.strip() == END]
    if not starts and not ends:
        return None
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise UsageError("the file's pmem markers are broken (a begin without an end, or several); "
                         f"fix them by hand: {BEGIN!r} ... {END!r}")
    return starts[0], ends[0]


def merge(existing: str, body: str) -> str:
    """`existing` with its pmem block replaced by `body` (appended when there is none)."""
    newline = "\r\n" if "\r\n" in existing else "\n"
    lines = existing.splitlines(keepends=True)
    block = [BEGIN + newline, *(ln + newline for ln in body.split("\n")), END + newline]
    span = _find([ln.rstrip("\r\n") for ln in lines])
    if span is None:
        if not existing:
            return "".join(block)
        head = existing if existing.endswith(("\n", "\r")) else existing + newline
        return head + newline + "".join(block)
    start, end = span
    tail = lines[end + 1:]
    if not lines[end].endswith(("\n", "\r")):  # the end marker was the file's last line, with no newline
        block[-1] = END
    return "".join(lines[:start] + block + tail)


def write_block(path: Path, body: str) -> bool:
    """Write the block into `path`; True when the file changed."""
    path = Path(path)
    if path.exists() and not path.is_file():
        raise UsageError(f"{path} is not a file")
    existing = ""
    if path.exists():
        if path.stat().st_size > MAX_FILE:
            raise UsageError(f"{path} is larger than {MAX_FILE:,} bytes; is it the right file?")
        raw = path.read_bytes()
        try:
            existing = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise UsageError(f"{path} is not UTF-8 text; pmem changed nothing") from None
    new = merge(existing, body)
    if new == existing:
        return False
    from .textfiles import write_through

    write_through(path, new.encode("utf-8"), new_mode=0o644)  # CLAUDE.md -> AGENTS.md stays a link
    return True

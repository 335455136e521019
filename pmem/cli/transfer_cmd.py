"""Moving memories in and out: import, export."""

import os
from pathlib import Path
from typing import List, Optional

import typer

from ..errors import PmemError, UsageError
from . import output as out
from .common import JsonOpt, ScopeAllOpt, open_store, read_stdin


def register(app: typer.Typer) -> None:
    app.command("import")(import_)
    app.command()(export)


def import_(
    file: str = typer.Argument(..., metavar="FILE|-", help="JSONL or Markdown file; '-' reads stdin."),
    fmt: Optional[str] = typer.Option(None, "--format", "-f", help="jsonl or md (default: guessed)."),
    tag: List[str] = typer.Option(None, "--tag", "-t", help="Add this tag to every imported memory."),
    tier: Optional[str] = typer.Option(None, "--tier", help="Tier for records that do not name one."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Check the file and count, store nothing."),
    allow_secret: bool = typer.Option(False, "--allow-secret", help="Import records that hold what looks like a "
                                      "machine secret (an API key, a token, a private key)."),
    as_json: bool = JsonOpt,
) -> None:
    """Import memories from JSONL (fields: text, created_at, tags, tier, pinned, expires_at, source,
    meta, thread, thread_pos) or Markdown (one memory per list item or paragraph). A record with a
    thread and no thread_pos is appended to that thread. One `pmem undo` reverts it. A file
    with a machine secret in any record imports nothing unless --allow-secret.

    \b
    Examples:
      pmem import notes.jsonl
      pmem export | pmem --db other.db import -
    """
    import io

    from .. import transfer

    if file == "-":
        stream = io.StringIO(read_stdin(500_000_000))
        name = ""
    else:
        path = Path(file)
        if not path.is_file():
            raise UsageError(f"no such file: {file}")
        stream = open(path, encoding="utf-8", errors="strict")
        name = path.name
    with stream:
        records = transfer.parse(stream, fmt, name)
    from dataclasses import replace

    if tag or tier:
        records = [replace(r, tags=list(r.tags) + list(tag or []), tier=r.tier if tier is None or
                           r.tier != "archival" else tier) for r in records]
    with open_store() as store:
        existing = store.existing_ids(r.id for r in records if r.id)
        todo = [r for r in records if r.id not in existing]
        if dry_run:
            stored = []
        else:
            with out.Progress("importing") as progress:
                stored = store.insert(todo, kind="import", summary=f"import {name or 'stdin'}: {len(todo)}",
                                      progress=progress, allow_secret=allow_secret)
    result = {"read": len(records), "imported": len(stored), "skipped_existing": len(existing),
              "dry_run": dry_run}
    if as_json:
        out.print_json(result)
    else:
        verb = "would import" if dry_run else "imported"
        count = len(todo) if dry_run else len(stored)
        out.note(f"{verb} {count} memories" + (f"; {len(existing)} already present" if existing else ""))


def export(
    fmt: str = typer.Option("jsonl", "--format", "-f", help="jsonl (lossless) or md."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write to FILE instead of stdout."),
    active: bool = typer.Option(False, "--active", help="Only active memories (default: everything but forgotten)."),
    include_forgotten: bool = typer.Option(False, "--include-forgotten", help="Also forgotten memories."),
    scope: str = ScopeAllOpt,
) -> None:
    """Export memories: JSONL keeps every field (import round-trips it); Markdown is for reading.
    Forgotten memories stay out unless --include-forgotten: an export is a file that travels.

    \b
    Examples:
      pmem export > backup.jsonl
      pmem export --format md -o memories.md
    """
    from .. import transfer
    from ..scope import filter_scope, in_scope
    from ..store import Filter

    if fmt not in transfer.FORMATS:
        raise UsageError(f"unknown format {fmt!r}: use {', '.join(transfer.FORMATS)}")
    if output is not None:
        _check_writable(output)
    wanted = filter_scope(scope)
    with open_store(read_only=True) as store:
        if active:
            memories = store.list(Filter(tiers=("core", "archival", "episodic"), scope=wanted), limit=None,
                                  reverse=True)
        else:
            memories = [m for m in store.iter_all()
                        if (include_forgotten or m.forgotten_at is None) and in_scope(m.scope, wanted)]
    lines = transfer.export_jsonl(memories) if fmt == "jsonl" else transfer.export_markdown(memories)
    if output is not None:
        try:
            fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        except OSError as exc:
            raise UsageError(f"cannot write {output}: {exc.strerror}") from None
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.writelines(lines)
        except OSError as exc:
            raise PmemError(f"writing {output} failed: {exc.strerror}") from None
        out.note(f"wrote {len(memories)} memories to {output}")
    else:
        out.write_lines(lines)  # as stored to a pipe; escapes shown, not acted on, on a terminal


def _check_writable(output: Path) -> None:
    """Refuse an -o that cannot be a file before reading the store."""
    if output.is_dir():
        raise UsageError(f"-o {output} is a folder: give a file name")
    if not output.parent.is_dir():
        raise UsageError(f"-o {output}: the folder {output.parent} does not exist")

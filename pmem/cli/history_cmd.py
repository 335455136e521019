"""The record of changes: history, log, undo."""

import json

import typer

from . import output as out
from .common import JsonOpt, check_count, open_store


def register(app: typer.Typer) -> None:
    app.command()(history)
    app.command()(log)
    app.command()(undo)


def history(
    memory_id: str = typer.Argument(..., metavar="ID", help="Memory id or a unique prefix."),
    as_json: bool = JsonOpt,
) -> None:
    """Show every change to a memory, oldest first.

    \b
    Example:
      pmem history 3f2a
    """
    with open_store(read_only=True) as store:
        rows = store.history(memory_id)
    if as_json:
        out.print_json([{**e.to_dict(), "operation": op.to_dict()} for e, op in rows])
        return
    for e, op in rows:
        undone = " (undone)" if op.undone_at else ""
        changes = e.changes()
        detail = ", ".join(f"{k}: {_short(a)} -> {_short(b)}" for k, (a, b) in changes.items()
                           if k not in ("updated_at",)) if e.before else _short((e.after or {}).get("text"), 60)
        out.echo(out.visible(f"{e.at}  {e.action:<9} op {op.id}{undone}  {detail}"))


def _short(value, width: int = 40) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def log(
    limit: int = typer.Option(20, "--limit", "-n", help="How many operations."),
    as_json: bool = JsonOpt,
) -> None:
    """List recent operations, newest first (what `pmem undo` would revert).

    \b
    Example:
      pmem log -n 5
    """
    check_count(limit, "--limit", 0)
    with open_store(read_only=True) as store:
        ops = store.operations(limit)
    if as_json:
        out.print_json([o.to_dict() for o in ops])
        return
    for o in ops:
        undone = "  (undone)" if o.undone_at else ""
        out.echo(out.visible(f"{o.at}  {o.id}  {o.kind:<9} {o.events:>5} changes  {_short(o.summary, 50)}{undone}"))


def undo(as_json: bool = JsonOpt) -> None:
    """Revert the last operation exactly (an import or a dream run is one operation).

    \b
    Example:
      pmem undo
    """
    with open_store() as store:
        op = store.undo()
    if as_json:
        out.print_json(op.to_dict())
    else:
        out.echo(out.visible(f"undid {op.kind} {op.id}: {op.events} change(s) ({_short(op.summary, 60)})"))

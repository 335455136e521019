"""What the command modules share: options, input readers, option parsing and `open_store()`.

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
from ..errors import PmemError, UsageError

TagOpt = typer.Option(None, "--tag", "-t", help="Only memories with this tag (repeatable: all must match).")
TierOpt = typer.Option(None, "--tier", help="Only this tier: core, archival, episodic (repeatable).")
SinceOpt = typer.Option(None, "--since", help="Created on or after DATE (YYYY-MM-DD, ISO time, or 7d for 7 days ago).")
UntilOpt = typer.Option(None, "--until", help="Created on or before DATE.")
AsOfOpt = typer.Option(None, "--as-of", help="Facts that were valid at DATE (includes since-superseded ones).")
JsonOpt = typer.Option(False, "--json", help="Print JSON for scripts (stable keys).")
IdsArg = typer.Argument(..., metavar="ID...", help="Memory ids or unique prefixes.")


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


def open_store(ctx: Optional[typer.Context] = None):
    """The store the running command works on (`--db`, else $PMEM_DB / $PMEM_HOME / user dir)."""
    from ..store import MemoryStore

    return MemoryStore(db_override(ctx))


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


# -- the error boundary -------------------------------------------------------------------

def _sqlite_errors() -> tuple:
    """The exception base classes of the SQLite drivers loaded so far (none imported here)."""
    found = []
    for name in ("sqlite3", "sqlean", "pysqlite3.dbapi2"):
        module = sys.modules.get(name)
        error = getattr(module, "Error", None)
        if isinstance(error, type):
            found.append(error)
    return tuple(found)


class PmemGroup(TyperGroup):
    """Every pmem group (the app and its sub-apps) uses this class: it turns what a command raises
    into one `pmem: error:` line and the documented exit code, so no command has to remember to."""

    def invoke(self, ctx: typer.Context):
        from . import output as out

        try:
            return super().invoke(ctx)
        except PmemError as exc:
            out.error(str(exc))
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            out.error("interrupted")
            raise typer.Exit(130) from None
        except BrokenPipeError:  # `pmem export | head`: the reader left; that is not an error
            _silence_stdout()
            raise typer.Exit(0) from None
        except Exception as exc:
            if isinstance(exc, _sqlite_errors()):
                out.error(f"database error: {exc}")
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

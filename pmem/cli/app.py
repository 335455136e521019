"""The `pmem` command line: parse, call the library, render. Nothing else lives here.

This module creates the app and asks each command module to register its commands, in the
order of COMMAND_MODULES (the order `pmem --help` lists them). A new command goes in its own
`<topic>_cmd.py` with a `register(app)` function, added to that list. Errors need no handling
in commands: `common.PmemGroup` translates them for every command.

No `from __future__ import annotations` in the command modules: typer reads every command's
signature at each start, and string annotations made it evaluate them all (~12 ms a command).
"""

from pathlib import Path
from typing import Optional

import typer

from . import (
    agents_cmd,
    config_cmd,
    dream_cmd,
    extract_cmd,
    history_cmd,
    housekeeping_cmd,
    memories_cmd,
    models_cmd,
    serve_cmd,
    sync_cmd,
    transfer_cmd,
    tui_cmd,
)
from . import output as out
from .common import PmemGroup

COMMAND_MODULES = (memories_cmd, history_cmd, transfer_cmd, housekeeping_cmd, dream_cmd, extract_cmd,
                   serve_cmd, tui_cmd, agents_cmd, models_cmd, config_cmd, sync_cmd)


def _print_version(value: bool) -> None:
    """Eager: `pmem --version` alone prints and exits 0, before click asks for a command."""
    if value:
        from ..version import __version__

        out.echo(f"pmem {__version__}")
        raise typer.Exit(0)


def _main(
    db: Optional[Path] = typer.Option(None, "--db", help="Database file (default: $PMEM_DB, "
                                      "$PMEM_HOME/pmem.db, or the user data dir).", envvar=None),
    version: bool = typer.Option(False, "--version", help="Print the version and exit.", is_eager=True,
                                 callback=_print_version),
) -> None:
    """A personal memory for you and your LLM tools, in one local SQLite file.

    \b
    Examples:
      pmem add "The wifi password at the cabin is hunter2" --tag home
      pmem search "cabin internet"
      pmem recall "plan dinner" | llm "suggest a recipe"
    """


def make_app() -> typer.Typer:
    """A fresh app with every command registered (tests may add throwaway commands to their own)."""
    app = typer.Typer(
        name="pmem",
        cls=PmemGroup,
        help="A personal memory for you and your LLM tools, in one local SQLite file.\n\n"
             "Exit codes: 0 ok, 1 error, 2 usage. Set PMEM_HOME to move all state.",
        add_completion=False,
        no_args_is_help=True,
        rich_markup_mode=None,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback()(_main)
    for module in COMMAND_MODULES:
        module.register(app)
    return app


app = make_app()

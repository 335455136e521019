"""The `pmem tui` command."""

import sys
from typing import Optional

import typer

from ..errors import UsageError
from .common import open_store


def register(app: typer.Typer) -> None:
    app.command()(tui)


def tui(
    query: Optional[str] = typer.Option(None, "--search", "-s", help="Start with this search."),
    project_only: bool = typer.Option(False, "--project", help="Start with global memories and this "
                                      "project's only (the S key switches back)."),
) -> None:
    """Browse, search and fix memories in a full-screen terminal UI (press ? for keys).

    \b
    Examples:
      pmem tui
      pmem tui --search "cabin"
      pmem tui --project
      PMEM_DB=~/other.db pmem tui
    """
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UsageError("pmem tui needs a terminal; use `pmem list` or `pmem search` in scripts")
    from ..tui import make_app  # textual loads only for this command

    with open_store() as store:
        tui_app = make_app(store, initial_query=query, project_only=project_only)
        tui_app.run()
    if tui_app.return_code:  # textual has shown what went wrong; the exit status must say so too
        raise typer.Exit(1)

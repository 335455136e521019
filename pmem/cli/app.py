"""The `pmem` command line: parse, call the library, render. Nothing else lives here.

This module creates the app; each command module registers its commands with `register(app)`.
COMMANDS names them, module by module, in the order `pmem --help` lists them: a command's module
is imported (and typer reads its signatures) only when that command runs, or when help or
completion lists them all, so `pmem list` does not pay for `pmem sync`
(docs/decisions/0040-command-start-up.md). A new command goes in its own `<topic>_cmd.py` with a `register(app)`
function, and its names in COMMANDS (tests/cli/test_cli_lazy_commands.py checks they agree). Errors
need no handling in commands: `common.PmemGroup` translates them for every command.

No `from __future__ import annotations` in the command modules: typer reads every command's
signature when it builds it, and string annotations made it evaluate them all (~12 ms a command).
"""

import importlib
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any, Optional

import typer
import typer.main

from . import output as out
from .common import PmemGroup

# module -> the commands its register() adds, in `pmem --help` order (typer lists an app's plain
# commands first, then its sub-apps: hook, models, config, sync)
COMMANDS: dict[str, tuple[str, ...]] = {
    "memories_cmd": ("add", "search", "recall", "list", "show", "edit", "pin", "unpin", "expire", "forget",
                     "restore"),
    "history_cmd": ("history", "log", "undo"),
    "transfer_cmd": ("import", "export"),
    "housekeeping_cmd": ("stats", "path", "reindex", "doctor"),
    "dream_cmd": ("dream",),
    "extract_cmd": ("extract", "why"),
    "serve_cmd": ("serve",),
    "tui_cmd": ("tui",),
    "agents_cmd": ("mcp", "context", "hook"),
    "models_cmd": ("models",),
    "config_cmd": ("config",),
    "sync_cmd": ("sync",),
}


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


class _Commands(MutableMapping):
    """A group's commands by name: every name in COMMANDS is listed, and looking one up imports
    its module and builds that command alone, as typer builds a registered app's."""

    def __init__(self, built: MutableMapping) -> None:
        self._order = [name for names in COMMANDS.values() for name in names]
        self._order += [name for name in built if name not in self._order]
        self._built = dict(built)  # commands registered on the app itself (tests add throwaway ones)
        self._module = {name: module for module, names in COMMANDS.items() for name in names}
        self._registered: dict[str, typer.Typer] = {}  # name -> an app holding that command alone

    def _load(self, module: str) -> None:
        scratch = typer.Typer(rich_markup_mode=None)
        importlib.import_module(f".{module}", __package__).register(scratch)
        for info in scratch.registered_commands:
            one = typer.Typer(rich_markup_mode=None)
            one.registered_commands.append(info)
            assert info.callback is not None
            self._registered[info.name or typer.main.get_command_name(info.callback.__name__)] = one
        for group in scratch.registered_groups:
            one = typer.Typer(rich_markup_mode=None)
            one.registered_groups.append(group)
            self._registered[str(group.name)] = one
        for name in COMMANDS[module]:
            self._module.pop(name, None)

    def _build(self, name: str) -> None:
        """typer reads a command's signature when it builds it: only the one that runs is built
        (its module registers up to 11)."""
        if name in self._module:
            self._load(self._module[name])
        if name in self._registered:
            self._built.setdefault(name, typer.main.get_group(self._registered.pop(name)).commands[name])

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            self._build(name)
        return self._built[name]

    def __contains__(self, name: object) -> bool:
        return name in self._order

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._order))

    def __len__(self) -> int:
        return len(self._order)

    def __setitem__(self, name: str, command: Any) -> None:
        self._built[name] = command
        if name not in self._order:
            self._order.append(name)

    def __delitem__(self, name: str) -> None:
        self[name]  # its module built, so that loading it later cannot bring the name back
        del self._built[name]
        self._order.remove(name)


class _App(PmemGroup):
    """The root group: PmemGroup's error boundary over the commands of COMMANDS, built on demand."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.commands = _Commands(self.commands)

    def list_commands(self, ctx) -> list[str]:
        return list(self.commands)  # the names, without building each command (typer's reads items())


def make_app() -> typer.Typer:
    """A fresh app that builds its commands on demand (tests may add throwaway commands to their own)."""
    app = typer.Typer(
        name="pmem",
        cls=_App,
        help="A personal memory for you and your LLM tools, in one local SQLite file.\n\n"
             "Exit codes: 0 ok, 1 error, 2 usage. Set PMEM_HOME to move all state.",
        add_completion=False,
        no_args_is_help=True,
        rich_markup_mode=None,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback()(_main)
    return app


app = make_app()

"""The command line builds only the command that runs: `pmem list` imports memories_cmd and no
other command module, while `--help`, completion and the man page see every command, in the same
order and with the same text as an app with every module registered up front."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import typer
import typer.main
from typer.testing import CliRunner

from pmem.cli import app as cli_app
from pmem.cli.common import PmemGroup

ROOT = Path(__file__).resolve().parents[2]
ALL = [name for names in cli_app.COMMANDS.values() for name in names]


def _eager() -> typer.Typer:
    """The app as it was built before: every command module registered at each start."""
    import importlib

    lazy = cli_app.make_app()
    app = typer.Typer(name="pmem", cls=PmemGroup, help=lazy.info.help, add_completion=False,
                      no_args_is_help=True, rich_markup_mode=None, pretty_exceptions_enable=False,
                      context_settings={"help_option_names": ["-h", "--help"]})
    app.callback()(lazy.registered_callback.callback)  # the same --db and --version
    for module in cli_app.COMMANDS:
        importlib.import_module(f"pmem.cli.{module}").register(app)
    return app


def test_commands_names_what_each_module_registers_in_help_order():
    eager = typer.main.get_command(_eager())
    assert list(eager.commands) == ALL  # typer lists plain commands first, then sub-apps
    for module, names in cli_app.COMMANDS.items():
        scratch = typer.Typer(rich_markup_mode=None)
        __import__(f"pmem.cli.{module}", fromlist=["register"]).register(scratch)
        assert tuple(typer.main.get_group(scratch).commands) == names, module


def test_help_is_the_eager_apps_word_for_word(pmem_home):
    runner = CliRunner()
    lazy, eager = cli_app.make_app(), _eager()
    for args in ([], ["--help"], ["search", "--help"], ["hook", "--help"], ["hook", "install", "--help"],
                 ["sync", "--help"], ["config", "get", "--help"], ["serch", "x"], ["sync", "bogus"]):
        a, b = runner.invoke(lazy, args), runner.invoke(eager, args)
        assert (a.exit_code, a.stdout, a.stderr) == (b.exit_code, b.stdout, b.stderr), args
    assert "Did you mean 'search', 'serve'?" in runner.invoke(lazy, ["serch", "x"]).stderr


def _modules_after(env: dict, *argv: str) -> tuple[int, set[str]]:
    code = ("import json, sys\nfrom pmem.cli import main\nsys.argv = ['pmem', *sys.argv[1:]]\n"
            "try:\n    main()\nexcept SystemExit as exc:\n    rc = exc.code or 0\nelse:\n    rc = 0\n"
            "sys.stderr.write('\\nMODULES ' + json.dumps([rc, sorted(sys.modules)]) + '\\n')")
    r = subprocess.run([sys.executable, "-c", code, *argv], env=env, capture_output=True, text=True, timeout=120)
    rc, mods = json.loads(r.stderr.rsplit("MODULES ", 1)[1])
    return rc, {m.rsplit(".", 1)[1] for m in mods if m.startswith("pmem.cli.") and m.endswith("_cmd")}


def test_a_command_imports_its_own_module_only(fake_config, pmem_home):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    assert _modules_after(env, "add", "The cabin wifi password is hunter2") == (0, {"memories_cmd"})
    assert _modules_after(env, "list") == (0, {"memories_cmd"})
    assert _modules_after(env, "search", "cabin wifi") == (0, {"memories_cmd"})
    assert _modules_after(env, "--version") == (0, set())
    assert _modules_after(env, "sync", "--help") == (0, {"sync_cmd"})
    assert _modules_after(env, "log") == (0, {"history_cmd"})
    rc, mods = _modules_after(env, "--help")
    assert rc == 0 and mods == set(cli_app.COMMANDS)


def test_throwaway_commands_join_the_listed_ones(pmem_home):
    app = cli_app.make_app()

    @app.command("boom")
    def boom() -> None:
        """Throw nothing."""

    group = typer.main.get_command(app)
    assert list(group.list_commands(None)) == [*ALL, "boom"]
    assert "serve" in group.commands and "nothing" not in group.commands
    del group.commands["serve"]
    assert "serve" not in group.list_commands(None) and group.get_command(None, "serve") is None
    out = group.get_help(group.context_class(group, info_name="pmem"))
    assert "  boom " in out and "  serve " not in out and "  search " in out

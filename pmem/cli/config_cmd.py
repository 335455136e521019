"""`pmem config`: show or change settings."""

import typer

from ..errors import UsageError
from . import output as out
from .common import JsonOpt, PmemGroup


def register(app: typer.Typer) -> None:
    config_app = typer.Typer(cls=PmemGroup, help="Show or change settings (config.toml, PMEM_* variables).",
                             rich_markup_mode=None)
    config_app.callback(invoke_without_command=True)(_config)
    config_app.command("get")(config_get)
    config_app.command("set")(config_set)
    app.add_typer(config_app, name="config")


def _config(ctx: typer.Context, as_json: bool = JsonOpt) -> None:
    """Show the effective settings and where each comes from.

    \b
    Examples:
      pmem config
      pmem config set recall_budget 800
    """
    if ctx.invoked_subcommand is None:
        _config_show(as_json)


def _config_show(as_json: bool) -> None:
    from .. import config

    cfg = config.load()
    if as_json:
        out.print_json({k: {"value": v, "from": cfg.origins[k]} for k, v in cfg.values.items()})
        return
    out.echo(f"# {cfg.path}")
    for k, v in cfg.values.items():
        out.echo(f"{k} = {v!r}    # {cfg.origins[k]}; {config.DEFAULTS[k][1]}")


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


def config_set(key: str = typer.Argument(..., help="Setting name."),
               value: str = typer.Argument(..., help="New value.")) -> None:
    """Write one setting to config.toml.

    \b
    Example:
      pmem config set chat_model ~/models/qwen2.5-1.5b-instruct-q4_k_m.gguf
    """
    from .. import config, paths

    try:
        path = config.set_value(key, value, note=out.note)  # a repaired file is worth a word
    except (ValueError, OSError) as exc:  # a config.toml that does not parse, or cannot be written
        raise UsageError(f"cannot update {paths.config_path()}: {' '.join(str(exc).split())}; "
                         "fix or delete that file") from None
    out.note(f"{key} set in {path}")

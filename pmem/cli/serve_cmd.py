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
    show_status: bool = typer.Option(False, "--status", help="Say whether a server runs, and what it holds."),
    as_json: bool = JsonOpt,
) -> None:
    """Keep the embedding model loaded so search and add skip loading it (optional).

    Commands use a running server by themselves (config `server = "auto"`, the default) and load
    the model in their own process when none runs; with `server = "start"` they also start one
    (exiting after 30 idle minutes) for the commands after them. The socket is private to you
    (0600, in the pmem home); nothing listens on the network.

    \b
    Examples:
      pmem serve --detach --idle 8h
      pmem serve --status
      pmem serve --stop
    """
    from .. import config
    from .. import serve as srv

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
        info["uptime_s"] = round(time.time() - info.pop("started"), 1)
        if as_json:
            out.print_json(info)
        else:
            out.key_values((k, ", ".join(v) if isinstance(v, list) else v) for k, v in info.items())
        return

    idle_s = timeutil.parse_duration(idle).total_seconds() if idle else 0.0
    cfg = config.load()
    n_threads = cfg.threads if threads is None else threads
    if n_threads < 0:
        raise UsageError("--threads must be 0 (automatic) or more")
    from ..provision import resolve_model
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

    from ..embed import load_model_file

    server = srv.Server(threads=n_threads, idle=idle_s, loader=load_model_file)
    server.bind()  # claims the socket: a second server stops here
    try:
        server.model(str(model))  # before answering anyone: errors show here, and callers just wait
    except BaseException:
        server.close()
        raise

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

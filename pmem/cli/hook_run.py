"""The body of `pmem hook CLIENT EVENT`, with no typer in it.

A hook runs before every prompt a person types, so `pmem.cli.main` runs a plain
`pmem hook CLIENT EVENT` (no options) here directly, without building the whole command line
(typer and every command module: ~50 ms of the ~260 ms of CPU a hook took,
docs/decisions/0037-llm-similar-anchor.md). `pmem hook ... --help` and anything with options
still go through typer, which calls the same `run`.

With a server answering, `run_direct` is the whole process: it reads stdin, asks the server and
prints, importing only what `pmem.integrations.hook_wire` imports
(docs/decisions/0041-hook-process-lean.md); this module imports nothing at its top for that reason.
"""

from __future__ import annotations

import os
import sys
import time

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing; type checkers read it as True
if TYPE_CHECKING:
    from pathlib import Path


def direct(argv: list[str]) -> bool:
    """Whether `argv` (after `pmem`) is a plain hook call that `run_direct` takes without typer."""
    if len(argv) != 3 or argv[0] != "hook":
        return False
    from ..integrations.hook_wire import EVENT_NAMES

    return argv[2] in EVENT_NAMES.get(argv[1], {})


def run_direct(client: str, event: str) -> None:
    """A plain `pmem hook CLIENT EVENT`: handed to the server when its settings say so and one
    answers within `server_wait`, else `run` (the work here), given what was read and the time
    spent. The settings it needs first (server, hook_timeout) come from `hook_wire.choose`;
    where only config.load can tell them, `run` does everything, as before."""
    started = time.monotonic()
    from ..integrations import hook_wire as wire

    chosen = wire.choose() if event != "compact" and wire.SUPPORTED else None
    if chosen is None or chosen[0] == "never":
        return run(client, event)
    timeout = chosen[1]
    text: str | None = ""
    try:
        if sys.stdin is not None and not sys.stdin.isatty():
            text = wire.read_stdin(started + timeout)
        if text is None:  # the host kept the pipe open and silent: as run_hook past its limit
            _log(client, event, f"gave up after {timeout:g} s (nothing printed)")
            _print(wire.format_output(client, event, ""))
            return
        wait = wire.server_wait(timeout - (time.monotonic() - started))
        block, how = wire.ask_server(client, event, text, None, wait)
        if block is not None:
            _print(wire.format_output(client, event, block))
            return
    except BaseException as exc:  # noqa: BLE001 - a hook must never fail the prompt
        if isinstance(exc, SystemExit) and not exc.code:
            raise
        _log(client, event, f"{type(exc).__name__}: {exc}")
        return
    run(client, event, text=text, spent=time.monotonic() - started, unanswered=how == "unanswered")


def _print(out: str) -> None:
    if out:
        sys.stdout.write(out + "\n")
        sys.stdout.flush()


def _log(client: str, event: str, message: str) -> None:
    from ..integrations.hooks import log_error

    log_error(f"{client} {event}: {message}")


def run(client: str, event: str, db: Path | None = None, *, text: str | None = None, spent: float = 0.0,
        unanswered: bool = False) -> None:
    """The hook: never fails, never prints an error (what went wrong goes to the hook log).

    With a server running (server = auto or always) the work is done there and this process
    imports no store, search or model (hooks.ask_server); else, or when the server does not
    answer in time, here, as a command does (and server = auto starts one for next time).
    `text`: the input, already read by `run_direct` in `spent` seconds, when it asked the server
    already (`unanswered`: it got no reply in time)."""
    from dataclasses import replace

    from ..errors import UsageError
    from ..integrations import hooks

    stdin = ""
    try:
        if event not in hooks.EVENTS:
            raise UsageError(f"unknown event {event!r}: use {', '.join(hooks.EVENTS)}")
        if text is not None:
            stdin = text
        elif sys.stdin is not None and not sys.stdin.isatty():
            stdin = sys.stdin.buffer  # read by the hook, within its time limit
        from .. import config

        cfg = config.load()
        asked: dict[str, str] = {"how": "unanswered"} if unanswered else {}

        def served(text: str, wait: float) -> str | None:
            block, asked["how"] = hooks.ask_server(client, event, text, db, wait)
            return block

        def open_db():
            from ..service import MemoryStore

            # a server that did not answer is not asked again for the model: it loads here at once
            return MemoryStore(db, config=cfg.with_values("hook", server="never")
                               if asked.get("how") == "unanswered" else cfg)

        settings = hooks.settings_for(cfg, client)
        if spent:
            settings = replace(settings, timeout=max(0.0, settings.timeout - spent))
        block = hooks.run_hook(client, event, stdin, open_db, settings=settings,
                               make_filter=lambda data: hooks.hook_filter(data, os.getcwd()),
                               served=None if cfg.server == "never" or text is not None else served)
        if block:
            sys.stdout.write(block + "\n")
            sys.stdout.flush()
    except BaseException as exc:  # noqa: BLE001 - a hook must never fail the prompt
        if isinstance(exc, SystemExit) and not exc.code:
            raise
        hooks.log_error(f"{client} {event}: {type(exc).__name__}: {exc}")
    finally:
        import threading

        if any(t.name == "pmem-hook" and t.is_alive() for t in threading.enumerate()):
            sys.stdout.flush()
            serve = sys.modules.get("pmem.models.serve")
            if serve is not None:  # os._exit skips the exit handlers: the server it put off starts now
                serve.launch_deferred()
            os._exit(0)  # a hook that ran out of time: leave now, the prompt is waiting

"""The body of `pmem hook CLIENT EVENT`, with no typer in it.

A hook runs before every prompt a person types, so `pmem.cli.main` runs a plain
`pmem hook CLIENT EVENT` (no options) here directly, without building the whole command line
(typer and every command module: ~50 ms of the ~260 ms of CPU a hook took, benchmarks/README.md,
"The anchor and the targets"). `pmem hook ... --help` and anything with options
still go through typer, which calls the same `run`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..errors import UsageError


def direct(argv: list[str]) -> bool:
    """Whether `argv` (after `pmem`) is a plain hook call that `run` takes without typer."""
    if len(argv) != 3 or argv[0] != "hook":
        return False
    from ..integrations.hooks import EVENT_NAMES

    return argv[2] in EVENT_NAMES.get(argv[1], {})


def run(client: str, event: str, db: Path | None = None) -> None:
    """The hook: never fails, never prints an error (what went wrong goes to the hook log).

    With a server running (server = auto or always) the work is done there and this process
    imports no store, search or model (hooks.ask_server); else, or when the server does not
    answer in time, here, as a command does (and server = auto starts one for next time)."""
    from ..integrations import hooks

    stdin = ""
    try:
        if event not in hooks.EVENTS:
            raise UsageError(f"unknown event {event!r}: use {', '.join(hooks.EVENTS)}")
        if sys.stdin is not None and not sys.stdin.isatty():
            stdin = sys.stdin.buffer  # read by the hook, within its time limit
        from .. import config

        cfg = config.load()
        asked: dict[str, str] = {}

        def served(text: str, wait: float) -> str | None:
            block, asked["how"] = hooks.ask_server(client, event, text, db, wait)
            return block

        def open_db():
            from ..store import MemoryStore

            # a server that did not answer is not asked again for the model: it loads here at once
            return MemoryStore(db, config=cfg.with_values("hook", server="never")
                               if asked.get("how") == "unanswered" else cfg)

        block = hooks.run_hook(client, event, stdin, open_db, settings=hooks.settings_for(cfg, client),
                               make_filter=lambda data: hooks.hook_filter(data, os.getcwd()),
                               served=None if cfg.server == "never" else served)
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
            os._exit(0)  # a hook that ran out of time: leave now, the prompt is waiting

"""Entry point of the `pmem` command."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    try:
        _main(argv)
    except KeyboardInterrupt:  # Ctrl-C before a command's own handler (common.PmemGroup) is in place
        sys.stderr.write("pmem: error: interrupted\n")
        sys.exit(130)


def _main(argv: list[str] | None) -> None:
    from .hook_run import direct, run_direct

    args = sys.argv[1:] if argv is None else argv
    if direct(args):  # before every prompt: no typer, no other command (see hook_run)
        run_direct(args[1], args[2])
        return
    from .app import app

    try:
        app(args=argv, prog_name="pmem")
    except BrokenPipeError:  # `pmem export | head`
        sys.stderr.close()
        sys.exit(0)

"""Entry point of the `pmem` command."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    from .app import app

    try:
        app(args=argv, prog_name="pmem")
    except BrokenPipeError:  # `pmem export | head`
        sys.stderr.close()
        sys.exit(0)

"""The `pmem tui` command(s). Registered on the app by importing this module (see app.py)."""

from __future__ import annotations

from .app import app, command  # noqa: F401

"""Showing text from users and models literally, wherever it is displayed (CLI and TUI)."""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """Control characters (escape sequences, bells) as \\xNN, so they show instead of acting."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)

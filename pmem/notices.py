"""What the library has to tell a person, without printing it.

Library code never prints: inside the TUI a line on stderr would write over the screen, and a
program using pmem decides what its users see. It calls `notice("...")` (for example "the server
stopped answering; loading the model in this process"), and the application listening decides
where that goes: the CLI writes `pmem: ...` on stderr, the TUI shows a notification. With nobody
listening, a notice goes nowhere.

Not the `logging` module: importing it costs every command about 2.5 ms, and `pmem list` is
benchmarked; this needs nothing.
"""

from __future__ import annotations

from typing import Callable

_listeners: list[Callable[[str], None]] = []


def listen(callback: Callable[[str], None]) -> Callable[[], None]:
    """Send every notice to `callback(message)`, from whatever thread raises it, until the
    returned function is called."""
    _listeners.append(callback)

    def stop() -> None:
        try:
            _listeners.remove(callback)
        except ValueError:
            pass

    return stop


def notice(message: str) -> None:
    """Tell the person `message` (one line), if an application listens."""
    for callback in list(_listeners):
        try:
            callback(message)
        except Exception:  # noqa: BLE001 - a notice must never break the work it reports on
            pass

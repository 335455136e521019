"""A hybrid logical clock: wall time in ms, a counter, the device. Its string sorts in time order.

A key is `WWWWWWWWWWWWW-CCCC-DEVICE`: fixed widths, so comparing two keys as strings compares
(wall, counter, device), and the last writer of a field is the larger key. An undo writes the key
it reverts plus `+` and its own clock: just above the value it undoes and below anything written
after that value, so a concurrent change on another device beats the undo on every replica.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone


@dataclass
class Clock:
    device: str
    wall: int = 0
    counter: int = 0

    @classmethod
    def parse(cls, key: str, device: str) -> "Clock":
        if not key:
            return cls(device)
        wall, counter, _ = key.split("+", 1)[0].split("-", 2)
        return cls(device, int(wall), int(counter, 16))

    def key(self) -> str:
        return f"{self.wall:013d}-{self.counter:04x}-{self.device}"

    def tick(self, at_ms: int) -> str:
        """The key of a change made at `at_ms` (never earlier than anything this device has seen)."""
        if at_ms > self.wall:
            self.wall, self.counter = at_ms, 0
        else:
            self.counter += 1
            if self.counter > 0xFFFF:
                self.wall, self.counter = self.wall + 1, 0
        return self.key()

    def observe(self, key: str) -> None:
        """A key seen from another device: later ticks sort after it."""
        other = Clock.parse(key, self.device)
        if (other.wall, other.counter) > (self.wall, self.counter):
            self.wall, self.counter = other.wall, other.counter


def ms(iso: str | None) -> int:
    """Milliseconds since the epoch of an ISO time (0 when unset or unreadable)."""
    if not iso:
        return 0
    try:
        dt = datetime.fromisoformat(iso.replace("Z", "+00:00"))
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=timezone.utc)
        return int(dt.timestamp() * 1000)
    except (ValueError, TypeError):
        return 0


def undo_key(base: str, own: str) -> str:
    return f"{base}+{own}" if base else own

"""Times are stored as ISO 8601 UTC strings ('2026-11-29T18:41:29Z'): sortable, readable, exact.

Years are always four digits (0999, not 999: strftime leaves them unpadded, and then text order
is not time order), and only years 1 to 9999 exist; a date or duration that leaves that range
is a usage error, never an OverflowError.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from .errors import UsageError

_MAX_SECONDS = 9999 * 366 * 86400
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(years|year|yr|y|weeks|week|wk|w|days|day|d|hr|h|min|m|sec|s)(?![a-z])")
_CANON = {"sec": "s", "min": "m", "hr": "h", "day": "d", "days": "d", "wk": "w", "week": "w",
          "weeks": "w", "yr": "y", "year": "y", "years": "y"}


class _OutOfRange(UsageError):
    """A well-formed date or duration past the calendar's ends: say so rather than 'invalid date'."""


def now() -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0)


_RANGE = "dates must fall in the years 1 to 9999"


def iso(dt: datetime) -> str:
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    try:
        dt = dt.astimezone(timezone.utc)
    except OverflowError:
        raise _OutOfRange(f"date out of range: {_RANGE}") from None
    return (f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T"
            f"{dt.hour:02d}:{dt.minute:02d}:{dt.second:02d}Z")


def shift(base: datetime, delta: timedelta, direction: int = 1) -> datetime:
    """`base` moved by `delta` forwards (direction 1) or backwards (-1), refusing to leave the
    calendar with a usage error."""
    try:
        return base + delta if direction >= 0 else base - delta
    except OverflowError:
        raise _OutOfRange(f"date out of range: {_RANGE}") from None


def from_now(duration: str) -> str:
    """'3d' -> the stored time 3 days from now (for --ttl, --in)."""
    return iso(shift(now(), parse_duration(duration)))


def now_iso() -> str:
    return iso(now())


def parse_duration(text: str) -> timedelta:
    """'30d', '2w', '12h', '1y', '90m', '1d12h' -> timedelta. Months are ambiguous and refused."""
    s = text.strip().lower()
    pos, total = 0, 0.0
    for m in _DURATION.finditer(s):
        if m.start() != pos and s[pos:m.start()].strip():
            break
        unit = _CANON.get(m.group(2), m.group(2))
        total += float(m.group(1)) * _UNITS[unit]
        pos = m.end()
    if pos == 0 or s[pos:].strip() or total <= 0:
        raise UsageError(f"invalid duration {text!r}: use a number and a unit, e.g. 90m, 12h, 3d, 2w, 1y")
    if total > _MAX_SECONDS:
        raise _OutOfRange(f"duration {text!r} is too long: at most 9999 years")
    return timedelta(seconds=total)


_FORMATS = ("%Y-%m-%d", "%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S")


def parse_when(text: str, *, direction: int = -1, base: datetime | None = None) -> str:
    """Parse a date for an option and return it as stored.

    Accepts ISO dates and times (naive ones are UTC), 'now', 'today', 'yesterday', 'tomorrow',
    and durations relative to now ('7d' means 7 days ago for --since, 7 days ahead for --expires:
    `direction` says which).
    """
    s = text.strip()
    if not s:
        raise UsageError("empty date")
    base = base or now()
    low = s.lower()
    if low == "now":
        return iso(base)
    day = base.replace(hour=0, minute=0, second=0)
    if low == "today":
        return iso(day)
    if low == "yesterday":
        return iso(day - timedelta(days=1))
    if low == "tomorrow":
        return iso(day + timedelta(days=1))
    if re.fullmatch(r"(\d+(?:\.\d+)?\s*[a-z]+\s*)+", low):
        try:
            return iso(shift(base, parse_duration(low), direction))
        except _OutOfRange:
            raise
        except UsageError:
            pass
    iso_text = s[:-1] + "+00:00" if s.endswith(("Z", "z")) else s
    try:
        dt = datetime.fromisoformat(iso_text)
    except ValueError:
        dt = None
        for fmt in _FORMATS:
            try:
                dt = datetime.strptime(s, fmt)
                break
            except ValueError:
                continue
    if dt is None:
        year = re.match(r"[+-]?(\d+)-\d", s)
        if year and not 1 <= int(year.group(1)) <= 9999:
            raise UsageError(f"invalid date {text!r}: {_RANGE}")
        raise UsageError(f"invalid date {text!r}: use YYYY-MM-DD, an ISO time, 'now', or a duration like 7d")
    return iso(dt)


def humanize_age(stamp: str | None, ref: datetime | None = None) -> str:
    """'3d', '5h', '2mo' — compact ages for tables."""
    if not stamp:
        return ""
    ref = ref or now()
    dt = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    secs = (ref - dt).total_seconds()
    future = secs < 0
    secs = abs(secs)
    for unit, size in (("y", 365 * 86400), ("mo", 30 * 86400), ("w", 7 * 86400), ("d", 86400),
                       ("h", 3600), ("m", 60)):
        if secs >= size:
            text = f"{int(secs // size)}{unit}"
            break
    else:
        text = "now" if secs < 1 else f"{int(secs)}s"
    return f"in {text}" if future and text != "now" else text

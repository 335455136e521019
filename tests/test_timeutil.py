from datetime import datetime, timezone

import pytest

from pmem.errors import UsageError
from pmem.timeutil import humanize_age, parse_duration, parse_when

BASE = datetime(2026, 11, 29, 12, 0, 0, tzinfo=timezone.utc)


def test_durations():
    assert parse_duration("3d").total_seconds() == 3 * 86400
    assert parse_duration("1d12h").total_seconds() == 36 * 3600
    assert parse_duration("2 weeks").total_seconds() == 14 * 86400
    for bad in ["", "3", "d", "-3d", "3x", "forever", "3 months"]:
        with pytest.raises(UsageError):
            parse_duration(bad)


def test_dates():
    assert parse_when("2023-05-08") == "2023-05-08T00:00:00Z"
    assert parse_when("2023-05-08T13:56:00+02:00") == "2023-05-08T11:56:00Z"
    assert parse_when("2023-05-08 13:56") == "2023-05-08T13:56:00Z"
    assert parse_when("7d", base=BASE) == "2026-11-22T12:00:00Z"
    assert parse_when("7d", direction=1, base=BASE) == "2026-12-06T12:00:00Z"
    assert parse_when("yesterday", base=BASE) == "2026-11-28T00:00:00Z"
    for bad in ["", "soon", "2023-13-45", "last tuesday"]:
        with pytest.raises(UsageError):
            parse_when(bad)


def test_humanize():
    assert humanize_age("2026-11-26T12:00:00Z", BASE) == "3d"
    assert humanize_age("2026-12-01T12:00:00Z", BASE) == "in 2d"

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


def test_years_are_four_digits_and_stay_in_the_calendar():
    from pmem.timeutil import from_now, iso

    assert parse_when("0999-06-01") == "0999-06-01T00:00:00Z"
    assert parse_when("0001-01-01") == "0001-01-01T00:00:00Z"
    assert iso(datetime(5, 1, 2, 3, 4, 5)) == "0005-01-02T03:04:05Z"
    assert parse_when("0999-06-01") < parse_when("1000-01-01")  # text order is time order
    for bad in ["0000-01-01", "10000-01-01", "99999999d", "9000y", "0001-01-01T00:00:00+01:00",
                "9999-12-31T23:00:00-05:00", "9" * 400 + "d"]:
        with pytest.raises(UsageError):
            parse_when(bad, direction=1)
    with pytest.raises(UsageError, match="years 1 to 9999"):
        from_now("9000y")
    with pytest.raises(UsageError, match="too long"):
        parse_duration("99999999d")
    with pytest.raises(UsageError, match="years 1 to 9999"):
        parse_when("3000y", base=BASE)  # 3000 years before 2026: year -974

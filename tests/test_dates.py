"""Relative dates resolved against the moment they were said (pmem.dates)."""

from __future__ import annotations

from datetime import date

import pytest

from pmem.dates import resolve_relative

SAID = "2026-11-12T15:00:00Z"  # a Thursday


@pytest.mark.parametrize("text, expected", [
    ("I started a new job last month", "I started a new job in October 2026"),
    ("Last month I moved to Porto", "In October 2026 I moved to Porto"),
    ("I have run every day since last month", "I have run every day since October 2026"),
    ("We met yesterday", "We met on 11 November 2026"),
    ("She called three days ago", "She called on 9 November 2026"),
    ("She called 10 days ago", "She called on 2 November 2026"),
    ("I will visit in two weeks", "I will visit in the week of 23 November 2026"),
    ("We hiked last weekend", "We hiked on the weekend of 7 November 2026"),
    ("Last Friday was fun", "Friday 6 November 2026 was fun"),
    ("I saw it last Thursday", "I saw it on Thursday 5 November 2026"),
    ("See you next year", "See you in 2027"),
    ("I quit smoking a year ago", "I quit smoking in 2025"),
    ("a couple of months ago", "in September 2026"),
    ("next month we fly", "in December 2026 we fly"),
    ("The exam is the day after tomorrow", "The exam is on 14 November 2026"),
    ("I bought it last week", "I bought it in the week of 2 November 2026"),
    ("Last Fri I took the kids to a workshop", "On Friday 6 November 2026 I took the kids to a workshop"),
    ("I joined a group last Tues. It was fun", "I joined a group on Tuesday 10 November 2026. It was fun"),
    ("that roadtrip this past weekend was wild", "that roadtrip on the weekend of 7 November 2026 was wild"),
])
def test_resolves(text, expected):
    assert resolve_relative(text, SAID)[0] == expected


@pytest.mark.parametrize("text", ["Lastly, nothing", "I will call next Friday", "this weekend is free",
                                  "I did it recently", "on Friday we swim", "The last month of the year",
                                  "Their last week of school", "no dates here"])
def test_leaves_unclear_or_absent_dates(text):
    assert resolve_relative(text, SAID) == (text, [])


def test_month_arithmetic_crosses_years_and_short_months():
    assert resolve_relative("last month", "2026-01-31")[0] == "in December 2025"
    assert resolve_relative("next month", date(2026, 1, 31))[0] == "in February 2026"
    assert resolve_relative("last year", "2028-02-29")[0] == "in 2027"
    assert resolve_relative("last Monday", "2026-11-16")[0] == "on Monday 9 November 2026"


def test_reports_what_it_changed():
    text, changes = resolve_relative("Yesterday and last month", SAID)
    assert text == "On 11 November 2026 and in October 2026"
    assert [(c.phrase, c.text) for c in changes] == [("Yesterday", "On 11 November 2026"),
                                                     ("last month", "in October 2026")]

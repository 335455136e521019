"""Relative dates in a sentence, resolved against the moment it was said.

"I started a new job last month", said on 2026-11-12, is stored as "I started a new job in October
2026": a fact read a year later must not move with the reader's calendar. Only expressions with one
clear meaning are resolved (yesterday, last week, last month, three days ago, last Friday, next
year...); "this weekend", "recently" or "on Friday" stay as they were.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta

_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
            "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a couple of": 2, "couple of": 2}
_WEEKDAYS = [d.lower() for d in calendar.day_name]
_WEEKDAY_NAMES = {**{d: i for i, d in enumerate(_WEEKDAYS)},
                  **{a: i for i, names in enumerate([("mon",), ("tue", "tues"), ("wed",), ("thu", "thur", "thurs"),
                                                      ("fri",), ("sat",), ("sun",)]) for a in names}}
# A preposition already in the sentence takes the place of our "in"/"on": "since last month" ->
# "since October 2026", not "since in October 2026".
_PREPOSITIONS = ("since", "until", "till", "from", "by", "before", "after", "during", "in", "on", "of",
                 "through", "throughout", "as of", "starting", "over")

_NUM = r"(\d+|a couple of|couple of|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
_PATTERN = re.compile(
    r"\b(?:(?P<prep>" + "|".join(p.replace(" ", r"\s+") for p in _PREPOSITIONS) + r")\s+)?(?:"
    r"(?P<day>yesterday|today|tomorrow|the day before yesterday|the day after tomorrow)"
    r"|(?P<rel>last|next|this past|this) (?P<unit>week|weekend|month|year)"
    r"|(?P<rel2>last|next) (?P<weekday>" + "|".join(sorted(_WEEKDAY_NAMES, key=len, reverse=True)) + r")"
    r"|(?P<n>" + _NUM[1:-1] + r") (?P<unit2>days?|weeks?|months?|years?) (?P<dir>ago|later|from now)"
    r"|in (?P<n3>" + _NUM[1:-1] + r") (?P<unit3>days?|weeks?|months?|years?)"
    r")\b", re.I)


_DETERMINER = re.compile(r"\b(?:the|a|an|this|that|my|your|his|her|its|our|their|every|each)\s+$", re.I)
_OF = re.compile(r"\s+of\b", re.I)
_SENTENCE_START = re.compile(r"(?:\A|[.!?:;]\s*|\n)\s*$")
_SUBJECT = re.compile(r"\s+(?:is|was|were|has|had|will|would|looks|looked|seems|seemed|feels|felt)\b", re.I)


@dataclass
class Resolved:
    phrase: str   # as written
    text: str     # what replaced it
    start: int


def _number(word: str) -> int:
    w = " ".join(word.lower().split())
    return int(w) if w.isdigit() else _NUMBERS[w]


def _add_months(d: date, months: int) -> date:
    month = d.month - 1 + months
    year = d.year + month // 12
    month = month % 12 + 1
    return date(year, month, min(d.day, calendar.monthrange(year, month)[1]))


def _day(d: date) -> str:
    return f"{d.day} {calendar.month_name[d.month]} {d.year}"


def _month(d: date) -> str:
    return f"{calendar.month_name[d.month]} {d.year}"


def _phrase(kind: str, d: date) -> tuple[str, str]:
    """(preposition, text) for a day, a week (starting Monday), a weekend, a month or a year."""
    if kind == "day":
        return "on", _day(d)
    if kind == "weekday":
        return "on", f"{calendar.day_name[d.weekday()]} {_day(d)}"
    if kind == "week":
        return "in", f"the week of {_day(d - timedelta(days=d.weekday()))}"
    if kind == "weekend":
        saturday = d - timedelta(days=d.weekday()) + timedelta(days=5)
        return "on", f"the weekend of {_day(saturday)}"
    if kind == "month":
        return "in", _month(d)
    return "in", str(d.year)


def _resolve(m: re.Match, said: date) -> tuple[str, str] | None:
    g = m.groupdict()
    if g["day"]:
        offset = {"yesterday": -1, "today": 0, "tomorrow": 1, "the day before yesterday": -2,
                  "the day after tomorrow": 2}[" ".join(g["day"].lower().split())]
        return _phrase("day", said + timedelta(days=offset))
    if g["rel"]:
        rel, unit = " ".join(g["rel"].lower().split()), g["unit"].lower()
        step = {"last": -1, "next": 1, "this": 0, "this past": -1}[rel]
        if unit == "weekend" and rel == "this":
            return None  # the one just past, or the one coming? it depends on the day
        if unit in ("week", "weekend"):
            return _phrase(unit, said + timedelta(weeks=step))
        if unit == "month":
            return _phrase("month", _add_months(said.replace(day=1), step))
        return _phrase("year", said.replace(year=said.year + step, day=1))
    if g["rel2"]:
        target = _WEEKDAY_NAMES[g["weekday"].lower()]
        if g["rel2"].lower() == "last":
            back = (said.weekday() - target) % 7 or 7
            return _phrase("weekday", said - timedelta(days=back))
        return None  # "next Friday": this coming one or the one after? people disagree
    count = _number(g["n"] or g["n3"])
    unit = (g["unit2"] or g["unit3"]).lower().rstrip("s")
    sign = -1 if g["dir"] and g["dir"].lower() == "ago" else 1
    if unit == "day":
        return _phrase("day", said + timedelta(days=sign * count))
    if unit == "week":
        return _phrase("week", said + timedelta(weeks=sign * count))
    if unit == "month":
        return _phrase("month", _add_months(said.replace(day=1), sign * count))
    return _phrase("year", said.replace(year=said.year + sign * count, day=1))


def _as_date(said: str | date | datetime) -> date:
    if isinstance(said, datetime):
        return said.date()
    if isinstance(said, date):
        return said
    return datetime.fromisoformat(said.strip().replace("Z", "+00:00")[:25]).date() if "T" in said \
        else date.fromisoformat(said.strip()[:10])


def resolve_relative(text: str, said: str | date | datetime) -> tuple[str, list[Resolved]]:
    """`text` with its relative dates made absolute for a sentence said at `said` (an ISO date or
    time, as pmem stores them), and what was replaced. Unclear expressions are left alone."""
    day = _as_date(said)
    out: list[str] = []
    changes: list[Resolved] = []
    pos = 0
    for m in _PATTERN.finditer(text):
        if _DETERMINER.search(text, 0, m.start()) or _OF.match(text, m.end()):
            continue  # "the last month of the year" names no date
        resolved = _resolve(m, day)
        if resolved is None:
            continue
        prep, value = resolved
        given = m.group("prep")
        if given and given.lower() in ("in", "on") and (m.group("n3") is None):
            replacement = f"{prep} {value}"   # "on yesterday" is not English; keep ours
        elif given:
            replacement = f"{given} {value}"
        else:
            replacement = f"{prep} {value}"
        if not given and _SUBJECT.match(text, m.end()) and _SENTENCE_START.search(text, 0, m.start()):
            replacement = value  # the phrase is the subject: "last Friday was fun"
        if m.group(0)[:1].isupper():
            replacement = replacement[0].upper() + replacement[1:]
        out.append(text[pos:m.start()])
        out.append(replacement)
        changes.append(Resolved(phrase=m.group(0), text=replacement, start=m.start()))
        pos = m.end()
    out.append(text[pos:])
    return "".join(out), changes

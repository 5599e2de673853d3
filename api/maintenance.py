"""Maintenance windows of a DeploymentPolicy (`spec.maintenanceWindows[]`) as pydantic models. Pure.

A window is a weekly slot of local wall-clock time: `days` (Mon..Sun, the days it opens; omitted =
every day), `start` and `end` (`HH:MM`, 24-hour) and `timeZone` (an IANA name such as
`Europe/Berlin`, default `UTC`). It is open while the clock of its time zone shows a time from
`start` (inclusive) to `end` (exclusive) on one of its days. A window whose `end` is before its
`start` crosses midnight: `{days: [Fri], start: "22:00", end: "02:00"}` opens Friday 22:00 and
closes Saturday 02:00. Because the rule reads the wall clock, daylight saving time is handled as a
clock on the wall would: on the night the clocks go forward a window of 01:00-04:00 lasts two
hours, and one inside the skipped hour does not open that night; on the night they go back a
window of 01:00-04:00 lasts four hours. The rules (`is_open`, `next_opening`, `closes_at`) are
`planning/rollout/maintenance.py`.

Time zone names are looked up with Python's `zoneinfo`: the operating system's database
(`/usr/share/zoneinfo`, Debian package `tzdata`), else the PyPI package `tzdata` (a noderoll
dependency), so the worker and `noderoll validate` know the same names on any machine.

Checks made here: `start`/`end` in `HH:MM`, a window may not be empty (`start` == `end`), a
day may be listed once, the time zone must exist. Across the windows of a policy
(`check_overlaps`): no two windows may overlap. Windows in one time zone are compared exactly;
windows in different time zones are compared at each zone's UTC offset in January and in July of
a reference year (2025), so an overlap that exists only in the weeks when one zone has changed its
clocks for daylight saving time and the other has not is not found.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, field_validator, model_validator

from api.base import SpecModel
from api.enums import Weekday

TIME_PATTERN = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"
DEFAULT_TIME_ZONE = "UTC"
MINUTES_PER_DAY = 24 * 60
MINUTES_PER_WEEK = 7 * MINUTES_PER_DAY
# Offsets used to compare windows of different time zones (winter and summer of a reference year).
_REFERENCE_INSTANTS = (datetime(2025, 1, 15, 12, tzinfo=UTC), datetime(2025, 7, 15, 12, tzinfo=UTC))
ZONE_HINT = (
    "use an IANA time zone name such as UTC, Europe/Berlin or America/New_York (the database comes from "
    "the operating system's /usr/share/zoneinfo or the PyPI package tzdata)"
)


def minutes(value: str) -> int:
    """Minutes after midnight of an `HH:MM` time."""
    hours, mins = value.split(":")
    return int(hours) * 60 + int(mins)


def zone(name: str) -> ZoneInfo:
    """The time zone `name`; ValueError with a hint when it is unknown."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as err:
        # ZoneInfo raises ValueError for names that are no relative path ("/etc/passwd", "..").
        raise ValueError(f"unknown time zone {name!r}: {ZONE_HINT}") from err


class MaintenanceWindow(SpecModel):
    """A weekly slot during which the fleet may start new node windows (module rules)."""

    days: list[Weekday] = Field(default_factory=lambda: list(Weekday))
    start: str
    end: str
    time_zone: str = DEFAULT_TIME_ZONE

    @field_validator("start", "end")
    @classmethod
    def _hh_mm(cls, value: str) -> str:
        if not re.match(TIME_PATTERN, value):
            raise ValueError(f"{value!r} is not a time of day: write HH:MM, 24-hour, 00:00 to 23:59 (e.g. 22:30)")
        return value

    @field_validator("days")
    @classmethod
    def _days_once(cls, value: list[Weekday]) -> list[Weekday]:
        if not value:
            raise ValueError("no day listed: list the days the window opens (Mon..Sun), or omit days for every day")
        twice = sorted({d.value for d in value if value.count(d) > 1})
        if twice:
            raise ValueError(f"{', '.join(twice)} listed more than once; list each day once")
        return value

    @field_validator("time_zone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        zone(value)
        return value

    @model_validator(mode="after")
    def _not_empty(self) -> MaintenanceWindow:
        if self.start == self.end:
            raise ValueError(
                f"empty window: start and end are both {self.start}; a window that crosses midnight has its end "
                "before its start (e.g. start 22:00, end 02:00)"
            )
        return self

    @property
    def start_minute(self) -> int:
        """`start` in minutes after midnight."""
        return minutes(self.start)

    @property
    def end_minute(self) -> int:
        """`end` in minutes after midnight."""
        return minutes(self.end)

    def describe(self) -> str:
        """`Mon,Tue 22:00-02:00 Europe/Berlin` (for messages)."""
        days = "every day" if len(self.days) == len(Weekday) else ",".join(d.value for d in self.days)
        return f"{days} {self.start}-{self.end} {self.time_zone}"


def _week_intervals(window: MaintenanceWindow, offset_minutes: int) -> list[tuple[int, int]]:
    """The window's open intervals in minutes of a UTC week (Monday 00:00 = 0), split at the week's end."""
    length = (window.end_minute - window.start_minute) % MINUTES_PER_DAY
    out = []
    for day in window.days:
        begin = (day.index * MINUTES_PER_DAY + window.start_minute - offset_minutes) % MINUTES_PER_WEEK
        end = begin + length
        if end <= MINUTES_PER_WEEK:
            out.append((begin, end))
        else:
            out += [(begin, MINUTES_PER_WEEK), (0, end - MINUTES_PER_WEEK)]
    return out


def _offsets(name: str) -> set[int]:
    tz = zone(name)
    return {int(i.astimezone(tz).utcoffset().total_seconds() // 60) for i in _REFERENCE_INSTANTS}  # type: ignore[union-attr]


def overlap(a: MaintenanceWindow, b: MaintenanceWindow) -> bool:
    """True when windows `a` and `b` are open at the same time (module rules: cross-zone at reference offsets)."""
    if a.time_zone == b.time_zone:
        pairs = [(0, 0)]
    else:
        pairs = [(x, y) for x in _offsets(a.time_zone) for y in _offsets(b.time_zone)]
    for off_a, off_b in pairs:
        for a0, a1 in _week_intervals(a, off_a):
            for b0, b1 in _week_intervals(b, off_b):
                if a0 < b1 and b0 < a1:
                    return True
    return False


def check_overlaps(windows: Sequence[MaintenanceWindow]) -> str | None:
    """The first pair of overlapping windows as a message, or None."""
    for i, first in enumerate(windows):
        for j in range(i + 1, len(windows)):
            if overlap(first, windows[j]):
                return (
                    f"maintenanceWindows[{i}] ({first.describe()}) and maintenanceWindows[{j}] "
                    f"({windows[j].describe()}) overlap; merge them into one window or make them disjoint"
                )
    return None

"""When a fleet may start new node windows: its DeploymentPolicy's maintenance windows. Pure.

The rule (`api/maintenance.py` describes the fields): a window is open while the wall clock of its
time zone shows a time from `start` (inclusive) to `end` (exclusive) on one of its `days`; a
window with `end` before `start` crosses midnight and belongs to the day it opens. A policy
without windows is always open. Only the start of a node window is gated: one that started inside
a window always finishes.

* `is_open(windows, now)`: is a window open at `now`?
* `next_opening(windows, now)`: the first instant at or after `now` at which a window is open
  (`now` itself when one is open; None when the policy has no windows).
* `closes_at(windows, now)`: while open, the first instant after `now` at which none is (None when
  closed now, or when the windows never close).

Daylight saving time: the wall clock jumps at a transition, so a window opens either when the
clock reaches its `start` or when a jump lands inside it (a window whose `start` falls into the
skipped hour opens at the jump, if its `end` is after it), and on the night the clocks go back a
time of day happens twice. The instants are therefore found among candidates (every instant at
which a window's clock shows its `start` or `end`, in both folds, within ten days, and every
offset change of its time zone in that span), each checked with `is_open`. All datetimes are
timezone-aware; results are in UTC. Deterministic: the workflow calls these with `workflow.now()`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from api.maintenance import MINUTES_PER_DAY, MaintenanceWindow

# Local dates around `now` whose start and end times are candidates (a week, plus slack for DST).
_DAYS_BEFORE, _DAYS_AFTER = 1, 9
# Offset changes are found by sampling every half hour (no zone changes its offset twice in that time).
_SCAN_STEP = timedelta(minutes=30)


def _open_one(window: MaintenanceWindow, now: datetime) -> bool:
    local = now.astimezone(ZoneInfo(window.time_zone))
    minute = local.hour * 60 + local.minute
    today = local.weekday()
    days = {d.index for d in window.days}
    start, end = window.start_minute, window.end_minute
    if start < end:
        return today in days and start <= minute < end
    # Crosses midnight: the evening of a listed day, or the early morning after one.
    return (today in days and minute >= start) or ((today - 1) % 7 in days and minute < end)


def is_open(windows: Sequence[MaintenanceWindow], now: datetime) -> bool:
    """True when a window is open at `now`, or when there are no windows (module rules)."""
    return not windows or any(_open_one(w, now) for w in windows)


def _clock_instants(tz: ZoneInfo, minute: int, dates: Iterable[date]) -> set[datetime]:
    """Instants at which the clock of `tz` shows `minute` on `dates` (both folds; a skipped time gives
    instants just around the jump, which the callers check)."""
    at = time(minute // 60, minute % 60)
    out = set()
    for day in dates:
        for fold in (0, 1):
            out.add(datetime.combine(day, at).replace(tzinfo=tz, fold=fold).astimezone(UTC))
    return out


def _transitions(tz: ZoneInfo, begin: datetime, end: datetime) -> set[datetime]:
    """Instants in [begin, end] at which the UTC offset of `tz` changes (whole seconds, as tzdata has them)."""
    out = set()
    left = begin
    offset = left.astimezone(tz).utcoffset()
    while left < end:
        right = min(left + _SCAN_STEP, end)
        if right.astimezone(tz).utcoffset() != offset:
            # Bisect on whole seconds: `low` has the old offset, `high` the new one.
            low, high = int(left.timestamp()), int(right.timestamp()) + 1
            while high - low > 1:
                mid = (low + high) // 2
                if datetime.fromtimestamp(mid, UTC).astimezone(tz).utcoffset() == offset:
                    low = mid
                else:
                    high = mid
            out.add(datetime.fromtimestamp(high, UTC))
            offset = right.astimezone(tz).utcoffset()
        left = right
    return out


def _candidates(windows: Sequence[MaintenanceWindow], now: datetime, ends: bool) -> list[datetime]:
    """Instants after `now` at which openness may change (module docstring), sorted."""
    found: set[datetime] = set()
    horizon = now + timedelta(days=_DAYS_BEFORE + _DAYS_AFTER)
    for window in windows:
        tz = ZoneInfo(window.time_zone)
        today = now.astimezone(tz).date()
        dates = [today + timedelta(days=d) for d in range(-_DAYS_BEFORE, _DAYS_AFTER + 1)]
        minute = window.end_minute if ends else window.start_minute
        found |= _clock_instants(tz, minute % MINUTES_PER_DAY, dates)
        found |= _transitions(tz, now, horizon)
    return sorted(c for c in found if c > now)


def next_opening(windows: Sequence[MaintenanceWindow], now: datetime) -> datetime | None:
    """The first instant at or after `now` at which a window is open (module rules), in UTC."""
    if not windows:
        return None
    if is_open(windows, now):
        return now.astimezone(UTC)
    return next((c for c in _candidates(windows, now, ends=False) if is_open(windows, c)), None)


def closes_at(windows: Sequence[MaintenanceWindow], now: datetime) -> datetime | None:
    """While a window is open at `now`: the first instant after it at which none is, in UTC."""
    if not windows or not is_open(windows, now):
        return None
    return next((c for c in _candidates(windows, now, ends=True) if not is_open(windows, c)), None)


def describe_opening(opening: datetime, windows: Sequence[MaintenanceWindow]) -> str:
    """`2025-03-30T01:00:00Z (03:00 Europe/Berlin)`: the instant in UTC and in the windows' time zone."""
    text = opening.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    zones = sorted({w.time_zone for w in windows} - {"UTC"})
    if len(zones) == 1:
        local = opening.astimezone(ZoneInfo(zones[0]))
        text += f" ({local:%a %H:%M} {zones[0]})"
    return text

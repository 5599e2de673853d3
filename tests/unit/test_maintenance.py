"""Maintenance windows: the model's checks (api/maintenance.py) and the rules (planning/rollout/maintenance.py).

The rule is the wall clock of the window's time zone; the tables pin it down around daylight
saving time transitions (Europe/Berlin: 2025-03-30 02:00 -> 03:00 and 2025-10-26 03:00 -> 02:00;
America/New_York: 2025-03-09 and 2025-11-02; Australia/Lord_Howe: half-hour changes), and the
hypothesis properties check `next_opening` and `closes_at` against `is_open` for random windows
and instants around those transitions.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from api.enums import Weekday
from api.maintenance import MaintenanceWindow, check_overlaps, overlap
from api.policy import DeploymentPolicySpec
from planning.rollout.maintenance import closes_at, describe_opening, is_open, next_opening


def w(start: str, end: str, days: list[str] | None = None, tz: str = "UTC") -> MaintenanceWindow:
    fields: dict[str, object] = {"start": start, "end": end, "timeZone": tz}
    if days is not None:
        fields["days"] = days
    return MaintenanceWindow.model_validate(fields)


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


# 2025-01-06 is a Monday.
@pytest.mark.parametrize(("window", "now", "expected"), [
    pytest.param(w("02:00", "04:00", ["Mon"]), "2025-01-06T02:00", True, id="start-inclusive"),
    pytest.param(w("02:00", "04:00", ["Mon"]), "2025-01-06T03:59:59", True, id="inside"),
    pytest.param(w("02:00", "04:00", ["Mon"]), "2025-01-06T04:00", False, id="end-exclusive"),
    pytest.param(w("02:00", "04:00", ["Mon"]), "2025-01-07T03:00", False, id="other-day"),
    pytest.param(w("22:00", "02:00", ["Fri"]), "2025-01-10T23:30", True, id="midnight-evening"),
    pytest.param(w("22:00", "02:00", ["Fri"]), "2025-01-11T01:59", True, id="midnight-next-morning"),
    pytest.param(w("22:00", "02:00", ["Fri"]), "2025-01-10T01:00", False, id="midnight-morning-of-listed-day"),
    pytest.param(w("22:00", "02:00", ["Sun"]), "2025-01-06T01:00", True, id="midnight-sunday-into-monday"),
    pytest.param(w("22:00", "00:00", ["Sun"]), "2025-01-06T00:00", False, id="end-at-midnight"),
    pytest.param(w("09:00", "17:00", tz="Europe/Berlin"), "2025-01-06T08:00", True, id="berlin-winter-utc+1"),
    pytest.param(w("09:00", "17:00", tz="Europe/Berlin"), "2025-07-07T07:00", True, id="berlin-summer-utc+2"),
    pytest.param(w("09:00", "17:00", tz="Europe/Berlin"), "2025-07-07T15:00", False, id="berlin-summer-closed"),
    pytest.param(w("09:00", "17:00", tz="Asia/Kolkata"), "2025-01-06T03:30", True, id="half-hour-offset"),
])
def test_is_open(window: MaintenanceWindow, now: str, expected: bool) -> None:
    assert is_open([window], utc(now)) is expected


def test_no_windows_is_always_open_and_has_no_opening() -> None:
    assert is_open([], utc("2025-01-06T00:00"))
    assert next_opening([], utc("2025-01-06T00:00")) is None
    assert closes_at([], utc("2025-01-06T00:00")) is None


@pytest.mark.parametrize(("windows", "now", "opening", "closing"), [
    pytest.param([w("02:00", "04:00", ["Mon"])], "2025-01-06T05:00", "2025-01-13T02:00", "2025-01-13T04:00",
                 id="next-week"),
    pytest.param([w("22:00", "02:00", ["Fri"])], "2025-01-06T00:00", "2025-01-10T22:00", "2025-01-11T02:00",
                 id="crosses-midnight"),
    # Spring forward in Berlin (01:00 UTC: 02:00 CET -> 03:00 CEST): the clock jumps into the window.
    pytest.param([w("02:30", "04:30", ["Sun"], "Europe/Berlin")], "2025-03-29T12:00", "2025-03-30T01:00",
                 "2025-03-30T02:30", id="berlin-start-skipped"),
    pytest.param([w("01:00", "04:00", ["Sun"], "Europe/Berlin")], "2025-03-29T12:00", "2025-03-30T00:00",
                 "2025-03-30T02:00", id="berlin-spring-two-hours"),
    # A window inside the skipped hour does not open that night: a week later.
    pytest.param([w("02:10", "02:50", ["Sun"], "Europe/Berlin")], "2025-03-29T12:00", "2025-04-06T00:10",
                 "2025-04-06T00:50", id="berlin-inside-skipped-hour"),
    # Fall back in Berlin (01:00 UTC: 03:00 CEST -> 02:00 CET): 01:00-04:00 lasts four hours.
    pytest.param([w("01:00", "04:00", ["Sun"], "Europe/Berlin")], "2025-10-25T12:00", "2025-10-25T23:00",
                 "2025-10-26T03:00", id="berlin-fall-four-hours"),
    # New York spring forward (07:00 UTC: 02:00 EST -> 03:00 EDT).
    pytest.param([w("01:30", "03:30", ["Sun"], "America/New_York")], "2025-03-08T12:00", "2025-03-09T06:30",
                 "2025-03-09T07:30", id="new-york-spring"),
])
def test_next_opening_and_close(windows: list[MaintenanceWindow], now: str, opening: str, closing: str) -> None:
    found = next_opening(windows, utc(now))
    assert found == utc(opening)
    assert closes_at(windows, found) == utc(closing)
    assert not is_open(windows, found - timedelta(seconds=1))


def test_fall_back_reopens_when_the_clock_goes_back_into_the_window() -> None:
    # Berlin 2025-10-26: 00:00-02:30 local closes at 02:30 CEST (00:30 UTC); at 01:00 UTC the clock
    # goes back to 02:00 CET, inside the window again, until 02:30 CET (01:30 UTC).
    windows = [w("00:00", "02:30", ["Sun"], "Europe/Berlin")]
    first = next_opening(windows, utc("2025-10-25T12:00"))
    assert first == utc("2025-10-25T22:00")
    close = closes_at(windows, first)
    assert close == utc("2025-10-26T00:30")
    again = next_opening(windows, close)
    assert again == utc("2025-10-26T01:00")
    assert closes_at(windows, again) == utc("2025-10-26T01:30")


def test_touching_windows_close_together() -> None:
    windows = [w("02:00", "04:00", ["Mon"]), w("04:00", "06:00", ["Mon"])]
    assert closes_at(windows, utc("2025-01-06T03:00")) == utc("2025-01-06T06:00")


def test_windows_covering_the_week_never_close() -> None:
    windows = [w("00:00", "12:00"), w("12:00", "00:00")]
    assert closes_at(windows, utc("2025-01-06T03:00")) is None


def test_describe_opening_in_utc_and_local_time() -> None:
    windows = [w("02:30", "04:30", ["Sun"], "Europe/Berlin")]
    assert describe_opening(utc("2025-03-30T01:00"), windows) == "2025-03-30T01:00:00Z (Sun 03:00 Europe/Berlin)"
    assert describe_opening(utc("2025-03-30T01:00"), [w("01:00", "02:00")]) == "2025-03-30T01:00:00Z"


# --- hypothesis: next_opening and closes_at agree with is_open --------------------------------

ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Sydney", "Australia/Lord_Howe", "Asia/Kolkata",
         "America/St_Johns", "Europe/Dublin", "Pacific/Chatham"]
TRANSITIONS = [utc(t) for t in ("2025-03-30T01:00", "2025-10-26T01:00", "2025-03-09T07:00", "2025-11-02T06:00",
                                "2025-04-05T15:00", "2025-10-04T16:00", "2025-04-06T14:45")]
times = st.integers(0, 23 * 60 + 59).map(lambda m: f"{m // 60:02d}:{m % 60:02d}")
windows_strategy = st.builds(
    lambda span, days, tz: w(span[0], span[1], days, tz),
    st.tuples(times, times).filter(lambda span: span[0] != span[1]),
    st.lists(st.sampled_from([d.value for d in Weekday]), min_size=1, max_size=7, unique=True),
    st.sampled_from(ZONES),
)
near_transitions = st.builds(lambda base, minutes: base + timedelta(minutes=minutes),
                             st.sampled_from(TRANSITIONS), st.integers(-3 * 24 * 60, 3 * 24 * 60))


def _probes(begin: datetime, end: datetime) -> list[datetime]:
    """Instants between `begin` and `end`: every 7 minutes, and the last second before `end`."""
    out, step = [], timedelta(minutes=7)
    probe = begin
    while probe < end and len(out) < 3000:
        out.append(probe)
        probe += step
    return out + [end - timedelta(seconds=1)] if end - timedelta(seconds=1) >= begin else out


@settings(max_examples=60, deadline=None)
@given(windows=st.lists(windows_strategy, min_size=1, max_size=2), now=near_transitions)
def test_next_opening_is_the_first_open_instant(windows: list[MaintenanceWindow], now: datetime) -> None:
    opening = next_opening(windows, now)
    assert opening is not None and opening >= now
    assert is_open(windows, opening)
    assert (opening == now) == is_open(windows, now)
    assert not any(is_open(windows, t) for t in _probes(now, opening))


@settings(max_examples=60, deadline=None)
@given(windows=st.lists(windows_strategy, min_size=1, max_size=2), now=near_transitions)
def test_closes_at_is_the_first_closed_instant(windows: list[MaintenanceWindow], now: datetime) -> None:
    opening = next_opening(windows, now)
    assert opening is not None
    closing = closes_at(windows, opening)
    if closing is None:  # the windows cover every minute of the week
        return
    assert closing > opening and not is_open(windows, closing)
    assert all(is_open(windows, t) for t in _probes(opening, closing))


# --- validation ---------------------------------------------------------------------------------


def policy(*windows: dict[str, object]) -> dict[str, object]:
    return {"default": {"budget": {"count": 1}}, "maintenanceWindows": list(windows)}


@pytest.mark.parametrize(("window", "message"), [
    pytest.param({"start": "03:00", "end": "03:00"}, "empty window: start and end are both 03:00", id="empty"),
    pytest.param({"start": "3:00", "end": "04:00"}, "'3:00' is not a time of day: write HH:MM", id="format"),
    pytest.param({"start": "24:00", "end": "04:00"}, "'24:00' is not a time of day", id="24h"),
    pytest.param({"start": "01:00", "end": "02:00", "timeZone": "Europe/Berln"},
                 "unknown time zone 'Europe/Berln': use an IANA time zone name", id="zone"),
    pytest.param({"start": "01:00", "end": "02:00", "timeZone": "../../etc/passwd"},
                 "unknown time zone '../../etc/passwd'", id="zone-path"),
    pytest.param({"start": "01:00", "end": "02:00", "days": ["Monday"]},
                 "Input should be 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat' or 'Sun'", id="day-name"),
    pytest.param({"start": "01:00", "end": "02:00", "days": []}, "no day listed", id="no-day"),
    pytest.param({"start": "01:00", "end": "02:00", "days": ["Mon", "Mon"]}, "Mon listed more than once",
                 id="day-twice"),
])
def test_invalid_window_is_refused_with_a_clear_message(window: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError) as err:
        DeploymentPolicySpec.model_validate(policy(window))
    assert message in str(err.value)


@pytest.mark.parametrize(("first", "second", "overlapping"), [
    pytest.param(w("22:00", "02:00", ["Mon"]), w("01:00", "03:00", ["Tue"]), True, id="across-midnight"),
    pytest.param(w("22:00", "02:00", ["Sun"]), w("01:00", "03:00", ["Mon"]), True, id="across-the-week"),
    pytest.param(w("01:00", "02:00", ["Mon"]), w("02:00", "03:00", ["Mon"]), False, id="touching"),
    pytest.param(w("01:00", "02:00", ["Mon"]), w("01:00", "02:00", ["Tue"]), False, id="other-days"),
    # 10:00-11:00 Berlin is 09:00 UTC in winter and 08:00 UTC in summer.
    pytest.param(w("10:00", "11:00", ["Mon"], "Europe/Berlin"), w("08:30", "08:45", ["Mon"]), True,
                 id="zones-summer"),
    pytest.param(w("10:00", "11:00", ["Mon"], "Europe/Berlin"), w("11:00", "12:00", ["Mon"]), False,
                 id="zones-apart"),
])
def test_overlap(first: MaintenanceWindow, second: MaintenanceWindow, overlapping: bool) -> None:
    assert overlap(first, second) is overlapping
    assert overlap(second, first) is overlapping


def test_overlapping_windows_are_refused_naming_both() -> None:
    with pytest.raises(ValidationError) as err:
        DeploymentPolicySpec.model_validate(policy(
            {"days": ["Fri"], "start": "22:00", "end": "02:00"}, {"days": ["Sat"], "start": "01:00", "end": "05:00"}))
    assert ("maintenanceWindows[0] (Fri 22:00-02:00 UTC) and maintenanceWindows[1] (Sat 01:00-05:00 UTC) overlap; "
            "merge them into one window or make them disjoint") in str(err.value)
    assert check_overlaps([w("01:00", "02:00"), w("03:00", "04:00")]) is None


def test_defaults_every_day_in_utc() -> None:
    window = w("01:00", "02:00")
    assert window.days == list(Weekday) and window.time_zone == "UTC"
    assert window.describe() == "every day 01:00-02:00 UTC"
    assert window.dump() == {"days": [d.value for d in Weekday], "start": "01:00", "end": "02:00", "timeZone": "UTC"}

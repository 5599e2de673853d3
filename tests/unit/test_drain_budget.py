"""A drain's or protected-pod wait's bound spans every attempt of the activity (pure: no API calls)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from temporalio.testing import ActivityEnvironment

from activities.drain import _spent_in_earlier_attempts


def _env(attempt: int, first_scheduled_ago: float) -> ActivityEnvironment:
    env = ActivityEnvironment()
    now = datetime.now(UTC)
    env.info = dataclasses.replace(
        env.info, attempt=attempt, scheduled_time=now - timedelta(seconds=first_scheduled_ago),
        current_attempt_scheduled_time=now)
    return env


def test_first_attempt_has_spent_nothing() -> None:
    assert _env(1, 500.0).run(_spent_in_earlier_attempts) == 0.0


def test_a_retry_counts_the_time_since_the_first_attempt_was_scheduled() -> None:
    spent = _env(4, 610.0).run(_spent_in_earlier_attempts)
    assert 609.0 <= spent <= 611.0


def test_clock_skew_never_gives_negative_time() -> None:
    assert _env(2, -5.0).run(_spent_in_earlier_attempts) == 0.0

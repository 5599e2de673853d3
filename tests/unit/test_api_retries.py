"""The retry policies of a node window outlast an apiserver outage (`workflows.api_retries`)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from temporalio.common import RetryPolicy

from workflows.api_retries import API_OUTAGE, API_RETRY, CLOSE_RETRY, WAIT_RETRY, outlasting, retry_span
from workflows.node_marks import MARK_RETRY


@pytest.mark.parametrize("policy", [API_RETRY, WAIT_RETRY, MARK_RETRY], ids=["api", "wait", "mark"])
def test_every_bounded_policy_outlasts_five_minutes_of_outage(policy: RetryPolicy) -> None:
    assert API_OUTAGE == timedelta(minutes=5)
    assert retry_span(policy) >= API_OUTAGE


def test_the_closing_calls_retry_until_the_api_answers() -> None:
    assert CLOSE_RETRY.maximum_attempts == 0
    with pytest.raises(ValueError, match="unlimited"):
        retry_span(CLOSE_RETRY)


def test_span_follows_temporals_doubling_backoff_capped_at_the_maximum() -> None:
    policy = RetryPolicy(initial_interval=timedelta(seconds=2), maximum_interval=timedelta(seconds=10),
                         maximum_attempts=6)
    assert retry_span(policy) == timedelta(seconds=2 + 4 + 8 + 10 + 10)
    # Unset maximum: the server's default, 100 x the initial interval.
    uncapped = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=9)
    assert retry_span(uncapped) == timedelta(seconds=1 + 2 + 4 + 8 + 16 + 32 + 64 + 100)
    assert retry_span(RetryPolicy(maximum_attempts=1)) == timedelta()


def test_the_old_policies_did_not_outlast_a_restart() -> None:
    # What failed a chaos rollout: 5 wait attempts span 30 s, 10 call attempts 151 s.
    old_wait = RetryPolicy(initial_interval=timedelta(seconds=2), maximum_interval=timedelta(seconds=60),
                           maximum_attempts=5)
    assert retry_span(old_wait) == timedelta(seconds=30)
    assert WAIT_RETRY.maximum_attempts == 10 and API_RETRY.maximum_attempts == 15


@given(initial=st.integers(1, 120), extra=st.integers(0, 600), outage=st.integers(0, 7200))
def test_outlasting_takes_the_fewest_attempts_that_span_the_outage(initial: int, extra: int, outage: int) -> None:
    policy = outlasting(timedelta(seconds=initial), timedelta(seconds=initial + extra), timedelta(seconds=outage))
    assert retry_span(policy) >= timedelta(seconds=outage)
    fewer = RetryPolicy(initial_interval=policy.initial_interval, maximum_interval=policy.maximum_interval,
                        maximum_attempts=policy.maximum_attempts - 1)
    assert policy.maximum_attempts == 1 or retry_span(fewer) < timedelta(seconds=outage)


@pytest.mark.parametrize(("initial", "maximum"), [(0, 10), (-1, 10), (10, 5)])
def test_outlasting_refuses_a_backoff_that_cannot_grow(initial: int, maximum: int) -> None:
    with pytest.raises(ValueError, match="0 < initial <= maximum"):
        outlasting(timedelta(seconds=initial), timedelta(seconds=maximum))

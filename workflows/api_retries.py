"""How long a node window waits out an unreachable Kubernetes API: the retry policies of its activities.

A control-plane restart or upgrade takes the apiserver away for tens of seconds to minutes, and on a
busy control plane the restart alone (graceful stop, start, readiness) took more than 30 s. The
policies are therefore sized by the outage they outlast, not by a count picked by hand: with
`API_OUTAGE` (5 minutes) the attempts of a short call or a wait keep coming until the API has been
away that long, and only then does the step fail (the stage is retried, or the window reports the
error). Errors that no retry can mend (`protocol/errors.py`: a 4xx, the node gone, a wait's own
bound) stop at once, whatever the policy.

The window's closing calls (uncordon, the final node state) are retried until the API answers:
giving up there would leave the node cordoned or its outcome unwritten, the failure this product
exists to avoid. The activity shows its attempt count and last error in the Temporal UI meanwhile.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from temporalio.common import RetryPolicy

API_OUTAGE = timedelta(minutes=5)
# A short Kubernetes call's bound per attempt (cordon, node state, stage pod deletion; activities and
# the window's local activities alike, `workflows.short_calls`).
API_TIMEOUT = timedelta(seconds=60)


def retry_span(policy: RetryPolicy) -> timedelta:
    """The backoff between the first and the last attempt of `policy` (time spent in attempts excluded).

    Unlimited attempts (`maximum_attempts=0`) have no span: ValueError."""
    if policy.maximum_attempts < 1:
        raise ValueError("a policy with unlimited attempts has no span")
    return sum((_interval(policy, n) for n in range(1, policy.maximum_attempts)), timedelta())


def outlasting(initial: timedelta, maximum: timedelta, outage: timedelta = API_OUTAGE) -> RetryPolicy:
    """A doubling backoff from `initial` capped at `maximum`, with the fewest attempts whose backoff
    spans `outage`."""
    if initial <= timedelta() or maximum < initial:
        raise ValueError(f"need 0 < initial <= maximum, got {initial} and {maximum}")
    policy = RetryPolicy(initial_interval=initial, maximum_interval=maximum, backoff_coefficient=2.0)
    attempts, span = 1, timedelta()
    while span < outage:
        span += _interval(policy, attempts)
        attempts += 1
    return replace(policy, maximum_attempts=attempts)


def _interval(policy: RetryPolicy, retry: int) -> timedelta:
    # Temporal's backoff before retry n (1-based): initial * coefficient^(n-1), capped at the maximum
    # (unset: 100 x initial, the server's default).
    initial = policy.initial_interval.total_seconds()
    maximum = policy.maximum_interval.total_seconds() if policy.maximum_interval else initial * 100
    return timedelta(seconds=min(initial * policy.backoff_coefficient ** min(retry - 1, 64), maximum))


# Short Kubernetes calls (cordon, node state, leases, stage pod deletion): 1 s doubling to 30 s.
API_RETRY = outlasting(timedelta(seconds=1), timedelta(seconds=30))
# Long waits (protected pods, drain, stage pods, reboot): 2 s doubling to 60 s; their own bounds end
# in non-retryable errors, and the drain's bound counts the time of failed attempts too.
WAIT_RETRY = outlasting(timedelta(seconds=2), timedelta(seconds=60))
# Uncordon and the final node state: until the API answers.
CLOSE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=60), maximum_attempts=0
)

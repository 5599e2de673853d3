"""How long a waiting activity may block between heartbeats. Reads the activity context, no I/O.

A wait longer than the heartbeat timeout would make Temporal declare a healthy activity lost and
start it again; every wait loop therefore sleeps (or watches) at most a third of the timeout.
"""

from __future__ import annotations

from temporalio import activity


def wait_slice(preferred: float) -> float:
    """`preferred` seconds, shortened to a third of the activity's heartbeat timeout (at least 0.2 s)."""
    try:
        timeout = activity.info().heartbeat_timeout
    except RuntimeError:
        return preferred  # called outside an activity (a script, a unit test)
    if not timeout:
        return preferred
    return max(0.2, min(preferred, timeout.total_seconds() / 3))

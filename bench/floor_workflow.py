"""The bare Temporal floor: a workflow that runs L no-op local activities, then K no-op activities, one
after another: a node window's shape (its short calls are local activities, ADR 0020). Deterministic.

Imports only the standard library and temporalio, so the workflow sandbox re-imports it cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from temporalio import activity, workflow

FLOOR_WORKFLOW = "bench_floor"
NOOP_ACTIVITY = "bench_noop"


@dataclass
class FloorInput:
    """How many no-op local activities, then activities, the workflow runs."""

    activities: int
    local_activities: int = 0


@activity.defn(name=NOOP_ACTIVITY)
def noop(index: int) -> int:
    """Do nothing (a synchronous activity, as noderoll's are)."""
    return index


@workflow.defn(name=FLOOR_WORKFLOW)
class FloorWorkflow:
    """Runs `local_activities` no-op local activities, then `activities` no-op activities, in sequence,
    as a node window runs its short calls and then its activities."""

    @workflow.run
    async def run(self, input: FloorInput) -> int:
        for index in range(input.local_activities):
            await workflow.execute_local_activity(NOOP_ACTIVITY, index, start_to_close_timeout=timedelta(seconds=60))
        for index in range(input.activities):
            await workflow.execute_activity(NOOP_ACTIVITY, index, start_to_close_timeout=timedelta(seconds=60))
        return input.local_activities + input.activities

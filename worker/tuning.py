"""The worker's concurrency and polling: activity threads, local-activity slots, workflow task pollers,
sticky schedule-to-start; the checks of their flags and their environment variables. No I/O (reads the
environment).

Apart from `worker.run_worker` (which registers every workflow and activity) so that the benchmarks
size their own workers and the bare Temporal floor as `noderoll worker` does without importing a
workflow module (import contract `bench-no-workflows`).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any, TypeVar

from temporalio.worker import PollerBehaviorSimpleMaximum

from service.connection import NONSTICKY_POLL_SHARE, STICKY_SCHEDULE_TO_START_SECONDS

T = TypeVar("T")
ENV_WORKFLOW_TASK_POLLERS = "NODEROLL_WORKFLOW_TASK_POLLERS"
ENV_STICKY_SCHEDULE_TO_START = "NODEROLL_STICKY_SCHEDULE_TO_START"


def sticky_schedule_to_start(value: str) -> float:
    """`--sticky-schedule-to-start`: a number of seconds, more than 0 and at most an hour."""
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not 0 < seconds <= 3600:
        raise argparse.ArgumentTypeError(f"{value} seconds is out of range: more than 0 and at most 3600")
    return seconds


def _from_env(name: str, check: Callable[[str], T], unset: T) -> T:
    """Variable `name` checked as its flag checks it (`unset` when it is not set): what the bench
    records, since its `noderoll worker`s inherit the variable."""
    value = os.environ.get(name)
    if not value:
        return unset
    try:
        return check(value)
    except argparse.ArgumentTypeError as err:
        raise SystemExit(f"{name}: {err}") from None


def sticky_schedule_to_start_from_env() -> float:
    """NODEROLL_STICKY_SCHEDULE_TO_START, or the default."""
    return _from_env(ENV_STICKY_SCHEDULE_TO_START, sticky_schedule_to_start, STICKY_SCHEDULE_TO_START_SECONDS)


def pollers_from_env() -> int | None:
    """NODEROLL_WORKFLOW_TASK_POLLERS, or None (the SDK's polling; the bench's floor polls like it)."""
    return _from_env(ENV_WORKFLOW_TASK_POLLERS, workflow_task_pollers, None)


def workflow_task_pollers(value: str) -> int:
    """`--workflow-task-pollers`: an integer >= 2 (one poller for the task queue, one for the sticky queue)."""
    try:
        pollers = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number of pollers") from None
    if pollers < 2:
        raise argparse.ArgumentTypeError(f"{pollers} is too few: at least 2 (one for the task queue, one for the "
                                         "worker's sticky queue)")
    return pollers


def polling(pollers: int | None) -> dict[str, Any]:
    """The worker's workflow task polling: the SDK's when `pollers` is None, else `pollers` polls,
    half of them on the task queue, where every new node window's first task waits
    (service/connection.py: NONSTICKY_POLL_SHARE)."""
    if pollers is None:
        return {}
    return {"workflow_task_poller_behavior": PollerBehaviorSimpleMaximum(maximum=pollers),
            "nonsticky_to_sticky_poll_ratio": NONSTICKY_POLL_SHARE}


# The window's short calls (ADR 0020) are local activities, run by the same executor as the activities.
# With a thread per activity slot only, a 250-window batch's long waits held nearly every thread and a
# new window's first workflow task waited for one to end (the likely part of 24-32 s waits at 1,000
# nodes, docs/benchmarks.md): the local activities get threads of their own.
LOCAL_ACTIVITY_SLOTS = 100


def activity_threads(activity_slots: int) -> int:
    """The executor's threads: one per activity slot and one per local-activity slot."""
    return activity_slots + LOCAL_ACTIVITY_SLOTS

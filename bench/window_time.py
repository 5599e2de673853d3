"""Where a node window's time goes, from its Temporal history. Pure.

The bench's window overhead (duration minus the critical path) says how much a window adds, not
where. This splits one window's history (`node/<node>`, one run) into:

* `queued_s`: activities scheduled but not yet picked up by a worker (task queue and poller latency:
  a worker short of slots, or a busy server);
* `activity_s[<type>]`: activities running on the worker, per activity type (a stage pod's includes
  its creation, its start-up and the stages themselves; the interrupt's, the reboot);
* `task_queued_s` / `task_running_s`: workflow tasks waiting for a worker (the first one of a run
  included: how long a new window waits to start) and being run by it (the workflow code deciding
  the next step, in the sandbox);
* `between_s`: the rest: timers (retry backoff), server-side latency between one task's end and
  the next one's scheduling.

They add up to the window's duration (activities of one window run one after another; time where
two tasks overlap is counted once, in the one scheduled first). A retried activity counts from its
scheduling to its last attempt's close; its attempts' gaps are "queued".
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

# Where a started or closing event names the task it belongs to (its `scheduled_event_id`).
STARTED = {
    EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED: "workflow_task_started_event_attributes",
    EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED: "activity_task_started_event_attributes",
}
CLOSED = {
    EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED: "workflow_task_completed_event_attributes",
    EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED: "workflow_task_failed_event_attributes",
    EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT: "workflow_task_timed_out_event_attributes",
    EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: "activity_task_completed_event_attributes",
    EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED: "activity_task_failed_event_attributes",
    EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT: "activity_task_timed_out_event_attributes",
    EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED: "activity_task_canceled_event_attributes",
}


@dataclass(frozen=True)
class WindowTime:
    """One window's seconds: queued, running per activity type, and between activities."""

    seconds: float
    queued_s: float
    between_s: float
    activity_s: dict[str, float] = field(default_factory=dict)
    task_queued_s: float = 0.0
    task_running_s: float = 0.0
    # The run's first workflow task's wait (part of task_queued_s): how late the window really began.
    first_task_queued_s: float = 0.0


def _epoch(event: HistoryEvent) -> float:
    return event.event_time.seconds + event.event_time.nanos / 1e9


WORKFLOW_TASK = ""  # the kind of a workflow task among the activities' kinds


@dataclass
class _Task:
    kind: str  # an activity type, or WORKFLOW_TASK
    scheduled: float
    started: float | None = None
    closed: float | None = None


def _tasks(events: Sequence[HistoryEvent]) -> list[_Task]:
    found: dict[int, _Task] = {}
    for event in events:
        at = _epoch(event)
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
            found[event.event_id] = _Task(WORKFLOW_TASK, at)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            found[event.event_id] = _Task(event.activity_task_scheduled_event_attributes.activity_type.name, at)
        elif event.event_type in STARTED or event.event_type in CLOSED:
            attrs = getattr(event, STARTED.get(event.event_type) or CLOSED[event.event_type])
            task = found.get(attrs.scheduled_event_id)
            if task is None:
                continue
            if event.event_type in STARTED:
                task.started = at
            else:
                task.closed = at
    return sorted(found.values(), key=lambda a: a.scheduled)  # stable: history order among equal times


def window_time(events: Sequence[HistoryEvent]) -> WindowTime:
    """Split one window's history (module docstring). Pure."""
    if not events:
        return WindowTime(0.0, 0.0, 0.0)
    first, last = _epoch(events[0]), _epoch(events[-1])
    queued = {True: 0.0, False: 0.0}  # workflow task? -> seconds waiting for a worker
    task_running = 0.0
    by_kind: dict[str, float] = {}
    covered_until = first
    tasks = _tasks(events)
    opening = next((t for t in tasks if t.kind == WORKFLOW_TASK), None)
    first_wait = (opening.started if opening and opening.started is not None else last) - first if opening else 0.0
    for task in tasks:
        end = task.closed if task.closed is not None else last
        start = max(task.scheduled, covered_until)
        if end <= start:
            continue  # entirely inside an earlier task's time
        # Started (the last attempt's start, as the history records it) splits queued from running.
        began = min(max(task.started if task.started is not None else end, start), end)
        queued[task.kind == WORKFLOW_TASK] += began - start
        if task.kind == WORKFLOW_TASK:
            task_running += end - began
        else:
            by_kind[task.kind] = by_kind.get(task.kind, 0.0) + (end - began)
        covered_until = end
    seconds = last - first
    between = seconds - queued[False] - queued[True] - task_running - sum(by_kind.values())
    return WindowTime(seconds, queued[False], max(0.0, between), by_kind, queued[True], task_running, first_wait)


def median_breakdown(times: Sequence[WindowTime]) -> dict[str, float]:
    """Median seconds per part over windows (an activity type a window lacks counts 0 there). Pure."""
    if not times:
        return {}
    kinds = sorted({kind for t in times for kind in t.activity_s})
    parts = {"window": [t.seconds for t in times], "activities_queued": [t.queued_s for t in times],
             "workflow_tasks_queued": [t.task_queued_s for t in times],
             "first_workflow_task_queued": [t.first_task_queued_s for t in times],
             "workflow_tasks_running": [t.task_running_s for t in times], "other": [t.between_s for t in times]}
    for kind in kinds:
        parts[kind] = [t.activity_s.get(kind, 0.0) for t in times]
    return {name: round(statistics.median(values), 2) for name, values in parts.items()}

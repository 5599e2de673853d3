"""bench/window_time.py: a window's time split into queued, per activity type and between activities."""

from __future__ import annotations

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

from bench.window_time import WindowTime, median_breakdown, window_time

T0 = 1_700_000_000


def _event(event_id: int, at: float, kind: EventType.ValueType, **attrs: object) -> HistoryEvent:
    event = HistoryEvent(event_id=event_id, event_type=kind)
    event.event_time.seconds = T0 + int(at)
    event.event_time.nanos = int(round((at - int(at)) * 1e9))
    if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
        event.activity_task_scheduled_event_attributes.activity_type.name = str(attrs["name"])
    elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
        event.activity_task_started_event_attributes.scheduled_event_id = int(attrs["scheduled"])  # type: ignore[arg-type]
    elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
        event.activity_task_completed_event_attributes.scheduled_event_id = int(attrs["scheduled"])  # type: ignore[arg-type]
    elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
        event.workflow_task_started_event_attributes.scheduled_event_id = int(attrs["scheduled"])  # type: ignore[arg-type]
    elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
        event.workflow_task_completed_event_attributes.scheduled_event_id = int(attrs["scheduled"])  # type: ignore[arg-type]
    elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
        event.activity_task_failed_event_attributes.scheduled_event_id = int(attrs["scheduled"])  # type: ignore[arg-type]
    return event


def _history(*activities: tuple[str, float, float, float, bool]) -> list[HistoryEvent]:
    """Workflow started at 0 and completed at the last close + 1; activities (name, scheduled,
    started, closed, failed)."""
    events = [_event(1, 0.0, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED)]
    end = 0.0
    for name, scheduled, started, closed, failed in activities:
        sid = len(events) + 1
        events.append(_event(sid, scheduled, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, name=name))
        events.append(_event(sid + 1, started, EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED, scheduled=sid))
        closed_kind = EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED if failed else EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
        events.append(_event(sid + 2, closed, closed_kind, scheduled=sid))
        end = max(end, closed)
    events.append(_event(len(events) + 1, end + 1.0, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED))
    return events


def test_a_window_splits_into_queued_running_and_between_and_they_add_up() -> None:
    events = _history(("write_node_state", 0.5, 0.75, 1.0, False),
                      ("run_stage_pod", 1.5, 2.0, 20.0, False),
                      ("run_stage_pod", 20.25, 20.5, 30.0, True),
                      ("uncordon_node", 31.0, 31.0, 31.5, False))
    found = window_time(events)
    assert found.seconds == 32.5
    assert abs(found.queued_s - (0.25 + 0.5 + 0.25 + 0.0)) < 1e-6
    assert abs(found.activity_s["run_stage_pod"] - (18.0 + 9.5)) < 1e-6  # a failed attempt is time spent too
    assert abs(found.activity_s["write_node_state"] - 0.25) < 1e-6
    # Between: 0-0.5, 1.0-1.5, 20.0-20.25, 30.0-31.0, 31.5-32.5.
    assert abs(found.between_s - (0.5 + 0.5 + 0.25 + 1.0 + 1.0)) < 1e-6
    assert abs(found.queued_s + found.between_s + sum(found.activity_s.values()) - found.seconds) < 1e-6


def test_overlapping_activities_are_counted_once() -> None:
    # Two lease acquisitions scheduled together: the second's time inside the first's counts once.
    events = _history(("acquire_lease", 0.0, 0.0, 4.0, False), ("acquire_lease", 0.0, 1.0, 3.0, False),
                      ("drain_node", 2.0, 2.0, 6.0, False))
    found = window_time(events)
    assert abs(found.activity_s["acquire_lease"] - 4.0) < 1e-6
    assert abs(found.activity_s["drain_node"] - 2.0) < 1e-6  # 4.0-6.0: its first 2 s were covered
    assert abs(found.seconds - 7.0) < 1e-6 and abs(found.between_s - 1.0) < 1e-6


def test_an_activity_still_open_at_the_end_runs_to_the_last_event() -> None:
    events = [_event(1, 0.0, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED),
              _event(2, 1.0, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, name="drain_node"),
              _event(3, 5.0, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED)]
    found = window_time(events)
    # Never started: all of it queued.
    assert found.queued_s == 4.0 and found.activity_s == {"drain_node": 0.0} and found.between_s == 1.0


def test_workflow_tasks_waiting_and_running_are_their_own_parts() -> None:
    # A new run whose first workflow task waits 4 s for a worker, runs 0.25 s, schedules an
    # activity; the activity's completion schedules a second task (0.5 s queued, 0.25 s running).
    wt = EventType
    events = [_event(1, 0.0, wt.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED),
              _event(2, 0.0, wt.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED),
              _event(3, 4.0, wt.EVENT_TYPE_WORKFLOW_TASK_STARTED, scheduled=2),
              _event(4, 4.25, wt.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, scheduled=2),
              _event(5, 4.25, wt.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, name="cordon_node"),
              _event(6, 4.5, wt.EVENT_TYPE_ACTIVITY_TASK_STARTED, scheduled=5),
              _event(7, 5.0, wt.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, scheduled=5),
              _event(8, 5.0, wt.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED),
              _event(9, 5.5, wt.EVENT_TYPE_WORKFLOW_TASK_STARTED, scheduled=8),
              _event(10, 5.75, wt.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, scheduled=8),
              _event(11, 6.0, wt.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED)]
    found = window_time(events)
    assert (found.task_queued_s, found.task_running_s, found.first_task_queued_s) == (4.5, 0.5, 4.0)
    assert (found.queued_s, found.activity_s) == (0.25, {"cordon_node": 0.5})
    assert found.between_s == 0.25 and found.seconds == 6.0


def test_median_breakdown_counts_a_missing_activity_type_as_zero() -> None:
    times = [WindowTime(10.0, 1.0, 2.0, {"run_stage_pod": 7.0}),
             WindowTime(20.0, 3.0, 4.0, {"run_stage_pod": 9.0, "drain_node": 4.0}),
             WindowTime(30.0, 5.0, 6.0, {"run_stage_pod": 11.0, "drain_node": 8.0})]
    assert median_breakdown(times) == {"window": 20.0, "activities_queued": 3.0, "workflow_tasks_queued": 0.0,
                                       "first_workflow_task_queued": 0.0,
                                       "workflow_tasks_running": 0.0, "other": 4.0,
                                       "drain_node": 4.0, "run_stage_pod": 9.0}
    assert median_breakdown([]) == {}

"""The fleet workflow's histories at scale (issue 45): runs, workflow-task latency, payload sizes. Does Temporal I/O.

`fleet_runs` fetches every run of `fleet/<policy>` (continue-as-new gives a run per history limit), oldest
first; the rest are pure reductions of those histories:

* `runs_summary`: the runs (so the continue-as-new count is runs - 1), events per run and the largest
  run's history in bytes (Temporal limits a history's events and bytes: 51,200 events, 50 MB by default);
* `task_latency`: the fleet's workflow tasks, from scheduled to completed (queued on the task queue, then
  running on the worker), p50 and p95: how long the fleet takes to react to an answer;
* `largest_payloads`: the largest payload of each kind the fleet's histories hold, as Temporal measures
  it (the serialized `Payloads`; 2 MB is the server's default limit for one, 512 KB its warning): the fleet's
  input and its carry-over (continue-as-new), each activity's input and result by type (the listing
  `list_fleet_nodes`, the fresh read `read_node_supply`, the hand-out `request_windows`), each signal by
  name (`window_result`: a window's answer; `desired`: the bridge's desired state).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from temporalio.api.common.v1 import Payloads
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from bench.histories import percentile
from protocol.names import fleet_workflow_id

CARRY = "carry-over (continue-as-new input)"
FIRST_INPUT = "fleet input (first run)"


async def fleet_runs(client: Client, policy: str) -> list[list[HistoryEvent]]:
    """Every run's history of `fleet/<policy>`, oldest first."""
    workflow_id = fleet_workflow_id(policy)
    runs: list[tuple[float, list[HistoryEvent]]] = []
    async for execution in client.list_workflows(f'WorkflowId = "{workflow_id}"'):
        history = await client.get_workflow_handle(workflow_id, run_id=execution.run_id).fetch_history()
        if history.events:
            runs.append((_epoch(history.events[0]), list(history.events)))
    return [events for _, events in sorted(runs, key=lambda r: r[0])]


def _epoch(event: HistoryEvent) -> float:
    return event.event_time.seconds + event.event_time.nanos / 1e9


@dataclass(frozen=True)
class RunsSummary:
    """The fleet's runs: how many, their events, the largest history in bytes."""

    runs: int
    events_per_run: list[int]
    largest_history_bytes: int

    @property
    def continue_as_new(self) -> int:
        """Continue-as-new count: every run but the first began with one."""
        return max(0, self.runs - 1)


def runs_summary(runs: Sequence[Sequence[HistoryEvent]]) -> RunsSummary:
    """The runs summed up (module docstring). Pure."""
    return RunsSummary(len(runs), [len(r) for r in runs],
                       max((sum(e.ByteSize() for e in r) for r in runs), default=0))


@dataclass(frozen=True)
class TaskLatency:
    """Seconds from a workflow task's scheduling to its completion (queued + running), p50 and p95."""

    tasks: int = 0
    total_p50_s: float = 0.0
    total_p95_s: float = 0.0
    queued_p50_s: float = 0.0
    queued_p95_s: float = 0.0
    running_p50_s: float = 0.0
    running_p95_s: float = 0.0
    running_max_s: float = 0.0


def task_latency(runs: Sequence[Sequence[HistoryEvent]]) -> TaskLatency:
    """The fleet's workflow tasks' latencies over every run (module docstring). Pure."""
    queued: list[float] = []
    running: list[float] = []
    total: list[float] = []
    for events in runs:
        scheduled: dict[int, float] = {}
        started: dict[int, float] = {}
        for event in events:
            kind = event.event_type
            if kind == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
                scheduled[event.event_id] = _epoch(event)
            elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                started[event.workflow_task_started_event_attributes.scheduled_event_id] = _epoch(event)
            elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                attrs = event.workflow_task_completed_event_attributes
                at_scheduled = scheduled.get(attrs.scheduled_event_id)
                at_started = started.get(attrs.scheduled_event_id)
                if at_scheduled is None or at_started is None:
                    continue
                queued.append(at_started - at_scheduled)
                running.append(_epoch(event) - at_started)
                total.append(_epoch(event) - at_scheduled)
    if not total:
        return TaskLatency()

    def q(values: list[float], p: float) -> float:
        return round(percentile(values, p), 3)

    return TaskLatency(len(total), round(statistics.median(total), 3), q(total, 95),
                       round(statistics.median(queued), 3), q(queued, 95),
                       round(statistics.median(running), 3), q(running, 95), round(max(running), 3))


def _size(payloads: Payloads) -> int:
    return payloads.ByteSize() if payloads.payloads else 0


@dataclass
class PayloadSizes:
    """The largest payload of each kind (bytes), and how many of each kind there were."""

    largest: dict[str, int] = field(default_factory=dict)
    count: dict[str, int] = field(default_factory=dict)

    def note(self, kind: str, size: int) -> None:
        self.largest[kind] = max(self.largest.get(kind, 0), size)
        self.count[kind] = self.count.get(kind, 0) + 1


def largest_payloads(runs: Sequence[Sequence[HistoryEvent]]) -> PayloadSizes:
    """The largest payload of each kind in the fleet's histories (module docstring). Pure."""
    found = PayloadSizes()
    for events in runs:
        activity_types: dict[int, str] = {}
        for event in events:
            kind = event.event_type
            if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
                attrs = event.workflow_execution_started_event_attributes
                found.note(CARRY if attrs.continued_execution_run_id else FIRST_INPUT, _size(attrs.input))
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                attrs = event.activity_task_scheduled_event_attributes
                activity_types[event.event_id] = attrs.activity_type.name
                found.note(f"activity {attrs.activity_type.name} input", _size(attrs.input))
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                attrs = event.activity_task_completed_event_attributes
                name = activity_types.get(attrs.scheduled_event_id, "?")
                found.note(f"activity {name} result", _size(attrs.result))
            elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
                attrs = event.workflow_execution_signaled_event_attributes
                found.note(f"signal {attrs.signal_name}", _size(attrs.input))
    return found

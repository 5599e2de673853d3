"""Temporal histories of a benchmark rollout: node windows (timing, events, activities, disruptions) and the fleet.

Fetches the histories of every run of `node/<node>` started since the rollout began (the node
workflow completes after each window, so one run is one window) and of every run of the fleet
`fleet/<policy>`, and reduces them with pure functions: a window's duration is its node workflow run
from start to close (the request, the node read, cordon, drain, stages, interrupt, uncordon, state
writes and the answer to the fleet); its drains and interrupts are its `drain_node` and
`run_interrupt` activities (independent of the fleet's own accounting). Does Temporal I/O.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from temporalio.api.enums.v1 import EventType, TimeoutType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from bench.window_time import WindowTime, window_time
from protocol.names import (
    NODE_WORKFLOW_PREFIX,
    NODE_WORKFLOW_TYPE,
    SIGNAL_WINDOW,
    fleet_workflow_id,
    node_workflow_id,
)

FETCH_CONCURRENCY = 16


@dataclass(frozen=True)
class WindowStats:
    """One node workflow run reduced to what the benchmark reports."""

    node: str
    seconds: float
    events: int
    activities: int
    started: float  # epoch seconds
    closed: float
    # Activities of the run that disrupt the node.
    cordons: int = 0
    drains: int = 0
    interrupts: int = 0
    # Stage Jobs (pods) the window ran: stage pods, stage Jobs of older runs, interrupt pods.
    stage_pods: int = 0
    # Workflow tasks the run took (scheduled), and local activities (their markers in the history).
    workflow_tasks: int = 0
    local_activities: int = 0
    # Workflow tasks that timed out: on the worker's sticky queue (not picked up in time, handed out
    # again from the task queue) or while running (the worker did not answer in time).
    sticky_timeouts: int = 0
    running_timeouts: int = 0
    # Where its time went: queued, per activity type, between activities (bench/window_time.py).
    time: WindowTime | None = None
    # When it answered its fleet (the signal to the fleet initiated; 0: not found, use `closed`): the
    # node is out of its window then, and the fleet may start the next one before the run closes.
    answered: float = 0.0
    # The request's payload (the `window` signal's `WindowRequest`) in bytes, as Temporal measures it.
    request_bytes: int = 0

    @property
    def answer_at(self) -> float:
        """When the fleet had the window's answer: `answered`, else (not found) the run's close."""
        return self.answered or self.closed


def _epoch(event: HistoryEvent) -> float:
    return event.event_time.seconds + event.event_time.nanos / 1e9


STAGE_ACTIVITIES = ("run_stage_job", "run_stage_pod", "run_interrupt")
# The marker the Python SDK records for a local activity's result.
LOCAL_ACTIVITY_MARKER = "core_local_activity"


def _carries_interrupt(event: HistoryEvent) -> bool:
    """A `run_stage_pod` whose pod runs the window's interrupt (its input's `job.interrupt` is set)."""
    payloads = event.activity_task_scheduled_event_attributes.input.payloads
    try:
        data = json.loads(payloads[0].data) if payloads else {}
    except ValueError:
        return False
    return bool(isinstance(data, dict) and (data.get("job") or {}).get("interrupt"))


def _workflow_tasks(events: Sequence[HistoryEvent]) -> tuple[int, int, int]:
    """Workflow tasks scheduled, and those timed out on the sticky queue and while running. Pure."""
    timeouts = [e.workflow_task_timed_out_event_attributes.timeout_type for e in events
                if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT]
    scheduled = sum(1 for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED)
    return (scheduled, timeouts.count(TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START),
            timeouts.count(TimeoutType.TIMEOUT_TYPE_START_TO_CLOSE))


def window_stats(node: str, events: Sequence[HistoryEvent]) -> WindowStats:
    """Duration, event count, activity count and disruptive activities of one node workflow history. Pure."""
    first, last = _epoch(events[0]), _epoch(events[-1])
    scheduled = [e for e in events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    types = [e.activity_task_scheduled_event_attributes.activity_type.name for e in scheduled]
    carried = sum(1 for e in scheduled if e.activity_task_scheduled_event_attributes.activity_type.name
                  == "run_stage_pod" and _carries_interrupt(e))
    tasks, sticky_timeouts, running_timeouts = _workflow_tasks(events)
    answers = [_epoch(e) for e in events
               if e.event_type == EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED]
    local = sum(1 for e in events if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
                and e.marker_recorded_event_attributes.marker_name == LOCAL_ACTIVITY_MARKER)
    # The request: the run's input (a node run starts with its first request, issue 26) or a `window` signal.
    requests = [e.workflow_execution_signaled_event_attributes.input.ByteSize() for e in events
                if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
                and e.workflow_execution_signaled_event_attributes.signal_name == SIGNAL_WINDOW]
    requests += [e.workflow_execution_started_event_attributes.input.ByteSize() for e in events[:1]
                 if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED]
    return WindowStats(node, last - first, len(events), len(types), first, last,
                       cordons=types.count("cordon_node"), drains=types.count("drain_node"),
                       interrupts=types.count("run_interrupt") + carried,
                       stage_pods=sum(types.count(t) for t in STAGE_ACTIVITIES), workflow_tasks=tasks,
                       local_activities=local, time=window_time(events), answered=max(answers, default=0.0),
                       sticky_timeouts=sticky_timeouts, running_timeouts=running_timeouts,
                       request_bytes=max(requests, default=0))


async def node_windows(client: Client, nodes: Sequence[str], since: float, task_queue: str = "") -> list[WindowStats]:
    """Every run of the nodes' workflows started at or after `since` (epoch seconds): one per window.

    `task_queue`: the run's own (a sampled run, issue 45): its node runs are listed by it and only they are
    read (a 10,000-node fleet whose first 1,000 windows ran has 9,000 nodes without one)."""
    wanted = {node_workflow_id(n) for n in nodes}
    stamp = datetime.fromtimestamp(since, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    runs: list[tuple[str, str]] = []
    query = f"WorkflowType = '{NODE_WORKFLOW_TYPE}' AND StartTime >= '{stamp}'"
    async for execution in client.list_workflows(query + (f" AND TaskQueue = '{task_queue}'" if task_queue else "")):
        if execution.id in wanted:
            runs.append((execution.id, execution.run_id))
    if not task_queue:
        # Visibility lags a little behind: a node whose run it does not list yet is read by id (latest run).
        listed = {workflow_id for workflow_id, _ in runs}
        runs += [(workflow_id, "") for workflow_id in sorted(wanted - listed)]
    limit = asyncio.Semaphore(FETCH_CONCURRENCY)

    async def one(workflow_id: str, run_id: str) -> WindowStats | None:
        async with limit:
            try:
                handle = client.get_workflow_handle(workflow_id, run_id=run_id or None)
                history = await handle.fetch_history()
            except Exception:  # noqa: BLE001 - a node without a workflow simply had no window
                return None
        if not history.events or _epoch(history.events[0]) < since:
            return None
        return window_stats(workflow_id.removeprefix(NODE_WORKFLOW_PREFIX), history.events)

    found = await asyncio.gather(*(one(w, r) for w, r in runs))
    return [w for w in found if w is not None]


def per_node(windows: Sequence[WindowStats], nodes: Sequence[str], field: str) -> dict[str, int]:
    """node -> windows (`field="windows"`) or the sum of a WindowStats count field over its windows. Pure."""
    counts = dict.fromkeys(nodes, 0)
    for w in windows:
        if w.node in counts:
            counts[w.node] += 1 if field == "windows" else int(getattr(w, field))
    return counts


def histogram(counts: dict[str, int]) -> dict[str, int]:
    """`{"1": 48, "2": 2}`: how many nodes had each count (JSON keys are strings). Pure."""
    found: dict[str, int] = {}
    for value in counts.values():
        found[str(value)] = found.get(str(value), 0) + 1
    return dict(sorted(found.items(), key=lambda kv: int(kv[0])))


def histogram_text(counts: dict[str, int]) -> str:
    """`1×50` or `1×48 2×2`: the histogram as a table cell. Pure."""
    return " ".join(f"{value}×{nodes}" for value, nodes in histogram(counts).items()) or "-"


@dataclass(frozen=True)
class FleetHistory:
    """The fleet workflow's history, summed over its runs (continue-as-new included)."""

    events: int
    workflow_tasks: int
    # Its workflow tasks that timed out on the worker's sticky queue (each then handed out again
    # with the run's whole history to replay: the fleet's is the longest) or while running.
    sticky_timeouts: int
    running_timeouts: int


def fleet_history(events: Sequence[HistoryEvent]) -> FleetHistory:
    """Counts of the fleet's history (its runs' events, one after the other). Pure."""
    return FleetHistory(len(events), *_workflow_tasks(events))


async def fleet_events(client: Client, policy: str) -> FleetHistory:
    """The fleet workflow's history counts, summed over its runs (continue-as-new included)."""
    workflow_id = fleet_workflow_id(policy)
    events: list[HistoryEvent] = []
    async for execution in client.list_workflows(f'WorkflowId = "{workflow_id}"'):
        history = await client.get_workflow_handle(workflow_id, run_id=execution.run_id).fetch_history()
        events.extend(history.events)
    return fleet_history(events)


BATCH_GAP_SECONDS = 5.0


def batches_from_sends(sends: Sequence[tuple[float, list[str]]], gap: float = BATCH_GAP_SECONDS) -> list[int]:
    """Batch sizes from the rollout's hand-overs `(time, nodes)`: a node counts once, at its first
    hand-over; hand-overs less than `gap` seconds apart belong to one batch (a batch is sent in
    chunks within one workflow task; the next waits for the previous batch's results). Pure."""
    sizes: list[int] = []
    seen: set[str] = set()
    last = float("-inf")
    for at, nodes in sorted(sends, key=lambda s: s[0]):
        new = [n for n in nodes if n not in seen]
        if not new:
            continue
        if not sizes or at - last > gap:
            sizes.append(0)
        sizes[-1] += len(new)
        seen.update(new)
        last = at
    return sizes


async def fleet_batches(client: Client, policy: str) -> list[int]:
    """The batches a fleet really ran, from its `request_windows` activities (all runs)."""
    workflow_id = fleet_workflow_id(policy)
    sends: list[tuple[float, list[str]]] = []
    async for execution in client.list_workflows(f'WorkflowId = "{workflow_id}"'):
        history = await client.get_workflow_handle(workflow_id, run_id=execution.run_id).fetch_history()
        for event in history.events:
            if event.HasField("activity_task_scheduled_event_attributes"):
                attrs = event.activity_task_scheduled_event_attributes
                if attrs.activity_type.name == "request_windows" and attrs.input.payloads:
                    data = json.loads(attrs.input.payloads[0].data)
                    sends.append((_epoch(event), list(data.get("nodes") or [])))
    return batches_from_sends(sends)


def peak_overlap(windows: Sequence[WindowStats]) -> int:
    """The most windows that ran at once, each from its run's start to its answer to the fleet (a
    window's end before another's start at the same instant). Pure."""
    ends = [(w.answer_at, -1) for w in windows]
    edges = sorted([(w.started, 1) for w in windows] + ends, key=lambda e: (e[0], e[1]))
    peak = running = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    return peak


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by nearest rank. Pure."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = math.ceil(q / 100 * len(ordered))
    return ordered[max(0, min(len(ordered), rank) - 1)]

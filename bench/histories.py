"""Temporal histories of a benchmark rollout: node windows (timing, events, activities) and the rollout.

Fetches the histories of `node/<node>` and every run of `package/<name>` and reduces them with pure
functions: a window's duration is its node workflow run from start to close (the request, the node
read, the lease, cordon, drain, stages, interrupt, uncordon, state writes and the answer to the
rollout). Does Temporal I/O.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from api.keys import node_workflow_id, rollout_workflow_id

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


def _epoch(event: HistoryEvent) -> float:
    return event.event_time.seconds + event.event_time.nanos / 1e9


def window_stats(node: str, events: Sequence[HistoryEvent]) -> WindowStats:
    """Duration, event count and activity count of one node workflow history. Pure."""
    first, last = _epoch(events[0]), _epoch(events[-1])
    scheduled = sum(1 for e in events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
    return WindowStats(node, last - first, len(events), scheduled, first, last)


async def node_windows(client: Client, nodes: Sequence[str]) -> list[WindowStats]:
    """The latest run of every node's workflow (one window per node in a single-package rollout)."""
    limit = asyncio.Semaphore(FETCH_CONCURRENCY)

    async def one(node: str) -> WindowStats | None:
        async with limit:
            try:
                history = await client.get_workflow_handle(node_workflow_id(node)).fetch_history()
            except Exception:  # noqa: BLE001 - a node without a workflow simply had no window
                return None
        return window_stats(node, history.events) if history.events else None

    found = await asyncio.gather(*(one(n) for n in nodes))
    return [w for w in found if w is not None]


async def rollout_events(client: Client, package: str) -> int:
    """History events of the rollout workflow, summed over its runs (continue-as-new included)."""
    workflow_id = rollout_workflow_id(package)
    total = 0
    async for execution in client.list_workflows(f'WorkflowId = "{workflow_id}"'):
        history = await client.get_workflow_handle(workflow_id, run_id=execution.run_id).fetch_history()
        total += len(history.events)
    return total


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


async def rollout_batches(client: Client, package: str) -> list[int]:
    """The batches a rollout really ran, from its `request_node_windows` activities (all runs)."""
    workflow_id = rollout_workflow_id(package)
    sends: list[tuple[float, list[str]]] = []
    async for execution in client.list_workflows(f'WorkflowId = "{workflow_id}"'):
        history = await client.get_workflow_handle(workflow_id, run_id=execution.run_id).fetch_history()
        for event in history.events:
            if event.HasField("activity_task_scheduled_event_attributes"):
                attrs = event.activity_task_scheduled_event_attributes
                if attrs.activity_type.name == "request_node_windows" and attrs.input.payloads:
                    data = json.loads(attrs.input.payloads[0].data)
                    sends.append((_epoch(event), list(data.get("nodes") or [])))
    return batches_from_sends(sends)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by nearest rank. Pure."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = math.ceil(q / 100 * len(ordered))
    return ordered[max(0, min(len(ordered), rank) - 1)]

"""Handing node requests to node workflows by signal-with-start. Does I/O (Temporal frontend).

A workflow cannot signal-with-start another workflow, so the rollout hands a whole batch through
this activity: for each node, `start_workflow(NodeWorkflow, start_signal="request")` starts
`node/<node>` when it does not run, or only signals it when it does. Idempotent: the node workflow
drops a request whose `request_id` it has seen, so a retried activity sends nothing twice in effect.

The failure policy of node workflows this worker starts is tuned by environment
(`protocol.node_settings`, shared with the bridge).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import Any

from temporalio import activity

from activities.io import RequestNodeWindowsInput
from api.keys import node_workflow_id
from protocol.node_settings import node_workflow_settings
from workflows.messages import NODE_WORKFLOW_TYPE, SIGNAL_NODE_REQUEST, NodeWorkflowInput

# Signal-with-start calls in flight at once. One call is a round trip to the Temporal frontend (and a
# history write there); made one after the other, a batch of 50 nodes waited for 50 round trips
# before its last node could start its window (issue 14: the hand-over was the serial part of a
# batch). A handful at once keeps the frontend's load bounded; `NODEROLL_HAND_OVER_CONCURRENCY`
# overrides it for the worker (1 = one after the other, as before; the bench compares the two).
HAND_OVER_CONCURRENCY = 8
HAND_OVER_CONCURRENCY_ENV = "NODEROLL_HAND_OVER_CONCURRENCY"


def hand_over_concurrency() -> int:
    """Signal-with-starts at once: the environment's override, else `HAND_OVER_CONCURRENCY`."""
    raw = os.environ.get(HAND_OVER_CONCURRENCY_ENV, "")
    try:
        return max(1, int(raw)) if raw else HAND_OVER_CONCURRENCY
    except ValueError as err:
        raise ValueError(f"{HAND_OVER_CONCURRENCY_ENV}={raw!r}: not a whole number") from err


def node_workflow_input(node: str) -> NodeWorkflowInput:
    """The input of a new `node/<node>`: the defaults, tuned by the environment (`protocol.node_settings`)."""
    return NodeWorkflowInput(node=node, **node_workflow_settings())  # type: ignore[arg-type]


async def signal_node_workflows(nodes: Sequence[str], requests: Sequence[Any], signal: str, task_queue: str) -> None:
    """Signal-with-start `node/<node>` with `signal` and its request, `hand_over_concurrency()` at a time
    (heartbeats per node). Used by `request_node_windows` (legacy requests) and
    `activities.fleet.request_windows` (windows)."""
    client = activity.client()
    task_queue = task_queue or activity.info().task_queue
    slots = asyncio.Semaphore(hand_over_concurrency())

    async def hand_over(node: str, request: Any) -> None:
        async with slots:
            await client.start_workflow(
                NODE_WORKFLOW_TYPE,
                node_workflow_input(node),
                id=node_workflow_id(node),
                task_queue=task_queue,
                start_signal=signal,
                start_signal_args=[request],
                static_summary=f"node {node}",
            )
        activity.heartbeat(node)

    # A failed call cancels the others and fails the activity with that call's own error (not the
    # group's "unhandled errors in a TaskGroup"), so the Temporal UI names it; the retry asks again.
    try:
        async with asyncio.TaskGroup() as group:
            for node, request in zip(nodes, requests, strict=True):
                group.create_task(hand_over(node, request))
    except ExceptionGroup as failed:
        raise failed.exceptions[0] from None


@activity.defn(name="request_node_windows")
async def request_node_windows(input: RequestNodeWindowsInput) -> None:
    """Signal-with-start `node/<node>` with each request (heartbeats per node)."""
    await signal_node_workflows(input.nodes, input.requests, SIGNAL_NODE_REQUEST, input.task_queue)

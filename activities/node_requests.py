"""Handing a batch's window requests to node workflows, several at a time. Does I/O (Temporal frontend).

A workflow cannot signal-with-start another workflow, so the fleet hands a whole batch through its
activity `request_windows` (`activities/fleet.py`), which calls `signal_node_workflows` here: for each
node, `protocol.node.signal_node_workflow` (the one way every process reaches `node/<node>`) starts
it when it does not run, or only signals it when it does. Idempotent: the node workflow drops a
request whose `request_id` it has seen, so a retried activity sends nothing twice in effect.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence

from temporalio import activity

from protocol.fleet import WindowRequest
from protocol.names import SIGNAL_WINDOW
from protocol.node import Route, signal_node_workflow

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


async def signal_node_workflows(nodes: Sequence[str], requests: Sequence[WindowRequest], task_queue: str,
                                cluster: str = "") -> None:
    """Signal-with-start `node/<node>` (`node/<cluster>/<node>`) with `window` and its request,
    `hand_over_concurrency()` at a time (heartbeats per node); `task_queue` "" is the calling activity's own."""
    client = activity.client()
    route = Route(task_queue or activity.info().task_queue, cluster)
    slots = asyncio.Semaphore(hand_over_concurrency())

    async def hand_over(node: str, request: WindowRequest) -> None:
        async with slots:
            await signal_node_workflow(client, node, SIGNAL_WINDOW, request, route)
        activity.heartbeat(node)

    # A failed call cancels the others and fails the activity with that call's own error (not the
    # group's "unhandled errors in a TaskGroup"), so the Temporal UI names it; the retry asks again.
    try:
        async with asyncio.TaskGroup() as group:
            for node, request in zip(nodes, requests, strict=True):
                group.create_task(hand_over(node, request))
    except ExceptionGroup as failed:
        raise failed.exceptions[0] from None

"""Handing node requests to node workflows by signal-with-start. Does I/O (Temporal frontend).

A workflow cannot signal-with-start another workflow, so the rollout hands a whole batch through
this activity: for each node, `start_workflow(NodeWorkflow, start_signal="request")` starts
`node/<node>` when it does not run, or only signals it when it does. Idempotent: the node workflow
drops a request whose `request_id` it has seen, so a retried activity sends nothing twice in effect.

The failure policy of node workflows this worker starts is tuned by environment
(`protocol.node_settings`, shared with the bridge).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from temporalio import activity

from activities.io import RequestNodeWindowsInput
from api.keys import node_workflow_id
from protocol.node_settings import node_workflow_settings
from workflows.messages import NODE_WORKFLOW_TYPE, SIGNAL_NODE_REQUEST, NodeWorkflowInput


def node_workflow_input(node: str) -> NodeWorkflowInput:
    """The input of a new `node/<node>`: the defaults, tuned by the environment (`protocol.node_settings`)."""
    return NodeWorkflowInput(node=node, **node_workflow_settings())  # type: ignore[arg-type]


async def signal_node_workflows(nodes: Sequence[str], requests: Sequence[Any], signal: str, task_queue: str) -> None:
    """Signal-with-start `node/<node>` with `signal` and its request, node by node (heartbeats per node).
    Used by `request_node_windows` (legacy requests) and `activities.fleet.request_windows` (windows)."""
    client = activity.client()
    task_queue = task_queue or activity.info().task_queue
    for node, request in zip(nodes, requests, strict=True):
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


@activity.defn(name="request_node_windows")
async def request_node_windows(input: RequestNodeWindowsInput) -> None:
    """Signal-with-start `node/<node>` with each request (heartbeats per node)."""
    await signal_node_workflows(input.nodes, input.requests, SIGNAL_NODE_REQUEST, input.task_queue)

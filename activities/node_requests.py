"""Handing node requests to node workflows by signal-with-start. Does I/O (Temporal frontend).

A workflow cannot signal-with-start another workflow, so the rollout hands a whole batch through
this activity: for each node, `start_workflow(NodeWorkflow, start_signal="request")` starts
`node/<node>` when it does not run, or only signals it when it does. Idempotent: the node workflow
drops a request whose `request_id` it has seen, so a retried activity sends nothing twice in effect.
"""

from __future__ import annotations

from temporalio import activity

from activities.io import RequestNodeWindowsInput
from api.keys import node_workflow_id
from workflows.messages import NODE_WORKFLOW_TYPE, SIGNAL_NODE_REQUEST, NodeWorkflowInput


@activity.defn(name="request_node_windows")
async def request_node_windows(input: RequestNodeWindowsInput) -> None:
    """Signal-with-start `node/<node>` with each request (heartbeats per node)."""
    client = activity.client()
    task_queue = input.task_queue or activity.info().task_queue
    for node, request in zip(input.nodes, input.requests, strict=True):
        await client.start_workflow(
            NODE_WORKFLOW_TYPE,
            NodeWorkflowInput(node=node),
            id=node_workflow_id(node),
            task_queue=task_queue,
            start_signal=SIGNAL_NODE_REQUEST,
            start_signal_args=[request],
            static_summary=f"node {node}",
        )
        activity.heartbeat(node)

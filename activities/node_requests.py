"""Handing node requests to node workflows by signal-with-start. Does I/O (Temporal frontend).

A workflow cannot signal-with-start another workflow, so the rollout hands a whole batch through
this activity: for each node, `start_workflow(NodeWorkflow, start_signal="request")` starts
`node/<node>` when it does not run, or only signals it when it does. Idempotent: the node workflow
drops a request whose `request_id` it has seen, so a retried activity sends nothing twice in effect.

The failure policy of node workflows this worker starts can be tuned by environment (defaults:
`NodeWorkflowInput`): `NODEROLL_NODE_STAGE_ATTEMPTS` (attempts per stage) and
`NODEROLL_NODE_RETRY_BACKOFF_SECONDS` (backoff before the second attempt, doubling after); so can
the defaults of the bounds a Package's `limits` override (seconds): `NODEROLL_NODE_PROTECTED_PODS_TIMEOUT_SECONDS`
(3600), `NODEROLL_NODE_STAGE_TIMEOUT_SECONDS` (1800), `NODEROLL_NODE_INTERRUPT_TIMEOUT_SECONDS` (900).
"""

from __future__ import annotations

import os

from temporalio import activity

from activities.io import RequestNodeWindowsInput
from api.keys import node_workflow_id
from workflows.messages import NODE_WORKFLOW_TYPE, SIGNAL_NODE_REQUEST, NodeWorkflowInput

STAGE_ATTEMPTS_ENV = "NODEROLL_NODE_STAGE_ATTEMPTS"
RETRY_BACKOFF_ENV = "NODEROLL_NODE_RETRY_BACKOFF_SECONDS"
PROTECTED_PODS_TIMEOUT_ENV = "NODEROLL_NODE_PROTECTED_PODS_TIMEOUT_SECONDS"
STAGE_TIMEOUT_ENV = "NODEROLL_NODE_STAGE_TIMEOUT_SECONDS"
INTERRUPT_TIMEOUT_ENV = "NODEROLL_NODE_INTERRUPT_TIMEOUT_SECONDS"
# Environment variable -> the NodeWorkflowInput field it sets (whole seconds, at least 1).
TIMEOUT_ENVS = {
    PROTECTED_PODS_TIMEOUT_ENV: "protected_pods_timeout_seconds",
    STAGE_TIMEOUT_ENV: "stage_timeout_seconds",
    INTERRUPT_TIMEOUT_ENV: "reboot_timeout_seconds",
}


def node_workflow_input(node: str) -> NodeWorkflowInput:
    """The input of a new `node/<node>`: the defaults, tuned by the environment (module docstring)."""
    tuned: dict[str, float] = {}
    if os.environ.get(STAGE_ATTEMPTS_ENV):
        tuned["stage_attempts"] = max(1, int(os.environ[STAGE_ATTEMPTS_ENV]))
    if os.environ.get(RETRY_BACKOFF_ENV):
        tuned["retry_backoff_seconds"] = max(0.0, float(os.environ[RETRY_BACKOFF_ENV]))
    for env, name in TIMEOUT_ENVS.items():
        if os.environ.get(env):
            tuned[name] = max(1, int(os.environ[env]))
    return NodeWorkflowInput(node=node, **tuned)  # type: ignore[arg-type]


@activity.defn(name="request_node_windows")
async def request_node_windows(input: RequestNodeWindowsInput) -> None:
    """Signal-with-start `node/<node>` with each request (heartbeats per node)."""
    client = activity.client()
    task_queue = input.task_queue or activity.info().task_queue
    for node, request in zip(input.nodes, input.requests, strict=True):
        await client.start_workflow(
            NODE_WORKFLOW_TYPE,
            node_workflow_input(node),
            id=node_workflow_id(node),
            task_queue=task_queue,
            start_signal=SIGNAL_NODE_REQUEST,
            start_signal_args=[request],
            static_summary=f"node {node}",
        )
        activity.heartbeat(node)

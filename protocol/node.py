"""The node workflow `node/<node>` as its starters see it: its input, and the one way to reach it.

Three processes hand a node workflow something: the fleet's activity `request_windows` (a
`WindowRequest`, signal `window`), the bridge and the CLI (a `NodeReset`, signal `reset`). Each does
it with `signal_node_workflow`: a window request starts `node/<node>` with the request in its input
when no run is open (`start_window`: an eager start, so its first workflow task does not wait for a
poll) and signals the open run otherwise; a reset is a signal-with-start. Either way with the same input (`node_workflow_input`: the defaults below,
tuned by the starting process's environment, `protocol.node_settings`). A run started by any of them
therefore behaves the same, whoever started it.

The input's fields are the node window's failure policy; the bounds are the defaults that a
Package's `limits` replace for its windows (the largest of a window's packages).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from temporalio.client import Client
from temporalio.common import (
    SearchAttributeKey,
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from protocol.fleet import NodeReset, WindowRequest
from protocol.names import NODE_WORKFLOW_TYPE, SEARCH_ATTR_CLUSTER, SIGNAL_WINDOW, node_workflow_id
from protocol.node_settings import (
    DEFAULT_INTERRUPT_TIMEOUT_SECONDS,
    DEFAULT_PROTECTED_PODS_TIMEOUT_SECONDS,
    DEFAULT_STAGE_TIMEOUT_SECONDS,
    eager_node_start,
    node_workflow_settings,
)


@dataclass
class NodeWorkflowInput:
    """Input of `node/<node>` (started by `signal_node_workflow`; continue-as-new fills the carried fields).

    See docs/adr/0004-node-workflow.md for the failure policy.
    """

    node: str
    # Attempts per stage (each attempt is a new pod) before the package ends erroring.
    stage_attempts: int = 3
    # Backoff before attempt n+1: retry_backoff_seconds * 2**(n-1), capped at 10 minutes.
    retry_backoff_seconds: float = 30.0
    # Bound of the wait for pods matching podNonInterruptLabels.
    protected_pods_timeout_seconds: int = DEFAULT_PROTECTED_PODS_TIMEOUT_SECONDS
    # Bound of one stage (also of its pod's activity start-to-close timeout).
    stage_timeout_seconds: int = DEFAULT_STAGE_TIMEOUT_SECONDS
    # Bound of a reboot: new boot id and Ready again.
    reboot_timeout_seconds: int = DEFAULT_INTERRUPT_TIMEOUT_SECONDS
    # Heartbeat timeout of waiting activities: how soon a crashed worker's activity is retried.
    heartbeat_seconds: int = 15
    # Carried across continue-as-new: queued window requests (arrival order) and resets not applied yet;
    # `windows` is also how a run starts with its first request (`start_window`).
    windows: list[WindowRequest] = field(default_factory=list)
    resets: list[NodeReset] = field(default_factory=list)


def node_workflow_input(node: str) -> NodeWorkflowInput:
    """The input of a new `node/<node>`: the defaults, tuned by this process's environment."""
    return NodeWorkflowInput(node=node, **node_workflow_settings())  # type: ignore[arg-type]


CLUSTER_KEY = SearchAttributeKey.for_keyword(SEARCH_ATTR_CLUSTER)


def cluster_attributes(cluster: str) -> TypedSearchAttributes:
    """`NoderollCluster` for a workflow started in a named cluster; nothing without one (ADR 0017)."""
    return TypedSearchAttributes([SearchAttributePair(CLUSTER_KEY, cluster)] if cluster else [])


@dataclass(frozen=True)
class Route:
    """Where a node workflow runs: its task queue and its cluster's name ("" = none: `node/<node>`)."""

    task_queue: str
    cluster: str = ""


async def signal_node_workflow(client: Client, node: str, signal: str, payload: Any, route: Route) -> None:
    """Hand `node/<node>` (`node/<cluster>/<node>` in a named cluster) a window request or a reset on the
    route's task queue (module docstring).

    A window request (`signal` `window`) starts a new run with the request in its input, asking
    for an eager start (`start_window`); a reset is a signal-with-start. Idempotent in effect: the
    node workflow drops a request or reset id it has seen."""
    if signal == SIGNAL_WINDOW and isinstance(payload, WindowRequest):
        await start_window(client, node, payload, route)
        return
    await client.start_workflow(
        NODE_WORKFLOW_TYPE,
        node_workflow_input(node),
        id=node_workflow_id(node, route.cluster),
        task_queue=route.task_queue,
        start_signal=signal,
        start_signal_args=[payload],
        static_summary=f"node {node}" + (f" of cluster {route.cluster}" if route.cluster else ""),
        search_attributes=cluster_attributes(route.cluster),
    )


# A run that completes between a refused start and the signal: start again (each try is one of them).
START_TRIES = 5


async def start_window(client: Client, node: str, request: WindowRequest, route: Route) -> None:
    """Start `node/<node>` with `request` as its first queued window (issue #26 item 2): with no run
    open, the run's first workflow task has its request at once (no signal), and with
    `NODEROLL_EAGER_NODE_START=1` (`request_eager_start`; off by default: it keeps the window on this
    worker, `protocol.node_settings.EAGER_START_ENV`) a worker in this process (the fleet's activity
    runs in `noderoll worker`) gets that task in the start's answer instead of polling for it. A run already open is signalled instead (`window`), as
    signal-with-start did; one that completed between the refused start and the signal is started
    again. Either way the run drops a request id it has seen, so a retried hand-over is harmless."""
    workflow_id = node_workflow_id(node, route.cluster)
    handle = client.get_workflow_handle(workflow_id)
    for _ in range(START_TRIES):
        try:
            await client.start_workflow(
                NODE_WORKFLOW_TYPE,
                replace(node_workflow_input(node), windows=[request]),
                id=workflow_id,
                task_queue=route.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                request_eager_start=eager_node_start(),
                static_summary=f"node {node}" + (f" of cluster {route.cluster}" if route.cluster else ""),
                search_attributes=cluster_attributes(route.cluster),
            )
            return
        except WorkflowAlreadyStartedError:
            pass
        try:
            await handle.signal(SIGNAL_WINDOW, request)
            return
        except RPCError as err:
            if err.status is not RPCStatusCode.NOT_FOUND:
                raise  # NOT_FOUND: the open run completed in between; start again
    raise RuntimeError(f"{workflow_id}: neither started nor signalled after {START_TRIES} tries")

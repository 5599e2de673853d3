"""The node workflow `node/<node>` as its starters see it: its input, and the one way to reach it.

Three processes hand a node workflow something: the fleet's activity `request_windows` (a
`WindowRequest`, signal `window`), the bridge and the CLI (a `NodeReset`, signal `reset`). Each does
it with `signal_node_workflow`: a signal-with-start that starts `node/<node>` when no run is open and
only signals the open run otherwise, with the same input (`node_workflow_input`: the defaults below,
tuned by the starting process's environment, `protocol.node_settings`). A run started by any of them
therefore behaves the same, whoever started it.

The input's fields are the node window's failure policy; the bounds are the defaults that a
Package's `limits` replace for its windows (the largest of a window's packages).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from temporalio.client import Client
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

from protocol.fleet import NodeReset, WindowRequest
from protocol.names import NODE_WORKFLOW_TYPE, SEARCH_ATTR_CLUSTER, node_workflow_id
from protocol.node_settings import (
    DEFAULT_INTERRUPT_TIMEOUT_SECONDS,
    DEFAULT_PROTECTED_PODS_TIMEOUT_SECONDS,
    DEFAULT_STAGE_TIMEOUT_SECONDS,
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
    # Carried across continue-as-new only: queued window requests (arrival order) and resets not applied yet.
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
    """Signal-with-start `node/<node>` (`node/<cluster>/<node>` in a named cluster) with `signal` and
    `payload` on the route's task queue (module docstring).

    Idempotent in effect: the node workflow drops a request or reset id it has seen."""
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

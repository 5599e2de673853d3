"""Inputs and results of the fleet's activities, as plain dataclasses (no Kubernetes import). Pure data.

Workflows call activities by name with these, so the workflow sandbox never loads a client. (The
node window's activities still take `activities/io.py`; both move here with the protocol.)
"""


from dataclasses import dataclass, field
from typing import Any

from protocol.fleet import PackageEntry, WindowRequest


@dataclass
class ListFleetNodesInput:
    """List the Nodes and classify them for the fleet's Packages (`planning.fleet_targets`)."""

    packages: list[PackageEntry]
    # node -> Packages its window in flight carries (those stay the fleet's whatever the taints).
    in_flight: dict[str, list[str]] = field(default_factory=dict)
    # Label keys the policy's compartment selectors read (the only labels returned).
    label_keys: list[str] = field(default_factory=list)
    # Server-side label selector narrowing the list ("" = every node).
    label_selector: str = ""


@dataclass
class ListFleetNodesResult:
    """`planning.fleet_targets.FleetSelection` as JSON (the workflow converts it)."""

    selection: dict[str, Any] = field(default_factory=dict)
    listed: int = 0
    # `planning.node_marks.NodeMark`s as JSON: what blocked nodes must show and do not show yet.
    marks: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class RequestWindowsInput:
    """Hand each request to `node/<node>` by signal-with-start `window` (one activity per chunk)."""

    requests: list[WindowRequest]
    # Node of each request, in the same order.
    nodes: list[str]
    # Task queue of the node workflows ("" = the calling activity's own queue).
    task_queue: str = ""


@dataclass
class QueryPrometheusInput:
    """An instant query (`GET /api/v1/query`) for an analysis gate of the fleet's policy."""

    query: str
    # Prometheus base URL ("" = the worker's --prometheus-address / NODEROLL_PROMETHEUS_ADDRESS).
    address: str = ""
    # Name of the gate (for logs and heartbeats).
    gate: str = ""


@dataclass
class PromSeries:
    """One series of an instant query's result: its labels and its value as Prometheus wrote it."""

    labels: dict[str, str] = field(default_factory=dict)
    value: str = ""


@dataclass
class QueryPrometheusResult:
    """The query's result: `vector` (a series each) or `scalar` (one series without labels)."""

    result_type: str = "vector"
    series: list[PromSeries] = field(default_factory=list)
    # The Prometheus base URL that answered.
    address: str = ""


@dataclass
class NodeSnapshot:
    """What target selection and batch planning need to know about one Node (observed once).

The result of the legacy `list_target_nodes` (in `activities.io.ListTargetNodesResult`), and the base
of the Kubernetes adapter's whole snapshot (`kube.node_snapshot.NodeFacts`)."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    # Each taint as {"key", "value", "effect"}.
    taints: list[dict[str, str]] = field(default_factory=list)
    created: str = ""
    # The raw `noderoll.io/state` annotation ("" when absent); parsed by the pure core.
    state_annotation: str = ""
    # The `noderoll.io/status` label ("" when absent) and whether `noderoll.io/StateMalformed` is True.
    status_label: str = ""
    state_malformed: bool = False

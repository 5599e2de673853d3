"""Inputs and results of the fleet's activities, as plain dataclasses (no Kubernetes import). Pure data.

Workflows call activities by name with these, so the workflow sandbox never loads a client. The
node window's activities have theirs in `protocol/node_activities.py`.
"""


from dataclasses import dataclass, field
from typing import Any

from protocol.clusters import ClusterReport
from protocol.fleet import PackageEntry, WindowRequest


@dataclass
class ListFleetNodesInput:
    """List the Nodes and classify them for the fleet's Packages (`planning.rollout.fleet_targets`)."""

    packages: list[PackageEntry]
    # node -> Packages its window in flight carries (those stay the fleet's whatever the taints).
    in_flight: dict[str, list[str]] = field(default_factory=dict)
    # Label keys the policy's compartment selectors and topology limits read (the only labels returned).
    label_keys: list[str] = field(default_factory=list)
    # Server-side label selector narrowing the list ("" = every node).
    label_selector: str = ""
    # Capacity floors and topology limits (planning/rollout/disruption.py): report per node why it is down and
    # its allocatable units of `resources`.
    supply: bool = False
    resources: list[str] = field(default_factory=list)
    # The policy's `spec.respect` as JSON ({}: the policy has none: the defaults, api/respect.py): report
    # per node why it is down, a node another maintenance holds with that reason. None: not asked.
    respect: dict[str, Any] | None = None


@dataclass
class ListFleetNodesResult:
    """`planning.rollout.fleet_targets.FleetSelection` as JSON (the workflow converts it)."""

    selection: dict[str, Any] = field(default_factory=dict)
    listed: int = 0
    # `planning.node.node_marks.NodeMark`s as JSON: what blocked nodes must show and do not show yet.
    marks: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class RequestWindowsInput:
    """Hand each request to `node/<node>` by signal-with-start `window` (one activity per chunk)."""

    requests: list[WindowRequest]
    # Node of each request, in the same order.
    nodes: list[str]
    # Task queue of the node workflows ("" = the calling activity's own queue).
    task_queue: str = ""
    # The fleet's cluster name ("" = none): the node workflows are `node/<cluster>/<node>`.
    cluster: str = ""


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
class DescribeWorkflowRunsInput:
    """Workflow ids whose latest run should be checked (the fleet's watchdog)."""

    workflow_ids: list[str]


@dataclass
class DescribeWorkflowRunsResult:
    """The ids (of the input) whose latest run is closed or that do not exist."""

    closed: list[str] = field(default_factory=list)
    # Closed id -> how it closed (`COMPLETED`, `TERMINATED`, `TIMED_OUT`, ..., `NOT_FOUND`).
    statuses: dict[str, str] = field(default_factory=dict)


@dataclass
class MarkBlockedNodesInput:
    """Show on each node what its mark says (decided again on a fresh read).

    Each mark is the JSON of a `planning.node.node_marks.NodeMark` (`planning.fleet.codec` converts):
    this module stays a leaf."""

    marks: list[dict[str, Any]]


@dataclass
class MarkBlockedNodesResult:
    """The nodes written (the others already showed it, changed meanwhile, run a window or are gone)."""

    written: list[str] = field(default_factory=list)


@dataclass
class ReportToGlobalInput:
    """A cluster's report to `global/<policy>` (signal-with-start `cluster_report`, task queue
    `noderoll-global`; protocol/clusters.py)."""

    policy: str
    report: ClusterReport


@dataclass
class MarkUpcomingNodesInput:
    """Drain-ahead (`planning.rollout.drain_ahead`): claim `mark` and release `unmark` for `fleet` (its workflow id)."""

    fleet: str
    mark: list[str] = field(default_factory=list)
    unmark: list[str] = field(default_factory=list)
    # Also the PreferNoSchedule taint `noderoll.io/upcoming` (the policy's `drainAhead.taint`).
    taint: bool = False


@dataclass
class MarkUpcomingNodesResult:
    """The nodes claimed and released (nodes that no longer exist are in neither)."""

    marked: list[str] = field(default_factory=list)
    unmarked: list[str] = field(default_factory=list)


@dataclass
class NodeAvailability:
    """One node as capacity floors, topology limits and the count budget see it now."""

    # Why its capacity does not count ("" = it counts): planning.rollout.disruption's DOWN_* reasons.
    down: str = ""
    # Allocatable units of the floors' resources.
    capacity: dict[str, int] = field(default_factory=dict)
    # The node's values of the topology keys.
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class ReadNodeSupplyInput:
    """A fresh read of the fleet's nodes before windows are handed out (the budget at hand-out, ADR 0023).

    `down_only` (issue 45): read the nodes named in `nodes` and every node that is cordoned or in a node
    window (selected by the apiserver: `spec.unschedulable`, `noderoll.io/status=in-progress`), not every node
    of the fleet; without it (reads asked before the rule) every node named is read.
    """

    nodes: list[str]
    label_keys: list[str] = field(default_factory=list)
    resources: list[str] = field(default_factory=list)
    # As `ListFleetNodesInput.respect`: report a node other maintenance holds with that reason (None: not asked).
    respect: dict[str, Any] | None = None
    down_only: bool = False


@dataclass
class ReadNodeSupplyResult:
    """Node -> how it stands now (nodes that no longer exist are left out)."""

    nodes: dict[str, NodeAvailability] = field(default_factory=dict)

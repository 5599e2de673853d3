"""Messages exchanged between the rollout, node and budget workflows. Pure data (no I/O).

The protocol (see docs/architecture.md):

* A rollout (`package/<name>`) sends a `NodeRequest` to `node/<node>` with signal-with-start,
  signal `SIGNAL_NODE_REQUEST`. The node workflow is the single writer of that node's state.
* When the package reaches a terminal result on that node, the node workflow signals the rollout
  back with `SIGNAL_NODE_RESULT` carrying a `NodeResult` (signal to the rollout workflow id;
  a rollout that no longer runs is ignored: `workflow.get_external_workflow_handle(...).signal`
  failures are logged, not fatal).
* Before disrupting a node (cordon/drain/interrupt) the node workflow asks each budget it needs
  for a lease: signal-with-start on `budget/<policy>/<compartment>` with `SIGNAL_BUDGET_ACQUIRE`
  and a `LeaseRequest`; the budget answers with `SIGNAL_LEASE_GRANTED` (a `LeaseGrant`) on the
  holder's workflow id; the holder returns it with `SIGNAL_BUDGET_RELEASE` (a `LeaseRelease`) in a
  `finally`. The budget also reclaims leases of holders whose workflow run is closed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from api.package import (
    DEFAULT_INTERRUPT_TIMEOUT_SECONDS,
    DEFAULT_PROTECTED_PODS_TIMEOUT_SECONDS,
    DEFAULT_STAGE_TIMEOUT_SECONDS,
)
from planning.batches import BatchPlannerState
from protocol.fleet import NodeReset, WindowRequest

SIGNAL_NODE_REQUEST = "request"
SIGNAL_NODE_CANCEL = "cancel"
SIGNAL_NODE_RESULT = "node_result"
SIGNAL_BUDGET_ACQUIRE = "acquire"
SIGNAL_BUDGET_RELEASE = "release"
SIGNAL_LEASE_GRANTED = "lease_granted"
QUERY_NODE_STATUS = "node_status"
QUERY_BUDGET_STATUS = "budget_status"
# Workflow type names (what a starter passes to start_workflow by name).
ROLLOUT_WORKFLOW_TYPE = "RolloutWorkflow"
BUDGET_WORKFLOW_TYPE = "BudgetWorkflow"
NODE_WORKFLOW_TYPE = "NodeWorkflow"
# Node workflow: `retry` (no payload) re-runs packages that ended erroring (same string as api.keys.SIGNAL_RETRY).
SIGNAL_NODE_RETRY = "retry"
# Rollout signals beyond the contract ones in api.keys (sent by the bridge).
SIGNAL_SPEC_CHANGED = "spec_changed"
SIGNAL_NODES_CHANGED = "nodes_changed"
# The Package was deleted: uninstall first when `uninstall.enabled`, then the rollout ends.
SIGNAL_PACKAGE_DELETED = "deleted"


@dataclass
class BudgetRef:
    """Which budget a disruption of this node counts against, and its absolute size now."""

    policy: str
    compartment: str
    limit: int


@dataclass
class NodeRequest:
    """A rollout asks a node to converge one package to `spec` (sent by signal-with-start)."""

    rollout_workflow_id: str
    package: str
    # The Package spec as validated JSON (api.models.PackageSpec dumped by alias).
    spec: dict[str, Any]
    # Package metadata.generation that this request was made from.
    generation: int
    budget: BudgetRef | None = None
    # Unique per (rollout run, batch, node, attempt): lets the node workflow drop duplicates.
    request_id: str = ""
    # True when the rollout asks for the package's uninstall on this node.
    uninstall: bool = False
    # The node's position in the order its rollout requested nodes (NodeWright's SKYHOOK_NODE_ORDER).
    node_order: int = 0


@dataclass
class NodeCancel:
    """A rollout withdraws its pending request (halt): only requests not yet started are dropped."""

    rollout_workflow_id: str
    package: str


@dataclass
class NodeResult:
    """The outcome of one package on one node, sent back to the rollout."""

    node: str
    package: str
    version: str
    request_id: str
    # api.enums.State value: complete, erroring, blocked or skipped.
    state: str
    stage: str | None = None
    message: str = ""
    # True when the node was cordoned, drained or interrupted for this result.
    disrupted: bool = False
    log_tail: str = ""
    # `blocked` because the node is held (its state annotation cannot be read): the rollout treats
    # the node as its listing would (blocked, requested again once a listing finds it readable).
    held: bool = False


@dataclass
class LeaseRequest:
    """Ask a compartment budget for one disruption lease."""

    holder_workflow_id: str
    lease_id: str
    node: str
    limit: int


@dataclass
class LeaseGrant:
    """A budget granted `lease_id` to the holder."""

    lease_id: str
    budget_workflow_id: str


@dataclass
class LeaseRelease:
    """A holder returns `lease_id`."""

    lease_id: str


@dataclass
class BudgetStatus:
    """What a budget workflow reports on query."""

    limit: int
    in_use: int
    holders: dict[str, str] = field(default_factory=dict)  # lease_id -> node
    waiting: int = 0


@dataclass
class HeldLease:
    """A lease a budget has granted and not yet seen returned (carried across continue-as-new)."""

    holder_workflow_id: str
    lease_id: str
    node: str


@dataclass
class BudgetInput:
    """Input of `budget/<policy>/<compartment>`.

    Starters send `BudgetInput()` (empty) with signal-with-start `SIGNAL_BUDGET_ACQUIRE`; the
    fields are only filled by the budget itself when it continues as new.
    """

    limit: int = 0
    held: list[HeldLease] = field(default_factory=list)
    waiting: list[LeaseRequest] = field(default_factory=list)
    # History length that triggers continue-as-new (0: the budget's default; tests set it low).
    history_limit: int = 0


@dataclass
class NodeWorkflowInput:
    """Input of `node/<node>` (start it with signal-with-start `SIGNAL_NODE_REQUEST`).

    Starters normally send `NodeWorkflowInput(node=...)`; the other fields tune the failure policy
    (tests shorten them). See docs/adr/0004-node-workflow.md.
    """

    node: str
    # Attempts per stage (each attempt is a new Job) before the package ends erroring.
    stage_attempts: int = 3
    # Backoff before attempt n+1: retry_backoff_seconds * 2**(n-1), capped at 10 minutes.
    retry_backoff_seconds: float = 30.0
    # Defaults of the bounds below; a Package's `limits` replace them for its windows (the largest of
    # a window's packages, planning.window.window_limits).
    # Bound of the wait for pods matching podNonInterruptLabels.
    protected_pods_timeout_seconds: int = DEFAULT_PROTECTED_PODS_TIMEOUT_SECONDS
    # Bound of one stage Job (also its activity start-to-close timeout).
    stage_timeout_seconds: int = DEFAULT_STAGE_TIMEOUT_SECONDS
    # Bound of a reboot: new boot id and Ready again.
    reboot_timeout_seconds: int = DEFAULT_INTERRUPT_TIMEOUT_SECONDS
    # Heartbeat timeout of waiting activities: how soon a crashed worker's activity is retried.
    heartbeat_seconds: int = 15
    # Carried across continue-as-new only: queued requests and erroring ones waiting for `retry`.
    pending: list[NodeRequest] = field(default_factory=list)
    held: list[NodeRequest] = field(default_factory=list)
    # Carried across continue-as-new only: queued fleet window requests, in arrival order.
    windows: list[WindowRequest] = field(default_factory=list)
    # Carried across continue-as-new only: `reset` requests not applied yet.
    resets: list[NodeReset] = field(default_factory=list)


@dataclass
class SpecChange:
    """The bridge tells a rollout its Package (or the Package's policy) changed (`spec_changed`)."""

    spec: dict[str, Any]
    generation: int
    policy_name: str | None = None
    # The DeploymentPolicy spec as validated JSON; None when the Package names no policy.
    policy: dict[str, Any] | None = None


@dataclass
class RetryRequest:
    """Payload of a rollout's `retry` (optional): only these nodes; empty = every failed node."""

    nodes: list[str] = field(default_factory=list)


@dataclass
class RolloutCarry:
    """Everything a rollout carries into its next run."""

    planner: BatchPlannerState | None = None
    # Bumped on every re-plan (spec change, uninstall): request ids and results carry it.
    epoch: int = 0
    sequence: int = 0
    eligible: list[str] = field(default_factory=list)
    # node -> api.enums.State value of its latest result (or `complete` when found done).
    outcomes: dict[str, str] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)
    # node -> request id of the request in flight (sent, not answered, not withdrawn).
    in_flight: dict[str, str] = field(default_factory=dict)
    # node -> why it cannot be targeted (taints), from the latest listing.
    blocked: dict[str, str] = field(default_factory=dict)
    # node -> the dependency it waits for (not complete there), from the latest listing.
    waiting: dict[str, str] = field(default_factory=dict)
    # node -> why a node that was a target is no longer one (relabelled, ignored, deleted): not updated.
    departed: dict[str, str] = field(default_factory=dict)
    # Nodes whose node workflow must get `retry` after their next request (failed before).
    retry_nodes: list[str] = field(default_factory=list)
    paused: bool = False
    halted: bool = False
    promote: bool = False
    deleting: bool = False
    uninstalling: bool = False
    # RFC 3339 end of the canary soak ("" = none running).
    soak_until: str = ""
    message: str = ""
    # node -> its position in the order this version was requested (NodeWright's SKYHOOK_NODE_ORDER).
    node_order: dict[str, int] = field(default_factory=dict)


@dataclass
class RolloutInput:
    """Input of `package/<name>` (the bridge starts it; continue-as-new fills `carry`)."""

    package: str
    spec: dict[str, Any]
    generation: int
    policy_name: str | None = None
    policy: dict[str, Any] | None = None
    paused: bool = False
    # Task queue of the node workflows ("" = the rollout's own).
    node_task_queue: str = ""
    # How often a rollout re-lists nodes on its own (joiners, taints gone) besides `nodes_changed`.
    relist_seconds: int = 300
    # History length that triggers continue-as-new (0: the rollout's default; tests set it low).
    history_limit: int = 0
    # State carried across continue-as-new: a RolloutCarry as JSON (workflows.rollout_state converts;
    # a typed field would make the workflow sandbox resolve planning's types, which it cannot).
    carry: dict[str, Any] | None = None

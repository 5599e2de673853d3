"""Status shapes of Package and DeploymentPolicy (what the bridge writes). Pure (no I/O).

`planning/views/status.py` renders a `PackageStatus` from a rollout's progress; the bridge patches the
status subresource with `PackageStatus.dump()`. Conditions follow Kubernetes conventions
(metav1.Condition fields, `Ready` with `observedGeneration`).

A drain that waits is visible while it waits, not only when it times out. While a node window
evicts pods, the node carries the condition `noderoll.io/Draining=True` (reason `Evicting`); once
evictions have been refused by PodDisruptionBudgets for 15 s in a row, the reason becomes
`EvictionRefused` and the message names the refused pods and the PodDisruptionBudgets covering
them with `disruptionsAllowed`, `currentHealthy`, `desiredHealthy` and `expectedPods`; while the
window waits for pods matching `podNonInterruptLabels` the reason is `WaitingForProtectedPods`
and the message names them. The message follows the blockers (re-read with every eviction round,
at least every 10 s). The same text is on one Event per node and reason (each wait updates it in
place, issue #14), updated rather than repeated when the blockers change and at least every minute
(`count`: the refused evictions of the current wait so far, or the updates of a protected-pods
wait): Warning `DrainBlocked`, or Normal
`WaitingForProtectedPods`. When the drain
ends the condition turns False (`Drained`, `ProtectedPodsFinished`, or `DrainFailed` with the
failure). A Package whose window on a node is held up this way lists the node in
`status.drainBlockedNodes` (`node`, `reason`, `message`, `since`: when the drain began) and names
it in its `Progressing` condition's message; `noderoll status PKG` shows the same, and
`noderoll nodes` shows the window's packages at stage `drain`, state `blocked` with the message
(state `in_progress` while the drain proceeds). A blocked drain is not `Degraded`: it waits
within `drain.timeoutSeconds` (protected pods: the worker's protected-pods bound), after which the
node ends erroring at stage `drain` with the same blockers in its `lastError`.

Drain rules (the DeploymentPolicy's `spec.workloads.rules`): while pods that a `WaitForCompletion` rule
matched run, the reason is `WaitingForCompletion` (a Normal Event of that name) and the message names
each pod with its rule, counted from 1 as listed (`ns/job-0 (rule 2 (WaitForCompletion, 600s))`); the
`EvictionRefused` message and a timed-out drain's `lastError` name the rule of each pod that a rule
decided the same way. With `spec.workloads.onDrainTimeout: Skip`, a node whose drain timed out is not
erroring: its window gave it up (uncordoned, nothing run, label `noderoll.io/skipped=drain-timeout`,
`noderoll.io/status=blocked`, a Warning Event `DrainSkipped`), its Packages count it as blocked
(`blockedNodes`, with the drain's failure as reason) and list it in `status.skippedNodes` (`node`,
`reason`; the first 20 by name) with their number in `status.skippedNodeCount`, until `noderoll retry
--nodes NODE` (or a new wave) asks it again.

Maintenance windows and analysis gates (the DeploymentPolicy's `maintenanceWindows` and `analysis`):
while the fleet has work but no maintenance window is open, the DeploymentPolicy and each of its
Packages with work left show phase `Waiting`, `status.nextWindow` (the next opening, RFC 3339) and
a message naming it (condition `Progressing` True with reason `Waiting`, `Ready` False). When an
analysis gate fails, the fleet halts: phase `Halted`, and `status.gateFailure` (`gate`, `query`,
`condition`, `value`, `time`, `reason`, `when`) on the DeploymentPolicy and on each Package the
halt holds back, the same text in the message and in the `Degraded` condition, and one Warning
Event `GateFailed` on the DeploymentPolicy per failure. `resume` clears it (the gate counts as
passed once), `retry` evaluates the gate again.

Canary rollback (the DeploymentPolicy's `canary.onFailure: rollback`, ADR 0009): when the canary of a
wave fails, the DeploymentPolicy and each Package the rollback carries show phase `RollingBack`,
then `RolledBack` (`Halted` when the rollback failed on a node), and `status.rollback`: `wave`,
`phase`, `reason` (the canary nodes that failed and why, one line), `canaryFailures` (the same per
node), `nodes` (the canary nodes rolled back), `versions` (per Package the version it went back to),
`uninstalled` (the Packages that were new in the wave, uninstalled) and `failedNodes` (nodes where the
rollback itself failed, with why).
The message says the same; `Ready` is False and `Degraded` True with reason `RollingBack` or
`RolledBack`; the bridge emits one Warning Event `CanaryRolledBack` on the DeploymentPolicy per
rolled-back wave. A rolled-back node counts as `waiting` for the Package (reason `rolled back to
...`). The status stays until the next wave starts (a new desired state, or `resume`).

Promotion across clusters (the DeploymentPolicy's `spec.clusters`, ADR 0017): the DeploymentPolicy
and every Package of a named cluster's fleet show `status.globalRollout` as `global/<policy>` last
told the fleet: the change, the stage granted (1-based), the phase of the promotion, the soak's
end, why it is halted, and every cluster with its stage and state (`waiting`, `running`,
`complete`, `failed`, `held`, `unknown`). While its stage is not granted the fleet and its
Packages show phase `Waiting` with the global workflow's message (a held cluster: why).

GPU budgets (ADR 0015): a DeploymentPolicy with capacity floors shows, as of its fleet's latest batch
plan, `status.capacity` per floor (`compartment`, `resource`, `available` with that batch out,
`floor`, `total`, `downNodes`: nodes down for other reasons than the fleet's windows, e.g.
`gpu-07 (NotReady)`), and with floors or topology limits `status.waiting`: per compartment and rule
(`floor`, `topology`) the nodes held back and the first reason (`1,792 of 1,800 GPUs would remain`,
`rack r12 has 1 node in a window (max 1)`). The message says the same (`waiting: ...`); while the
rules hold every node the fleet and its Packages show phase `Waiting` without `nextWindow`.

Size (issue 45): a status stays under 64 KB whatever the fleet's size. `blockedNodes` and `erroringNodes`
list the first 5 nodes (by name) of each of the first 10 reasons (most nodes first), each reason cut to 200
characters; `blockedReasons` and `erroringReasons` give those reasons with their node counts, and `nodes`
counts every node (`planning.views.capped`). `drainBlockedNodes` lists the first 20 nodes by name, with their
number in `drainBlockedNodeCount` when there are more; `skippedNodes` the first 20 (`skippedNodeCount`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from api.enums import CanaryPhase, RolloutPhase


class StatusModel(BaseModel):
    """Base of status models: camelCase, extra fields ignored (written by us, read back leniently)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    def dump(self) -> dict[str, Any]:
        """As CRD JSON (camelCase, None omitted)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class Condition(StatusModel):
    """A metav1.Condition."""

    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str
    message: str = ""
    last_transition_time: str
    observed_generation: int | None = None


class NodeCounts(StatusModel):
    """How many target nodes are in each state."""

    total: int = 0
    waiting: int = 0
    in_progress: int = 0
    complete: int = 0
    erroring: int = 0
    blocked: int = 0
    skipped: int = 0


class NodeReason(StatusModel):
    """A node and why it is blocked or erroring."""

    node: str
    reason: str


class ReasonStatus(StatusModel):
    """A reason nodes are blocked or erroring, and how many have it (`planning.views.capped`)."""

    reason: str
    nodes: int


class DrainBlockedNode(StatusModel):
    """A target node whose drain waits on someone else's pods (`planning.node.drain.DrainBlock`)."""

    node: str
    reason: str  # api.enums.DrainReason: EvictionRefused | WaitingForProtectedPods | WaitingForCompletion
    message: str = ""
    since: str | None = None  # when the node's drain began


class GateFailureStatus(StatusModel):
    """The analysis gate that halted the fleet (`planning.rollout.gates.GateFailure`)."""

    gate: str
    query: str
    condition: str = ""
    value: str = ""
    time: str = ""
    reason: str = ""
    when: str = ""


class RollbackStatus(StatusModel):
    """The rollback of a failed canary (`planning.rollout.fleet_rollback.RollbackReport`)."""

    wave: int = 0
    phase: RolloutPhase = RolloutPhase.ROLLING_BACK
    reason: str = ""
    canary_failures: list[NodeReason] = Field(default_factory=list)
    nodes: list[str] = Field(default_factory=list)
    # Package -> the version it went back to; the Packages uninstalled (they were new in the wave).
    versions: dict[str, str] = Field(default_factory=dict)
    uninstalled: list[str] = Field(default_factory=list)
    failed_nodes: list[NodeReason] = Field(default_factory=list)


class ClusterStatus(StatusModel):
    """One cluster of the promotion (`protocol.clusters.ClusterView`)."""

    name: str
    # 1-based; 0: in no stage.
    stage: int = 0
    state: str = "unknown"
    message: str = ""


class GlobalRolloutStatus(StatusModel):
    """The promotion across clusters as the fleet last heard it (`protocol.clusters.GlobalView`)."""

    change: str = ""
    summary: str = ""
    # The highest stage granted, 1-based (0: none yet); the number of stages.
    stage: int = 0
    stages: int = 0
    phase: RolloutPhase = RolloutPhase.PENDING
    soak_until: str | None = None
    halted: str | None = None
    message: str = ""
    clusters: list[ClusterStatus] = Field(default_factory=list)


class BatchStatus(StatusModel):
    """The batch the rollout is working on."""

    number: int = 0
    size: int = 0


class CanaryStatus(StatusModel):
    """The canary's phase and nodes."""

    phase: CanaryPhase = CanaryPhase.NONE
    nodes: list[str] = Field(default_factory=list)


class EtaStatus(StatusModel):
    """When the fleet's wave is estimated to end (every window succeeding): docs/how-it-works.md "ETA".

    Rounded to the minute and without a countdown, so the status changes only when the estimate does."""

    finish_at: str
    batches_left: int = 0
    source: str = ""


class PackageStatus(StatusModel):
    """`status` of a Package."""

    phase: RolloutPhase = RolloutPhase.PENDING
    observed_generation: int | None = None
    version: str | None = None
    message: str = ""
    progress: str = "0/0"
    nodes: NodeCounts = Field(default_factory=NodeCounts)
    current_batch: BatchStatus = Field(default_factory=BatchStatus)
    canary: CanaryStatus = Field(default_factory=CanaryStatus)
    # The first 5 nodes of each of the first 10 reasons (every one is counted in `nodes`), and those reasons
    # with their node counts (None: no such node); issue 45.
    blocked_nodes: list[NodeReason] = Field(default_factory=list)
    erroring_nodes: list[NodeReason] = Field(default_factory=list)
    blocked_reasons: list[ReasonStatus] | None = None
    erroring_reasons: list[ReasonStatus] | None = None
    # The first 20 by name, and how many there are when that is more (None: all are listed).
    drain_blocked_nodes: list[DrainBlockedNode] = Field(default_factory=list)
    drain_blocked_node_count: int | None = None
    # Nodes whose window gave them up when their drain timed out (`spec.workloads.onDrainTimeout: Skip`):
    # the first few by name, and how many there are (None: none).
    skipped_nodes: list[NodeReason] | None = None
    skipped_node_count: int | None = None
    next_window: str | None = None
    gate_failure: GateFailureStatus | None = None
    rollback: RollbackStatus | None = None
    eta: EtaStatus | None = None
    global_rollout: GlobalRolloutStatus | None = None
    conditions: list[Condition] = Field(default_factory=list)


class CapacityStatus(StatusModel):
    """One capacity floor of the policy's fleet (`planning.rollout.disruption.CapacityUse`)."""

    compartment: str
    resource: str
    available: int = 0
    floor: int = 0
    total: int = 0
    # Nodes of the compartment down for other reasons than the fleet's windows, the first few.
    down_nodes: list[str] = Field(default_factory=list)


class WaitStatus(StatusModel):
    """Nodes a floor or topology limit held back at the latest batch plan (`planning.rollout.disruption.WaitNote`)."""

    compartment: str
    rule: str
    nodes: int = 0
    reason: str = ""


class PolicyStatus(StatusModel):
    """`status` of a DeploymentPolicy: its validity and its fleet rollout's progress."""

    observed_generation: int | None = None
    message: str = ""
    phase: RolloutPhase | None = None
    fleet: str | None = None
    wave: int | None = None
    current_batch: BatchStatus | None = None
    nodes: NodeCounts | None = None
    packages: list[str] | None = None
    next_window: str | None = None
    gate_failure: GateFailureStatus | None = None
    rollback: RollbackStatus | None = None
    eta: EtaStatus | None = None
    global_rollout: GlobalRolloutStatus | None = None
    capacity: list[CapacityStatus] | None = None
    waiting: list[WaitStatus] | None = None
    conditions: list[Condition] = Field(default_factory=list)

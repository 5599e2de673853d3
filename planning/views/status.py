"""Rendering a Package's status from its rollout's progress. Pure (no I/O).

The rollout workflow answers its `progress` query with a `RolloutProgress`; the bridge calls
`render_package_status(progress, generation, previous)` and writes the result to the status
subresource. What the Package shows is `package_view(progress)`: a rollout that is `Complete` while
targeted nodes are blocked shows phase `Blocked` (it did everything it can; the rest needs the
block lifted), and the message names the blocked nodes when the rollout has nothing else to say.
Conditions follow Kubernetes conventions (metav1.Condition):
* `Ready`: True only when the phase is Complete for the current generation and no targeted node is
  blocked (so `kubectl wait --for=condition=Ready` and GitOps health checks mean "every targeted
  node updated"); `observedGeneration` set. While nodes are blocked it is False with reason
  `NodesBlocked` (unless the rollout halted, failed or is invalid: that phase is the reason) and the
  message names them with their reasons (`blocked_summary`: the first `BLOCKED_SHOWN`, then a count);
* `Progressing`: True while the rollout works (Pending, Canary, Progressing, Uninstalling, Waiting,
  RollingBack);
* `Degraded`: True when nodes are erroring or blocked, or the rollout halted, failed, is invalid, or
  its canary failed and is being (or was) rolled back (RollingBack, RolledBack).
Nodes whose drain waits on someone else's pods (`drain_blocked`, read by the bridge from the nodes'
`noderoll.io/Draining` condition, `planning.node.drain`) are listed in `drainBlockedNodes` and named in
the `Progressing` message: the window still runs within its bounds, so they are not `Degraded`.
Nodes whose window gave them up when their drain timed out (`spec.workloads.onDrainTimeout: Skip`) are
blocked nodes (`blockedNodes`, `NodesBlocked`) and are also listed in `skippedNodes` (the first
`SKIPPED_SHOWN` by name, each reason cut to `REASON_CHARS`) with their number in `skippedNodeCount`.
Node lists are capped (`planning.views.capped`; `drainBlockedNodes` at `DRAIN_BLOCKED_SHOWN` with
`drainBlockedNodeCount`): a status stays under 64 KB at any fleet size (issue 45).
`lastTransitionTime` is kept from `previous` when a condition's status did not change, else it
is `progress.updated_at` (the workflow's clock): the function reads no clock itself.
`render_invalid_package_status` (phase Invalid, the validation problems as message) and
`render_policy_status` (condition `Valid`) are what the bridge writes after validating an object.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from api.enums import CanaryPhase, ConditionType, RolloutPhase, State
from api.problems import ValidationProblem
from api.status import (
    BatchStatus,
    CanaryStatus,
    CapacityStatus,
    ClusterStatus,
    Condition,
    DrainBlockedNode,
    EtaStatus,
    GateFailureStatus,
    GlobalRolloutStatus,
    NodeCounts,
    NodeReason,
    PackageStatus,
    PolicyStatus,
    ReasonStatus,
    RollbackStatus,
    WaitStatus,
)
from planning.node.drain import DrainBlock, drain_summary
from planning.rollout.disruption import CapacityUse, WaitNote
from planning.rollout.fleet_rollback import RollbackReport
from planning.rollout.gates import GateFailure
from planning.views.capped import REASON_CHARS, ReasonCount, capped, cut
from planning.views.eta import Eta
from protocol.clusters import GlobalView

_WORKING = {RolloutPhase.PENDING, RolloutPhase.CANARY, RolloutPhase.PROGRESSING, RolloutPhase.UNINSTALLING,
            RolloutPhase.WAITING, RolloutPhase.ROLLING_BACK}
_BAD = {RolloutPhase.HALTED, RolloutPhase.FAILED, RolloutPhase.INVALID, RolloutPhase.ROLLING_BACK,
        RolloutPhase.ROLLED_BACK}
NODES_BLOCKED = "NodesBlocked"
# Blocked nodes named in a condition or message (all of them are in `status.blockedNodes`).
BLOCKED_SHOWN = 5
# Skipped nodes listed in `status.skippedNodes` (all of them are counted in `status.skippedNodeCount`).
SKIPPED_SHOWN = 20
DRAIN_BLOCKED_SHOWN = 20


@dataclass
class RolloutProgress:
    """What a rollout reports (its `progress` query); plain data, serializable."""

    phase: RolloutPhase = RolloutPhase.PENDING
    version: str = ""
    total_nodes: int = 0
    # api.enums.State value -> number of target nodes in that state.
    counts: dict[str, int] = field(default_factory=dict)
    batch_number: int = 0
    batch_size: int = 0
    canary_phase: CanaryPhase = CanaryPhase.NONE
    canary_nodes: list[str] = field(default_factory=list)
    # node -> reason, capped (`planning.views.capped`): all counted in `*_count`, the reasons in `*_reasons`.
    blocked: dict[str, str] = field(default_factory=dict)
    erroring: dict[str, str] = field(default_factory=dict)
    # Fleets: the blocked nodes a window gave up (`onDrainTimeout: Skip`) -> reason, the first SKIPPED_SHOWN.
    skipped: dict[str, str] = field(default_factory=dict)
    blocked_count: int = 0
    erroring_count: int = 0
    skipped_count: int = 0
    blocked_reasons: list[ReasonCount] = field(default_factory=list)
    erroring_reasons: list[ReasonCount] = field(default_factory=list)
    message: str = ""
    # RFC 3339 time of this report (workflow.now()).
    updated_at: str = ""
    # Fleets: the Package generation this report is about (the one the fleet was handed).
    generation: int = 0
    # Fleets: the Package was deleted with uninstall enabled and is uninstalled everywhere.
    uninstalled: bool = False
    # Fleets: while waiting for a maintenance window, its opening (RFC 3339); the gate that halted the fleet.
    next_window: str = ""
    gate_failure: GateFailure | None = None
    # Fleets: the rollback of the failed canary that carries this Package (`canary.onFailure: rollback`).
    rollback: RollbackReport | None = None
    # Fleets: when the fleet's wave is estimated to end (planning.views.eta), while the Package has work left.
    eta: Eta | None = None


def _count(progress: RolloutProgress, state: State) -> int:
    return int(progress.counts.get(state.value, 0))


def blocked_count(progress: RolloutProgress) -> int:
    """The blocked nodes (a report of a fleet before issue 45 lists them all, with no count)."""
    return max(progress.blocked_count, len(progress.blocked))


def blocked_summary(blocked: Mapping[str, str], count: int = 0) -> str:
    """`N node(s) blocked: a (reason); b (reason)` for the first BLOCKED_SHOWN nodes, then a count (`count`:
    every blocked node, of which `blocked` lists some)."""
    names = sorted(blocked)
    total = max(count, len(names))
    shown = [f"{name} ({cut(blocked[name] or 'no reason given')})" for name in names[:BLOCKED_SHOWN]]
    more = (f"; and {total - len(shown)} more (see status.blockedNodes and status.blockedReasons)"
            if total > len(shown) else "")
    return f"{total} node(s) blocked: " + "; ".join(shown) + more


def package_view(progress: RolloutProgress) -> RolloutProgress:
    """`progress` as the Package shows it: `Complete` with blocked nodes is `Blocked` (module rules)."""
    if progress.phase is not RolloutPhase.COMPLETE or not progress.blocked:
        return progress
    return replace(progress, phase=RolloutPhase.BLOCKED,
                   message=progress.message or blocked_summary(progress.blocked, blocked_count(progress)))


def _keep_transition_times(
    conditions: list[Condition], previous: Sequence[Mapping[str, Any]]
) -> list[Condition]:
    before = {c.get("type"): c for c in previous}
    out = []
    for cond in conditions:
        old = before.get(cond.type)
        if old and old.get("status") == cond.status and old.get("lastTransitionTime"):
            cond = cond.model_copy(update={"last_transition_time": old["lastTransitionTime"]})
        out.append(cond)
    return out


def render_conditions(
    progress: RolloutProgress, generation: int, drain_blocked: Sequence[DrainBlock] = ()
) -> list[Condition]:
    """The Ready, Progressing and Degraded conditions for `progress` (module rules)."""
    progress = package_view(progress)
    phase, now = progress.phase, progress.updated_at
    complete = _count(progress, State.COMPLETE)
    counted = f"{complete}/{progress.total_nodes} nodes complete"
    summary = progress.message or counted
    ready = phase is RolloutPhase.COMPLETE and not progress.blocked
    blocked = blocked_summary(progress.blocked, blocked_count(progress)) if progress.blocked else ""
    ready_reason = phase.value if phase in _BAD or not blocked else NODES_BLOCKED
    ready_message = summary
    if blocked:
        # The counts, what the rollout says (unless it is this very summary), then who is blocked and why.
        said = [progress.message] if progress.message and progress.message != blocked else []
        ready_message = "; ".join([counted, *said, blocked])
    degraded_reasons = []
    if progress.erroring:
        degraded_reasons.append(f"{max(progress.erroring_count, len(progress.erroring))} node(s) erroring")
    if blocked and blocked != summary:
        degraded_reasons.append(blocked)
    degraded = phase in _BAD or bool(progress.erroring) or bool(progress.blocked)
    degraded_reason = (
        phase.value if phase in _BAD else ("NodesErroring" if progress.erroring else NODES_BLOCKED)
    )

    def condition(kind: ConditionType, status: bool, reason: str, message: str) -> Condition:
        return Condition(
            type=kind.value,
            status="True" if status else "False",
            reason=reason,
            message=message,
            last_transition_time=now,
            observed_generation=generation,
        )

    degraded_message = "; ".join([summary, *degraded_reasons]) if degraded else ""
    return [
        condition(ConditionType.READY, ready, ready_reason, ready_message),
        condition(ConditionType.PROGRESSING, phase in _WORKING, phase.value,
                  "; ".join(filter(None, [summary, drain_summary(drain_blocked)]))),
        condition(
            ConditionType.DEGRADED, degraded, degraded_reason if degraded else "AsExpected", degraded_message
        ),
    ]


def render_package_status(
    progress: RolloutProgress,
    generation: int,
    previous: Mapping[str, Any] | None = None,
    drain_blocked: Sequence[DrainBlock] = (),
    promotion: GlobalView | None = None,
) -> dict[str, Any]:
    """The Package `status` (CRD JSON) for `progress` at `generation`; `previous` is the current status;
    `drain_blocked`: the target nodes whose drain waits (module rules); `promotion`: the fleet's view of
    `global/<policy>` (spec.clusters)."""
    progress = package_view(progress)
    complete = _count(progress, State.COMPLETE)
    conditions = render_conditions(progress, generation, drain_blocked)
    conditions = _keep_transition_times(conditions, (previous or {}).get("conditions") or [])
    # Capped here too: a fleet from before issue 45 answers with every node listed and no reasons.
    blocked_shown, blocked_reasons = capped(progress.blocked)
    erroring_shown, erroring_reasons = capped(progress.erroring)
    blocked_reasons = progress.blocked_reasons or blocked_reasons
    erroring_reasons = progress.erroring_reasons or erroring_reasons
    status = PackageStatus(
        phase=progress.phase,
        observed_generation=generation,
        version=progress.version or None,
        message=progress.message,
        progress=f"{complete}/{progress.total_nodes}",
        nodes=NodeCounts(
            total=progress.total_nodes,
            waiting=_count(progress, State.WAITING),
            in_progress=_count(progress, State.IN_PROGRESS),
            complete=complete,
            erroring=_count(progress, State.ERRORING),
            blocked=_count(progress, State.BLOCKED),
            skipped=_count(progress, State.SKIPPED),
        ),
        current_batch=BatchStatus(number=progress.batch_number, size=progress.batch_size),
        canary=CanaryStatus(phase=progress.canary_phase, nodes=sorted(progress.canary_nodes)),
        blocked_nodes=[NodeReason(node=n, reason=r) for n, r in blocked_shown.items()],
        erroring_nodes=[NodeReason(node=n, reason=r) for n, r in erroring_shown.items()],
        blocked_reasons=[ReasonStatus(reason=r.reason, nodes=r.nodes) for r in blocked_reasons] or None,
        erroring_reasons=[ReasonStatus(reason=r.reason, nodes=r.nodes) for r in erroring_reasons] or None,
        drain_blocked_nodes=[DrainBlockedNode(node=b.node, reason=b.reason, message=cut(b.message),
                                              since=b.since or None)
                             for b in sorted(drain_blocked, key=lambda b: b.node)[:DRAIN_BLOCKED_SHOWN]],
        drain_blocked_node_count=len(drain_blocked) if len(drain_blocked) > DRAIN_BLOCKED_SHOWN else None,
        skipped_nodes=[NodeReason(node=n, reason=r[:REASON_CHARS]) for n, r in sorted(progress.skipped.items())][
            :SKIPPED_SHOWN] or None,
        skipped_node_count=max(progress.skipped_count, len(progress.skipped)) or None,
        next_window=progress.next_window or None,
        gate_failure=gate_failure_status(progress.gate_failure),
        rollback=rollback_status(progress.rollback),
        eta=eta_status(progress.eta),
        global_rollout=global_rollout_status(promotion),
        conditions=conditions,
    )
    return status.dump()


def eta_status(eta: Eta | None) -> EtaStatus | None:
    """`status.eta` (None: no estimate: nothing left, held, or halted)."""
    if eta is None or not eta.finish_at:
        return None
    return EtaStatus(finish_at=eta.finish_at, batches_left=eta.batches_left, source=eta.source)


def global_rollout_status(view: GlobalView | None) -> GlobalRolloutStatus | None:
    """`status.globalRollout`: the promotion across clusters as the fleet last heard it (None: none)."""
    if view is None:
        return None
    return GlobalRolloutStatus(
        change=view.change, summary=view.summary, stage=view.stage + 1, stages=len(view.stages),
        phase=RolloutPhase(view.phase), soak_until=view.soak_until or None, halted=view.halted or None,
        message=view.message,
        clusters=[ClusterStatus(name=c.cluster, stage=c.stage + 1, state=c.state, message=c.message)
                  for c in view.clusters],
    )


def global_halt_event(shown: Mapping[str, Any] | None, now: GlobalView | None) -> str:
    """The reason of the `GlobalHalted` Event to emit ("" = none): the promotion across clusters is
    halted for a reason the status `shown` (its `globalRollout`, CRD JSON) does not show yet."""
    if now is None or not now.halted or (shown or {}).get("halted") == now.halted:
        return ""
    return now.halted


def gate_failure_status(failure: GateFailure | None) -> GateFailureStatus | None:
    """`status.gateFailure` of a failed analysis gate (None: no failure)."""
    if failure is None:
        return None
    return GateFailureStatus(gate=failure.gate, query=failure.query, condition=failure.condition,
                             value=failure.value, time=failure.at, reason=failure.reason, when=failure.when)


def rollback_status(report: RollbackReport | None) -> RollbackStatus | None:
    """`status.rollback` of a failed canary's rollback (None: none)."""
    if report is None:
        return None
    return RollbackStatus(
        wave=report.wave, phase=report.phase, reason=report.reason,
        canary_failures=[NodeReason(node=n, reason=r) for n, r in sorted(report.failures.items())],
        nodes=sorted(report.nodes), versions=dict(report.versions), uninstalled=sorted(report.uninstalled),
        failed_nodes=[NodeReason(node=n, reason=r) for n, r in sorted(report.failed.items())],
    )


def _problem_text(problems: Sequence[ValidationProblem]) -> str:
    return "; ".join(f"{p.field}: {p.message}" for p in problems)


def render_invalid_package_status(
    problems: Sequence[ValidationProblem],
    generation: int,
    now: str,
    previous: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The status of a Package that failed validation: phase Invalid, Ready False, the problems as message."""
    progress = RolloutProgress(phase=RolloutPhase.INVALID, message=_problem_text(problems), updated_at=now)
    status = render_package_status(progress, generation, previous)
    # Keep what the last valid rollout reported about nodes; only phase, message and conditions change.
    kept = {
        k: v
        for k, v in (previous or {}).items()
        if k in ("nodes", "progress", "version", "blockedNodes", "erroringNodes")
    }
    return status | kept


def render_policy_status(
    problems: Sequence[ValidationProblem],
    generation: int,
    now: str,
    previous: Mapping[str, Any] | None = None,
    fleet: FleetReport | None = None,
) -> dict[str, Any]:
    """The status of a DeploymentPolicy: condition `Valid` True, or False with the problems, and
    (when `fleet` is given) its fleet's phase, wave, current batch, nodes per state and Packages."""
    valid = not problems
    message = "" if valid else _problem_text(problems)
    condition = Condition(
        type=ConditionType.VALID.value,
        status="True" if valid else "False",
        reason="Valid" if valid else "Invalid",
        message=message,
        last_transition_time=now,
        observed_generation=generation,
    )
    conditions = _keep_transition_times([condition], (previous or {}).get("conditions") or [])
    status = PolicyStatus(observed_generation=generation, message=message, conditions=conditions)
    if fleet is not None:
        counts = fleet.counts
        status = status.model_copy(update={
            "phase": fleet.phase, "fleet": f"fleet/{fleet.policy}", "wave": fleet.wave,
            "current_batch": BatchStatus(number=fleet.batch_number, size=fleet.batch_size),
            "nodes": NodeCounts(
                total=fleet.total_nodes, waiting=counts.get(State.WAITING.value, 0),
                in_progress=counts.get(State.IN_PROGRESS.value, 0), complete=counts.get(State.COMPLETE.value, 0),
                erroring=counts.get(State.ERRORING.value, 0), blocked=counts.get(State.BLOCKED.value, 0),
                skipped=counts.get(State.SKIPPED.value, 0)),
            "packages": sorted(fleet.packages),
            "message": message or fleet.message,
            "next_window": fleet.next_window or None,
            "gate_failure": gate_failure_status(fleet.gate_failure),
            "rollback": rollback_status(fleet.rollback),
            "eta": eta_status(fleet.eta),
            "global_rollout": global_rollout_status(fleet.global_rollout),
            "capacity": [CapacityStatus(compartment=c.compartment, resource=c.resource, available=c.available,
                                        floor=c.floor, total=c.total, down_nodes=c.down)
                         for c in fleet.capacity] or None,
            "waiting": [WaitStatus(compartment=w.compartment, rule=w.rule, nodes=w.nodes, reason=w.reason)
                        for w in fleet.waits] or None,
        })
    return status.dump()


class FleetReport(Protocol):
    """What the policy status reads of a fleet's progress (`planning.views.fleet_status.FleetProgress`)."""

    policy: str
    phase: RolloutPhase
    wave: int
    batch_number: int
    batch_size: int
    total_nodes: int
    counts: dict[str, int]
    message: str
    next_window: str
    gate_failure: GateFailure | None
    rollback: RollbackReport | None
    eta: Eta | None
    global_rollout: GlobalView | None
    capacity: list[CapacityUse]
    waits: list[WaitNote]

    @property
    def packages(self) -> Mapping[str, Any]: ...

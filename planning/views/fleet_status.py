"""A fleet's progress (its `progress` query): per Package, per node, and for the fleet. Pure.

`fleet_progress(state, phase, now)` derives everything from a `planning.rollout.fleet_state.FleetState`:
* per node and Package: `in_progress` (its window is out and carries the Package), the outcome
  recorded in this wave (`complete`, `erroring`, `blocked`), unless the latest listing found the
  node blocked since (an untolerated taint or an unreadable state on a node that was complete: not
  Ready any more; an erroring outcome stays), else what the latest listing says (`complete` when
  nothing is left to do, `blocked` for untolerated taints, unreadable state or a dependency not
  there, `waiting` for pending or paused work);
* per Package a `planning.views.status.RolloutProgress` (what the bridge renders into the Package's
  status): counts over the nodes it targets, its blocked and erroring nodes, and its own phase:
  `Pending` until a wave rolls out its current spec, `Paused` while it is paused (spec, annotation
  or signal) with work left, `Halted` while the fleet is, `Canary` while the fleet's canary runs,
  `Waiting` while the fleet waits for a maintenance window, `Progressing`, `Uninstalling` (an
  uninstall while any node it targets is waiting, in progress, erroring or blocked: `uninstalled`,
  which lets the bridge drop the Package's finalizer, only when none is), then
  `Failed` (erroring nodes) or `Complete`; with the fleet's next window opening and its failed
  analysis gate, if any; a Package the rollback of a failed canary carries shows `RollingBack`, then
  `RolledBack` (or `Halted` when the rollback failed) with the rollback (restricted to it), and other
  Packages with work left in that wave show `Halted` (the wave ended);
* per node and Package after its rollback window answered: `waiting` with the reason ("rolled back to
  1.0.0: the canary of wave 2 failed here") when it is back, `erroring` with the rollback's failure when not;
* per node its state, each Package's state, the reason when blocked or erroring, the
  disruptions the fleet's windows caused there (windows, cordons, drains, interrupts) and, when its
  last window gave it up (`spec.workloads.onDrainTimeout: Skip`), why (`skipped`); per Package its
  blocked nodes so skipped (`RolloutProgress.skipped`);
* for the fleet: the next opening of a maintenance window while it waits for one (`next_window`),
  the analysis gate that halted it (`gate_failure`: gate, query, value, time), each gate's
  latest sample (`gates`) and the rollback of the wave's failed canary (`rollback`).
* for a cluster's fleet whose policy has `spec.clusters` (ADR 0017): the last view of
  `global/<policy>` (`global_rollout`: the stage, every cluster's state);
* for a policy with capacity floors or topology limits (ADR 0015), as of the latest batch plan: each
  floor with that batch out (`capacity`: units available, floor, total, nodes down for other
  reasons) and the nodes each rule held back with the first reason (`waits`);
`details_line` is the Temporal UI's details line (phase, wave, batch, nodes complete, versions) and
`details_note` what it adds for a waiting (a maintenance window, or GPU budgets holding every node),
gate-halted or rolled-back fleet; the line counts complete nodes as `fleet_progress` does, without
building the report (the fleet sets it on every turn of its loop).
* the fleet's message, also on each Package while it works, names the nodes that left the targets
  (relabelled out of the selector, ignored, deleted) before they were updated (`departed`: they
  are no longer in the listing, so in no count).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from api.enums import CanaryPhase, RolloutPhase, State
from planning.rollout import fleet_rollback as rollbacks
from planning.rollout.disruption import CapacityUse, WaitNote, describe, is_held_by_others
from planning.rollout.fleet_state import FleetState, entries, package_revision
from planning.rollout.gates import GateFailure, GateTrack, failure_text
from planning.views.eta import Eta, Timings, eta_at
from planning.views.status import RolloutProgress
from protocol.clusters import GlobalView

# Nodes that left the targets before they were updated, named in a message (all are counted).
DEPARTED_SHOWN = 5
# A node's state from its Packages' states: the first that any Package has, in this order.
_NODE_STATE_ORDER = (State.ERRORING, State.IN_PROGRESS, State.WAITING, State.BLOCKED, State.COMPLETE)
_NOT_COMPLETE = frozenset(s.value for s in _NODE_STATE_ORDER if s is not State.COMPLETE)


@dataclass
class NodeProgress:
    """One node of the fleet."""

    state: str = State.WAITING.value
    # Package -> api.enums.State value.
    packages: dict[str, str] = field(default_factory=dict)
    reason: str = ""
    windows: int = 0
    cordons: int = 0
    drains: int = 0
    interrupts: int = 0
    # Why its last window gave the node up (`drain-timeout`; "" = it did not, or it is asked again).
    skipped: str = ""


@dataclass
class BudgetUse:
    """One compartment's budget and the fleet's windows out in it now."""

    limit: int = 0
    in_use: int = 0
    # The compartment's nodes in the wave, and those finished (succeeded or failed).
    nodes: int = 0
    finished: int = 0


@dataclass
class FleetProgress:
    """What a fleet reports (its `progress` query); plain data, serializable."""

    policy: str = ""
    phase: RolloutPhase = RolloutPhase.PENDING
    wave: int = 0
    batch_number: int = 0
    batch_size: int = 0
    canary_phase: CanaryPhase = CanaryPhase.NONE
    canary_nodes: list[str] = field(default_factory=list)
    message: str = ""
    total_nodes: int = 0
    # api.enums.State value -> nodes in that state.
    counts: dict[str, int] = field(default_factory=dict)
    packages: dict[str, RolloutProgress] = field(default_factory=dict)
    nodes: dict[str, NodeProgress] = field(default_factory=dict)
    # Compartment -> its budget and the windows out in it (never more than the budget).
    budgets: dict[str, BudgetUse] = field(default_factory=dict)
    # RFC 3339 time of this report (workflow.now()).
    updated_at: str = ""
    # RFC 3339 opening of the next maintenance window while the fleet waits for one ("" = not waiting).
    next_window: str = ""
    # The analysis gate that halted the fleet (cleared by resume or retry), and each gate's latest samples.
    gate_failure: GateFailure | None = None
    gates: dict[str, GateTrack] = field(default_factory=dict)
    # The rollback of the wave's failed canary (`canary.onFailure: rollback`), None when there is none.
    rollback: rollbacks.RollbackReport | None = None
    # When the wave's remaining batches end, all succeeding (planning.views.fleet_eta); None: nothing left,
    # halted, or a report without a clock (the Temporal UI's details line).
    eta: Eta | None = None
    # What the ETA rests on: the fleet's measured window durations and gaps (`noderoll plan` uses them too).
    timings: Timings = field(default_factory=Timings)
    # The promotion across clusters as `global/<policy>` last told this fleet (None: no spec.clusters).
    global_rollout: GlobalView | None = None
    # Capacity floors with the latest batch out, and what floors and topology limits held back (ADR 0015).
    capacity: list[CapacityUse] = field(default_factory=list)
    waits: list[WaitNote] = field(default_factory=list)


_ROLLBACK_PHASES = (RolloutPhase.ROLLING_BACK, RolloutPhase.ROLLED_BACK)
# Phases with an ETA: the fleet works through its batches (held ones wait for someone: no ETA).
_ETA_PHASES = (RolloutPhase.CANARY, RolloutPhase.PROGRESSING, RolloutPhase.UNINSTALLING)


def details_note(state: FleetState, phase: RolloutPhase) -> str:
    """What the Temporal UI's details line adds: the next window opening, why GPU budgets hold every node, or
    the failed gate."""
    if phase is RolloutPhase.WAITING and state.next_window:
        return f"; next maintenance window opens {state.next_window}"
    if phase is RolloutPhase.WAITING and state.planner is not None and state.planner.waits:
        return f"; {describe(state.planner.waits)}"  # GPU budgets hold every node
    if phase is RolloutPhase.HALTED and state.gates.failure is not None:
        return f"; {failure_text(state.gates.failure)}"
    if state.rollback is not None and (phase in _ROLLBACK_PHASES or phase is RolloutPhase.HALTED):
        return f"; {state.rollback.reason}"
    return ""


def details_line(state: FleetState, phase: RolloutPhase, fleet_id: str) -> str:
    """The Temporal UI's current-details line of the fleet (module docstring)."""
    planner = state.planner
    complete = sum(1 for node in state.targets if _node_complete(state, node))
    shown = ", ".join(f"{name} {entry.spec.get('version', '')}" for name, entry in sorted(entries(state).items()))
    return (
        f"**{phase.value}** {fleet_id} wave {state.wave}, batch {planner.batch_number if planner else 0}: "
        f"{complete}/{len(state.targets)} nodes complete; packages: {shown or 'none'}"
    ) + details_note(state, phase)


def _node_complete(state: FleetState, node: str) -> bool:
    """`_node_progress(state, node).state == complete`, stopping at the first Package that is not."""
    return not any(_package_state(state, node, package)[0] in _NOT_COMPLETE for package in state.targets[node].packages())


def _package_state(state: FleetState, node: str, package: str) -> tuple[str, str]:
    """(api.enums.State value, reason) of `package` on `node`."""
    flight = state.in_flight.get(node)
    if flight is not None and package in flight.packages:
        return State.IN_PROGRESS.value, ""
    rollback = state.rollback
    if rollback is not None and package in rollback.nodes.get(node, []):
        if node in rollback.failed:
            return State.ERRORING.value, f"rollback failed: {rollback.failed[node]}"
        if node in rollback.done:
            return State.WAITING.value, rollbacks.node_reason(rollback, node, package)
    record = state.records.get(node)
    targets = state.targets[node]
    outcome = record.outcomes.get(package) if record is not None else None
    if outcome is not None and (outcome == State.ERRORING.value or package not in targets.blocked):
        return outcome, record.messages.get(package, "") if record is not None else ""
    if package in targets.done:
        return State.COMPLETE.value, ""
    if package in targets.blocked:
        return State.BLOCKED.value, targets.blocked[package]
    if package in targets.waiting:
        return State.BLOCKED.value, targets.waiting[package]
    if node in state.departed:
        return State.SKIPPED.value, state.departed[node]
    if is_held_by_others(targets.down):
        return State.WAITING.value, targets.down  # not started while another maintenance holds it
    return State.WAITING.value, ""


def _node_progress(state: FleetState, node: str) -> NodeProgress:
    targets = state.targets[node]
    packages, reasons = {}, []
    for package in targets.packages():
        value, reason = _package_state(state, node, package)
        packages[package] = value
        if reason and value != State.COMPLETE.value:
            reasons.append(f"{package}: {reason}")
    present = set(packages.values())
    node_state = next((s.value for s in _NODE_STATE_ORDER if s.value in present), State.COMPLETE.value)
    tally = state.disruptions.get(node)
    record = state.records.get(node)
    return NodeProgress(
        state=node_state, packages=packages, reason="; ".join(reasons),
        windows=tally.windows if tally else 0, cordons=tally.cordons if tally else 0,
        drains=tally.drains if tally else 0, interrupts=tally.interrupts if tally else 0,
        skipped=record.skipped if record is not None and State.BLOCKED.value in present else "",
    )


def _package_phase(
    state: FleetState, name: str, counts: Mapping[str, int], fleet_phase: RolloutPhase, paused: bool
) -> RolloutPhase:
    entry = entries(state)[name]
    if state.revisions.get(name) != package_revision(entry):
        return RolloutPhase.PENDING
    left = counts.get(State.WAITING.value, 0) + counts.get(State.IN_PROGRESS.value, 0)
    if entry.uninstall:
        # Uninstalled only when no targeted node still has it: a node the uninstall cannot reach yet
        # (blocked: a taint, such as the not-ready one a node keeps for seconds after its own reboot;
        # unreadable state) would otherwise lose its uninstall with the Package's finalizer.
        unfinished = left or counts.get(State.ERRORING.value) or counts.get(State.BLOCKED.value)
        return RolloutPhase.UNINSTALLING if unfinished else RolloutPhase.COMPLETE
    if state.rollback is not None and name in state.rollback.orders:
        return rollbacks.phase(state.rollback) if fleet_phase is not RolloutPhase.HALTED else fleet_phase
    if left:
        if paused and not counts.get(State.IN_PROGRESS.value):
            return RolloutPhase.PAUSED
        if fleet_phase in (RolloutPhase.HALTED, RolloutPhase.PAUSED, RolloutPhase.CANARY, RolloutPhase.WAITING):
            return fleet_phase
        if fleet_phase in _ROLLBACK_PHASES:
            return RolloutPhase.HALTED  # the wave ended with the rollback: its nodes wait for the next one
        return RolloutPhase.PROGRESSING
    if counts.get(State.ERRORING.value):
        return RolloutPhase.FAILED
    return RolloutPhase.COMPLETE


def _fleet_message(state: FleetState) -> str:
    """The fleet's message, naming the nodes that left the targets before they were updated."""
    if not state.departed:
        return state.message
    names = sorted(state.departed)
    more = f" and {len(names) - DEPARTED_SHOWN} more" if len(names) > DEPARTED_SHOWN else ""
    note = (f"{len(names)} node(s) no longer targeted (left the selector, ignored or deleted), not updated: "
            f"{', '.join(names[:DEPARTED_SHOWN])}{more}")
    return f"{state.message}; {note}" if state.message else note


def _package_message(name: str, phase: RolloutPhase, fleet: str, state: FleetState) -> str:
    if phase is RolloutPhase.PENDING:
        return f"waiting for {fleet} to start a wave with this spec"
    if phase is RolloutPhase.PAUSED:
        return "paused: kept out of new windows (spec.paused, noderoll.io/pause or the pause signal)"
    if phase in (RolloutPhase.HALTED, RolloutPhase.CANARY, RolloutPhase.PROGRESSING, RolloutPhase.WAITING,
                 *_ROLLBACK_PHASES) or state.departed:
        message = _fleet_message(state)
        return f"{fleet}: {message}" if message else ""
    return ""


def has_eta(fleet_phase: RolloutPhase) -> bool:
    """A fleet in this phase works through its batches and has an ETA (held ones wait for someone: none)."""
    return fleet_phase in _ETA_PHASES


def fleet_progress(state: FleetState, fleet_phase: RolloutPhase, now: str, fleet_id: str = "",
                   eta: Eta | None = None) -> FleetProgress:
    """The `progress` query's answer for `state` (module rules); `fleet_id` names the fleet in messages
    (default `fleet/<policy>`; `fleet/<cluster>/<policy>` in a named cluster); `eta`: the wave's ETA
    (`planning.views.fleet_eta.fleet_eta`), shown in the phases that have one."""
    planner = state.planner
    fleet = fleet_id or f"fleet/{state.spec.policy_name if state.spec else ''}"
    nodes = {node: _node_progress(state, node) for node in sorted(state.targets)}
    report = FleetProgress(
        policy=state.spec.policy_name if state.spec else "",
        phase=fleet_phase, wave=state.wave,
        batch_number=planner.batch_number if planner else 0,
        batch_size=len(planner.current_batch) if planner else 0,
        canary_phase=planner.canary_phase if planner else CanaryPhase.NONE,
        canary_nodes=list(planner.canary_nodes) if planner else [],
        message=_fleet_message(state), total_nodes=len(nodes), nodes=nodes, updated_at=now,
        next_window=state.next_window if fleet_phase is RolloutPhase.WAITING else "",
        gate_failure=state.gates.failure, gates={**state.gates.continuous, **state.gates.tracks},
        rollback=rollbacks.report(state.rollback, fleet_phase is RolloutPhase.HALTED) if state.rollback else None,
        eta=eta if has_eta(fleet_phase) else None,
        timings=state.timings,
        global_rollout=state.turns.view,
        capacity=list(planner.capacity) if planner else [], waits=list(planner.waits) if planner else [],
    )
    for progress in nodes.values():
        report.counts[progress.state] = report.counts.get(progress.state, 0) + 1
    if planner is not None:
        for comp in planner.compartments.values():
            out = sum(1 for n in comp.nodes if n in state.in_flight)
            report.budgets[comp.name] = BudgetUse(limit=comp.budget, in_use=out, nodes=len(comp.nodes),
                                                  finished=comp.succeeded + comp.failed)
    for name, entry in sorted(entries(state).items()):
        counts: dict[str, int] = {}
        blocked, erroring, skipped = {}, {}, {}
        for node in sorted(state.targets):
            value = nodes[node].packages.get(name)
            if value is None:
                continue
            counts[value] = counts.get(value, 0) + 1
            if value in (State.BLOCKED.value, State.ERRORING.value):
                _value, reason = _package_state(state, node, name)
                (blocked if value == State.BLOCKED.value else erroring)[node] = reason
                if value == State.BLOCKED.value and nodes[node].skipped:
                    skipped[node] = reason
        paused = entry.paused or name in state.paused_packages or state.paused
        phase = _package_phase(state, name, counts, fleet_phase, paused)
        report.packages[name] = RolloutProgress(
            phase=phase, version=str(entry.spec.get("version", "")), total_nodes=sum(counts.values()),
            counts=counts, batch_number=report.batch_number, batch_size=report.batch_size,
            canary_phase=report.canary_phase, canary_nodes=report.canary_nodes,
            blocked=blocked, erroring=erroring, skipped=skipped, message=_package_message(name, phase, fleet, state),
            updated_at=now, generation=entry.generation,
            uninstalled=entry.uninstall and phase is RolloutPhase.COMPLETE,
            next_window=report.next_window if phase is RolloutPhase.WAITING else "",
            gate_failure=report.gate_failure if phase is RolloutPhase.HALTED else None,
            rollback=_package_rollback(report.rollback, state, name),
            eta=report.eta if phase in _ETA_PHASES else None,
        )
    return report


def _package_rollback(report: rollbacks.RollbackReport | None, state: FleetState,
                      name: str) -> rollbacks.RollbackReport | None:
    """The fleet's rollback as one Package shows it: its nodes and its version (None: not carried)."""
    rollback = state.rollback
    if report is None or rollback is None or name not in rollback.orders:
        return None
    nodes = sorted(n for n, packages in rollback.nodes.items() if name in packages)
    return replace(report, nodes=nodes, versions={p: v for p, v in report.versions.items() if p == name},
                   uninstalled=[p for p in report.uninstalled if p == name],
                   failed={n: why for n, why in report.failed.items() if n in nodes})


def read_at(progress: FleetProgress, now: str) -> FleetProgress:
    """`progress` as of `now` (when its reader reads it): the fleet's ETA and each Package's moved there
    (`planning.views.eta.eta_at`); the fleet computed them at its last workflow task."""
    if progress.eta is None:
        return progress
    packages = {name: replace(p, eta=eta_at(p.eta, now)) if p.eta is not None else p
                for name, p in progress.packages.items()}
    return replace(progress, eta=eta_at(progress.eta, now), packages=packages)

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

Size and cost at scale (issue 45): the answer is a summary unless a `protocol.fleet.ProgressFilter` asks for
nodes: `nodes` is then one page of the nodes it matches (`nodes_matched`, `nodes_next`), else empty; the
disruptions are summed (`disruptions`, and per kind how many nodes had each count, `disruption_nodes`); every
Package's blocked and erroring nodes are capped (`planning.views.capped`) with their counts. Each node's view
and the sums come from `planning.views.fleet_nodes.NodeViews`, which recomputes only the nodes that changed
since it last looked: an answer costs the changed nodes, the Packages and the listed page, not the fleet.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from api.enums import CanaryPhase, RolloutPhase, State
from planning.rollout import fleet_rollback as rollbacks
from planning.rollout.disruption import CapacityUse, WaitNote, describe
from planning.rollout.fleet_state import FleetState, entries, package_revision
from planning.rollout.gates import GateFailure, GateTrack, failure_text
from planning.views.capped import capped
from planning.views.eta import Eta, Timings, eta_at
from planning.views.fleet_nodes import NodeProgress, NodeViews, complete_nodes, histogram, node_views
from planning.views.status import SKIPPED_SHOWN, RolloutProgress
from protocol.clusters import GlobalView
from protocol.fleet import ProgressFilter

__all__ = ["BudgetUse", "FleetProgress", "NodeProgress", "details_line", "details_note", "fleet_progress",
           "has_eta", "read_at", "with_nodes"]

# Nodes that left the targets before they were updated, named in a message (all are counted).
DEPARTED_SHOWN = 5
# A `progress` page of nodes: its default and largest size.
NODES_PAGE = 500
NODES_PAGE_MAX = 1000


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
    # The nodes a `ProgressFilter` asked for, one page in name order (none without a filter), how many nodes
    # it matched in all, and the `after` of the next page ("" = this was the last).
    nodes: dict[str, NodeProgress] = field(default_factory=dict)
    nodes_matched: int = 0
    nodes_next: str = ""
    # The fleet's windows' disruptions summed over its nodes (windows, cordons, drains, interrupts), and per
    # kind how many nodes had each count ({"drains": {"1": 200}}: one drain on each of 200 nodes).
    disruptions: dict[str, int] = field(default_factory=dict)
    disruption_nodes: dict[str, dict[str, int]] = field(default_factory=dict)
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
    complete = complete_nodes(state)
    shown = ", ".join(f"{name} {entry.spec.get('version', '')}" for name, entry in sorted(entries(state).items()))
    return (
        f"**{phase.value}** {fleet_id} wave {state.wave}, batch {planner.batch_number if planner else 0}: "
        f"{complete}/{len(state.targets)} nodes complete; packages: {shown or 'none'}"
    ) + details_note(state, phase)


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
    """The `progress` query's answer for `state` (module rules), a summary: no node listed (`with_nodes`);
    `fleet_id` names the fleet in messages (default `fleet/<policy>`; `fleet/<cluster>/<policy>` in a named
    cluster); `eta`: the wave's ETA (`planning.views.fleet_eta.fleet_eta`), shown in the phases that have one."""
    planner = state.planner
    fleet = fleet_id or f"fleet/{state.spec.policy_name if state.spec else ''}"
    views = node_views(state)
    report = FleetProgress(
        policy=state.spec.policy_name if state.spec else "",
        phase=fleet_phase, wave=state.wave,
        batch_number=planner.batch_number if planner else 0,
        batch_size=len(planner.current_batch) if planner else 0,
        canary_phase=planner.canary_phase if planner else CanaryPhase.NONE,
        canary_nodes=list(planner.canary_nodes) if planner else [],
        message=_fleet_message(state), total_nodes=len(views.nodes), updated_at=now,
        next_window=state.next_window if fleet_phase is RolloutPhase.WAITING else "",
        gate_failure=state.gates.failure, gates={**state.gates.continuous, **state.gates.tracks},
        rollback=rollbacks.report(state.rollback, fleet_phase is RolloutPhase.HALTED) if state.rollback else None,
        eta=eta if has_eta(fleet_phase) else None,
        timings=state.timings,
        global_rollout=state.turns.view,
        capacity=list(planner.capacity) if planner else [], waits=list(planner.waits) if planner else [],
        counts=dict(views.counts),
        disruptions={kind: views.disruptions.get(kind, 0) for kind in ("windows", "cordons", "drains", "interrupts")},
        disruption_nodes={kind: histogram(counts) for kind, counts in sorted(views.histograms.items())},
    )
    if planner is not None:
        out: dict[str, int] = {}
        for node in state.in_flight:
            compartment = views.compartment_of(planner, node)
            out[compartment] = out.get(compartment, 0) + 1
        for comp in planner.compartments.values():
            report.budgets[comp.name] = BudgetUse(limit=comp.budget, in_use=out.get(comp.name, 0),
                                                  nodes=len(comp.nodes), finished=comp.succeeded + comp.failed)
    for name in sorted(entries(state)):
        report.packages[name] = _package_progress(state, views, report, name, fleet)
    return report


def _package_progress(state: FleetState, views: NodeViews, report: FleetProgress, name: str,
                      fleet: str) -> RolloutProgress:
    """One Package's part of the report: its nodes per state, its blocked and erroring nodes capped."""
    entry = entries(state)[name]
    part = views.packages.get(name)
    counts = dict(part.counts) if part is not None else {}
    problems = part.problems if part is not None else {}
    blocked = {n: why for n, (value, why) in problems.items() if value == State.BLOCKED.value}
    erroring = {n: why for n, (value, why) in problems.items() if value == State.ERRORING.value}
    skipped = part.skipped if part is not None else {}
    shown_blocked, blocked_reasons = capped(blocked)
    shown_erroring, erroring_reasons = capped(erroring)
    paused = entry.paused or name in state.paused_packages or state.paused
    phase = _package_phase(state, name, counts, report.phase, paused)
    return RolloutProgress(
        phase=phase, version=str(entry.spec.get("version", "")), total_nodes=sum(counts.values()),
        counts=counts, batch_number=report.batch_number, batch_size=report.batch_size,
        canary_phase=report.canary_phase, canary_nodes=report.canary_nodes,
        blocked=shown_blocked, erroring=shown_erroring,
        skipped={n: skipped[n] for n in sorted(skipped)[:SKIPPED_SHOWN]},
        blocked_count=len(blocked), erroring_count=len(erroring), skipped_count=len(skipped),
        blocked_reasons=blocked_reasons, erroring_reasons=erroring_reasons,
        message=_package_message(name, phase, fleet, state),
        updated_at=report.updated_at, generation=entry.generation,
        uninstalled=entry.uninstall and phase is RolloutPhase.COMPLETE,
        next_window=report.next_window if phase is RolloutPhase.WAITING else "",
        gate_failure=report.gate_failure if phase is RolloutPhase.HALTED else None,
        rollback=_package_rollback(report.rollback, state, name),
        eta=report.eta if phase in _ETA_PHASES else None,
    )


def with_nodes(report: FleetProgress, state: FleetState, wanted: ProgressFilter | None) -> FleetProgress:
    """`report` with the page of nodes `wanted` asks for (none without a filter), how many it matched and the
    next page's `after` (`protocol.fleet.ProgressFilter`)."""
    if wanted is None or not wanted.lists_nodes():
        return report
    views = node_views(state)
    report = replace(report)
    named, states = set(wanted.nodes), set(wanted.states)
    if wanted.all or states:
        matched = sorted(n for n, view in views.nodes.items() if wanted.all or n in named or view.state in states)
    else:
        matched = sorted(n for n in named if n in views.nodes)
    limit = min(wanted.limit or NODES_PAGE, NODES_PAGE_MAX)
    page = [n for n in matched if n > wanted.after][:limit]
    report.nodes = {n: views.nodes[n] for n in page}
    report.nodes_matched = len(matched)
    report.nodes_next = page[-1] if page and page[-1] != matched[-1] else ""
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

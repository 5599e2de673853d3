"""What a fleet rollout remembers, and the rules that change it. Pure (no I/O, deterministic).

`FleetState` is the whole memory of `fleet/<policy>` as plain dataclasses (carried through
continue-as-new as JSON). The workflow (`workflows/fleet.py`) only sequences; every decision about
waves, requests, results and retries is a function here, unit-tested without Temporal.

Waves: the fleet's desired state is its Packages' specs (a revision per Package: the spec without
`paused`, plus the uninstall flag) and its policy. Any change of a revision or of the policy
wants a new wave; it starts once no window is in flight ("windows in flight finish first"):
the nodes are listed again, a new batch planner is built over them (same node order: the order
key is the fleet, not a Package version) and the wave's records start empty, so a node whose
window already carried the change is done (its recorded state shows it) and any other node with
work pending gets one window for everything pending there. A wave that changes no Package (a
policy edit) runs no canary; otherwise the canary covers each changed Package. A Package removed
without uninstall starts no wave: it just leaves the windows not yet handed out.

Per node and wave the fleet records each carried Package's outcome. A node is asked at most once
per wave for a Package: only `retry` (or a new wave) clears an outcome, except `blocked`
outcomes, which are cleared when the node itself changes (its fingerprint). A window carries a
dependent only together with each of its dependencies pending on that node: a dependency paused by
signal (or answered erroring or blocked) keeps its dependents out, as `spec.paused` does in target
selection.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from api.enums import CanaryPhase, State
from api.policy import DeploymentPolicySpec
from planning import batches
from planning.batch_state import BatchPlannerState
from planning.fleet_targets import FleetSelection, NodeTargets
from protocol.fleet import Filter, FleetSpec, PackageEntry, WindowResult

# Node workflows that closed without answering: how often a request is re-sent before the node is erroring.
LOST_RESENDS = 2
DEPARTED_REASON = "no longer a target (left the selector, ignored or deleted) before it was updated"


@dataclass
class InFlight:
    """A request handed to a node workflow and not answered yet."""

    request_id: str
    packages: list[str] = field(default_factory=list)
    # RFC 3339 time it was handed over.
    sent_at: str = ""
    # Times it was re-sent because the node workflow closed without answering.
    resent: int = 0


@dataclass
class NodeRecord:
    """A node's outcomes in the current wave."""

    # Package -> api.enums.State value (complete, erroring, blocked).
    outcomes: dict[str, str] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)
    # The node's fingerprint when a blocked outcome was recorded.
    fingerprint: str = ""


@dataclass
class Disruptions:
    """What the fleet's windows did to one node, over the fleet's lifetime."""

    windows: int = 0
    cordons: int = 0
    drains: int = 0
    interrupts: int = 0


@dataclass
class FleetState:
    """Everything a fleet carries into its next run (see the module docstring)."""

    spec: FleetSpec | None = None
    wave: int = 0
    # Package -> revision the current wave rolls out; the policy's revision.
    revisions: dict[str, str] = field(default_factory=dict)
    policy_revision: str = ""
    # Packages the current wave changes (the canary covers each).
    changed: list[str] = field(default_factory=list)
    wave_wanted: bool = False
    planner: BatchPlannerState | None = None
    sequence: int = 0
    targets: dict[str, NodeTargets] = field(default_factory=dict)
    in_flight: dict[str, InFlight] = field(default_factory=dict)
    records: dict[str, NodeRecord] = field(default_factory=dict)
    disruptions: dict[str, Disruptions] = field(default_factory=dict)
    departed: dict[str, str] = field(default_factory=dict)
    # Operator pauses (signals): the whole fleet, or some Packages / nodes.
    paused: bool = False
    paused_packages: list[str] = field(default_factory=list)
    paused_nodes: list[str] = field(default_factory=list)
    halted: bool = False
    promote: bool = False
    # RFC 3339 end of the canary soak ("" = none running).
    soak_until: str = ""
    message: str = ""


# --- desired state ---------------------------------------------------------------------------


def _digest(data: object) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def package_revision(entry: PackageEntry) -> str:
    """What a wave rolls out of one Package: its spec without `paused`, and whether it is uninstalled."""
    spec = {k: v for k, v in entry.spec.items() if k != "paused"}
    return _digest({"spec": spec, "uninstall": entry.uninstall})


def policy_revision(spec: FleetSpec) -> str:
    """The revision of the fleet's policy (None: the built-in one)."""
    return _digest(spec.policy)


def entries(state: FleetState) -> dict[str, PackageEntry]:
    """The fleet's Packages by name."""
    return {e.name: e for e in (state.spec.packages if state.spec else [])}


def set_spec(state: FleetState, spec: FleetSpec) -> bool:
    """Take a new desired state; True when it wants a new wave (a revision or the policy changed)."""
    state.spec = spec
    wanted = {e.name: package_revision(e) for e in spec.packages}
    if any(state.revisions.get(p) != r for p, r in wanted.items()) or policy_revision(spec) != state.policy_revision:
        state.wave_wanted = True
    elif not state.wave_wanted:
        # Only removals (a Package deleted without uninstall): nothing new to roll out.
        state.revisions = {p: r for p, r in state.revisions.items() if p in wanted}
    return state.wave_wanted


def start_wave(state: FleetState, selection: FleetSelection, policy: DeploymentPolicySpec, identity: str) -> None:
    """Begin a new wave over `selection` (call only with nothing in flight)."""
    assert state.spec is not None
    revisions = {e.name: package_revision(e) for e in state.spec.packages}
    state.changed = sorted(p for p, r in revisions.items() if state.revisions.get(p) != r)
    state.revisions = revisions
    state.policy_revision = policy_revision(state.spec)
    state.wave += 1
    state.wave_wanted = False
    state.records = {}
    state.departed = {}
    state.soak_until = ""
    state.promote = False
    state.targets = dict(selection.nodes)
    planner = batches.new_planner(batches.PlannerInput(policy, selection.eligible(), identity))
    if not state.changed:
        # Only the policy changed: the Packages passed their canary in an earlier wave.
        planner.canary_phase = CanaryPhase.PASSED
    state.planner = planner


def refresh_targets(state: FleetState, selection: FleetSelection, policy: DeploymentPolicySpec) -> list[str]:
    """A newer listing within the wave: joiners, departures, lifted blocks. Returns the joiners."""
    planner = state.planner
    assert planner is not None
    known = {n for c in planner.compartments.values() for n in c.nodes}
    joined = batches.add_nodes(planner, policy, [n for n in selection.eligible() if n.name not in known])
    for node in sorted(known):
        if node in selection.nodes or node in state.departed:
            continue
        if node not in state.in_flight and wanted(state, node):
            state.departed[node] = DEPARTED_REASON
    for node in selection.nodes:
        state.departed.pop(node, None)
    for node, record in state.records.items():
        current = selection.nodes.get(node)
        if record.fingerprint and current is not None and current.fingerprint != record.fingerprint:
            # The node changed since it answered `blocked` (annotation fixed, taint gone): ask again.
            for package in [p for p, s in record.outcomes.items() if s == State.BLOCKED.value]:
                record.outcomes.pop(package)
                record.messages.pop(package, None)
            record.fingerprint = ""
    state.targets = dict(selection.nodes)
    return joined


# --- requests and results ----------------------------------------------------------------------


def _operator_paused(state: FleetState, package: str) -> bool:
    return package in state.paused_packages


def wanted(state: FleetState, node: str) -> list[str]:
    """Packages the node's next window would carry now (pending, not paused, not yet answered this wave).

    A dependent stays out while a dependency pending on the node is not carried with it (paused by
    signal, or answered erroring or blocked in this wave): its window would only answer it blocked,
    and the dependency's later window would then cost the node a second drain and interrupt.
    """
    targets = state.targets.get(node)
    if targets is None or node in state.paused_nodes or node in state.departed:
        return []
    record = state.records.get(node)
    answered = record.outcomes if record else {}
    current = state.revisions
    carried = [p for p in targets.pending if p in current and p not in answered and not _operator_paused(state, p)]
    return _with_their_dependencies(state, targets.pending, carried, answered)


def _with_their_dependencies(
    state: FleetState, pending: Collection[str], carried: list[str], answered: Mapping[str, str]
) -> list[str]:
    """`carried` without the dependents of a Package pending on the node but not carried (a fixpoint)."""
    specs = entries(state)
    kept = list(carried)
    changed = True
    while changed:
        changed = False
        for package in list(kept):
            entry = specs.get(package)
            if entry is None or entry.uninstall:
                continue
            held = [d for d in entry.spec.get("dependsOn") or {}
                    if d in pending and d not in kept and answered.get(d) != State.COMPLETE.value]
            if held:
                kept.remove(package)
                changed = True
    return kept


def startable(state: FleetState) -> set[str]:
    """Nodes that may get a request now: work wanted and none in flight."""
    return {n for n in state.targets if n not in state.in_flight and wanted(state, n)}


def remaining(state: FleetState) -> set[str]:
    """Nodes with work left in this wave: startable ones and those whose window is out."""
    return startable(state) | set(state.in_flight)


def canary_cover(state: FleetState) -> list[list[str]]:
    """For each Package the wave changes: the startable nodes that would carry it (the canary takes one of each)."""
    ready = sorted(startable(state))
    cover = []
    for package in state.changed:
        nodes = [n for n in ready if package in wanted(state, n)]
        if nodes:
            cover.append(nodes)
    return cover


def request_id(state: FleetState, fleet: str, node: str) -> str:
    """A new request id, unique within the fleet (fleet, wave, sequence, node)."""
    state.sequence += 1
    return f"{fleet}:{state.wave}:{state.sequence}:{node}"


def record_result(state: FleetState, result: WindowResult) -> bool:
    """Take a node workflow's answer; False when it answers a request no longer in flight (stale)."""
    flight = state.in_flight.get(result.node)
    if flight is None or flight.request_id != result.request_id:
        return False
    del state.in_flight[result.node]
    if result.withdrawn:
        return True
    record = state.records.setdefault(result.node, NodeRecord())
    for package, outcome in sorted(result.outcomes.items()):
        if outcome.state == State.SKIPPED.value:
            continue
        record.outcomes[package] = outcome.state
        record.messages[package] = outcome.message
        if outcome.state == State.BLOCKED.value:
            targets = state.targets.get(result.node)
            record.fingerprint = targets.fingerprint if targets else ""
    if result.cordoned or result.drained or result.interrupt:
        tally = state.disruptions.setdefault(result.node, Disruptions())
        tally.windows += 1
        tally.cordons += int(result.cordoned)
        tally.drains += int(result.drained)
        tally.interrupts += int(bool(result.interrupt))
    return True


def node_failed(state: FleetState, node: str) -> bool:
    """True when a Package ended erroring on `node` in this wave."""
    record = state.records.get(node)
    return record is not None and State.ERRORING.value in record.outcomes.values()


def batch_results(state: FleetState, batch: Collection[str]) -> tuple[list[str], list[str]] | None:
    """(succeeded, failed) once no node of `batch` is in flight, else None.

    A node failed when a Package ended erroring there; it succeeded when none did and one completed
    (a Package answered blocked next to it does not fail the node); a node whose Packages were all
    blocked or withdrawn counts as neither.
    """
    if any(n in state.in_flight for n in batch):
        return None
    ok, bad = [], []
    for node in sorted(batch):
        record = state.records.get(node)
        if record is None or not record.outcomes:
            continue
        if node_failed(state, node):
            bad.append(node)
        elif State.COMPLETE.value in record.outcomes.values():
            ok.append(node)
    return ok, bad


def failed_nodes(state: FleetState) -> list[str]:
    """Nodes where a Package ended erroring in this wave."""
    return sorted(n for n in state.records if node_failed(state, n))


# --- operator signals ----------------------------------------------------------------------------


def _add(items: list[str], new: Collection[str]) -> None:
    items.extend(sorted(set(new) - set(items)))


def apply_pause(state: FleetState, scope: Filter) -> None:
    """`pause`: no new windows (for the whole fleet, or for these Packages / nodes)."""
    if scope.is_empty():
        state.paused = True
    _add(state.paused_packages, scope.packages)
    _add(state.paused_nodes, scope.nodes)


def apply_resume(state: FleetState, scope: Filter) -> None:
    """`resume`: clear pauses; without a filter also the halt, and promote a canary awaiting promotion."""
    if scope.is_empty():
        state.paused, state.halted, state.promote = False, False, True
        state.paused_packages.clear()
        state.paused_nodes.clear()
        if state.planner is not None and state.planner.halted:
            batches.resume_after_halt(state.planner)
        return
    state.paused_packages[:] = [p for p in state.paused_packages if p not in scope.packages]
    state.paused_nodes[:] = [n for n in state.paused_nodes if n not in scope.nodes]


def apply_halt(state: FleetState, scope: Filter) -> list[str]:
    """`halt`: stop at the next safe point; returns the nodes whose queued requests must be withdrawn.

    Without a filter the whole fleet halts; with one, the named Packages and nodes are paused and
    the requests carrying them are withdrawn (windows already running finish).
    """
    if scope.is_empty():
        state.halted = True
        return sorted(state.in_flight)
    apply_pause(state, Filter(scope.packages, scope.nodes))
    return sorted(
        node for node, flight in state.in_flight.items()
        if node in scope.nodes or set(flight.packages) & set(scope.packages)
    )


def apply_retry(state: FleetState, scope: Filter) -> list[str]:
    """`retry`: erroring and blocked outcomes (all, or of these Packages / nodes) are asked again; clears a halt."""
    retried = []
    for node, record in sorted(state.records.items()):
        if scope.nodes and node not in scope.nodes:
            continue
        again = [
            p for p, s in record.outcomes.items()
            if s in (State.ERRORING.value, State.BLOCKED.value) and (not scope.packages or p in scope.packages)
        ]
        for package in again:
            record.outcomes.pop(package)
            record.messages.pop(package, None)
        if again:
            retried.append(node)
    state.halted = False
    if state.planner is not None and state.planner.halted:
        batches.resume_after_halt(state.planner)
    return retried


# --- watchdog ----------------------------------------------------------------------------------------


def overdue(state: FleetState, now: datetime, after: timedelta) -> list[str]:
    """Nodes whose request has been out longer than `after` (their node workflow is checked)."""
    return sorted(
        n for n, f in state.in_flight.items() if f.sent_at and datetime.fromisoformat(f.sent_at) + after <= now
    )


def lost(state: FleetState, node: str, how: str) -> bool:
    """The node workflow holding `node`'s request closed without answering (`how`: its status).

    Returns True when the request should be sent again; after `LOST_RESENDS` re-sends the node's
    Packages end erroring with the reason instead.
    """
    flight = state.in_flight.get(node)
    if flight is None:
        return False
    if flight.resent < LOST_RESENDS:
        return True
    del state.in_flight[node]
    record = state.records.setdefault(node, NodeRecord())
    message = (f"node workflow node/{node} closed ({how}) without answering, {flight.resent + 1} times; "
               "signal retry to ask again")
    for package in flight.packages:
        record.outcomes[package] = State.ERRORING.value
        record.messages[package] = message
    return False

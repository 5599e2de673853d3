"""What a fleet rollout remembers, and the rules that change it. Pure (no I/O, deterministic).

`FleetState` is the whole memory of `fleet/<policy>` as plain dataclasses (carried through
continue-as-new as JSON). The fleet machine (`planning.fleet`, run by `workflows/fleet.py`) sequences;
every decision about waves, requests, results and retries is a function here, unit-tested without Temporal.

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
per wave for a Package: only `retry` (or a new wave) clears an outcome, except a `blocked`
outcome, cleared when the node itself changes (its fingerprint; not after a window that skipped the node),
and a `complete` one whose work is
pending again at a later listing (the node's record was removed or reset: it is asked again).
`gates` and `next_window`: analysis gates and maintenance windows (`planning/rollout/gates.py`, `maintenance.py`).
`previous`, `outgoing` and `rollback`: what a failed canary goes back to, and its rollback
(`planning/rollout/fleet_rollback.py`, `canary.onFailure: rollback`).
A window carries a dependent only together with each of its dependencies pending on that node: a
dependency paused by signal (or answered erroring or blocked) keeps its dependents out, as
`spec.paused` does in target selection.
`upcoming` and `window_seconds`: drain-ahead's marks and the window durations its estimate reads
(`planning/rollout/drain_ahead.py`); `preview_next` is the batch the planner would give next.
Which nodes want a window (`wanted`, `startable`, `remaining`) is kept by `planning.rollout.work_index`: every
rule here that changes what a node wants tells it (`touch_nodes`, `work_index.touch_all`), so the fleet's loop does not read
every node at every step (issue 45).
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Collection, Mapping, Set
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from api.enums import CanaryPhase, State
from api.policy import DeploymentPolicySpec
from planning.clusters.cluster_turns import ClusterTurns
from planning.rollout import batches, disruption, work_index
from planning.rollout import drain_ahead as ahead
from planning.rollout import fleet_rerun as rerun
from planning.rollout import fleet_rollback as rollbacks
from planning.rollout import gates as gate_rules
from planning.rollout.batch_state import BatchPlannerState
from planning.rollout.fleet_targets import FleetSelection, NodeTargets
from planning.views.eta import Timings, record_hand_out, record_window
from protocol.fleet import Filter, FleetSpec, PackageEntry, PackageOrder, Rerun, WindowRequest, WindowResult

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
    # Ids of the reruns (`planning.rollout.fleet_rerun`) this request carries.
    reruns: list[str] = field(default_factory=list)
    # A rollback window (`planning.rollout.fleet_rollback`): its answer goes to `FleetState.rollback`.
    rollback: bool = False


@dataclass
class NodeRecord:
    """A node's outcomes in the current wave."""

    # Package -> api.enums.State value (complete, erroring, blocked).
    outcomes: dict[str, str] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)
    # The node's fingerprint when a blocked outcome was recorded ("" after a skipped window: not asked again
    # when the node changes, only on `retry` or a new wave).
    fingerprint: str = ""
    # Why the node's last window gave it up (`WindowResult.skipped`: `drain-timeout`; "" = it did not).
    skipped: str = ""


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
    # node -> its position in the order the wave asked its nodes (SKYHOOK_NODE_ORDER).
    node_order: dict[str, int] = field(default_factory=dict)
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
    # Analysis gates; while waiting for a maintenance window, its opening (RFC 3339, "" = not waiting).
    gates: gate_rules.GateBook = field(default_factory=gate_rules.GateBook)
    next_window: str = ""
    # `noderoll rerun`: reruns not finished, and the ids taken (planning.rollout.fleet_rerun).
    reruns: list[rerun.RerunOrder] = field(default_factory=list)
    rerun_ids: list[str] = field(default_factory=list)
    # Per Package the wave changes: the spec a rollback restores (None: it was new; absent: unknown);
    # specs the wave rolls out that the desired state has since replaced (the next wave's previous);
    # the rollback of the wave's failed canary (planning.rollout.fleet_rollback).
    previous: dict[str, PackageEntry | None] = field(default_factory=dict)
    outgoing: dict[str, PackageEntry] = field(default_factory=dict)
    rollback: rollbacks.Rollback | None = None
    # Window durations and gaps between batches, for the ETA (planning.views.eta).
    timings: Timings = field(default_factory=Timings)
    # The promotion across clusters (`spec.clusters`, a named cluster; planning.clusters.cluster_turns).
    turns: ClusterTurns = field(default_factory=ClusterTurns)
    # Drain-ahead: node -> RFC 3339 time the fleet's `noderoll.io/upcoming` mark was written; the
    # durations (seconds) of the latest answered windows (planning.rollout.drain_ahead).
    upcoming: dict[str, str] = field(default_factory=dict)
    window_seconds: list[float] = field(default_factory=list)
    # Nodes held back when their window was to be handed out (their budget no longer held on a fresh read,
    # planning.fleet.handout): node -> why. They keep their drain-ahead mark while they wait.
    held: dict[str, str] = field(default_factory=dict)


def copy_for_simulation(state: FleetState) -> FleetState:
    """A copy of `state` that the fleet's machine can run ahead on (the ETA) without changing `state`.

    A deep copy but for the nodes' targets: each `NodeTargets` is replaced, never changed in place, so the
    copy's dict shares them (at 10,000 nodes copying them was most of the copy); the derived caches (the work
    index, the node views) are not copied: the copy builds its own when asked.
    """
    caches = {k: v for k, v in state.__dict__.items() if k.startswith("_")}
    targets = state.targets
    try:
        for key in caches:
            del state.__dict__[key]
        state.targets = {}
        copied = copy.deepcopy(state)
    finally:
        state.targets = targets
        state.__dict__.update(caches)
    copied.targets = dict(targets)
    return copied


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
    wanted = {e.name: package_revision(e) for e in spec.packages}
    for entry in state.spec.packages if state.spec else []:
        # The spec the wave rolls out, replaced now: the next wave's previous (kept once, only when replaced).
        rolled = state.revisions.get(entry.name)
        replaced = entry.name in wanted and wanted[entry.name] != rolled
        if replaced and rolled == package_revision(entry):
            state.outgoing.setdefault(entry.name, entry)
    if spec != state.spec:
        work_index.touch_all(state)
    state.spec = spec
    if any(state.revisions.get(p) != r for p, r in wanted.items()) or policy_revision(spec) != state.policy_revision:
        state.wave_wanted = True
    elif not state.wave_wanted:
        # Only removals (a Package deleted without uninstall): nothing new to roll out.
        state.revisions = {p: r for p, r in state.revisions.items() if p in wanted}
    return state.wave_wanted


def start_wave(state: FleetState, selection: FleetSelection, policy: DeploymentPolicySpec, identity: str,
               recount: bool = True) -> None:
    """Begin a new wave over `selection` (call only with nothing in flight).

    `recount`: the Packages of the ending wave whose canary did not pass count as changed again
    (False only when replaying fleet runs recorded before that rule: their canary stays as it was).
    """
    assert state.spec is not None
    revisions = {e.name: package_revision(e) for e in state.spec.packages}
    before = state.planner
    passed = before is None or rollbacks.canary_passed(before.canary_phase, before.canary_count)
    # A change whose canary did not pass (rolled back, halted, superseded) is still a change.
    unproven = rollbacks.unproven(state.changed, passed)
    changed = sorted(p for p, r in revisions.items() if state.revisions.get(p) != r or (recount and p in unproven))
    state.previous = rollbacks.previous_specs(rollbacks.PreviousInput(
        changed, state.previous, unproven, set(state.revisions), state.outgoing))
    state.outgoing, state.rollback = {}, None
    state.changed = changed
    state.revisions = revisions
    state.policy_revision = policy_revision(state.spec)
    state.wave += 1
    state.wave_wanted = False
    state.records = {}
    state.node_order = {}
    state.departed = {}
    state.held = {}
    state.soak_until = ""
    state.promote = False
    gate_rules.start_wave(state.gates)
    state.targets = dict(selection.nodes)
    rerun.resolve(state.reruns, state.targets)
    planner = batches.new_planner(batches.PlannerInput(policy, selection.eligible(), identity))
    if not state.changed:
        # Only the policy changed: the Packages passed their canary in an earlier wave.
        planner.canary_phase = CanaryPhase.PASSED
    state.planner = planner
    work_index.touch_all(state)


def refresh_targets(state: FleetState, selection: FleetSelection, policy: DeploymentPolicySpec) -> list[str]:
    """A newer listing within the wave: joiners, departures, lifted blocks. Returns the joiners."""
    planner = state.planner
    assert planner is not None
    known = {n for c in planner.compartments.values() for n in c.nodes}
    joined = batches.add_nodes(planner, policy, [n for n in selection.eligible() if n.name not in known])
    departed_before = dict(state.departed)
    for node in sorted(known):
        if node in selection.nodes or node in state.departed:
            continue
        if node not in state.in_flight and wanted(state, node):
            state.departed[node] = DEPARTED_REASON
    for node in selection.nodes:
        state.departed.pop(node, None)
    # The nodes whose view may change: their targets or departure changed, or an outcome is cleared below.
    touched = {n for n in state.targets.keys() | selection.nodes.keys()
               if state.targets.get(n) != selection.nodes.get(n)}
    touched |= {n for n in departed_before.keys() | state.departed.keys()
                if departed_before.get(n) != state.departed.get(n)}
    for node, record in state.records.items():
        current = selection.nodes.get(node)
        if current is None:
            continue
        changed_node = bool(record.fingerprint) and current.fingerprint != record.fingerprint
        # Asked again: a `blocked` answer once the node changed (annotation fixed, taint gone), and a
        # `complete` one whose record is gone from the node (reset by hand, reimaged: work pending again).
        again = [p for p, s in record.outcomes.items()
                 if (s == State.BLOCKED.value and changed_node) or (s == State.COMPLETE.value and p in current.pending)]
        for package in again:
            record.outcomes.pop(package)
            record.messages.pop(package, None)
            touched.add(node)
        if changed_node:
            record.fingerprint = ""
    state.targets = dict(selection.nodes)
    if joined:
        work_index.touch_all(state)  # the planner's compartments changed (the views read them)
    else:
        touch_nodes(state, touched)
    forget_outcomes(state, rerun.resolve(state.reruns, state.targets))
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
    return _wanted(state, node)


def touch_nodes(state: FleetState, nodes: Collection[str]) -> None:
    """These nodes' wanted Packages or requests may have changed (work index): every change of `in_flight`
    or `records` made outside this module says so."""
    work_index.touch(state, list(nodes), _wanted)


def _wanted(state: FleetState, node: str) -> list[str]:
    """`wanted`, computed."""
    targets = state.targets.get(node)
    if targets is None or node in state.paused_nodes or node in state.departed:
        return []
    record = state.records.get(node)
    answered = record.outcomes if record else {}
    current = state.revisions
    again = rerun.wanted_again(state.reruns, node, targets, answered)
    carried = [p for p in [*targets.pending, *again]
               if p in current and p not in answered and not _operator_paused(state, p)]
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


def startable(state: FleetState) -> Set[str]:
    """Nodes that may get a request now: work wanted and none in flight (the work index's set: read only)."""
    return work_index.startable(state, _wanted)


def remaining(state: FleetState) -> Set[str]:
    """Nodes with work left in this wave: startable ones and those whose window is out (a view)."""
    return work_index.Remaining(startable(state), state.in_flight.keys())


def supply(state: FleetState, policy: DeploymentPolicySpec) -> disruption.Supply | None:
    """The latest listing as the policy's capacity floors and topology limits see it, with the fleet's
    windows out (None when the policy has neither: `batches.next_batch` then admits every node).

    Asked at every hand-out; its nodes are kept (`_SupplyCache`, not a field) and only those whose targets
    were replaced since are taken again (issue 45: building all 10,000 was most of a hand-out's cost).
    """
    planner = state.planner
    limits = disruption.limits_of(policy)
    if not limits:
        return None
    # A new wave, a listing with joiners, a signal: `touch_all` (the planner's compartments may be new).
    key = (work_index.index_of(state).epoch, repr(limits))
    cache: _SupplyCache | None = state.__dict__.get(_SUPPLY)
    if cache is None or cache.key != key:
        compartments = {n: c.name for c in planner.compartments.values() for n in c.nodes} if planner else {}
        full = disruption.supply_of(policy, state.targets, compartments, ())
        assert full is not None
        cache = _SupplyCache(key, compartments, full.limits, dict(full.nodes), dict(state.targets))
        state.__dict__[_SUPPLY] = cache
    else:
        changed = {n: t for n, t in state.targets.items() if cache.seen.get(n) is not t}
        gone = cache.seen.keys() - state.targets.keys()
        if changed or gone:
            if any(n not in cache.compartments for n in changed):
                del state.__dict__[_SUPPLY]  # a node the planner does not know: assigned with the others again
                return supply(state, policy)
            part = disruption.supply_of(policy, changed, cache.compartments, ())
            cache.nodes.update(part.nodes if part is not None else {})
            for name in gone:
                cache.nodes.pop(name, None)
            cache.seen = dict(state.targets)
    found = disruption.Supply(cache.limits, cache.nodes, frozenset(state.in_flight))
    if work_index.CHECK:
        fresh = disruption.supply_of(policy, state.targets, cache.compartments, state.in_flight)
        assert fresh == found, "the fleet's supply is out of date"
    return found


_SUPPLY = "_supply"


@dataclass
class _SupplyCache:
    """The nodes of `supply`, for the planner and policy of `key`, as of the targets `seen` (by identity)."""

    key: tuple[int, str]
    compartments: dict[str, str]
    limits: Mapping[str, disruption.CompartmentLimits]
    nodes: dict[str, disruption.NodeSupply]
    seen: dict[str, NodeTargets]


def others(state: FleetState, policy: DeploymentPolicySpec) -> disruption.Others:
    """What other people and controllers hold among the fleet's listed nodes, as the latest listing or read
    shows it (this fleet's windows left out): per compartment the nodes cordoned or held by another
    maintenance, which take slots of its count budget (a node whose Packages are all blocked there too), and
    the nodes another maintenance holds, not to be started."""
    planner = state.planner
    known = {n: c.name for c in planner.compartments.values() for n in c.nodes} if planner else {}
    busy: dict[str, dict[str, str]] = {}
    held: dict[str, str] = {}
    down = {n: t for n, t in state.targets.items() if t.down and n not in state.in_flight}
    if not down:
        return disruption.Others()
    assigned = disruption.every_compartment(policy, state.targets, known)
    for node, listed in sorted(down.items()):
        if disruption.is_held_by_others(listed.down):
            held[node] = listed.down
        if listed.down == disruption.DOWN_CORDONED or node in held:
            busy.setdefault(assigned[node], {})[node] = listed.down
    return disruption.Others(busy, held)


def preview_next(state: FleetState, policy: DeploymentPolicySpec, respect: bool = False) -> list[str]:
    """The batch the planner would give after the batch out, if that batch succeeds (and a canary is
    promoted), over the latest listing with this fleet's windows ended (`respect`: counting `others`).
    Changes nothing in `state`."""
    if state.planner is None:
        return []
    planner = copy.deepcopy(state.planner)
    out = planner.current_batch
    if planner.current:
        batches.record_batch_result(planner, out, [])
    batches.promote_canary(planner)
    ended = set(out) | set(state.in_flight)
    snap = supply(state, policy)
    snap = disruption.after_windows(snap, ended) if snap is not None else None
    cover = [[n for n in group if n not in ended] for group in canary_cover(state)]
    return batches.next_batch(planner, startable(state) - ended, [g for g in cover if g], snap,
                              others(state, policy) if respect else None)


def canary_cover(state: FleetState) -> list[list[str]]:
    """For each Package the wave changes: the startable nodes that would carry it (the canary takes one of each)."""
    ready = sorted(startable(state))
    cover = []
    for package in state.changed:
        nodes = [n for n in ready if package in wanted(state, n)]
        if nodes:
            cover.append(nodes)
    return cover


def package_orders(state: FleetState, node: str, packages: list[str]) -> tuple[list[PackageOrder], list[str]]:
    """The orders of a window on `node` carrying `packages`, with the reruns they carry (and their ids)."""
    known, again = entries(state), rerun.for_node(state.reruns, node)
    orders = []
    for name in packages:
        entry, order = known[name], again.get(name)
        orders.append(PackageOrder(name, entry.spec, entry.generation, entry.uninstall,
                                   order.id if order else "", order.stage if order else "", uid=entry.uid))
    return orders, sorted({again[p].id for p in packages if p in again})


def request_id(state: FleetState, fleet: str, node: str) -> str:
    """A new request id, unique within the fleet (fleet, wave, sequence, node)."""
    state.sequence += 1
    return f"{fleet}:{state.wave}:{state.sequence}:{node}"


def order_of(state: FleetState, node: str) -> int:
    """`node`'s position in the order the wave asked its nodes (the first asked is 0; kept on re-asks)."""
    return state.node_order.setdefault(node, len(state.node_order))


def window_request(state: FleetState, fleet: str, orders: list[PackageOrder], node: str) -> WindowRequest:
    """The request of the window in flight on `node` (every request the fleet sends is built here), with
    what the policy asks of the window itself (`spec.workloads`, `spec.verify`).

    A rollback's window asks for no GPU verify: it takes the change off a node whose verify may be what
    failed, and that failure stays recorded on the node (`verifyFailed`) rather than failing the rollback.
    """
    policy = (state.spec.policy or {}) if state.spec else {}
    flight = state.in_flight[node]
    return WindowRequest(fleet, flight.request_id, orders, state.wave, order_of(state, node),
                         workloads=policy.get("workloads"), verify=None if flight.rollback else policy.get("verify"))


def hand_out(state: FleetState, fleet: str, nodes: Collection[str], now: str) -> list[tuple[str, WindowRequest]]:
    """Put a request in flight for each of `nodes` that wants work now (in name order); returns them.

    The one place a fleet's window requests are made: the fleet machine sends what this returns.
    """
    handed = []
    for node in sorted(nodes):
        packages = wanted(state, node)
        if not packages or node in state.in_flight:
            continue
        orders, reruns = package_orders(state, node, packages)
        request = request_id(state, fleet, node)
        state.in_flight[node] = InFlight(request, packages, now, reruns=reruns)
        state.held.pop(node, None)
        handed.append((node, window_request(state, fleet, orders, node)))
    if handed:
        touch_nodes(state, [node for node, _request in handed])
        record_hand_out(state.timings, now)
    return handed


def record_result(state: FleetState, result: WindowResult, now: str = "") -> bool:
    """Take a node workflow's answer; False when it answers a request no longer in flight (stale).

    `now` (the fleet's clock, RFC 3339): a successful window's duration is kept for the ETA.
    """
    flight = state.in_flight.get(result.node)
    if flight is None or flight.request_id != result.request_id:
        return False
    del state.in_flight[result.node]
    touch_nodes(state, [result.node])
    if result.withdrawn:
        return True
    if now and flight.sent_at:
        seconds = (datetime.fromisoformat(now) - datetime.fromisoformat(flight.sent_at)).total_seconds()
        ahead.keep_duration(state.window_seconds, max(0.0, seconds))
    if flight.rollback:
        if state.rollback is not None:  # None: `resume` gave the rollback up meanwhile
            rollbacks.answered(state.rollback, result)
    else:
        _record_outcomes(state, result, flight)
        states = {o.state for o in result.outcomes.values()}
        if State.COMPLETE.value in states and State.ERRORING.value not in states:
            record_window(state.timings, result.interrupt, flight.sent_at, now)
        touch_nodes(state, [result.node])
    if result.cordoned or result.drained or result.interrupt:
        tally = state.disruptions.setdefault(result.node, Disruptions())
        tally.windows += 1
        tally.cordons += int(result.cordoned)
        tally.drains += int(result.drained)
        tally.interrupts += int(bool(result.interrupt))
    return True


def _record_outcomes(state: FleetState, result: WindowResult, flight: InFlight) -> None:
    rerun.answered(state.reruns, result.node, flight.reruns)
    record = state.records.setdefault(result.node, NodeRecord())
    record.skipped = result.skipped
    for package, outcome in sorted(result.outcomes.items()):
        if outcome.state == State.SKIPPED.value:
            continue
        record.outcomes[package] = outcome.state
        record.messages[package] = outcome.message
        if outcome.state == State.BLOCKED.value:
            targets = state.targets.get(result.node)
            # A skipped window changed the node itself (cordon, labels): only `retry` or a new wave asks it again.
            record.fingerprint = targets.fingerprint if targets and not result.skipped else ""


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


# --- canary rollback (planning.rollout.fleet_rollback) ------------------------------------------------------


def start_rollback(state: FleetState) -> str:
    """The wave's canary failed and the policy rolls back: plan it; returns "" or why there is none."""
    planner = state.planner
    assert planner is not None
    planned = rollbacks.plan(rollbacks.RollbackInput(
        wave=state.wave, canary=planner.canary_nodes, changed=state.changed, previous=state.previous,
        entries=entries(state), outcomes={n: r.outcomes for n, r in state.records.items()},
        messages={n: r.messages for n, r in state.records.items()},
    ))
    if isinstance(planned, str):
        return planned
    if not planned.nodes:
        return "no canary node ran a Package the wave changes"
    state.rollback = planned
    work_index.touch_all(state)
    return ""


def rolling_back(state: FleetState) -> bool:
    """A rollback has nodes left and is not halted: a new wave waits until it is done."""
    return state.rollback is not None and not state.halted and not rollbacks.finished(state.rollback)


# --- operator signals ----------------------------------------------------------------------------


def forget_outcomes(state: FleetState, pairs: Collection[tuple[str, str]]) -> None:
    """Forget this wave's outcome of each (node, Package): the node is asked for it again."""
    for node, package in pairs:
        record = state.records.get(node)
        if record is not None:
            record.outcomes.pop(package, None)
            record.messages.pop(package, None)
    touch_nodes(state, {node for node, _package in pairs})


def apply_rerun(state: FleetState, request: Rerun) -> bool:
    """`rerun` (planning.rollout.fleet_rerun): True when taken (a new id); resolved at once when the wave has targets."""
    if not rerun.take(state.reruns, state.rerun_ids, request):
        return False
    work_index.touch_all(state)
    if state.planner is not None and state.targets:
        forget_outcomes(state, rerun.resolve(state.reruns, state.targets))
    return True


def _add(items: list[str], new: Collection[str]) -> None:
    items.extend(sorted(set(new) - set(items)))


def apply_pause(state: FleetState, scope: Filter) -> None:
    """`pause`: no new windows (for the whole fleet, or for these Packages / nodes)."""
    if scope.is_empty():
        state.paused = True
    _add(state.paused_packages, scope.packages)
    _add(state.paused_nodes, scope.nodes)
    work_index.touch_all(state)


def apply_resume(state: FleetState, scope: Filter) -> None:
    """`resume`: clear pauses; without a filter also a halt (a failed gate passes once), and promote the canary."""
    work_index.touch_all(state)
    if scope.is_empty():
        gate_rules.override(state.gates)
        state.paused, state.halted, state.promote = False, False, True
        if state.rollback is not None:
            # Re-attempt the rolled-back wave: a new wave of the same desired state, canary first
            # (its changes are unproven: `start_wave` counts them as changed again).
            state.rollback, state.wave_wanted = None, True
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
    # Rollback windows ignore pauses: withdrawing one would only send it again.
    return sorted(
        node for node, flight in state.in_flight.items()
        if not flight.rollback and (node in scope.nodes or set(flight.packages) & set(scope.packages))
    )


def apply_retry(state: FleetState, scope: Filter) -> list[str]:
    """`retry`: erroring and blocked outcomes (all, or of these Packages / nodes) are asked again; clears a halt
    (a failed gate is evaluated again). After a canary rollback: the nodes whose rollback failed are asked again."""
    work_index.touch_all(state)
    if state.rollback is not None:
        state.halted = False
        return rollbacks.retry(state.rollback, scope.nodes)
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
    gate_rules.restart(state.gates)
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
    message = (f"node workflow node/{node} closed ({how}) without answering, {flight.resent + 1} times; "
               "signal retry to ask again")
    if flight.rollback:
        if state.rollback is not None:
            rollbacks.lost(state.rollback, node, message)
        touch_nodes(state, [node])
        return False
    record = state.records.setdefault(node, NodeRecord())
    for package in flight.packages:
        record.outcomes[package] = State.ERRORING.value
        record.messages[package] = message
    touch_nodes(state, [node])
    return False

"""`noderoll plan`: what a fleet's next wave would do, simulated with the fleet's own rules. Pure.

`plan_fleet(PlanInput)` runs the fleet's decisions, not a copy of them: target selection
(`planning.fleet_targets.select_fleet`) over a snapshot of the Nodes, the wave
(`planning.fleet_state.set_spec`, `start_wave`: the same planner, the same node order, the order key
being the fleet's workflow id), then batch after batch as the fleet's loop does
(`planning.batches.planner_phase`, `next_batch` with `fleet_state.canary_cover`,
`fleet_state.hand_out`, `batch_results`, `record_batch_result`, `promote_canary`), each node's window
planned by `planning.node_plan.plan_node` from the request the fleet would hand it and the node's
recorded state (as the node workflow plans it), and answered as a window that succeeded would
answer (`fleet_state.record_result`). So the batches, their order and each node's merged window are
the fleet's, on the assumption that every window succeeds: a failed window, a retry or a halt
changes what comes after it (the plan says so).

Without `current` (no fleet runs), every Package counts as changed (the canary covers each); with
it (the desired state the running fleet holds), only Packages whose spec differs do, as in the
fleet. Nodes already at the desired state are done (no window). Nodes a Package targets but
cannot update now are listed with the reason (blocked: a taint not tolerated, runtime-required,
an unreadable state; waiting: a dependency not met; paused); nodes no Package targets are counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from api.enums import CanaryPhase, State
from api.node_state import parse_node_state
from api.package import PackageSpec
from api.policy import DeploymentPolicySpec
from planning import batches
from planning import fleet_state as fs
from planning.compartments import DEFAULT_POLICY
from planning.disruption import listing_label_keys
from planning.eta import Eta, EtaInput, Timings, WindowShape, estimate, kind_of
from planning.fleet_targets import FleetPackage, FleetQuery, FleetSelection, select_fleet
from planning.node_plan import NodePlanInput, plan_node
from planning.targets import NodeView
from protocol.fleet import FleetSpec, PackageOutcome, WindowRequest, WindowResult
from protocol.names import fleet_workflow_id

ASSUMES = ("every window succeeds (a failure, retry or halt changes the batches after it); "
           "batches after the first are simulated with the fleet's planner")
# Safety net: the simulation ends after this many batches (a fleet of 1,000 nodes one at a time takes 1,000).
MAX_BATCHES = 100_000


@dataclass(frozen=True)
class PlanInput:
    """A fleet's desired state, the Nodes as they are, and what its running fleet holds and measured."""

    desired: FleetSpec
    nodes: Sequence[NodeView]
    # RFC 3339 time the plan is made at (the ETA's start).
    now: str
    # The desired state the running fleet holds (None: no fleet runs).
    current: FleetSpec | None = None
    timings: Timings = field(default_factory=Timings)
    # The running fleet's wave (0: none): the plan's wave is the next one.
    wave: int = 0
    # The cluster's name ("" none): the fleet is `fleet/<cluster>/<policy>`, its node order's key.
    cluster: str = ""


@dataclass
class PlannedPackage:
    """One Package of a node's window: what it does there."""

    name: str
    action: str
    version: str
    previous_version: str | None = None
    # Its stages in order; `interrupt` marks where the window's one merged interrupt runs.
    stages: list[str] = field(default_factory=list)
    reason: str = ""


@dataclass
class PlannedWindow:
    """One node's window: its batch, its Packages in order, one drain or none, one merged interrupt."""

    node: str
    batch: int
    compartment: str
    canary: bool
    # SKYHOOK_NODE_ORDER: the node's position in the order the wave asks its nodes.
    order: int
    packages: list[PlannedPackage] = field(default_factory=list)
    drain: bool = False
    # The merged interrupt ("" none) and its services.
    interrupt: str = ""
    services: list[str] = field(default_factory=list)
    # Packages of the request the node would answer without running them: name -> why.
    not_run: dict[str, str] = field(default_factory=dict)


@dataclass
class PlannedBatch:
    """One batch: its nodes per compartment, in the fleet's order."""

    number: int
    canary: bool
    compartments: dict[str, list[str]] = field(default_factory=dict)

    @property
    def nodes(self) -> list[str]:
        """Every node of the batch."""
        return [n for nodes in self.compartments.values() for n in nodes]


@dataclass
class Totals:
    """What the wave would cost."""

    nodes: int = 0
    windows: int = 0
    drains: int = 0
    reboots: int = 0
    interrupts: int = 0
    batches: int = 0


@dataclass
class FleetPlan:
    """What the next wave of one fleet would do (module docstring)."""

    fleet: str
    wave: int = 0
    # Packages whose spec (or uninstall) the wave changes; the canary covers each.
    changed: list[str] = field(default_factory=list)
    policy_changed: bool = False
    canary: list[str] = field(default_factory=list)
    canary_soak_seconds: int = 0
    batches: list[PlannedBatch] = field(default_factory=list)
    windows: dict[str, PlannedWindow] = field(default_factory=dict)
    # Node -> Package -> why it cannot be updated now (blocked, waiting for a dependency, paused).
    skipped: dict[str, dict[str, str]] = field(default_factory=dict)
    # Nodes already at the desired state, and nodes no Package of the fleet targets.
    done: list[str] = field(default_factory=list)
    not_targeted: list[str] = field(default_factory=list)
    totals: Totals = field(default_factory=Totals)
    eta: Eta | None = None
    notes: list[str] = field(default_factory=list)
    assumes: str = ASSUMES

    @property
    def changes(self) -> bool:
        """Something would change: a window that runs something on some node."""
        return any(w.packages for w in self.windows.values())


def _packages(spec: FleetSpec) -> dict[str, FleetPackage]:
    return {e.name: FleetPackage(PackageSpec.model_validate(e.spec), uninstall=e.uninstall, paused=e.paused)
            for e in spec.packages}


def _policy(spec: FleetSpec) -> DeploymentPolicySpec:
    return DeploymentPolicySpec.model_validate(spec.policy) if spec.policy else DEFAULT_POLICY


def _initial_state(data: PlanInput) -> fs.FleetState:
    state = fs.FleetState(wave=data.wave)
    if data.current is not None:
        # What the running fleet rolls out: Packages at these revisions are not changes.
        state.spec = data.current
        state.revisions = {e.name: fs.package_revision(e) for e in data.current.packages}
        state.policy_revision = fs.policy_revision(data.current)
    fs.set_spec(state, data.desired)
    return state


def _window(request: WindowRequest, node: NodeView) -> tuple[PlannedWindow, WindowResult]:
    """The node workflow's plan of `request` (workflows/node_window.py) and a successful answer to it."""
    recorded, problem = parse_node_state(node.state_annotation)
    specs = {o.name: PackageSpec.model_validate(o.spec) for o in request.packages}
    uninstall = frozenset(o.name for o in request.packages if o.uninstall)
    rerun = {o.name: o.rerun_stage for o in request.packages if o.rerun}
    plan = plan_node(NodePlanInput(node=node.name, recorded=recorded, desired=specs, uninstall=uninstall,
                                   rerun=rerun))
    window = PlannedWindow(node=node.name, batch=0, compartment="", canary=False, order=request.node_order)
    outcomes: dict[str, PackageOutcome] = {}
    if problem or plan.error:
        why = problem or plan.error or ""
        window.not_run = {o.name: why for o in request.packages}
        return window, WindowResult(node.name, request.request_id,
                                    {o.name: PackageOutcome(State.BLOCKED.value, message=why) for o in request.packages})
    for name, package in sorted(plan.packages.items()):
        if package.blocked:
            window.not_run[name] = package.blocked
            outcomes[name] = PackageOutcome(State.BLOCKED.value, package.version, message=package.blocked)
        elif not package.has_work:
            window.not_run[name] = package.reason or "up to date"
            outcomes[name] = PackageOutcome(State.COMPLETE.value, package.version)
    if plan.window is not None:
        for name in plan.window.packages:
            package = plan.packages[name]
            window.packages.append(PlannedPackage(name, package.action.value, package.version,
                                                  package.previous_version, [s.value for s in package.stages],
                                                  package.reason))
            outcomes[name] = PackageOutcome(State.COMPLETE.value, package.version)
        merged = plan.window.interrupt
        window.drain = plan.window.needs_drain
        window.interrupt = merged.type.value if merged else ""
        window.services = list(merged.services) if merged else []
    result = WindowResult(node.name, request.request_id, outcomes, cordoned=window.drain, drained=window.drain,
                          interrupt=window.interrupt)
    return window, result


def shape_of(window: PlannedWindow) -> WindowShape:
    """The ETA's view of a planned window."""
    stages = sum(1 for p in window.packages for s in p.stages if s != "interrupt")
    return WindowShape(kind=kind_of(window.interrupt), stages=stages, drain=window.drain)


def _skipped(plan: FleetPlan, selection: FleetSelection, data: PlanInput) -> None:
    for name in sorted(n.name for n in data.nodes):
        targets = selection.nodes.get(name)
        if targets is None:
            plan.not_targeted.append(name)
            continue
        paused = {p: "paused (spec.paused or noderoll.io/pause)" for p in targets.paused}
        reasons = {**targets.blocked, **targets.waiting, **paused}
        if reasons:
            plan.skipped[name] = dict(sorted(reasons.items()))


def plan_fleet(data: PlanInput) -> FleetPlan:
    """What the next wave of `data.desired`'s fleet would do (module docstring)."""
    policy = _policy(data.desired)
    fleet_id = fleet_workflow_id(data.desired.policy_name, data.cluster)
    state = _initial_state(data)
    selection = select_fleet(FleetQuery(_packages(data.desired), data.nodes, {}, frozenset(listing_label_keys(policy))))
    fs.start_wave(state, selection, policy, fleet_id)
    planner = state.planner
    assert planner is not None
    plan = FleetPlan(fleet=data.desired.policy_name, wave=state.wave, changed=list(state.changed),
                     policy_changed=data.current is not None and state.policy_revision != fs.policy_revision(data.current),
                     canary_soak_seconds=planner.canary_soak_seconds if planner.canary_count else 0)
    _skipped(plan, selection, data)
    plan.done = sorted(n for n, t in selection.nodes.items() if t.done and not t.pending)
    views = {n.name: n for n in data.nodes}
    while len(plan.batches) < MAX_BATCHES:
        phase = batches.planner_phase(planner, fs.remaining(state))
        if phase is batches.PlannerPhase.CANARY_HOLD:
            batches.promote_canary(planner)  # the soak passes (and a manual promotion is given)
            continue
        if phase is not batches.PlannerPhase.READY:
            break
        canary = planner.canary_count > 0 and planner.canary_phase is CanaryPhase.NONE
        nodes = batches.next_batch(planner, fs.startable(state), fs.canary_cover(state))
        if not nodes:
            break
        batch = PlannedBatch(planner.batch_number, canary, {c: list(n) for c, n in sorted(planner.current.items())})
        plan.batches.append(batch)
        compartment = {n: c for c, members in batch.compartments.items() for n in members}
        for node, request in fs.hand_out(state, fleet_id, nodes, data.now):
            window, result = _window(request, views[node])
            window.batch, window.compartment, window.canary = batch.number, compartment[node], canary
            plan.windows[node] = window
            fs.record_result(state, result)
        results = fs.batch_results(state, nodes)
        assert results is not None
        batches.record_batch_result(planner, *results)
    plan.canary = sorted(n for b in plan.batches if b.canary for n in b.nodes)
    plan.windows = {n: w for n, w in plan.windows.items() if w.packages or w.not_run}
    running = [w for w in plan.windows.values() if w.packages]
    plan.totals = Totals(nodes=len({*plan.windows, *plan.skipped, *plan.done}), windows=len(running),
                         drains=sum(w.drain for w in running), reboots=sum(w.interrupt == "reboot" for w in running),
                         interrupts=sum(bool(w.interrupt) for w in running), batches=len(plan.batches))
    shapes = [[shape_of(plan.windows[n]) for n in b.nodes if n in plan.windows and plan.windows[n].packages]
              for b in plan.batches]
    plan.eta = estimate(EtaInput(batches=shapes, timings=data.timings, now=data.now,
                                 soak_seconds=float(plan.canary_soak_seconds if plan.canary else 0)))
    if policy.maintenance_windows:
        plan.notes.append("the policy has maintenance windows: batches start only inside them (not in the ETA)")
    if policy.analysis:
        plan.notes.append("the policy has analysis gates: a failing gate halts the fleet (not in the ETA)")
    return plan

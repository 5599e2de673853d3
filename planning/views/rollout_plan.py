"""`noderoll plan`: what a fleet's next wave would do: the fleet's own machine run ahead. Pure.

`plan_fleet(PlanInput)` runs the fleet's decisions, not a copy of them: the fleet machine
(`planning.fleet.machine`, the very code the fleet workflow runs) on a simulated fleet
(`planning.views.simulate`) whose nodes are a snapshot of the Nodes (`planning.views.worlds.SnapshotWorld`):
target selection, the wave, the canary, every batch or rolling start with its floors, topology limits,
drain-ahead lead, maintenance windows and gate samples, each node's window planned by
`planning.node.node_plan.plan_node` from the request the fleet hands it and the node's recorded state (as the
node workflow plans it), and answered as a window that succeeded would answer. So the batches, their
order, the rolling start order and each node's merged window are the fleet's, on the assumption that
every window succeeds: a failed window, a retry or a halt changes what comes after it (the plan says
so). The ETA is the simulated end (windows: the fleet's measured p50s, else the defaults).

Without `current` (no fleet runs), every Package counts as changed (the canary covers each); with it
(the desired state the running fleet holds), only Packages whose spec differs do, as in the fleet.
Nodes already at the desired state are done (no window). Nodes a Package targets but cannot update now
are listed with the reason (blocked: a taint not tolerated, runtime-required, an unreadable state;
waiting: a dependency not met; paused); nodes no Package targets are counted.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from api.policy import DeploymentPolicySpec
from planning.fleet.messages import Desired
from planning.fleet.run import FleetRun
from planning.node.targets import NodeView
from planning.rollout import fleet_state as fs
from planning.rollout.compartments import DEFAULT_POLICY
from planning.rollout.disruption import floor_resources, limits_of, listing_label_keys
from planning.rollout.fleet_targets import FleetPackage, FleetQuery, FleetSelection, select_fleet
from planning.rollout.rolling import is_rolling
from planning.views.eta import Eta, SimulatedRun, Timings, simulated_eta
from planning.views.simulate import HandOut, Simulation, simulate
from planning.views.worlds import PlannedPackage, PlannedWindow, SnapshotWorld, spec_of
from protocol.fleet import FleetInput, FleetSpec

ASSUMES = ("every window succeeds (a failure, retry or halt changes the batches after it); "
           "the batches are the fleet's own machine run ahead on a simulated clock")

__all__ = ["ASSUMES", "FleetPlan", "PlanInput", "PlannedBatch", "PlannedPackage", "PlannedWindow", "Totals",
           "plan_fleet"]


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
    # The cluster the fleet runs in ("" = none): its workflow id, the node order's identity.
    cluster: str = ""


@dataclass
class PlannedBatch:
    """One batch (for `rolling`: one start of windows): its nodes per compartment, in the fleet's order."""

    number: int
    canary: bool
    compartments: dict[str, list[str]] = field(default_factory=dict)
    # Seconds after the plan's start when it is handed out.
    starts_at: float = 0.0

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
    # The most windows out at once.
    peak: int = 0


@dataclass
class FleetPlan:
    """What the next wave of one fleet would do (module docstring)."""

    fleet: str
    wave: int = 0
    # Packages whose spec (or uninstall) the wave changes; the canary covers each.
    changed: list[str] = field(default_factory=list)
    policy_changed: bool = False
    # `rolling`: the batches are the starts of windows, in order (no batch barrier).
    rolling: bool = False
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


def _policy(spec: FleetSpec) -> DeploymentPolicySpec:
    return DeploymentPolicySpec.model_validate(spec.policy) if spec.policy else DEFAULT_POLICY


def _initial_state(data: PlanInput) -> fs.FleetState:
    """What the fleet holds before the desired state reaches it; the plan always starts a wave (a node that
    fell behind the current spec gets a window as well)."""
    state = fs.FleetState(wave=data.wave, wave_wanted=True, timings=copy.deepcopy(data.timings))
    if data.current is not None:
        # What the running fleet rolls out: Packages at these revisions are not changes.
        state.spec = data.current
        state.revisions = {e.name: fs.package_revision(e) for e in data.current.packages}
        state.policy_revision = fs.policy_revision(data.current)
    return state


def _selection(data: PlanInput, policy: DeploymentPolicySpec) -> FleetSelection:
    packages = {e.name: FleetPackage(spec_of(e.spec), uninstall=e.uninstall, paused=e.paused)
                for e in data.desired.packages}
    return select_fleet(FleetQuery(packages, data.nodes, {}, frozenset(listing_label_keys(policy)),
                                   bool(limits_of(policy)), frozenset(floor_resources(policy))))


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


def _batches(handouts: list[HandOut], rolling: bool) -> list[PlannedBatch]:
    """The plan's batches: one per planner batch (its hand-outs merged), or per rolling start."""
    out: list[PlannedBatch] = []
    for handout in handouts:
        same = out and not rolling and out[-1].number == handout.batch and out[-1].canary == handout.canary
        batch = out[-1] if same else PlannedBatch(handout.batch if not rolling else len(out) + 1, handout.canary,
                                                  starts_at=handout.at)
        for node, compartment in handout.nodes.items():
            batch.compartments.setdefault(compartment, []).append(node)
        if not same:
            out.append(batch)
    for batch in out:
        batch.compartments = {c: nodes for c, nodes in sorted(batch.compartments.items())}
    return out


def _notes(plan: FleetPlan, sim: Simulation, policy: DeploymentPolicySpec) -> None:
    if sim.stopped != "done":
        plan.notes.append(f"the fleet would stop there: {sim.stopped}")
    if policy.maintenance_windows:
        plan.notes.append("the policy has maintenance windows: batches start only inside them (the ETA waits for them)")
    if policy.analysis:
        plan.notes.append("the policy has analysis gates: a failing gate halts the fleet (the ETA assumes they pass)")
    plan.notes.extend(f"assumed: {what}" for what in sim.assumed)


def plan_fleet(data: PlanInput) -> FleetPlan:
    """What the next wave of `data.desired`'s fleet would do (module docstring)."""
    policy = _policy(data.desired)
    run = FleetRun(input=FleetInput(policy_name=data.desired.policy_name, cluster=data.cluster),
                   state=_initial_state(data), policy=_policy(data.current) if data.current else DEFAULT_POLICY)
    run.receive(Desired(data.desired))
    world = SnapshotWorld(data.nodes, data.timings)
    start = datetime.fromisoformat(data.now)
    sim = simulate(run, world, start)
    state = run.state
    rolling = state.planner is not None and is_rolling(state.planner)
    plan = FleetPlan(fleet=data.desired.policy_name, wave=state.wave, changed=list(state.changed),
                     policy_changed=data.current is not None and state.policy_revision != fs.policy_revision(data.current),
                     rolling=rolling, batches=_batches(sim.handouts, rolling))
    planner = state.planner
    plan.canary_soak_seconds = planner.canary_soak_seconds if planner and planner.canary_count else 0
    selection = _selection(data, policy)
    _skipped(plan, selection, data)
    plan.done = sorted(n for n, t in selection.nodes.items() if t.done and not t.pending)
    for batch in plan.batches:
        for compartment, nodes in batch.compartments.items():
            for node in nodes:
                window = world.windows.get(node)
                if window is not None and not window.batch:
                    window.batch, window.compartment, window.canary = batch.number, compartment, batch.canary
                    window.starts_at = batch.starts_at
    plan.canary = sorted(n for b in plan.batches if b.canary for n in b.nodes)
    plan.windows = {n: w for n, w in sorted(world.windows.items()) if w.packages or w.not_run}
    running = [w for w in plan.windows.values() if w.packages]
    plan.totals = Totals(nodes=len({*plan.windows, *plan.skipped, *plan.done}), windows=len(running),
                         drains=sum(w.drain for w in running), reboots=sum(w.interrupt == "reboot" for w in running),
                         interrupts=sum(bool(w.interrupt) for w in running), batches=len(plan.batches),
                         peak=sim.peak)
    shapes = [w.shape() for w in running]
    plan.eta = simulated_eta(SimulatedRun(now=data.now, seconds=sim.end, running_seconds=0.0,
                                          batches=len(plan.batches), shapes=shapes, timings=data.timings))
    _notes(plan, sim, policy)
    return plan

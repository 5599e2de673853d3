"""The simulated fleets the machine is run ahead on (`planning.views.simulate.World`). Pure.

* `SnapshotWorld` (`noderoll plan`): the Nodes of a snapshot. Listings run the real target selection
  (`planning.rollout.fleet_targets.select_fleet`) over them; a window is planned as the node workflow plans it
  (`planning.node.node_plan.plan_node` on the request and the node's recorded state) and, when it answers,
  records its Packages complete (or uninstalled) in the node's state annotation, as the window does.
* `FleetViewWorld` (the ETA of a running fleet): the fleet's own view of its nodes (`FleetState.targets`,
  its latest listing). A window is shaped by the Packages it carries as a fresh install (or uninstall) of
  each (`window_shape`); when it answers, its Packages move from pending to done. A Package waiting for a
  dependency stays waiting until the next real listing (the ETA does not re-run target selection).

Both take a window's duration from the fleet's `Timings` (`planning.views.eta.window_seconds`: its kind's
measured p50, else the defaults) and show a node in a window as down (`planning.rollout.disruption.DOWN_WINDOW`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from api.enums import PlanAction, Stage, State
from api.interrupts import InterruptRequest, merge_interrupts
from api.node_state import NodeState, PackageNodeState, config_hashes, dump_node_state, parse_node_state
from api.package import PackageSpec
from planning.fleet.codec import selection_to_json
from planning.node.node_plan import NodePlanInput, plan_node, stage_sequence
from planning.node.targets import NodeView
from planning.rollout.disruption import DOWN_CORDONED, DOWN_WINDOW
from planning.rollout.fleet_state import InFlight
from planning.rollout.fleet_targets import (
    FleetPackage,
    FleetQuery,
    FleetSelection,
    NodeTargets,
    classify_node,
    down_reason,
    supply_read,
    units,
)
from planning.rollout.respect import Respect, respect_from_json
from planning.views.eta import Timings, WindowShape, kind_of, window_seconds
from protocol.activities import (
    ListFleetNodesInput,
    ListFleetNodesResult,
    NodeAvailability,
    ReadNodeSupplyInput,
    ReadNodeSupplyResult,
)
from protocol.fleet import PackageEntry, PackageOutcome, WindowRequest, WindowResult

IN_WINDOW_LABEL = "in-progress"


@functools.lru_cache(maxsize=256)
def _spec(json_text: str) -> PackageSpec:
    return PackageSpec.model_validate_json(json_text)


def spec_of(entry_spec: Mapping[str, object]) -> PackageSpec:
    """The validated spec of a Package's JSON (cached: a simulation validates the same few specs often)."""
    return _spec(json.dumps(entry_spec, sort_keys=True))


def window_shape(packages: Iterable[str], specs: Mapping[str, tuple[PackageSpec | None, bool]]) -> WindowShape:
    """The window carrying `packages` as a fresh install (or uninstall) of each would run it."""
    interrupts: list[InterruptRequest | None] = []
    stages = 0
    for name in packages:
        spec, uninstall = specs.get(name, (None, False))
        if spec is None:
            continue
        request = (InterruptRequest(type=spec.interrupt.type, services=tuple(sorted(set(spec.interrupt.services))))
                   if spec.interrupt is not None else None)
        interrupts.append(request)
        action = PlanAction.UNINSTALL if uninstall else PlanAction.INSTALL
        stages += sum(1 for s in stage_sequence(action, request is not None) if s is not Stage.INTERRUPT)
    merged = merge_interrupts(interrupts)
    return WindowShape(kind=kind_of(merged.type.value if merged else ""), stages=stages,
                       drain=bool(merged and merged.disruptive))


# --- noderoll plan: a snapshot of the Nodes --------------------------------------------------------


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
    batch: int = 0
    compartment: str = ""
    canary: bool = False
    # SKYHOOK_NODE_ORDER: the node's position in the order the wave asks its nodes.
    order: int = 0
    # Seconds after the plan's start when the window is handed out, and its assumed duration.
    starts_at: float = 0.0
    seconds: float = 0.0
    packages: list[PlannedPackage] = field(default_factory=list)
    drain: bool = False
    # The merged interrupt ("" none) and its services.
    interrupt: str = ""
    services: list[str] = field(default_factory=list)
    # Packages of the request the node would answer without running them: name -> why.
    not_run: dict[str, str] = field(default_factory=dict)

    def shape(self) -> WindowShape:
        """The ETA's view of the window."""
        stages = sum(1 for p in self.packages for s in p.stages if s != Stage.INTERRUPT.value)
        return WindowShape(kind=kind_of(self.interrupt), stages=stages, drain=self.drain)


def plan_window(request: WindowRequest, node: NodeView) -> tuple[PlannedWindow, WindowResult]:
    """The node workflow's plan of `request` (workflows/node_window.py) and a successful answer to it."""
    recorded, problem = parse_node_state(node.state_annotation)
    specs = {o.name: spec_of(o.spec) for o in request.packages}
    uninstall = frozenset(o.name for o in request.packages if o.uninstall)
    rerun = {o.name: o.rerun_stage for o in request.packages if o.rerun}
    plan = plan_node(NodePlanInput(node=node.name, recorded=recorded, desired=specs, uninstall=uninstall,
                                   rerun=rerun))
    window = PlannedWindow(node=node.name, order=request.node_order)
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


def recorded_after(annotation: str, request: WindowRequest, result: WindowResult) -> str:
    """The node's state annotation once `request`'s window answered `result`: each Package complete there is
    recorded at its version and config (an uninstalled one is gone), as the node window writes it."""
    recorded, problem = parse_node_state(annotation)
    if problem:
        return annotation
    packages = dict(recorded.packages)
    for order in request.packages:
        outcome = result.outcomes.get(order.name)
        if outcome is None or outcome.state != State.COMPLETE.value:
            continue
        if order.uninstall:
            packages.pop(order.name, None)
            continue
        spec = spec_of(order.spec)
        packages[order.name] = PackageNodeState(version=spec.version, image=spec.image, stage=Stage.CONFIG,
                                                state=State.COMPLETE, config=config_hashes(spec.config))
    return dump_node_state(NodeState(packages=packages))


class SnapshotWorld:
    """A snapshot of the Nodes under simulated windows (module docstring)."""

    def __init__(self, nodes: Sequence[NodeView], timings: Timings) -> None:
        self.views = {n.name: n for n in nodes}
        self.timings = timings
        self.requests: dict[str, WindowRequest] = {}
        # The window each node got (its first that ran or answered something).
        self.windows: dict[str, PlannedWindow] = {}
        # Per node, its last classification and what it was made of (`listing`).
        self._classified: dict[str, tuple[NodeView, bool, frozenset[str], str, NodeTargets | None]] = {}

    def _view(self, name: str) -> NodeView:
        view = self.views[name]
        return replace(view, status_label=IN_WINDOW_LABEL) if name in self.requests else view

    def listing(self, input: ListFleetNodesInput) -> ListFleetNodesResult:
        """The real target selection over the snapshot (`select_fleet`'s rules, node by node). A node's
        classification is made again only when its view, its window or the query changed: a plan lists the
        whole fleet dozens of times and a window changes one node (issue 45: most of a 10,000-node plan)."""
        packages = {e.name: FleetPackage(spec_of(e.spec), uninstall=e.uninstall, paused=e.paused) for e in input.packages}
        in_flight = {n: frozenset(p) for n, p in input.in_flight.items()}
        query = FleetQuery(packages, [], in_flight, frozenset(input.label_keys), input.supply,
                           frozenset(input.resources), respect_from_json(input.respect))
        asked = json.dumps([[(e.name, e.spec, e.uninstall, e.paused) for e in input.packages], sorted(input.label_keys),
                            input.supply, sorted(input.resources), input.respect], sort_keys=True, default=str)
        selection = FleetSelection()
        for name in sorted(self.views):
            view, in_window, ours = self.views[name], name in self.requests, in_flight.get(name, frozenset())
            known = self._classified.get(name)
            if known is not None and known[0] is view and known[1:4] == (in_window, ours, asked):
                targets = known[4]
            else:
                targets = classify_node(self._view(name), query)
                self._classified[name] = (view, in_window, ours, asked, targets)
            if targets is not None:
                selection.nodes[name] = targets
        return ListFleetNodesResult(selection=selection_to_json(selection), listed=len(self.views))

    def read(self, input: ReadNodeSupplyInput) -> ReadNodeSupplyResult:
        keys, respect = set(input.label_keys), respect_from_json(input.respect)
        views = supply_read([self._view(n) for n in sorted(self.views)], input.nodes, input.down_only)
        return ReadNodeSupplyResult({v.name: _availability(v, input.resources, keys, respect) for v in views})

    def open_window(self, node: str, request: WindowRequest) -> tuple[float, WindowResult]:
        window, result = plan_window(request, self.views[node])
        window.seconds = window_seconds(window.shape(), self.timings) if window.packages else 0.0
        if node not in self.windows or (window.packages and not self.windows[node].packages):
            self.windows[node] = window
        self.requests[node] = request
        return window.seconds, result

    def resume_window(self, node: str, flight: InFlight) -> tuple[float, WindowResult]:
        raise ValueError(f"a plan starts with no window out, but {node} has one ({flight.request_id})")

    def close_window(self, node: str, result: WindowResult) -> None:
        request = self.requests.pop(node)
        view = self.views[node]
        self.views[node] = replace(view, state_annotation=recorded_after(view.state_annotation, request, result))


def _availability(view: NodeView, resources: Sequence[str], keys: set[str], respect: Respect | None) -> NodeAvailability:
    return NodeAvailability(down_reason(view, respect), units(view, resources),
                            {k: v for k, v in view.labels.items() if k in keys})



# --- the ETA: the fleet's own view of its nodes -------------------------------------------------------


class FleetViewWorld:
    """The fleet's latest listing under simulated windows (module docstring)."""

    def __init__(self, targets: Mapping[str, NodeTargets], entries: Sequence[PackageEntry], timings: Timings) -> None:
        self.targets = dict(targets)
        self.timings = timings
        self.specs: dict[str, tuple[PackageSpec | None, bool]] = {}
        for entry in entries:
            try:
                self.specs[entry.name] = (spec_of(entry.spec), entry.uninstall)
            except ValueError:
                self.specs[entry.name] = (None, entry.uninstall)
        self.shapes: dict[tuple[str, ...], tuple[WindowShape, float]] = {}
        self.out: set[str] = set()
        # The shape of every window run (or out at the start), in order.
        self.shapes_run: list[WindowShape] = []

    def _seconds(self, packages: Iterable[str]) -> float:
        key = tuple(sorted(packages))
        if key not in self.shapes:
            shape = window_shape(key, self.specs)
            self.shapes[key] = (shape, window_seconds(shape, self.timings))
        shape, seconds = self.shapes[key]
        self.shapes_run.append(shape)
        return seconds

    def seconds_of(self, state: object) -> float:
        """The time of the windows run so far (the last shape's), 0 before any."""
        return window_seconds(self.shapes_run[-1], self.timings) if self.shapes_run else 0.0

    def _shown(self, name: str) -> NodeTargets:
        listed = self.targets[name]
        return replace(listed, down=DOWN_WINDOW) if name in self.out else listed

    def listing(self, input: ListFleetNodesInput) -> ListFleetNodesResult:
        selection = FleetSelection({n: self._shown(n) for n in sorted(self.targets)})
        return ListFleetNodesResult(selection=selection_to_json(selection), listed=len(self.targets))

    def read(self, input: ReadNodeSupplyInput) -> ReadNodeSupplyResult:
        # The fleet's view knows why a node is down, not its Node: what a `down_only` read selects by itself is
        # what the view has cordoned or in a window.
        wanted = set(input.nodes)
        shown = {n: self._shown(n) for n in self.targets}
        return ReadNodeSupplyResult({n: NodeAvailability(t.down, dict(t.capacity), dict(t.labels))
                                     for n, t in shown.items()
                                     if n in wanted or (input.down_only and t.down in (DOWN_CORDONED, DOWN_WINDOW))})

    def open_window(self, node: str, request: WindowRequest) -> tuple[float, WindowResult]:
        self.out.add(node)
        outcomes = {o.name: PackageOutcome(State.COMPLETE.value, str(o.spec.get("version", ""))) for o in request.packages}
        return self._seconds(outcomes), WindowResult(node, request.request_id, outcomes)

    def resume_window(self, node: str, flight: InFlight) -> tuple[float, WindowResult]:
        self.out.add(node)
        outcomes = {p: PackageOutcome(State.COMPLETE.value) for p in flight.packages}
        return self._seconds(flight.packages), WindowResult(node, flight.request_id, outcomes, withdrawn=False)

    def close_window(self, node: str, result: WindowResult) -> None:
        self.out.discard(node)
        listed = self.targets.get(node)
        if listed is None:
            return
        completed = [p for p, o in result.outcomes.items() if o.state == State.COMPLETE.value]
        self.targets[node] = replace(listed, pending=[p for p in listed.pending if p not in completed],
                                     done=sorted({*listed.done, *completed}))

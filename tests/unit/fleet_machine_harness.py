"""A fake fleet that drives the fleet machine (planning/fleet/machine.py) the way the workflow does, written
apart from planning/views/simulate.py, for the machine's property tests (tests/unit/test_fleet_machine.py).

`Harness` plays Kubernetes and the node workflows: Nodes (`NodeView`s) that listings classify with the real
target selection, node workflows that answer each request after the node's own window time (every Package
complete and recorded on the node, or erroring on the nodes in `fail`), and people or other controllers
that cordon, uncordon, turn nodes NotReady and Ready at given times (the bridge's `availability_changed`
and `nodes_changed` follow each). At every hand-out it checks the budgets on the Nodes as they are then
(`violations`), and it records what was handed out, when (`handouts`).
"""

from __future__ import annotations

import heapq
import json
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from api.enums import CanaryPhase
from api.node_state import config_hashes
from api.package import PackageSpec
from api.policy import DeploymentPolicySpec
from planning.fleet import commands as c
from planning.fleet.codec import selection_to_json
from planning.fleet.machine import FleetMachine
from planning.fleet.messages import Answer, AvailabilityChanged, Desired, NodesChanged
from planning.node.targets import NodeView
from planning.rollout import batches, disruption
from planning.rollout.fleet_targets import (
    FleetPackage,
    FleetQuery,
    NodeTargets,
    down_reason,
    select_fleet,
    supply_read,
    units,
)
from planning.rollout.gates import SampleOutcome
from planning.rollout.respect import respect_from_json
from protocol.activities import (
    DescribeWorkflowRunsResult,
    ListFleetNodesResult,
    MarkUpcomingNodesResult,
    NodeAvailability,
    ReadNodeSupplyResult,
)
from protocol.fleet import FleetInput, FleetSpec, PackageOutcome, WindowRequest, WindowResult
from tests.unit.fleet_builders import a_fleet_spec

START = datetime(2026, 1, 1, tzinfo=UTC)
GPU = "nvidia.com/gpu"
# A respected taint of the default list (cluster-autoscaler deleting the node).
HELD_TAINT = "ToBeDeletedByClusterAutoscaler"


@dataclass
class Node:
    """A simulated Node: labels, GPUs, what is recorded on it, and what others did to it."""

    name: str
    labels: dict[str, str]
    gpus: int = 8
    recorded: dict[str, dict[str, Any]] = field(default_factory=dict)
    cordoned: bool = False
    ready: bool = True
    # Held by another maintenance: the cluster autoscaler's taint (PreferNoSchedule, so that the Packages are
    # not blocked by it: the fleet must hold the node itself).
    held: bool = False

    def view(self, in_window: bool) -> NodeView:
        state = json.dumps({"packages": self.recorded})
        taints = [{"key": HELD_TAINT, "value": "", "effect": "PreferNoSchedule"}] if self.held else []
        return NodeView(self.name, dict(self.labels), taints, state, "in-progress" if in_window else "", False,
                        self.ready, self.cordoned, {GPU: str(self.gpus)} if self.gpus else {})


@dataclass(frozen=True)
class Outside:
    """Someone else changes a node at `at` seconds: `cordon`, `uncordon`, `notready`, `ready`, `hold` (another
    maintenance's taint) and `release`."""

    at: float
    node: str
    what: str


@dataclass
class Harness:
    """The fake fleet (module docstring)."""

    nodes: dict[str, Node]
    spec: FleetSpec
    # Seconds each node's windows take.
    seconds: dict[str, float]
    outside: list[Outside] = field(default_factory=list)
    fail: set[str] = field(default_factory=set)
    # The first reads before a hand-out that fail (the apiserver not answering), and what the fleet held then.
    unreadable: int = 0
    unread_holds: list[dict[str, str]] = field(default_factory=list)
    clock: datetime = START
    handouts: list[tuple[float, int, bool, list[str]]] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    requests: dict[str, list[WindowRequest]] = field(default_factory=dict)
    peak: int = 0

    def __post_init__(self) -> None:
        self.machine = FleetMachine()
        self.out: dict[str, WindowRequest] = {}
        self.finishing: list[tuple[datetime, str, str]] = []
        self.events = sorted(self.outside, key=lambda o: (o.at, o.node, o.what))
        self.policy = DeploymentPolicySpec.model_validate(self.spec.policy)

    @classmethod
    def of(cls, nodes: list[Node], policy: dict[str, Any], packages: list[Any], seconds: dict[str, float],
           **kwargs: Any) -> Harness:
        return cls({n.name: n for n in nodes}, a_fleet_spec(*packages, policy=policy), seconds, **kwargs)

    # --- the Nodes ---------------------------------------------------------------------------------

    def views(self) -> list[NodeView]:
        return [n.view(n.name in self.out) for _, n in sorted(self.nodes.items())]

    def listing(self, command: c.ListNodes) -> ListFleetNodesResult:
        query = command.input
        packages = {e.name: FleetPackage(_spec(e.spec), e.uninstall, e.paused) for e in query.packages}
        selection = select_fleet(FleetQuery(packages, self.views(), {n: frozenset(p) for n, p in query.in_flight.items()},
                                            frozenset(query.label_keys), query.supply, frozenset(query.resources),
                                            respect_from_json(query.respect)))
        return ListFleetNodesResult(selection_to_json(selection), len(self.nodes))

    def read(self, command: c.ReadSupply) -> ReadNodeSupplyResult:
        keys, respect = set(command.input.label_keys), respect_from_json(command.input.respect)
        views = supply_read(self.views(), command.input.nodes, command.input.down_only)
        return ReadNodeSupplyResult({v.name: NodeAvailability(down_reason(v, respect), units(v, command.input.resources),
                                                              {k: x for k, x in v.labels.items() if k in keys})
                                     for v in views})

    # --- the budget at every hand-out ----------------------------------------------------------------

    def check_budgets(self, nodes: list[str]) -> None:
        """Every node handed out now (`nodes`, not yet out) fits its compartment's count budget, floor and
        topology limits, on the Nodes as they are, with this fleet's windows out."""
        planner = self.machine.run.state.planner
        assert planner is not None
        compartments = {n: planner.compartment_of(n) or "default" for n in self.nodes}
        listed = {v.name: NodeTargets(labels=dict(v.labels), capacity=units(v, [GPU]), down=down_reason(v))
                  for v in self.views()}
        supply = disruption.supply_of(self.policy, listed, compartments, set(self.out))
        admission = batches.Admission(supply)
        for node in nodes:
            if self.nodes[node].held:
                self.violations.append(f"{self.seconds_now():.0f}s {node}: started while another maintenance holds it")
            if not admission.admit(node):
                self.violations.append(f"{self.seconds_now():.0f}s {node}: {admission.waits[-1].text}")
        # The count budget: this fleet's windows and the nodes someone else cordoned or holds, at once.
        for name, comp in planner.compartments.items():
            others = {n for n, node in self.nodes.items() if compartments.get(n) == name and n not in self.out
                      and (node.cordoned or node.held)}
            # Only nodes that were up become disrupted (a node someone else cordoned takes no further slot).
            added = {n for n in nodes if compartments.get(n) == name} - others
            out = {n for n in self.out if compartments.get(n) == name} | added
            if added and len(out | others) > comp.budget:
                self.violations.append(f"{self.seconds_now():.0f}s compartment {name}: {len(out)} out and "
                                       f"{len(others)} down for others' reasons, budget {comp.budget}")

    def hand_over(self, command: c.RequestWindows) -> None:
        planner = self.machine.run.state.planner
        self.check_budgets(list(command.nodes))
        for node, request in zip(command.nodes, command.requests, strict=True):
            self.out[node] = request
            self.requests.setdefault(node, []).append(request)
            heapq.heappush(self.finishing, (self.clock + timedelta(seconds=self.seconds[node]), node, request.request_id))
        self.peak = max(self.peak, len(self.out))
        number = planner.batch_number if planner else 0
        canary = planner is not None and planner.canary_phase is CanaryPhase.RUNNING
        self.handouts.append((self.seconds_now(), number, canary, list(command.nodes)))

    # --- time ------------------------------------------------------------------------------------------

    def seconds_now(self) -> float:
        return (self.clock - START).total_seconds()

    def _finish(self, node: str, request_id: str) -> None:
        request = self.out.get(node)
        if request is None or request.request_id != request_id:
            return
        del self.out[node]
        outcomes = {}
        for order in request.packages:
            version = str(order.spec.get("version", ""))
            if node in self.fail:
                outcomes[order.name] = PackageOutcome("erroring", version, "apply", "apply failed")
                continue
            if order.uninstall:
                self.nodes[node].recorded.pop(order.name, None)
            else:
                self.nodes[node].recorded[order.name] = {
                    "version": version, "image": str(order.spec.get("image", "")), "state": "complete",
                    "stage": "config", "config": config_hashes(order.spec.get("config") or {})}
            outcomes[order.name] = PackageOutcome("complete", version, "config", "complete")
        self.machine.receive(Answer(WindowResult(node, request_id, outcomes)))

    def _happen(self, event: Outside) -> None:
        node = self.nodes[event.node]
        if event.what in ("cordon", "uncordon"):
            node.cordoned = event.what == "cordon"
        elif event.what in ("hold", "release"):
            node.held = event.what == "hold"
        else:
            node.ready = event.what == "ready"
        self.machine.receive(AvailabilityChanged((event.node,)))
        self.machine.receive(NodesChanged())

    def wait(self, command: c.Wait) -> bool | None:
        run = self.machine.run
        if run.inbox:
            return True
        moments = []
        if self.finishing:
            moments.append(self.finishing[0][0])
        if self.events:
            moments.append(START + timedelta(seconds=self.events[0].at))
        if command.timeout is not None:
            moments.append(self.clock + command.timeout)
        if not self.out and not self.events and run.phase.value in ("Complete", "Failed", "Halted", "Waiting"):
            return None
        if not moments:
            return None
        self.clock = max(self.clock, min(moments))
        while self.finishing and self.finishing[0][0] <= self.clock:
            _at, node, request_id = heapq.heappop(self.finishing)
            self._finish(node, request_id)
        while self.events and START + timedelta(seconds=self.events[0].at) <= self.clock:
            self._happen(self.events.pop(0))
        return bool(run.inbox)

    # --- the loop ----------------------------------------------------------------------------------------

    def run(self, steps: int = 20_000) -> Harness:
        machine = self.machine
        machine.receive(Desired(self.spec))
        command = machine.start(FleetInput(policy_name=self.spec.policy_name), self.clock)
        unread = False
        for _ in range(steps):
            answer: Any = None
            if isinstance(command, c.Complete | c.ContinueAsNew):
                break
            if isinstance(command, c.Wait):
                if unread:  # the fleet holds what it could not check, then pauses
                    self.unread_holds.append(dict(machine.run.state.held))
                    unread = False
                answer = self.wait(command)
                if answer is None:
                    break
            elif isinstance(command, c.Patched):
                answer = True
            elif isinstance(command, c.HistoryFull):
                answer = False
            elif isinstance(command, c.ListNodes):
                answer = self.listing(command)
            elif isinstance(command, c.ReadSupply) and self.unreadable:
                self.unreadable -= 1
                answer = c.Failed("the apiserver did not answer")
                unread = True
            elif isinstance(command, c.ReadSupply):
                answer = self.read(command)
            elif isinstance(command, c.RequestWindows):
                self.hand_over(command)
            elif isinstance(command, c.MarkUpcoming):
                answer = MarkUpcomingNodesResult(list(command.input.mark), list(command.input.unmark))
            elif isinstance(command, c.QueryGate):
                answer = SampleOutcome(True, "1")
            elif isinstance(command, c.DescribeRuns):
                answer = DescribeWorkflowRunsResult()
            command = machine.feed(answer, self.clock)
        return self


def _spec(data: dict[str, Any]) -> PackageSpec:
    return PackageSpec.model_validate(data)


def with_gpus(view: NodeView, gpus: int) -> NodeView:
    """`view` with `gpus` allocatable GPUs."""
    return replace(view, allocatable={GPU: str(gpus)})

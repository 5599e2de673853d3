"""The benchmark scenario: its Packages' and DeploymentPolicy's manifests and its ideal makespan. Pure.

The package `bench-sleep` (bench/packages/bench-sleep) sleeps `stage_seconds` in every stage it
runs (`apply`, `config`, `post-interrupt` on a fresh node; checks are instant) and asks for a
reboot that fleetsim makes last `reboot_seconds`. A scenario rolls out `packages` Packages of it
under one DeploymentPolicy, so one fleet (`fleet/<name>`): the first is named `<name>`, each
further one `<name>-<i>` and depends on the one before, all with the same interrupt; the fleet
gives every node ONE window for all of them (their stages in dependency order, one drain, one
merged reboot). The ideal makespan is what a perfect orchestrator with the same batches would
take: the number of batches times one node's critical path (every stage of every Package plus
one interrupt), with zero time between stages, windows and batches.

The scale scenario (issue 45): a count budget (`budget_count`: the same windows at once at every fleet
size), a GPU floor (`floor_percent`: every hand-out reads the nodes first, ADR 0023) and a sample
(`windows`: the first W windows of the wave, then a halt), so fleets of 200 to 10,000 nodes run the
same batches and are compared window for window.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from api.enums import Stage
from api.keys import API_VERSION, PACKAGE_KIND, POLICY_KIND
from api.node_state import NodeState
from api.package import PackageSpec
from api.policy import DeploymentPolicySpec
from fleetsim.context import jitter_factor
from planning.node.node_plan import NodePlanInput, plan_node
from planning.rollout.batches import PlannerInput, new_planner, next_batch, record_batch_result
from planning.rollout.compartments import NodeInfo
from protocol.names import fleet_workflow_id

PACKAGES_DIR = Path(__file__).resolve().parent / "packages"
IMAGE = "bench.local/bench-sleep:1.0.0"
RUN_LABEL = "bench.noderoll.io/run"
GPU_RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True)
class Scenario:
    """One benchmark rollout: names, fleet size, timings and the policy."""

    name: str  # Package and DeploymentPolicy name, node prefix, label value
    nodes: int
    stage_seconds: float = 5.0
    reboot_seconds: float = 15.0
    strategy: str = "exponential"
    initial_batch: int = 1
    growth_factor: int = 2
    budget_percent: int = 25
    version: str = "1.0.0"
    reboot: bool = True  # False: no interrupt (no drain, no cordon): the "one package without interrupt" window
    # Packages of the fleet: each after the first depends on the one before (all alike otherwise).
    packages: int = 1
    # linear's delta; fleetsim's --jitter-percent (each node's stages and reboot times its own factor).
    delta: int = 1
    jitter_percent: float = 0.0
    # A count budget instead of `budget_percent` (None: the percent); a floor of `nvidia.com/gpu` in percent
    # (None: none); the windows sampled (None: the whole wave; else the fleet is halted once W windows began).
    budget_count: int | None = None
    floor_percent: int | None = None
    windows: int | None = None

    @property
    def sampled(self) -> bool:
        """The run is the first `windows` windows of a larger wave (halted then), not the whole wave."""
        return self.windows is not None and self.windows < self.nodes

    @property
    def package_names(self) -> list[str]:
        """`<name>`, then `<name>-2`, `<name>-3`, ... (the dependency order)."""
        return [self.name] + [f"{self.name}-{i}" for i in range(2, self.packages + 1)]


def policy_manifest(sc: Scenario) -> dict[str, Any]:
    """The DeploymentPolicy of the scenario."""
    strategy: dict[str, Any] = {"type": sc.strategy}
    if sc.strategy != "rolling":  # rolling keeps the budget's windows running: no initialBatch
        strategy["initialBatch"] = sc.initial_batch
    if sc.strategy == "exponential":
        strategy["growthFactor"] = sc.growth_factor
    if sc.strategy == "linear":
        strategy["delta"] = sc.delta
    budget: dict[str, Any] = {"count": sc.budget_count} if sc.budget_count else {"percent": sc.budget_percent}
    if sc.floor_percent:
        budget["minAvailable"] = {"resource": GPU_RESOURCE, "percent": sc.floor_percent}
    return {
        "apiVersion": API_VERSION, "kind": POLICY_KIND, "metadata": {"name": sc.name, "labels": {RUN_LABEL: sc.name}},
        "spec": {"default": {"budget": budget, "strategy": strategy}},
    }


def package_manifest(sc: Scenario, extra_env: dict[str, str] | None = None, index: int = 0) -> dict[str, Any]:
    """The scenario's `index`-th Package (selects the scenario's nodes by label; depends on the one before)."""
    env = {"BENCH_STAGE_SECONDS": f"{sc.stage_seconds:g}", **(extra_env or {})}
    name = sc.package_names[index]
    return {
        "apiVersion": API_VERSION, "kind": PACKAGE_KIND, "metadata": {"name": name, "labels": {RUN_LABEL: sc.name}},
        "spec": {
            "version": sc.version,
            "image": IMAGE,
            "nodeSelector": {"matchLabels": {RUN_LABEL: sc.name}},
            **({"interrupt": {"type": "reboot"}} if sc.reboot else {}),
            **({"dependsOn": {sc.package_names[index - 1]: sc.version}} if index else {}),
            "deploymentPolicy": sc.name,
            "env": [{"name": k, "value": v} for k, v in sorted(env.items())],
        },
    }


def package_manifests(sc: Scenario) -> list[dict[str, Any]]:
    """Every Package of the scenario, dependencies first."""
    return [package_manifest(sc, index=i) for i in range(sc.packages)]


def node_critical_path(sc: Scenario) -> float:
    """Seconds one fresh node needs at best in its one window: every planned stage plus one interrupt. Pure."""
    desired = {m["metadata"]["name"]: PackageSpec.model_validate(m["spec"]) for m in package_manifests(sc)}
    plan = plan_node(NodePlanInput(node="n", recorded=NodeState(), desired=desired))
    stages = [s for name in desired for s in plan.packages[name].stages if s is not Stage.INTERRUPT]
    interrupted = any(Stage.INTERRUPT in plan.packages[name].stages for name in desired)
    return len(stages) * sc.stage_seconds + (sc.reboot_seconds if interrupted else 0.0)


def planned_batches(sc: Scenario, node_names: list[str]) -> list[list[str]]:
    """The batches (their nodes) the planner makes for the scenario when every node succeeds, up to the
    one that reaches the sample's `windows` (the halt comes during it); [] for rolling, which has none. Pure."""
    if sc.strategy == "rolling":
        return []
    policy = DeploymentPolicySpec.model_validate(policy_manifest(sc)["spec"])
    state = new_planner(PlannerInput(policy, [NodeInfo(n) for n in node_names], fleet_workflow_id(sc.name)))
    remaining = set(node_names)
    found = []
    while True:
        batch = next_batch(state, remaining)
        if not batch:
            return found
        found.append(list(batch))
        if sc.windows is not None and sum(len(b) for b in found) >= sc.windows:
            return found
        remaining -= set(batch)
        record_batch_result(state, set(batch), set())


def batch_sizes(sc: Scenario, node_names: list[str]) -> list[int]:
    """The batch sizes the planner makes for the scenario when every node succeeds. Pure."""
    return [len(batch) for batch in planned_batches(sc, node_names)]


def node_paths(sc: Scenario, node_names: list[str]) -> dict[str, float]:
    """Each node's critical path: fleetsim's jitter scales its stages and its reboot alike. Pure."""
    critical = node_critical_path(sc)
    return {n: critical * jitter_factor(n, sc.jitter_percent) for n in node_names}


def ideal_makespan(sc: Scenario, node_names: list[str]) -> float:
    """A perfect orchestrator's makespan (zero time between stages, windows and batches). Pure.

    Batches: the sum over batches of their slowest node's critical path (all nodes alike without
    jitter: batches x critical path). `rolling`: the budget's windows at all times, each node started
    the moment a window ends, in the planner's order (list scheduling on `budget` slots)."""
    paths = node_paths(sc, node_names)
    if sc.strategy != "rolling":
        return sum(max(paths[n] for n in batch) for batch in planned_batches(sc, node_names))
    policy = DeploymentPolicySpec.model_validate(policy_manifest(sc)["spec"])
    state = new_planner(PlannerInput(policy, [NodeInfo(n) for n in node_names], fleet_workflow_id(sc.name)))
    slots = [0.0] * max(1, min(c.budget for c in state.compartments.values() if c.nodes))
    for node in (n for c in state.compartments.values() for n in c.nodes):
        start = heapq.heappop(slots)
        heapq.heappush(slots, start + paths[node])
    return max(slots)

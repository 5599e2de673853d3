"""The demo's Kubernetes objects: the example policy and Packages from deploy/examples, fitted to the demo fleet.

Reads the example YAML files and returns plain dicts (no API calls). Fitting means: names get the
demo's suffix and every object the demo's run label (so several demos, or tests, share one cluster:
each demo's bridge watches only its own objects), the Packages select only the
demo fleet's nodes (fleetsim's prefix label) and name the demo policy, the reboot package waits for
the fleet's protected training pods, and the canary soak is short enough for a terminal demo. The
example's GPU floor (80 %) is kept unless it would keep every node of a small demo fleet out of
windows (4 nodes of 8 GPUs: 26 of 32 must stay, one node leaves 24): it is then lowered so that one
node may go (75 % of 4 nodes).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from demo.view import GpuWatch
from fleetsim.context import PREFIX_LABEL
from fleetsim.workloads import PROTECTED_LABEL

EXAMPLES = Path(__file__).resolve().parent.parent / "deploy" / "examples"
POLICY_FILE = "policy-gpu-fleet.yaml"
# No interrupt first, then the reboot package that depends on it.
PACKAGE_FILES = ("package-sysctl-tuning.yaml", "package-kmod-blocklist.yaml")
# The example Packages select GPU nodes by this label; the demo fleet carries it.
GPU_LABEL = ("example.com/gpu", "true")
# The rack label the example policy's topology limit reads; fleetsim puts the demo nodes in racks of 4.
RACK_LABEL = "example.com/rack"
NODES_PER_RACK = 4
GPUS_PER_NODE = 8


def racks_for(nodes: int) -> int:
    """How many racks the demo's nodes fill (4 nodes each, at least 2 so the limit has a choice). Pure."""
    return max(2, -(-nodes // NODES_PER_RACK))
# On the demo's policy and Packages; the demo's bridge watches only objects carrying it.
RUN_LABEL = "demo.noderoll.io/run"


@dataclass(frozen=True)
class DemoNames:
    """Every name the demo creates, derived from one suffix ("" for the plain demo)."""

    suffix: str = ""

    @property
    def node_prefix(self) -> str:
        """fleetsim's node name prefix (also the value of its prefix label)."""
        return f"demo{self.suffix}"

    @property
    def selector(self) -> str:
        """Label selector of this demo's policy and Packages (the demo bridge's `--label-selector`)."""
        return f"{RUN_LABEL}={self.node_prefix}"

    @property
    def workload_namespace(self) -> str:
        """Namespace of the training pods and Deployments."""
        return f"demo{self.suffix}-workloads"

    def named(self, example_name: str) -> str:
        """The demo name of an example object."""
        return f"{example_name}{self.suffix}"


@dataclass(frozen=True)
class DemoObjects:
    """The policy and the Packages to apply, in order."""

    policy: dict[str, Any]
    packages: list[dict[str, Any]]

    @property
    def package_names(self) -> list[str]:
        """Names of the demo Packages."""
        return [p["metadata"]["name"] for p in self.packages]


@dataclass(frozen=True)
class DemoTuning:
    """Knobs of the demo policy (short soak, optional budget override)."""

    soak_seconds: int = 10
    budget_percent: int | None = None
    # The demo fleet's size (None: unknown, the floor is kept as the example has it).
    nodes: int | None = None


def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text(encoding="utf-8"))
    return data


def fit_policy(example: dict[str, Any], names: DemoNames, tuning: DemoTuning) -> dict[str, Any]:
    """The example DeploymentPolicy under the demo's name and tuning. Pure."""
    policy = copy.deepcopy(example)
    policy["metadata"] = {"name": names.named(example["metadata"]["name"]), "labels": {RUN_LABEL: names.node_prefix}}
    spec = policy["spec"]
    if "canary" in spec:
        spec["canary"]["soakSeconds"] = tuning.soak_seconds
    if tuning.budget_percent is not None:
        # Only the node count: the GPU floor and the rack limit stay.
        budget = spec["default"]["budget"]
        budget.pop("count", None)
        budget["percent"] = tuning.budget_percent
    floor = spec["default"]["budget"].get("minAvailable")
    if floor and floor.get("percent") and tuning.nodes:
        floor["percent"] = min(floor["percent"], floor_percent_for(tuning.nodes))
    return policy


def floor_percent_for(nodes: int) -> int:
    """The highest GPU floor percent that still lets one of `nodes` equal nodes into a window. Pure."""
    return max(1, min(99, 100 * (nodes - 1) // max(nodes, 1)))


def fit_package(example: dict[str, Any], names: DemoNames, policy: str) -> dict[str, Any]:
    """The example Package restricted to the demo fleet, under the demo's names. Pure."""
    package = copy.deepcopy(example)
    package["metadata"] = {"name": names.named(example["metadata"]["name"]), "labels": {RUN_LABEL: names.node_prefix}}
    spec = package["spec"]
    spec["deploymentPolicy"] = policy
    selector = spec.setdefault("nodeSelector", {})
    selector.setdefault("matchLabels", {})[PREFIX_LABEL] = names.node_prefix
    if spec.get("dependsOn"):
        spec["dependsOn"] = {names.named(dep): version for dep, version in spec["dependsOn"].items()}
    if spec.get("podNonInterruptLabels"):
        # The fleet's protected training pods: the reboot waits for them instead of killing them.
        spec["podNonInterruptLabels"] = {"matchLabels": {PROTECTED_LABEL: "true"}}
    return package


def interrupt_word(objects: DemoObjects) -> str:
    """How the demo names its Packages' merged interrupt: `reboot` when one of them reboots (a reboot wins
    the merge), else `interrupt`. Pure."""
    types = {(p["spec"].get("interrupt") or {}).get("type") for p in objects.packages}
    return "reboot" if "reboot" in types else "interrupt"


def gpu_watch(objects: DemoObjects) -> GpuWatch:
    """What the demo watches on the Nodes for the policy's rack limit (the label and its max). Pure."""
    limits = objects.policy["spec"]["default"]["budget"].get("maxUnavailablePerTopology") or []
    rack = next((limit for limit in limits if limit["key"] == RACK_LABEL), None)
    return GpuWatch(rack_label=RACK_LABEL, rack_max=int(rack["max"]) if rack else 0)


def demo_objects(names: DemoNames, tuning: DemoTuning) -> DemoObjects:
    """The demo's policy and Packages, read from deploy/examples and fitted."""
    policy = fit_policy(_load(POLICY_FILE), names, tuning)
    policy_name = policy["metadata"]["name"]
    packages = [fit_package(_load(name), names, policy_name) for name in PACKAGE_FILES]
    return DemoObjects(policy, packages)

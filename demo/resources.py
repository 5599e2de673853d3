"""The demo's Kubernetes objects: the example policy and Packages from deploy/examples, fitted to the demo fleet.

Reads the example YAML files and returns plain dicts (no API calls). Fitting means: names get the
demo's suffix and every object the demo's run label (so several demos, or tests, share one cluster:
each demo's bridge watches only its own objects), the Packages select only the
demo fleet's nodes (fleetsim's prefix label) and name the demo policy, the reboot package waits for
the fleet's protected training pods, and the canary soak is short enough for a terminal demo.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fleetsim.context import PREFIX_LABEL
from fleetsim.workloads import PROTECTED_LABEL

EXAMPLES = Path(__file__).resolve().parent.parent / "deploy" / "examples"
POLICY_FILE = "policy-gpu-fleet.yaml"
# No interrupt first, then the reboot package that depends on it.
PACKAGE_FILES = ("package-sysctl-tuning.yaml", "package-kmod-blocklist.yaml")
# The example Packages select GPU nodes by this label; the demo fleet carries it.
GPU_LABEL = ("example.com/gpu", "true")
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
        spec["default"]["budget"] = {"percent": tuning.budget_percent}
    return policy


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


def demo_objects(names: DemoNames, tuning: DemoTuning) -> DemoObjects:
    """The demo's policy and Packages, read from deploy/examples and fitted."""
    policy = fit_policy(_load(POLICY_FILE), names, tuning)
    policy_name = policy["metadata"]["name"]
    packages = [fit_package(_load(name), names, policy_name) for name in PACKAGE_FILES]
    return DemoObjects(policy, packages)

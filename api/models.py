"""One import point for noderoll's API models (Package, DeploymentPolicy, statuses, node state). Pure."""

from __future__ import annotations

from api.node_state import NodeState, PackageNodeState, dump_node_state, parse_node_state
from api.package import (
    Drain,
    EnvVar,
    Interrupt,
    Limits,
    ObjectMeta,
    Package,
    PackageSpec,
    Resources,
    Toleration,
    Uninstall,
)
from api.policy import (
    DEFAULT_COMPARTMENT,
    Budget,
    Canary,
    Compartment,
    DeploymentPolicy,
    DeploymentPolicySpec,
    PolicyDefault,
    Strategy,
)
from api.problems import InvalidDocumentError, ValidationProblem
from api.selectors import LabelSelector, SelectorRequirement
from api.status import (
    BatchStatus,
    CanaryStatus,
    Condition,
    NodeCounts,
    NodeReason,
    PackageStatus,
    PolicyStatus,
)

__all__ = [
    "DEFAULT_COMPARTMENT",
    "BatchStatus",
    "Budget",
    "Canary",
    "CanaryStatus",
    "Compartment",
    "Condition",
    "DeploymentPolicy",
    "DeploymentPolicySpec",
    "Drain",
    "EnvVar",
    "Interrupt",
    "InvalidDocumentError",
    "LabelSelector",
    "Limits",
    "NodeCounts",
    "NodeReason",
    "NodeState",
    "ObjectMeta",
    "Package",
    "PackageNodeState",
    "PackageSpec",
    "PackageStatus",
    "PolicyDefault",
    "PolicyStatus",
    "Resources",
    "SelectorRequirement",
    "Strategy",
    "Toleration",
    "Uninstall",
    "ValidationProblem",
    "dump_node_state",
    "parse_node_state",
]

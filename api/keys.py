"""Contract names shared with users and outside tools (DESIGN.md "API (contract)"). Pure constants.

Every Kubernetes key, CRD coordinate, Temporal id prefix, signal, query and search attribute
that noderoll reads or writes is defined here once; other modules import the constant.
"""

from __future__ import annotations

GROUP = "noderoll.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
PACKAGE_KIND = "Package"
PACKAGE_PLURAL = "packages"
POLICY_KIND = "DeploymentPolicy"
POLICY_PLURAL = "deploymentpolicies"

PREFIX = "noderoll.io/"
NODE_STATE_ANNOTATION = "noderoll.io/state"
NODE_STATUS_LABEL = "noderoll.io/status"
NODE_IGNORE_LABEL = "noderoll.io/ignore"
CORDONED_BY_ANNOTATION = "noderoll.io/cordoned-by"
PAUSE_ANNOTATION = "noderoll.io/pause"
CONDITION_UPDATING = "noderoll.io/Updating"
CONDITION_ERRORING = "noderoll.io/Erroring"
# True while a node window drains the node (reason: `api.enums.DrainReason`); written only by the
# drain activities (activities/drain.py), read by the bridge and the CLI.
CONDITION_DRAINING = "noderoll.io/Draining"
RUNTIME_REQUIRED_TAINT_KEY = "noderoll.io/runtime-required"
RUNTIME_REQUIRED_TAINT_VALUE = "true"
RUNTIME_REQUIRED_TAINT_EFFECT = "NoSchedule"
FINALIZER = "noderoll.io/uninstall"
CORDONED_BY_VALUE = "noderoll"

# Temporal workflow ids (contract).
ROLLOUT_WORKFLOW_PREFIX = "package/"
NODE_WORKFLOW_PREFIX = "node/"
BUDGET_WORKFLOW_PREFIX = "budget/"

SIGNAL_PAUSE = "pause"
SIGNAL_RESUME = "resume"
SIGNAL_HALT = "halt"
SIGNAL_RETRY = "retry"
QUERY_PROGRESS = "progress"

SEARCH_ATTR_PACKAGE = "NoderollPackage"
SEARCH_ATTR_NODE = "NoderollNode"
SEARCH_ATTR_PHASE = "NoderollPhase"
SEARCH_ATTRIBUTES = (SEARCH_ATTR_PACKAGE, SEARCH_ATTR_NODE, SEARCH_ATTR_PHASE)

DEFAULT_TASK_QUEUE = "noderoll"
DEFAULT_NAMESPACE = "default"
# Namespace where stage Jobs and interrupt pods run.
PACKAGE_POD_NAMESPACE = "noderoll-system"


def rollout_workflow_id(package: str) -> str:
    """Workflow id of a Package's rollout (contract)."""
    return f"{ROLLOUT_WORKFLOW_PREFIX}{package}"


def node_workflow_id(node: str) -> str:
    """Workflow id of a node's workflow, the single writer of that node's state (contract)."""
    return f"{NODE_WORKFLOW_PREFIX}{node}"


def budget_workflow_id(policy: str, compartment: str) -> str:
    """Workflow id of a compartment's disruption budget (contract)."""
    return f"{BUDGET_WORKFLOW_PREFIX}{policy}/{compartment}"

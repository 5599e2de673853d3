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
RUNTIME_REQUIRED_TAINT_KEY = "noderoll.io/runtime-required"
RUNTIME_REQUIRED_TAINT_VALUE = "true"
RUNTIME_REQUIRED_TAINT_EFFECT = "NoSchedule"
# Node label (value "true"): gate the node with the runtime-required taint on every change of a
# runtimeRequired Package, not only when it joins (planning/runtime_taint.py).
RUNTIME_REQUIRED_GATE_LABEL = "noderoll.io/runtime-required-gate"
FINALIZER = "noderoll.io/uninstall"
CORDONED_BY_VALUE = "noderoll"

# Temporal names (workflow ids, signals, queries, search attributes) are defined once, in the wire
# protocol's leaf module; re-exported here for the code that reads every contract name from here.
from protocol.names import (  # noqa: E402, F401 - re-exported
    DEFAULT_FLEET,
    DEFAULT_NAMESPACE,
    DEFAULT_TASK_QUEUE,
    FLEET_WORKFLOW_PREFIX,
    NODE_WORKFLOW_PREFIX,
    QUERY_PROGRESS,
    SEARCH_ATTR_NODE,
    SEARCH_ATTR_PACKAGE,
    SEARCH_ATTR_PHASE,
    SEARCH_ATTRIBUTE_TYPES,
    SEARCH_ATTRIBUTES,
    SIGNAL_HALT,
    SIGNAL_PAUSE,
    SIGNAL_RESUME,
    SIGNAL_RETRY,
    budget_workflow_id,
    fleet_workflow_id,
    node_workflow_id,
)
from protocol.names import LEGACY_BUDGET_WORKFLOW_PREFIX as BUDGET_WORKFLOW_PREFIX  # noqa: E402, F401 - re-exported
from protocol.names import LEGACY_ROLLOUT_WORKFLOW_PREFIX as ROLLOUT_WORKFLOW_PREFIX  # noqa: E402, F401 - re-exported
from protocol.names import legacy_rollout_workflow_id as rollout_workflow_id  # noqa: E402, F401 - re-exported

# Namespace where stage Jobs and interrupt pods run.
PACKAGE_POD_NAMESPACE = "noderoll-system"

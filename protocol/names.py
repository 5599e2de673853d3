"""Temporal names: workflow types, workflow ids, signals, queries, search attributes. Pure constants.

The contract names (DESIGN.md "API (contract)": ids `fleet/<policy>` and `node/<node>`, signals
`pause`, `resume`, `halt`, `retry`, query `progress`, the `Noderoll*` search attributes) and the
internal ones (signals between the bridge, fleets and node workflows) are defined here once.
"""

from __future__ import annotations

# --- workflow types (what a starter passes to start_workflow by name) -----------------------
FLEET_WORKFLOW_TYPE = "FleetWorkflow"
NODE_WORKFLOW_TYPE = "NodeWorkflow"
# The per-Package engine of releases before fleets (ADR 0013): no longer registered; the worker and
# the bridge refuse to start while runs of these types are open (`noderoll migrate --finish-legacy`).
LEGACY_WORKFLOW_TYPES = ("RolloutWorkflow", "BudgetWorkflow")

# --- workflow ids (contract) ----------------------------------------------------------------
FLEET_WORKFLOW_PREFIX = "fleet/"
NODE_WORKFLOW_PREFIX = "node/"
# The fleet of Packages that name no DeploymentPolicy (a reserved policy name: one node at a time).
DEFAULT_FLEET = "default"

# --- contract signals and query (fleets) -----------------------------------------------------
# Each signal takes an optional `protocol.fleet.Filter` payload: {"packages": [...], "nodes": [...]}.
SIGNAL_PAUSE = "pause"
SIGNAL_RESUME = "resume"
SIGNAL_HALT = "halt"
SIGNAL_RETRY = "retry"
QUERY_PROGRESS = "progress"
# Operator verbs (issue 16): run a completed Package again (`protocol.fleet.Rerun`, on a fleet), and
# forget a node's recorded state (`protocol.fleet.NodeReset`, signal-with-start on `node/<node>`).
SIGNAL_RERUN = "rerun"
SIGNAL_NODE_RESET = "reset"

# --- internal signals and queries -------------------------------------------------------------
# bridge -> fleet: the fleet's desired state (`protocol.fleet.FleetSpec`), also the start signal.
SIGNAL_FLEET_SPEC = "desired"
# bridge -> fleet: Nodes joined, left or changed in a way that concerns the fleet (no payload).
SIGNAL_NODES_CHANGED = "nodes_changed"
# fleet -> node: one window for a set of Packages (`protocol.fleet.WindowRequest`, signal-with-start).
SIGNAL_WINDOW = "window"
# fleet -> node: withdraw a request that has not started (`protocol.fleet.WindowCancel`).
SIGNAL_WINDOW_CANCEL = "window_cancel"
# node -> fleet: the outcome of one window request (`protocol.fleet.WindowResult`).
SIGNAL_WINDOW_RESULT = "window_result"
QUERY_NODE_STATUS = "node_status"
# bridge -> fleet: the FleetSpec the fleet holds (after a bridge restart: what was handed over).
QUERY_FLEET_SPEC = "desired_state"

# --- search attributes (registered by the tooling: `noderoll dev up`, the Helm chart) -------
# Keyword list: every Package a fleet or node workflow carries (`NoderollPackage = 'x'` finds them).
SEARCH_ATTR_PACKAGE = "NoderollPackage"
SEARCH_ATTR_NODE = "NoderollNode"
SEARCH_ATTR_PHASE = "NoderollPhase"
# Name -> Temporal indexed value type, as `temporal operator search-attribute create --type` takes it.
SEARCH_ATTRIBUTE_TYPES = {
    SEARCH_ATTR_PACKAGE: "KeywordList",
    SEARCH_ATTR_NODE: "Keyword",
    SEARCH_ATTR_PHASE: "Keyword",
}
SEARCH_ATTRIBUTES = tuple(SEARCH_ATTRIBUTE_TYPES)

DEFAULT_TASK_QUEUE = "noderoll"
DEFAULT_NAMESPACE = "default"


def fleet_name(policy: str | None) -> str:
    """The fleet of Packages naming `policy` (`default` for none)."""
    return policy or DEFAULT_FLEET


def fleet_workflow_id(policy: str | None) -> str:
    """Workflow id of the fleet rollout of a DeploymentPolicy (contract; `fleet/default` for none)."""
    return f"{FLEET_WORKFLOW_PREFIX}{fleet_name(policy)}"


def node_workflow_id(node: str) -> str:
    """Workflow id of a node's workflow, the single writer of that node's state (contract)."""
    return f"{NODE_WORKFLOW_PREFIX}{node}"

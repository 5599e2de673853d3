"""Temporal names: workflow types, workflow ids, signals, queries, search attributes. Pure constants.

The contract names (DESIGN.md "API (contract)": ids `fleet/<policy>` and `node/<node>`, signals
`pause`, `resume`, `halt`, `retry`, query `progress`, the `Noderoll*` search attributes) and the
internal ones (signals between the bridge, fleets and node workflows) are defined here once.

Clusters (issue 29, ADR 0017): a worker, bridge or CLI given a cluster name (`--cluster NAME`) uses
`fleet/<cluster>/<policy>`, `node/<cluster>/<node>` and task queue `noderoll-<cluster>`; without one
(`cluster=""`) every id is exactly the single-cluster one. A policy's `spec.clusters` is coordinated
by `global/<policy>` on task queue `noderoll-global`.
"""

from __future__ import annotations

# --- workflow types (what a starter passes to start_workflow by name) -----------------------
FLEET_WORKFLOW_TYPE = "FleetWorkflow"
NODE_WORKFLOW_TYPE = "NodeWorkflow"
GLOBAL_WORKFLOW_TYPE = "GlobalRolloutWorkflow"
# The per-Package engine of releases before fleets (ADR 0013): no longer registered; the worker and
# the bridge refuse to start while runs of these types are open (`noderoll migrate --finish-legacy`).
LEGACY_WORKFLOW_TYPES = ("RolloutWorkflow", "BudgetWorkflow")

# --- workflow ids (contract) ----------------------------------------------------------------
FLEET_WORKFLOW_PREFIX = "fleet/"
NODE_WORKFLOW_PREFIX = "node/"
# The promotion of one policy's changes across clusters (`spec.clusters`): `global/<policy>`.
GLOBAL_WORKFLOW_PREFIX = "global/"
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
# bridge -> fleet: nodes of the fleet cordoned or uncordoned by someone else, or turned NotReady or
# Ready outside noderoll's own window (`protocol.fleet.AvailabilityChanged`; bursts coalesced).
SIGNAL_AVAILABILITY_CHANGED = "availability_changed"
# fleet -> node: one window for a set of Packages (`protocol.fleet.WindowRequest`, signal-with-start).
SIGNAL_WINDOW = "window"
# fleet -> node: withdraw a request that has not started (`protocol.fleet.WindowCancel`).
SIGNAL_WINDOW_CANCEL = "window_cancel"
# node -> fleet: the outcome of one window request (`protocol.fleet.WindowResult`).
SIGNAL_WINDOW_RESULT = "window_result"
QUERY_NODE_STATUS = "node_status"
# bridge -> fleet: the FleetSpec the fleet holds (after a bridge restart: what was handed over).
QUERY_FLEET_SPEC = "desired_state"
# fleet -> global/<policy>: a cluster asks for its turn for a change set, or reports its outcome
# (`protocol.clusters.ClusterReport`, signal-with-start by the activity `report_to_global`).
SIGNAL_CLUSTER_REPORT = "cluster_report"
# global/<policy> -> fleet: the cluster's turn and the global view (`protocol.clusters.GlobalTurn`).
SIGNAL_GLOBAL_TURN = "global_turn"

# --- search attributes (registered by the tooling: `noderoll dev up`, the Helm chart) -------
# Keyword list: every Package a fleet or node workflow carries (`NoderollPackage = 'x'` finds them).
SEARCH_ATTR_PACKAGE = "NoderollPackage"
SEARCH_ATTR_NODE = "NoderollNode"
SEARCH_ATTR_PHASE = "NoderollPhase"
# The cluster name of a fleet or node workflow (set at its start, only when the process has one).
SEARCH_ATTR_CLUSTER = "NoderollCluster"
# Name -> Temporal indexed value type, as `temporal operator search-attribute create --type` takes it.
SEARCH_ATTRIBUTE_TYPES = {
    SEARCH_ATTR_PACKAGE: "KeywordList",
    SEARCH_ATTR_NODE: "Keyword",
    SEARCH_ATTR_PHASE: "Keyword",
    SEARCH_ATTR_CLUSTER: "Keyword",
}
SEARCH_ATTRIBUTES = tuple(SEARCH_ATTRIBUTE_TYPES)

DEFAULT_TASK_QUEUE = "noderoll"
DEFAULT_NAMESPACE = "default"
# Polled by the worker of every named cluster: global/<policy> runs wherever a cluster's worker runs
# (it calls no activity), so no single cluster being down stops the promotion (ADR 0017).
GLOBAL_TASK_QUEUE = "noderoll-global"
# Cluster names: a lowercase DNS label (they become parts of ids and of the task queue's name);
# `global` would name the global task queue.
MAX_CLUSTER_LENGTH = 40
_CLUSTER_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")
RESERVED_CLUSTER = "global"


def cluster_name_problem(cluster: str) -> str:
    """Why `cluster` is not a valid cluster name ("" when it is). Pure."""
    hint = (f"a lowercase DNS label of at most {MAX_CLUSTER_LENGTH} characters "
            "(a-z, 0-9 and '-', starting and ending with a letter or digit)")
    if not cluster:
        return f"cluster name is empty; use {hint}"
    if (len(cluster) > MAX_CLUSTER_LENGTH or not set(cluster) <= _CLUSTER_CHARS
            or cluster[0] == "-" or cluster[-1] == "-"):
        return f"cluster name {cluster!r} is invalid; use {hint}"
    if cluster == RESERVED_CLUSTER:
        return f"cluster name {cluster!r} is reserved (task queue {GLOBAL_TASK_QUEUE}); pick another name"
    return ""


def cluster_task_queue(cluster: str) -> str:
    """The default task queue of a cluster's worker and bridge (`noderoll` without a cluster)."""
    return f"{DEFAULT_TASK_QUEUE}-{cluster}" if cluster else DEFAULT_TASK_QUEUE


def fleet_name(policy: str | None) -> str:
    """The fleet of Packages naming `policy` (`default` for none)."""
    return policy or DEFAULT_FLEET


def fleet_id_prefix(cluster: str = "") -> str:
    """`fleet/` (no cluster) or `fleet/<cluster>/`: what every fleet id of that cluster starts with."""
    return f"{FLEET_WORKFLOW_PREFIX}{cluster}/" if cluster else FLEET_WORKFLOW_PREFIX


def node_id_prefix(cluster: str = "") -> str:
    """`node/` (no cluster) or `node/<cluster>/`: what every node workflow id of that cluster starts with."""
    return f"{NODE_WORKFLOW_PREFIX}{cluster}/" if cluster else NODE_WORKFLOW_PREFIX


def fleet_workflow_id(policy: str | None, cluster: str = "") -> str:
    """Workflow id of the fleet rollout of a DeploymentPolicy (contract; `fleet/default` for none;
    `fleet/<cluster>/<policy>` in a named cluster)."""
    return f"{fleet_id_prefix(cluster)}{fleet_name(policy)}"


def node_workflow_id(node: str, cluster: str = "") -> str:
    """Workflow id of a node's workflow, the single writer of that node's state (contract;
    `node/<cluster>/<node>` in a named cluster)."""
    return f"{node_id_prefix(cluster)}{node}"


def global_workflow_id(policy: str) -> str:
    """Workflow id of the promotion of `policy`'s changes across clusters (contract)."""
    return f"{GLOBAL_WORKFLOW_PREFIX}{policy}"


def id_cluster(workflow_id: str) -> str | None:
    """The cluster of a fleet or node workflow id ("" for the single-cluster ids), None for other ids.

    Policy and node names never contain '/', so `fleet/<policy>` has one and `fleet/<cluster>/<policy>`
    two. Pure."""
    for prefix in (FLEET_WORKFLOW_PREFIX, NODE_WORKFLOW_PREFIX):
        if workflow_id.startswith(prefix):
            rest = workflow_id.removeprefix(prefix)
            return rest.split("/", 1)[0] if "/" in rest else ""
    return None

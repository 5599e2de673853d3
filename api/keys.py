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
# True while `noderoll.io/state` cannot be read: the node is held (nothing runs on it, nothing
# overwrites the annotation) until an operator removes or repairs it (docs/operations.md).
CONDITION_STATE_MALFORMED = "noderoll.io/StateMalformed"
# Its reason while True, and the Warning Event recorded on the Node when it turns True.
STATE_MALFORMED_REASON = "ParseError"
EVENT_STATE_MALFORMED = "StateMalformed"
# True while a node window drains the node (reason: `api.enums.DrainReason`); written only by the
# drain activities (activities/drain.py), read by the bridge and the CLI.
CONDITION_DRAINING = "noderoll.io/Draining"
RUNTIME_REQUIRED_TAINT_KEY = "noderoll.io/runtime-required"
RUNTIME_REQUIRED_TAINT_VALUE = "true"
RUNTIME_REQUIRED_TAINT_EFFECT = "NoSchedule"
# Node label (value "true"): gate the node with the runtime-required taint on every change of a
# runtimeRequired Package, not only when it joins (planning/node/runtime_taint.py).
RUNTIME_REQUIRED_GATE_LABEL = "noderoll.io/runtime-required-gate"
FINALIZER = "noderoll.io/uninstall"
# Deletion protection (like Kubernetes' pvc-protection): on a DeploymentPolicy while Packages name it,
# on a Package while other Packages depend on it; removed by the bridge once nothing uses it.
IN_USE_FINALIZER = "noderoll.io/in-use"
# Package annotation `<id>[:<stage>]`: run the Package again on every node where it is complete
# (once per id), as `noderoll rerun` does with the fleet signal `rerun`.
RERUN_ANNOTATION = "noderoll.io/rerun"
# Node annotation `<id>[:<package>,<package>...]`: forget the node's recorded state (all of it, or
# those packages) once per id, as `noderoll node reset` does with the node signal `reset`.
RESET_ANNOTATION = "noderoll.io/reset"
# Lease annotation: the version of the bridge that holds the Lease (`noderoll version`).
VERSION_ANNOTATION = "noderoll.io/version"
CORDONED_BY_VALUE = "noderoll"
# Drain-ahead (`spec.drainAhead` of a DeploymentPolicy, ADR 0015): a node's window is coming. The label
# (value "true") and, when the policy asks, the taint (no value, effect PreferNoSchedule) share one key;
# the annotation names the fleets that want them, as JSON {"fleet/<policy>": {"taint": bool}}.
UPCOMING_KEY = "noderoll.io/upcoming"
UPCOMING_VALUE = "true"
UPCOMING_TAINT_EFFECT = "PreferNoSchedule"
UPCOMING_FOR_ANNOTATION = "noderoll.io/upcoming-for"
# GPU workloads (`spec.workloads` of a DeploymentPolicy, api/workloads.py): the eviction notice on each pod a
# window will evict (RFC 3339) and on the node; the label of a node whose drain timed out and was skipped.
EVICTION_AT_ANNOTATION = "noderoll.io/eviction-at"
CONDITION_MAINTENANCE_SCHEDULED = "noderoll.io/MaintenanceScheduled"
SKIPPED_LABEL = "noderoll.io/skipped"

# The stage pod contract (docs/architecture.md, "The stage pod contract"): labels of every stage pod, and its annotations.
# Read by the worker's cleanup and drain, the CLI's `logs`, fleetsim's kubelet and the chaos tests.
STAGE_PACKAGE_LABEL = "noderoll.io/package"
STAGE_NODE_LABEL = "noderoll.io/node"
STAGE_MODE_LABEL = "noderoll.io/mode"
STAGE_COMPONENT_LABEL = "noderoll.io/component"
STAGE_COMPONENT = "stage"  # the value of STAGE_COMPONENT_LABEL
STAGE_VERSION_ANNOTATION = "noderoll.io/package-version"
# The init container that copies the package out of the Package's image (the others run the agent).
STAGE_PACKAGE_CONTAINER = "package"
# A pod of several Packages (one pod per window phase, ADR 0016): JSON list of its Packages, in the
# order they run; container `p<i>-<mode>` (and copy container `p<i>-package`) belongs to the i-th.
STAGE_PACKAGES_ANNOTATION = "noderoll.io/packages"

# Every node key noderoll reads or writes, with what it means: rendered into docs/api.md
# ("Node keys") by scripts/gen_api_docs.py, so the reference and the code cannot drift apart.
NODE_KEYS: tuple[tuple[str, str, str], ...] = (
    (NODE_STATE_ANNOTATION, "annotation",
     "JSON written by the node workflow only: per package its version, image, stage, state, attempts, last "
     "error, config hashes and the operation in progress; `verifyFailed` (the Packages, message and image) while "
     "the node's last GPU verify failed. Unreadable (not JSON, not an object, not the "
     f"schema): the node is held, see `{CONDITION_STATE_MALFORMED}`."),
    (NODE_STATUS_LABEL, "label",
     "`waiting`, `in-progress`, `complete`, `erroring`, `blocked` or `verify-failed`: written with every state "
     "write of a node window; `blocked` also by a rollout for a targeted node it cannot update (an untolerated "
     "taint, an unreadable state), never over `in-progress`, `erroring` or `verify-failed`; `verify-failed` while "
     "the node's last GPU verify failed (`spec.verify` of its DeploymentPolicy: the Packages completed, the GPUs "
     "did not pass). The next window's state write replaces it."),
    (NODE_IGNORE_LABEL, "label", "`true`: no rollout targets the node (not counted, not labelled)."),
    (RESET_ANNOTATION, "annotation",
     "`<id>[:<package>,...]`, set by an operator (`kubectl annotate`): the bridge asks the node workflow to "
     "forget the node's recorded state (every package, or the listed ones) so the next window installs from "
     "scratch; the node workflow removes the annotation with the state it writes. Once per id."),
    (CORDONED_BY_ANNOTATION, "annotation",
     f"`{CORDONED_BY_VALUE}` while noderoll holds the node's cordon; noderoll uncordons only what it cordoned."),
    (CONDITION_UPDATING, "condition", "True while a node window runs on the node."),
    (CONDITION_ERRORING, "condition", "True while a package ended erroring on the node, or its last GPU verify "
                                        "failed (it waits for `retry`)."),
    (CONDITION_DRAINING, "condition",
     "True while a node window drains the node or waits for its protected pods (reason `Evicting`, "
     "`WaitingForProtectedPods` or `EvictionRefused`; the message names the refused pods and the "
     "PodDisruptionBudgets with their allowed disruptions); False when the wait ended (`Drained`, "
     "`ProtectedPodsFinished`, `DrainFailed`). Written only by the drain activities."),
    (CONDITION_STATE_MALFORMED, "condition",
     f"True (reason `{STATE_MALFORMED_REASON}`, the problem as message, a Warning Event "
     f"`{EVENT_STATE_MALFORMED}`) while "
     f"`{NODE_STATE_ANNOTATION}` cannot be read: the node is held (no window, the annotation kept for inspection), "
     "reported `blocked` by every rollout targeting it, until an operator removes the annotation (the node is "
     "then fresh: each package's checks decide) or repairs it. False once it reads again."),
    (UPCOMING_KEY, "label",
     f"`{UPCOMING_VALUE}` while a fleet whose DeploymentPolicy sets `spec.drainAhead` expects the node's window "
     "soon: set at least `drainAhead.seconds` before the window starts, removed once the window answered or "
     "the node left the plan (fleet paused, halted, outside its maintenance windows; node no longer "
     "targeted). For schedulers and queues (Kueue, Volcano) to keep new long jobs off the node."),
    (UPCOMING_KEY, "taint",
     f"`{UPCOMING_KEY}:{UPCOMING_TAINT_EFFECT}` with the label when `drainAhead.taint` is true: the default "
     "scheduler then prefers other nodes for pods that do not tolerate it."),
    (UPCOMING_FOR_ANNOTATION, "annotation",
     "JSON `{\"fleet/<policy>\": {\"taint\": true|false}}`: the fleets that want the node marked upcoming; "
     "each fleet adds and removes only its own entry, the label and taint go with the last one."),
    (CONDITION_MAINTENANCE_SCHEDULED, "condition",
     "True (reason `EvictionScheduled`) from a node window's eviction notice (`spec.workloads.noticeSeconds` of "
     "its DeploymentPolicy) until the window ends; the message says from when pods are evicted, how many, and "
     "which fleet's window. Removed when the window ends (success, failure or skip)."),
    (EVICTION_AT_ANNOTATION, "annotation (on pods)",
     "RFC 3339 time from which a node window may evict (or delete) the pod: set at least "
     "`spec.workloads.noticeSeconds` before it, on every pod the drain will evict or delete (not on pods its "
     "rules `Leave`, DaemonSet, mirror or finished pods); for a `WaitForCompletion` pod the rule's timeout later. "
     "The hook for job frameworks to checkpoint. Removed from the pods still there when the window ends."),
    (SKIPPED_LABEL, "label",
     "`drain-timeout`: the last window of a DeploymentPolicy with `spec.workloads.onDrainTimeout: Skip` gave "
     "the node up when its drain timed out (uncordoned, nothing run). `noderoll retry --nodes NODE` asks it "
     "again; the node's next window removes the label."),
    (RUNTIME_REQUIRED_TAINT_KEY, "taint",
     f"`{RUNTIME_REQUIRED_TAINT_KEY}={RUNTIME_REQUIRED_TAINT_VALUE}:{RUNTIME_REQUIRED_TAINT_EFFECT}`: the "
     "taint of `runtimeRequired` Packages (see `spec.runtimeRequired`)."),
)

# Namespace where stage pods and interrupt pods run.
PACKAGE_POD_NAMESPACE = "noderoll-system"
# Namespace of the Events noderoll writes about Nodes and its objects (Nodes and both kinds are
# cluster-scoped; `kubectl get events` shows them in `default`, as Kubernetes' own Node Events).
EVENT_NAMESPACE = "default"

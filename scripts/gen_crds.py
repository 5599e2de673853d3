"""Generate deploy/crds/*.yaml (the Package and DeploymentPolicy CRDs) from one Python description.

Why generated: the LabelSelector, Interrupt, Budget, Strategy and Condition schemas appear several
times; writing them once keeps the copies identical. The output is committed (kubectl and Helm
read it); `tests/unit/test_crds.py` fails when it is out of date. Run: `python scripts/gen_crds.py`.

Constraints (the schemas must load on Kubernetes 1.20 and current releases): structural
schemas only, no CEL (`x-kubernetes-validations` is 1.25+), `oneOf` holding only `required`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from api import keys  # noqa: E402
from api.analysis import CONDITION_HINT  # noqa: E402
from api.capacity import DRAIN_AHEAD_MAX_SECONDS  # noqa: E402
from api.clusters import ClusterFailure, ClusterState  # noqa: E402
from api.enums import (  # noqa: E402
    CanaryFailure,
    CanaryPhase,
    DrainAction,
    DrainTimeoutAction,
    GateWhen,
    InterruptType,
    Promotion,
    RolloutPhase,
    StrategyType,
    Weekday,
)
from api.maintenance import TIME_PATTERN  # noqa: E402
from api.package import (  # noqa: E402
    INTERRUPT_MAX_SECONDS,
    LIMIT_MIN_SECONDS,
    PROTECTED_PODS_MAX_SECONDS,
    STAGE_MAX_SECONDS,
)
from api.respect import DEFAULT_TAINTS  # noqa: E402
from api.verify import VERIFY_DEFAULT_SECONDS, VERIFY_MAX_SECONDS, VerifyFailure  # noqa: E402
from api.versions import VALID_VERSION_HINT  # noqa: E402
from api.workloads import NOTICE_MAX_SECONDS, WAIT_MAX_SECONDS  # noqa: E402
from planning.rollout.disruption import (  # noqa: E402
    RULE_COUNT,
    RULE_FLOOR,
    RULE_MAINTENANCE,
    RULE_TOPOLOGY,
    RULE_UNREAD,
)
from protocol.node_settings import (  # noqa: E402
    DEFAULT_INTERRUPT_TIMEOUT_SECONDS,
    DEFAULT_PROTECTED_PODS_TIMEOUT_SECONDS,
    DEFAULT_STAGE_TIMEOUT_SECONDS,
)

NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
VERSION_PATTERN = (
    r"^v?(0|[1-9][0-9]*)(\.(0|[1-9][0-9]*)(\.(0|[1-9][0-9]*)"
    r"(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?)?)?$"
)
Schema = dict[str, Any]


def obj(
    description: str, properties: dict[str, Schema], required: list[str] | None = None, **extra: Any
) -> Schema:
    """An object schema; every property must carry a description."""
    for name, prop in properties.items():
        assert prop.get("description"), f"{name} has no description"
    out: Schema = {"type": "object", "description": description, "properties": properties}
    if required:
        out["required"] = required
    out.update(extra)
    return out


def string(description: str, **extra: Any) -> Schema:
    return {"type": "string", "description": description, **extra}


def integer(description: str, **extra: Any) -> Schema:
    return {"type": "integer", "description": description, **extra}


def boolean(description: str, default: bool | None = None) -> Schema:
    out: Schema = {"type": "boolean", "description": description}
    if default is not None:
        out["default"] = default
    return out


def array(description: str, items: Schema, **extra: Any) -> Schema:
    return {"type": "array", "description": description, "items": items, **extra}


def string_map(description: str, values: Schema | None = None) -> Schema:
    return {
        "type": "object",
        "description": description,
        "additionalProperties": values or {"type": "string"},
    }


def name_field(description: str) -> Schema:
    return string(description, pattern=NAME_PATTERN, maxLength=43, minLength=1)


def label_selector(description: str, what: str = "node") -> Schema:
    requirement = obj(
        "A label requirement: key, operator and values.",
        {
            "key": string("The label key the requirement applies to.", minLength=1),
            "operator": string(
                "In and NotIn need values; Exists and DoesNotExist take none.",
                enum=["In", "NotIn", "Exists", "DoesNotExist"],
            ),
            "values": array("Label values for In and NotIn.", {"type": "string"}),
        },
        required=["key", "operator"],
    )
    return obj(
        description + f" An empty selector selects every {what}.",
        {
            "matchLabels": string_map("Labels that must all be present with exactly these values."),
            "matchExpressions": array("Requirements that must all hold.", requirement),
        },
    )


def interrupt(description: str) -> Schema:
    return obj(
        description,
        {
            "type": string(
                "reboot, restartAllServices, service (restart `services`) or noop (an interrupt window "
                "without host action). Merged per node: reboot > restartAllServices > service > noop.",
                enum=[t.value for t in InterruptType],
            ),
            "services": array(
                "systemd units restarted by type service (required for it, unused by others).",
                {"type": "string"},
            ),
        },
        required=["type"],
    )


def condition_schema() -> Schema:
    return obj(
        "A Kubernetes condition (metav1.Condition).",
        {
            "type": string("Condition type: Ready, Progressing, Degraded, Valid or InUse."),
            "status": string("True, False or Unknown.", enum=["True", "False", "Unknown"]),
            "reason": string("A CamelCase reason for the last transition."),
            "message": string("A human-readable message."),
            "lastTransitionTime": string("When the status last changed.", format="date-time"),
            "observedGeneration": integer(
                "The metadata.generation the condition was computed from.", format="int64"
            ),
        },
        required=["type", "status"],
    )


def conditions() -> Schema:
    return array(
        "Standard conditions; Ready carries observedGeneration, so `kubectl wait --for=condition=Ready` works.",
        condition_schema(),
        **{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )


def node_reasons(description: str) -> Schema:
    return array(
        description,
        obj(
            "A node and the reason.",
            {"node": string("Node name."), "reason": string("Why.")},
            required=["node"],
        ),
    )


def reason_counts(kind: str) -> Schema:
    return array(
        f"The reasons nodes are {kind} and how many nodes have each: the first 10, most nodes first (omitted: "
        f"no node is {kind}).",
        obj(
            "A reason and its node count.",
            {"reason": string("Why (cut to 200 characters)."), "nodes": integer("Nodes with this reason.", minimum=0)},
            required=["reason", "nodes"],
        ),
    )


def package_spec() -> Schema:
    env = obj(
        "An environment variable.",
        {"name": string("Variable name.", minLength=1), "value": string("Value (literal).")},
        required=["name"],
    )
    quantity = {"x-kubernetes-int-or-string": True, "description": "A quantity such as 500m, 2 or 256Mi."}
    toleration = obj(
        "A toleration (core/v1 Toleration).",
        {
            "key": string("Taint key; empty with operator Exists tolerates everything."),
            "operator": string("Equal (default) or Exists.", enum=["Equal", "Exists"]),
            "value": string("Taint value for operator Equal."),
            "effect": string(
                "Taint effect; empty matches all.", enum=["", "NoSchedule", "PreferNoSchedule", "NoExecute"]
            ),
            "tolerationSeconds": integer(
                "For NoExecute: how long the pod stays after the taint appears.", format="int64"
            ),
        },
    )
    return obj(
        "The desired host change: what to install, where, and how disruptive it is.",
        {
            "version": string(
                f"Package version: {VALID_VERSION_HINT}.", pattern=VERSION_PATTERN, minLength=1
            ),
            "image": string(
                "Package image reference (with tag or digest), holding /noderoll-package/config.json "
                "(or /skyhook-package/config.json).",
                minLength=1,
            ),
            "nodeSelector": label_selector(
                "Nodes the package targets (nodes labelled noderoll.io/ignore=true are excluded)."
            ),
            "dependsOn": string_map(
                "Packages (name -> exact version) that must be complete on a node before this one runs there.",
                string("Exact version of the dependency.", pattern=VERSION_PATTERN),
            ),
            "interrupt": interrupt(
                "What to do on the host after apply/upgrade and config; omitted = nothing."
            ),
            "config": string_map("Files (name -> content) mounted for the stages at /noderoll-config."),
            "configInterrupts": string_map(
                "Config key or glob (* and ?) -> interrupt to run when a matching key changes.",
                interrupt("The interrupt for a matching config change."),
            ),
            "env": array("Environment variables for the stage containers.", env),
            "resources": obj(
                "Requests and limits of the stage containers.",
                {
                    "requests": string_map("Resource requests (cpu, memory).", quantity),
                    "limits": string_map("Resource limits (cpu, memory), not below the requests.", quantity),
                },
            ),
            "podNonInterruptLabels": label_selector(
                "Pods on the node matching this selector (Running or Pending) delay its interrupt."
            ),
            "additionalTolerations": array("Tolerations added to the stage pods.", toleration),
            "runtimeRequired": boolean(
                "Gate nodes with the taint noderoll.io/runtime-required=true:NoSchedule until this package is "
                "complete there: nodes joining while it exists and nodes labelled "
                "noderoll.io/runtime-required-gate=true get the taint; it goes once every runtimeRequired "
                "Package targeting the node is complete there (see The runtime-required taint).",
                default=False,
            ),
            "deploymentPolicy": name_field(
                "Name of the DeploymentPolicy that paces the rollout; omitted = one node at a time."
            ),
            "paused": boolean(
                "Pause the rollout (running nodes finish their step; no new node starts).", default=False
            ),
            "uninstall": obj(
                "Uninstall support and request.",
                {
                    "enabled": boolean("The package ships uninstall steps.", default=False),
                    "apply": boolean("Uninstall from every target node now (needs enabled).", default=False),
                },
                default={},
            ),
            "drain": obj(
                "How nodes are drained before a disruptive interrupt (Eviction API, PDBs respected).",
                {
                    "timeoutSeconds": integer(
                        "Give up draining after this long and report the blocking pods. One bound for the whole"
                        " drain: time spent in failed attempts (worker lost, API down) counts against it.",
                        minimum=1,
                        default=600,
                    ),
                    "gracePeriodSeconds": integer("Override the pods' termination grace period.", minimum=0),
                    "deleteEmptyDirData": boolean(
                        "Evict pods that use emptyDir volumes (their data is lost).", default=False
                    ),
                },
                default={},
            ),
            "limits": obj(
                "Bounds of this package's node windows; an unset field is the worker's default. A window "
                "carrying several Packages waits as long as the most patient of them (the largest value; "
                "an unset field counts as the default); each stage is bounded by its own Package's value.",
                {
                    "protectedPodsTimeoutSeconds": integer(
                        "How long to wait for pods matching podNonInterruptLabels to finish before the node "
                        f"ends erroring (default {DEFAULT_PROTECTED_PODS_TIMEOUT_SECONDS}).",
                        minimum=LIMIT_MIN_SECONDS, maximum=PROTECTED_PODS_MAX_SECONDS,
                    ),
                    "stageTimeoutSeconds": integer(
                        "Bound of one stage with its check (a stage pod's activeDeadlineSeconds is this bound times the stages it runs, summed over its Packages) "
                        f"(default {DEFAULT_STAGE_TIMEOUT_SECONDS}).",
                        minimum=LIMIT_MIN_SECONDS, maximum=STAGE_MAX_SECONDS,
                    ),
                    "interruptTimeoutSeconds": integer(
                        "Bound of the interrupt's confirmation: a rebooted node back Ready with a new boot id "
                        f"(default {DEFAULT_INTERRUPT_TIMEOUT_SECONDS}).",
                        minimum=LIMIT_MIN_SECONDS, maximum=INTERRUPT_MAX_SECONDS,
                    ),
                },
            ),
            "agentImage": string(
                "noderoll agent image (with tag or digest) running this package's stages; omitted = the "
                "agent image the worker pins (--agent-image, Helm stagePods.agentImage).",
                minLength=1,
            ),
            "imagePullSecrets": array(
                "Secrets in noderoll-system for pulling the package image and the agent image; added to the "
                "worker's own (--image-pull-secret, Helm stagePods.imagePullSecrets).",
                obj("A Secret reference (core/v1 LocalObjectReference).",
                    {"name": string("Name of a Secret in noderoll-system.", minLength=1)}, required=["name"]),
            ),
        },
        required=["version", "image"],
    )


def node_counts(what: str) -> Schema:
    return obj(what, {
        name: integer(f"Nodes {text}.", minimum=0)
        for name, text in (
            ("total", "in total"),
            ("waiting", "waiting"),
            ("inProgress", "in progress"),
            ("complete", "complete"),
            ("erroring", "erroring"),
            ("blocked", "blocked"),
            ("skipped", "skipped"),
        )
    })


def gate_failure() -> Schema:
    return obj(
        "The analysis gate that halted the fleet (cleared by resume, which overrides it once, or retry).",
        {
            "gate": string("Gate name (spec.analysis[].name of the DeploymentPolicy)."),
            "query": string("The PromQL query."),
            "condition": string("Its success condition."),
            "value": string("What the query returned when the gate failed (a value, series, or no series)."),
            "time": string("When the gate failed (RFC 3339).", format="date-time"),
            "reason": string("Why: failed samples beyond failureLimit, or why the query could not be evaluated."),
            "when": string("Where the gate was evaluated.", enum=[w.value for w in GateWhen]),
        },
        required=["gate", "query"],
    )


def rollback_status() -> Schema:
    return obj(
        "The rollback of the fleet's failed canary (canary.onFailure: rollback); kept until the next wave starts.",
        {
            "wave": integer("The wave whose canary failed.", minimum=0),
            "phase": string("RollingBack, RolledBack, or Halted (the operator halted it, or it failed on a node).",
                            enum=[p.value for p in (RolloutPhase.ROLLING_BACK, RolloutPhase.ROLLED_BACK,
                                                    RolloutPhase.HALTED)]),
            "reason": string("Why: the canary nodes that failed and their errors."),
            "canaryFailures": node_reasons("The canary nodes that failed, with the error."),
            "nodes": array("The canary nodes rolled back (each got one rollback window).", {"type": "string"}),
            "versions": string_map("Per Package the version it went back to."),
            "uninstalled": array("The Packages that were new in the wave: uninstalled.", {"type": "string"}),
            "failedNodes": node_reasons("Nodes where the rollback itself failed (they stay erroring), with the error."),
        },
    )


def eta_status() -> Schema:
    return obj(
        "When the fleet's wave is estimated to end, every window succeeding (noderoll plan and status show the same): "
        "the fleet's own decisions run ahead on a simulated fleet (the same budgets, floors, topology limits, "
        "strategy and drain-ahead), each window lasting the p50 of the fleet's measured windows of its kind, else "
        "defaults per stage, drain and reboot (source says which); taken from the fleet when the status is written "
        "and moved on by the time since. Absent when nothing is left or the fleet is held.",
        {
            "finishAt": string("Estimated end of the wave (RFC 3339, to the minute).", format="date-time"),
            "batchesLeft": integer("Batches left, the one out included.", minimum=0),
            "source": string("What the estimate rests on: measured p50s, or defaults (and which)."),
        },
        required=["finishAt"],
    )


def global_rollout() -> Schema:
    return obj(
        "The promotion of the policy's changes across clusters (spec.clusters) as global/<policy> last told "
        "this cluster's fleet: the stage granted and every cluster's state.",
        {
            "change": string("The latest change set (a digest of every Package's spec)."),
            "summary": string("The change set: name and version of each Package."),
            "stage": integer("The highest stage granted for it (1-based; 0: none yet).", minimum=0),
            "stages": integer("Number of stages.", minimum=0),
            "phase": string("Phase of the promotion: Pending, Progressing, Waiting (soaking before the next "
                            "stage), Paused, Halted, Complete.", enum=[p.value for p in RolloutPhase]),
            "soakUntil": string("End of the soak before the next stage (RFC 3339)."),
            "halted": string("Why the promotion is halted (a cluster failed, or the halt signal)."),
            "message": string("Human-readable summary."),
            "clusters": array("Every cluster of the stages (and any other that reported).", obj(
                "One cluster.",
                {
                    "name": string("Cluster name."),
                    "stage": integer("Its stage (1-based; 0: in no stage).", minimum=0),
                    "state": string("Its state for the latest change.", enum=[s.value for s in ClusterState]),
                    "message": string("Why it failed or is held."),
                },
                required=["name", "state"],
            )),
        },
    )


def next_window() -> Schema:
    return string("While the fleet waits for a maintenance window: when the next one opens (RFC 3339).",
                  format="date-time")


def package_status() -> Schema:
    return obj(
        "Observed state of the rollout, written by the noderoll bridge.",
        {
            "phase": string(
                "Rollout phase. Blocked: the rollout did everything it can, but targeted nodes are blocked "
                "(see blockedNodes); Ready stays False until they are updated.",
                enum=[p.value for p in RolloutPhase],
            ),
            "observedGeneration": integer("The metadata.generation this status describes.", format="int64"),
            "version": string("The version being rolled out."),
            "message": string("Human-readable summary."),
            "progress": string("Complete nodes / target nodes, e.g. 3/10."),
            "nodes": node_counts("Target nodes per state."),
            "currentBatch": obj(
                "The batch in flight.",
                {
                    "number": integer("Batch number (1-based).", minimum=0),
                    "size": integer("Nodes in the batch.", minimum=0),
                },
            ),
            "canary": obj(
                "The canary batch.",
                {
                    "phase": string("Canary phase.", enum=[p.value for p in CanaryPhase]),
                    "nodes": array("Canary nodes.", {"type": "string"}),
                },
            ),
            "blockedNodes": node_reasons(
                "Targeted nodes that cannot be updated now and why (an untolerated taint, an unreadable "
                "noderoll.io/state, a dependency not complete there...); each carries noderoll.io/status=blocked "
                "unless its own window runs or it is erroring (dependency waits keep their label). The first 5 "
                "nodes of each of the first 10 reasons (blockedReasons); every one is counted in nodes.blocked."
            ),
            "erroringNodes": node_reasons(
                "Nodes where a stage failed, with the error: the first 5 nodes of each of the first 10 reasons "
                "(erroringReasons); every one is counted in nodes.erroring."),
            "blockedReasons": reason_counts("blocked"),
            "erroringReasons": reason_counts("erroring"),
            "drainBlockedNodes": array(
                "Target nodes whose drain waits on someone else's pods (from the node condition "
                "noderoll.io/Draining): evictions refused by PodDisruptionBudgets, or protected pods still running; "
                "the first 20 by name.",
                obj(
                    "A node whose drain waits.",
                    {
                        "node": string("Node name."),
                        "reason": string("EvictionRefused, WaitingForProtectedPods or WaitingForCompletion."),
                        "message": string("The blocking pods and PodDisruptionBudgets (with disruptionsAllowed)."),
                        "since": string("When the node's drain began (RFC 3339)."),
                    },
                    required=["node", "reason"],
                ),
            ),
            "drainBlockedNodeCount": integer(
                "How many nodes drainBlockedNodes would list in all, when that is more than it shows (omitted: "
                "it shows them all)."),
            "skippedNodes": node_reasons(
                "Nodes whose window gave them up when their drain timed out (spec.workloads.onDrainTimeout: Skip "
                "of the DeploymentPolicy), the first 20 by name; all are also in blockedNodes."),
            "skippedNodeCount": integer("How many nodes skippedNodes has in all (omitted: none)."),
            "nextWindow": next_window(),
            "gateFailure": gate_failure(),
            "rollback": rollback_status(),
            "eta": eta_status(),
            "globalRollout": global_rollout(),
            "conditions": conditions(),
        },
    )


def budget() -> Schema:
    return obj(
        "Nodes of the compartment disrupted at once, across all rollouts using the policy: count or percent; "
        "optionally also a capacity floor and topology limits (docs/api.md, GPU budgets).",
        {
            "count": integer("Absolute number of nodes.", minimum=1),
            "percent": integer(
                "Percent of the compartment's nodes, rounded up, at least 1.", minimum=1, maximum=100
            ),
            "minAvailable": obj(
                "Capacity floor: the resource's allocatable summed over the compartment's Ready, uncordoned "
                "nodes in no window never goes below it because of noderoll (a node enters a window only if "
                "the floor still holds without it).",
                {
                    "resource": string("Extended resource name, e.g. nvidia.com/gpu.", minLength=1),
                    "count": integer("Units of the resource that stay available.", minimum=1),
                    "percent": integer(
                        "Percent of the resource's allocatable over the compartment's nodes, rounded up.",
                        minimum=1, maximum=99,
                    ),
                },
                required=["resource"],
                oneOf=[{"required": ["count"]}, {"required": ["percent"]}],
            ),
            "maxUnavailablePerTopology": array(
                "Topology limits: at most max nodes sharing a value of the node label key unavailable at once "
                "(in a window, cordoned or NotReady); nodes without the label form one group.",
                obj(
                    "One topology limit.",
                    {
                        "key": string("Node label key, e.g. topology.kubernetes.io/zone or a rack label.",
                                      minLength=1),
                        "max": integer("Nodes with the same value unavailable at once.", minimum=1),
                    },
                    required=["key", "max"],
                ),
            ),
        },
        oneOf=[{"required": ["count"]}, {"required": ["percent"]}],
    )


def strategy(with_defaults: bool) -> Schema:
    def d(value: Any) -> dict[str, Any]:
        return {"default": value} if with_defaults else {}

    return obj(
        "How batch sizes evolve and when failures halt the rollout.",
        {
            "type": string(
                "fixed (initialBatch each time), linear (+delta after a good batch), exponential (x growthFactor) "
                "or rolling (the budget's windows at all times, the next node as soon as one ends: no batches).",
                enum=[t.value for t in StrategyType],
                **d(StrategyType.FIXED.value),
            ),
            "initialBatch": integer(
                "Size of the first batch (always capped by the budget); not used by rolling.", minimum=1, **d(1)
            ),
            "delta": integer("linear only: batch growth (and shrink after a failure), default 1.", minimum=1),
            "growthFactor": integer("exponential only: batch growth factor, default 2.", minimum=2),
            "batchThreshold": integer(
                "Percent of a batch's finished nodes that must succeed (not used by rolling).", minimum=1,
                maximum=100, **d(100)
            ),
            "failureThreshold": integer(
                "Consecutive failed batches that halt the rollout (below safetyLimit); rolling: failed windows "
                "among the last N finished (N = the budget); omitted = never halt.",
                minimum=1,
            ),
            "safetyLimit": integer(
                "Progress percent under which failures shrink batches and can halt; above it they do not.",
                minimum=0,
                maximum=100,
                **d(50),
            ),
        },
        **d({}),
    )


def maintenance_window() -> Schema:
    return obj(
        "A weekly slot of wall-clock time in which the fleet may start new node windows (one in progress "
        "always finishes). Open while the clock of timeZone shows a time from start (inclusive) to end "
        "(exclusive) on one of days; an end before the start crosses midnight and belongs to the day it opens "
        "(Fri 22:00-02:00 closes Saturday 02:00).",
        {
            "days": array("Days the window opens; omitted = every day.",
                          string("A day of the week.", enum=[d.value for d in Weekday]), minItems=1, maxItems=7),
            "start": string("Opening time, HH:MM (24-hour).", pattern=TIME_PATTERN),
            "end": string("Closing time, HH:MM (24-hour); before start: the next day. Not equal to start.",
                          pattern=TIME_PATTERN),
            "timeZone": string("IANA time zone of start and end (e.g. Europe/Berlin), from the OS's "
                               "/usr/share/zoneinfo or the PyPI package tzdata.", default="UTC", minLength=1),
        },
        required=["start", "end"],
    )


def analysis_gate() -> Schema:
    return obj(
        "A Prometheus query that must hold for the fleet to go on; a failed gate halts the fleet.",
        {
            "name": name_field("Gate name, unique in the policy."),
            "query": string("PromQL instant query (GET /api/v1/query); the result must be a vector or a scalar.",
                            minLength=1),
            "successCondition": string(f"When a sample succeeds: {CONDITION_HINT}. Never evaluated as code.",
                                       minLength=1),
            "when": string(
                "afterCanary (after the canary's soak), betweenBatches (after every batch, the canary's included) "
                "or continuous (sampled while windows are out and before each batch).",
                enum=[w.value for w in GateWhen], default=GateWhen.BETWEEN_BATCHES.value,
            ),
            "intervalSeconds": integer("Seconds between samples.", minimum=1, maximum=86400, default=30),
            "count": integer("afterCanary/betweenBatches: successful samples in a row that pass the gate "
                             "(default 1); not for continuous gates.", minimum=1, maximum=1000),
            "failureLimit": integer("Failed samples tolerated (continuous: in a row); one more fails the gate.",
                                    minimum=0, maximum=1000, default=0),
            "address": string("Prometheus base URL for this gate (http://host:port[/prefix]); omitted = the "
                              "worker's --prometheus-address.", pattern=r"^https?://"),
        },
        required=["name", "query", "successCondition"],
    )


def policy_spec() -> Schema:
    compartment = obj(
        "A group of nodes with its own budget and strategy.",
        {
            "name": name_field("Compartment name, unique in the policy ('default' is reserved)."),
            "selector": label_selector(
                "Nodes in this compartment (a node matching several takes the safest)."
            ),
            "budget": budget(),
            "strategy": strategy(with_defaults=False)
            | {"description": "Batch strategy; omitted = the default's."},
        },
        required=["name", "selector", "budget"],
    )
    return obj(
        "How rollouts using this policy are paced.",
        {
            "default": obj(
                "Budget and strategy of nodes matching no compartment.",
                {"budget": budget(), "strategy": strategy(with_defaults=True)},
                required=["budget"],
            ),
            "compartments": array("Node groups, each with a budget and strategy.", compartment),
            "canary": obj(
                "A first batch of count nodes, soaked, then promoted before the rest.",
                {
                    "count": integer(
                        "Canary nodes (taken in stable order, within the budgets).", minimum=1, default=1
                    ),
                    "soakSeconds": integer("Wait after the canary succeeded.", minimum=0, default=0),
                    "promotion": string(
                        "auto, or manual (wait for `noderoll resume`).",
                        enum=[p.value for p in Promotion],
                        default="auto",
                    ),
                    "onFailure": string(
                        "When a canary node fails: halt the fleet, or rollback (the canary nodes go back to the "
                        "previous spec of each Package the wave changed, uninstalling new ones; the wave ends "
                        "RolledBack). Nodes outside the canary are never touched.",
                        enum=[f.value for f in CanaryFailure],
                        default=CanaryFailure.HALT.value,
                    ),
                },
            ),
            "maintenanceWindows": array(
                "When new node windows may start (no two may overlap); omitted or empty = at any time.",
                maintenance_window(),
            ),
            "analysis": array("Analysis gates: Prometheus queries evaluated after the canary, between batches "
                              "or continuously.", analysis_gate()),
            "clusters": obj(
                "Promote each change cluster by cluster (docs/multi-cluster.md): each cluster's fleet "
                "(a worker and bridge given --cluster) waits for its stage, granted by global/<policy> once "
                "every cluster of the stages before completed the change and soakSeconds passed. Omitted: "
                "each cluster rolls out on its own. Every cluster must have the same spec.clusters; a cluster "
                "whose copy differs, or that no stage names, is held.",
                {
                    "stages": array(
                        "Stages in order, each a list of cluster names (a cluster in one stage only), e.g. "
                        "[[canary-1], [eu-1, eu-2], [us-1]].",
                        array("The clusters of one stage, rolled out at the same time.", {"type": "string"},
                              minItems=1),
                        minItems=1,
                    ),
                    "soakSeconds": integer("Wait after a stage completed before the next one starts.",
                                           minimum=0, default=0),
                    "onFailure": string(
                        "When a cluster fails (its fleet Failed or halted by its thresholds): haltAll halts "
                        "every cluster's fleet until resume on global/<policy>; holdPromotion only starts no "
                        "later stage.",
                        enum=[f.value for f in ClusterFailure],
                        default=ClusterFailure.HALT_ALL.value,
                    ),
                },
                required=["stages"],
            ),
            "drainAhead": obj(
                "Tell the schedulers ahead which nodes are next: label noderoll.io/upcoming=true (and with taint, "
                "the taint noderoll.io/upcoming:PreferNoSchedule) at least seconds before a node's window; "
                "removed after the window or when the node leaves the plan.",
                {
                    "seconds": integer("Seconds between the mark and the node's window (at least).",
                                       minimum=1, maximum=DRAIN_AHEAD_MAX_SECONDS),
                    "taint": boolean("Also add the PreferNoSchedule taint noderoll.io/upcoming.", default=False),
                },
                required=["seconds"],
            ),
            "workloads": workloads(),
            "verify": verify_schema(),
            "respect": respect_schema(),
        },
        required=["default"],
    )


def workloads() -> Schema:
    rule = obj(
        "A drain rule: the pods it matches (every criterion set must hold) and what the drain does with them.",
        {
            "namespaces": array("Namespaces of the pods it matches (omitted: every namespace; never empty).",
                                {"type": "string"}, minItems=1),
            "podSelector": label_selector("Labels of the pods it matches (omitted: every pod).", "pod"),
            "gpuPods": boolean("true: pods that request or limit any */gpu extended resource (any container, "
                               "init containers too); false: pods that request none. Omitted: both."),
            "action": string(
                "Evict (Eviction API, PodDisruptionBudgets respected), WaitForCompletion (wait up to timeoutSeconds "
                "for the pod to finish, then evict it), Delete (delete with the pod's grace period, no Eviction "
                "API), Leave (never evicted; the interrupt goes ahead).",
                enum=[a.value for a in DrainAction]),
            "timeoutSeconds": integer("WaitForCompletion only (required there): how long to wait for the pod to "
                                      "finish before it is evicted.", minimum=1, maximum=WAIT_MAX_SECONDS),
        },
        required=["action"],
    )
    return obj(
        "How node windows treat the pods they drain (GPU jobs and other workloads). Omitted: every pod is "
        "evicted with the Packages' drain settings, and a drain that times out fails the window.",
        {
            "noticeSeconds": integer(
                "At least this long before a window evicts or deletes a pod, the pod gets the annotation "
                "noderoll.io/eviction-at (RFC 3339) and the node the condition noderoll.io/MaintenanceScheduled; "
                "removed when the window ends. 0: no notice.", minimum=0, maximum=NOTICE_MAX_SECONDS, default=0),
            "rules": array("Per pod the first rule that matches decides; no rule matches: Evict.", rule),
            "onDrainTimeout": string(
                "Fail: a drain that times out fails the window (erroring). Skip: the window uncordons the node "
                "(its own cordon only), labels it noderoll.io/skipped=drain-timeout, runs nothing, and its "
                "Packages count it as blocked (neither success nor failure) until noderoll retry --nodes.",
                enum=[a.value for a in DrainTimeoutAction], default=DrainTimeoutAction.FAIL.value),
        },
    )


def verify_schema() -> Schema:
    """`spec.verify` (api/verify.py)."""
    return obj(
        "Verify the GPUs before a node goes back to work: once per node window, after the interrupt and every "
        "Package's post-interrupt check, a pod pinned to the node runs image; a failure fails the window (every "
        "Package erroring at stage verify: thresholds, canary) and labels the node noderoll.io/status=verify-failed.",
        {
            "image": string("The verify image, run with its own entry point, privileged, the host's root at /host; "
                             "exit 0 passes (example: deploy/examples/verify/gpu-health).", minLength=1),
            "timeoutSeconds": integer("Deadline of the verify pod; past it the verify fails.",
                                      minimum=1, maximum=VERIFY_MAX_SECONDS, default=VERIFY_DEFAULT_SECONDS),
            "onFailure": string(
                "After a failed verify: KeepCordoned (noderoll's cordon stays until a verify passes) or Uncordon.",
                enum=[f.value for f in VerifyFailure], default=VerifyFailure.KEEP_CORDONED.value,
            ),
        },
        required=["image"],
    )


def respect_schema() -> Schema:
    """`spec.respect` (api/respect.py)."""
    return obj(
        "Other maintenance a fleet keeps out of: nodes carrying one of taints, or named by a NodeMaintenance "
        "(maintenance.nvidia.com) of another requestor, are reported down with the reason. Omitted: the default "
        "taints and nodeMaintenance true.",
        {
            "taints": array("Taint keys that hold a node (any value and effect); omitted: the default list ("
                            + ", ".join(DEFAULT_TAINTS) + "); [] respects none.", {"type": "string", "minLength": 1}),
            "nodeMaintenance": boolean("Respect NodeMaintenance objects (maintenance.nvidia.com/v1alpha1) naming "
                                       "the node.", default=True),
        },
    )


def crd(names: tuple[str, str, list[str]], spec: Schema, status: Schema, columns: list[Schema]) -> Schema:
    """A CRD from (kind, plural, shortNames), spec and status schemas and printer columns."""
    kind, plural, short = names
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{keys.GROUP}", "labels": {"app.kubernetes.io/part-of": "noderoll"}},
        "spec": {
            "group": keys.GROUP,
            "scope": "Cluster",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short,
                "categories": ["noderoll"],
            },
            "versions": [
                {
                    "name": keys.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {"openAPIV3Schema": root_schema(kind, spec, status)},
                }
            ],
        },
    }


def root_schema(kind: str, spec: Schema, status: Schema) -> Schema:
    """The object schema; `metadata` may only say `type: object` (the apiserver owns its schema)."""
    schema = obj(
        f"{kind}: see docs/api.md. Names are lowercase DNS labels of at most 43 characters "
        "(checked by noderoll: a CRD schema cannot constrain metadata.name).",
        {
            "apiVersion": string("API version: noderoll.io/v1alpha1."),
            "kind": string(f"{kind}."),
            "spec": spec,
            "status": status,
        },
        required=["spec"],
    )
    schema["properties"] = {"metadata": {"type": "object"}, **schema["properties"]}
    return schema


def column(name: str, path: str, kind: str = "string", priority: int = 0, description: str = "") -> Schema:
    out: Schema = {"name": name, "type": kind, "jsonPath": path, "description": description or name}
    if priority:
        out["priority"] = priority
    return out


READY = '.status.conditions[?(@.type=="Ready")].status'


def package_crd() -> Schema:
    return crd(
        (keys.PACKAGE_KIND, keys.PACKAGE_PLURAL, ["pkg", "nrpkg"]),
        package_spec(),
        package_status(),
        [
            column("Version", ".spec.version", description="Desired version"),
            column("Phase", ".status.phase", description="Rollout phase"),
            column("Progress", ".status.progress", description="Complete / target nodes"),
            column("Batch", ".status.currentBatch.number", "integer", description="Current batch"),
            column("ETA", ".status.eta.finishAt", description="Estimated end of the fleet's wave"),
            column("Ready", READY, description="Ready condition"),
            column("Policy", ".spec.deploymentPolicy", priority=1, description="DeploymentPolicy"),
            column("Message", ".status.message", priority=1, description="Status message"),
            column("Age", ".metadata.creationTimestamp", "date"),
        ],
    )


def policy_crd() -> Schema:
    status = obj(
        "Validity of the policy and the progress of its fleet rollout (fleet/<name>), written by the noderoll bridge.",
        {
            "observedGeneration": integer("The metadata.generation this status describes.", format="int64"),
            "message": string("Human-readable summary (the validation problems when invalid)."),
            "phase": string("Phase of the fleet rollout.", enum=[p.value for p in RolloutPhase]),
            "fleet": string("The fleet's Temporal workflow id (fleet/<name>)."),
            "wave": integer("Wave number: a new wave starts when a Package or the policy changes.", minimum=0),
            "currentBatch": obj(
                "The batch in flight.",
                {
                    "number": integer("Batch number within the wave (1-based).", minimum=0),
                    "size": integer("Nodes in the batch.", minimum=0),
                },
            ),
            "nodes": node_counts("The fleet's nodes per state."),
            "packages": array("Packages the fleet rolls out.", {"type": "string"}),
            "nextWindow": next_window(),
            "gateFailure": gate_failure(),
            "rollback": rollback_status(),
            "eta": eta_status(),
            "globalRollout": global_rollout(),
            "capacity": array(
                "Capacity floors (budget.minAvailable) as of the fleet's latest batch plan.",
                obj(
                    "One floor.",
                    {
                        "compartment": string("Compartment of the floor."),
                        "resource": string("The resource counted (e.g. nvidia.com/gpu)."),
                        "available": integer("Units available with the latest batch out.", minimum=0),
                        "floor": integer("The floor in units.", minimum=0),
                        "total": integer("Units over the compartment's nodes.", minimum=0),
                        "downNodes": array("Nodes down for other reasons than the fleet's windows (NotReady, "
                                           "cordoned, another window), the first few.", {"type": "string"}),
                    },
                    required=["compartment", "resource"],
                ),
            ),
            "waiting": array(
                "Nodes held back at the latest batch plan or hand-out: by the capacity floors and topology limits, "
                "by the count budget full of nodes down for other reasons, by another maintenance, or because "
                "the nodes could not be read before their windows.",
                obj(
                    "One compartment and rule.",
                    {
                        "compartment": string("Compartment of the held nodes."),
                        "rule": string("floor, topology, count, maintenance or unread.",
                                       enum=[RULE_FLOOR, RULE_TOPOLOGY, RULE_COUNT, RULE_MAINTENANCE, RULE_UNREAD]),
                        "nodes": integer("Nodes held back.", minimum=0),
                        "reason": string("The first reason (e.g. rack r12 has 1 node in a window (max 1))."),
                    },
                    required=["compartment", "rule"],
                ),
            ),
            "conditions": conditions(),
        },
    )
    return crd(
        (keys.POLICY_KIND, keys.POLICY_PLURAL, ["dp", "nrdp"]),
        policy_spec(),
        status,
        [
            column("Strategy", ".spec.default.strategy.type", description="Default strategy"),
            column("Budget", ".spec.default.budget.count", "integer", description="Default budget (count)"),
            column(
                "Budget%", ".spec.default.budget.percent", "integer", description="Default budget (percent)"
            ),
            column("Canary", ".spec.canary.count", "integer", description="Canary nodes"),
            column("Valid", '.status.conditions[?(@.type=="Valid")].status', description="Valid condition"),
            column("Phase", ".status.phase", description="Fleet rollout phase"),
            column("Wave", ".status.wave", "integer", description="Wave of the fleet rollout"),
            column("ETA", ".status.eta.finishAt", description="Estimated end of the wave"),
            column("NextWindow", ".status.nextWindow", priority=1, description="Next maintenance window opening"),
            column("Age", ".metadata.creationTimestamp", "date"),
        ],
    )


HEADER = "# Generated by scripts/gen_crds.py; edit that script, not this file.\n"


def render() -> dict[str, str]:
    """File name -> YAML text of every CRD."""
    out = {}
    for doc in (package_crd(), policy_crd()):
        text = yaml.safe_dump(doc, sort_keys=False, width=110, allow_unicode=True)
        out[f"{doc['metadata']['name']}.yaml"] = HEADER + "---\n" + text
    return out


# The Helm chart ships byte-identical copies (its test checks them); keep them in step.
HELM_COPY = ROOT / "deploy" / "helm" / "noderoll" / "files" / "crds"


def main() -> int:
    target = ROOT / "deploy" / "crds"
    target.mkdir(parents=True, exist_ok=True)
    for name, text in render().items():
        for folder in (target, HELM_COPY):
            if folder.is_dir():
                (folder / name).write_text(text, encoding="utf-8")
                print(f"wrote {folder / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

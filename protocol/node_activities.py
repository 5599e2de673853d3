"""Inputs and results of the node window's activities, as plain dataclasses (no Kubernetes import). Pure data.

The node workflow calls its activities by name with these (`workflows/node_window.py`,
`workflows/node_pods.py`, `workflows/node_verify.py`), so the workflow sandbox never loads a client; the
activities (`activities/nodes.py`, `drain.py`, `stage_run.py`, `interrupts.py`, `verify_run.py`,
`stage_cleanup.py`) take and
return the same types. The fleet's activities have theirs in `protocol/activities.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ReadNodeResult:
    """A Node as the node window sees it, observed once per window."""

    name: str
    unschedulable: bool = False
    # Value of `noderoll.io/cordoned-by` ("" when absent).
    cordoned_by: str = ""
    boot_id: str = ""
    ready: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    # Each taint as {"key", "value", "effect"}.
    taints: list[dict[str, str]] = field(default_factory=list)
    # The raw `noderoll.io/state` annotation ("" when absent); parsed by api.node_state.
    state_annotation: str = ""
    # The Node's resourceVersion when read ("" in histories recorded before it was carried).
    resource_version: str = ""


def cordon_view(snapshot: ReadNodeResult) -> ReadNodeResult:
    """What `cordon_node` reads of the window's read (the cordon and its resourceVersion; not the
    labels, taints and state, which would only lengthen the history). Pure."""
    return ReadNodeResult(snapshot.name, unschedulable=snapshot.unschedulable, cordoned_by=snapshot.cordoned_by,
                          resource_version=snapshot.resource_version)


@dataclass
class NodeInput:
    """Names one Node (read_node, cordon_node, uncordon_node)."""

    node: str
    # cordon_node: the window's read of the node (its resourceVersion set), to patch from without
    # reading it again; a node changed since answers 409 and is read as usual.
    seen: ReadNodeResult | None = None


@dataclass
class CordonNodeResult:
    """Whether noderoll holds the cordon (False: someone else cordoned the node first)."""

    cordoned_by_noderoll: bool
    was_unschedulable: bool = False


@dataclass
class UncordonNodeResult:
    """Whether the node was uncordoned (False: not cordoned by noderoll, left as it was)."""

    uncordoned: bool


@dataclass
class NodeEvent:
    """A Kubernetes Event on the Node; `key` makes a retried write idempotent."""

    reason: str
    message: str
    key: str
    warning: bool = False


@dataclass
class WriteNodeStateInput:
    """One transition of the node's noderoll state: annotation + label (one patch), conditions, events."""

    node: str
    # The `noderoll.io/state` JSON (api.node_state rendered); None leaves the annotation alone.
    state_annotation: str | None
    # `noderoll.io/status` label value (api.enums.NodeStatus).
    status: str
    updating: bool
    erroring: bool
    message: str = ""
    events: list[NodeEvent] = field(default_factory=list)
    # Node annotations removed in the same patch (a reset removes the `noderoll.io/reset` it applied).
    clear_annotations: list[str] = field(default_factory=list)
    # The `noderoll.io/skipped` label's value ("": removed; a window gave the node up: `drain-timeout`).
    skipped: str = ""


@dataclass
class WaitProtectedPodsInput:
    """Wait until no Running/Pending pod on `node` matches any selector (LabelSelector dicts)."""

    node: str
    selectors: list[dict[str, Any]]
    timeout_seconds: int
    poll_seconds: float = 2.0


@dataclass
class WaitProtectedPodsResult:
    """How long the wait took and which pods it waited for (namespace/name)."""

    waited_seconds: float
    waited_for: list[str] = field(default_factory=list)


@dataclass
class DrainNodeInput:
    """Evict every evictable pod of `node` through the Eviction API (Package `drain` settings)."""

    node: str
    timeout_seconds: int = 600
    # None: each pod's own terminationGracePeriodSeconds.
    grace_period_seconds: int | None = None
    delete_empty_dir_data: bool = False
    poll_seconds: float = 1.0
    # The window's first stage pod, created once the node is drained (ADR 0022); None: none.
    then: NextPod | None = None
    # The policy's drain rules (`spec.workloads.rules`, JSON by alias; empty: evict every pod) and its
    # `noticeSeconds` (pods that came after the window's notice get their own before they go).
    rules: list[dict[str, Any]] = field(default_factory=list)
    notice_seconds: int = 0


@dataclass
class AnnounceEvictionInput:
    """The eviction notice (`spec.workloads.noticeSeconds`): annotate the pods the drain will evict with their
    time and set the node's `noderoll.io/MaintenanceScheduled` condition."""

    node: str
    # RFC 3339: the notice's end, when the drain begins.
    notice_at: str
    rules: list[dict[str, Any]] = field(default_factory=list)
    # The fleet whose window it is (`fleet/<policy>`), named in the condition.
    fleet: str = ""


@dataclass
class AnnounceEvictionResult:
    """The pods told (namespace/name -> RFC 3339 eviction time)."""

    pods: dict[str, str] = field(default_factory=dict)


@dataclass
class DrainNodeResult:
    """Pods evicted (namespace/name) and how many evictions a PDB refused (429) on the way."""

    evicted: list[str] = field(default_factory=list)
    refused: int = 0
    # Pods deleted without the Eviction API (drain rule action `Delete`).
    deleted: list[str] = field(default_factory=list)
    seconds: float = 0.0
    # `DrainNodeInput.then`, created (None: not asked, or its creation failed and is left to its own activity).
    next_pod: PrestartedPod | None = None


@dataclass
class StageJob:
    """What a stage pod needs (the stage pod contract in docs/architecture.md)."""

    package: str
    version: str
    node: str
    # The first stage of the pod (`apply`; its name and pod name start with it) or `interrupt`.
    mode: str
    image: str
    # Stage attempt (1-based) and the window's key: both go into the deterministic pod name.
    attempt: int = 1
    window: str = ""
    env: list[dict[str, Any]] = field(default_factory=list)
    resources: dict[str, Any] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    config: dict[str, str] = field(default_factory=dict)
    # For `interrupt`: {"type": ..., "services": [...]} (NODEROLL_INTERRUPT).
    interrupt: dict[str, Any] | None = None
    timeout_seconds: int = 1800
    # The Package's `agentImage` ("" = the worker's pinned agent image) and `imagePullSecrets` (names).
    agent_image: str = ""
    image_pull_secrets: list[str] = field(default_factory=list)
    # The node's position in its fleet's order (NodeWright's SKYHOOK_NODE_ORDER).
    node_order: int = 0
    # Every container's mode, in order, for a stage pod (each stage followed by its check, the merged
    # `interrupt` last when the pod carries it); empty: `mode` alone (an interrupt pod).
    modes: list[str] = field(default_factory=list)
    # The Package's uid and the generation the window applies, from the fleet's order (SKYHOOK_RESOURCE_ID);
    # "" : unknown, the activity reads the Package for them.
    package_uid: str = ""
    generation: int = 0


@dataclass
class NextPod:
    """The pod a window runs next, to be created by the activity before it once that one succeeded
    (ADR 0022): `job` and the further Packages of a pod of several, as `RunStagePodInput` takes them."""

    job: StageJob
    following: list[StageJob] = field(default_factory=list)


@dataclass
class PrestartedPod:
    """A `NextPod` created: its name, and its uid and resourceVersion (both "" when an earlier
    attempt had created it: adopted)."""

    name: str
    uid: str = ""
    resource_version: str = ""


@dataclass
class RunStagePodInput:
    """One stage pod of several stages (`job.modes`), the window's merged interrupt last when
    `job.interrupt` is set (a reboot is then confirmed by a new boot id, as `run_interrupt` does)."""

    job: StageJob
    boot_id_before: str = ""
    reboot_timeout_seconds: int = 900
    # One pod per window phase (ADR 0016): the further Packages of the pod, each with its own modes,
    # run after `job`'s in order (never with an interrupt: the merged interrupt has a pod of its own).
    following: list[StageJob] = field(default_factory=list)
    # This pod, created by the activity before (ADR 0022): adopted, not created again.
    prestarted: PrestartedPod | None = None
    # The window's next pod (the merged interrupt's), created once every stage of this pod succeeded.
    then: NextPod | None = None


@dataclass
class RunStagePodResult:
    """How far the pod got. `exit_code`, `mode` and `log_tail` are the stages': the container that
    failed (a stage or its check), else the last stage container (exit 0). When the pod carried the
    interrupt and every stage succeeded, `interrupt_exit` is the interrupt's outcome."""

    job_name: str
    exit_code: int
    log_tail: str = ""
    mode: str = ""
    # Modes whose containers exited 0, in order (stages and checks, not the interrupt).
    completed: list[str] = field(default_factory=list)
    adopted: bool = False
    # None: the pod carried no interrupt or never reached it; else 0 (done; a reboot confirmed by a
    # new boot id with Ready) or the failure's exit code (-1: not confirmed in time).
    interrupt_exit: int | None = None
    interrupt_log: str = ""
    boot_id_after: str = ""
    # When each finished container of the pod started and ended, by container (mode, or `package` for the
    # copy): [RFC 3339 start, end]. For `noderoll report`'s stage and check bars; empty in runs before it.
    containers: dict[str, list[str]] = field(default_factory=dict)
    # A pod of several Packages (`RunStagePodInput.following`): the Package whose container decided
    # (`mode` is then that Package's mode) and, per Package, its modes that exited 0, in order.
    package: str = ""
    completed_by_package: dict[str, list[str]] = field(default_factory=dict)
    # `RunStagePodInput.then`, created (None: not asked, a stage failed, or its creation failed).
    next_pod: PrestartedPod | None = None


@dataclass
class RunInterruptInput:
    """Run the merged interrupt on the node and confirm it (reboot: new boot id, Ready again)."""

    job: StageJob
    # Boot id observed before the interrupt (read_node); a reboot must change it.
    boot_id_before: str = ""
    reboot_timeout_seconds: int = 900
    # This pod, created by the activity before (ADR 0022): adopted, not created again.
    prestarted: PrestartedPod | None = None
    # The window's first post-interrupt stage pod, created once the interrupt succeeded.
    then: NextPod | None = None


@dataclass
class RunInterruptResult:
    """The interrupt's outcome: pod exit code and log tail, and the boot id after it."""

    job_name: str
    exit_code: int
    boot_id_after: str = ""
    log_tail: str = ""
    # `RunInterruptInput.then`, created (None: not asked, the interrupt failed, or its creation failed).
    next_pod: PrestartedPod | None = None


@dataclass
class RunVerifyPodInput:
    """The window's GPU verify (`spec.verify` of the fleet's policy, api/verify.py): run its pod on the
    node (`job.mode` `verify`, `job.image` the verify image) and wait until it ends."""

    job: StageJob
    # This pod, created by the activity before (ADR 0022): adopted, not created again.
    prestarted: PrestartedPod | None = None


@dataclass
class RunVerifyPodResult:
    """The verify pod's exit code (-1: no container result: the deadline, a pod that cannot start) and
    its log tail."""

    job_name: str
    exit_code: int
    log_tail: str = ""


@dataclass
class DeleteStageJobsInput:
    """Delete the stage pods (and ConfigMaps) of `packages` on `node`, all but the pods in `keep`."""

    node: str
    packages: list[str] = field(default_factory=list)
    # Pod names kept: the latest failed attempt of each package that ended erroring (`noderoll logs`).
    keep: list[str] = field(default_factory=list)
    # A kept pod of several Packages (ADR 0016) -> the Package it is kept for, when that is not the
    # one it is labelled with: it is labelled with it, so that Package's next window deletes it.
    owners: dict[str, str] = field(default_factory=dict)


@dataclass
class DeleteStageJobsResult:
    """Pods deleted one by one (empty when one collection delete did it) and the pods kept."""

    deleted: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)


@dataclass
class CloseWindowInput:
    """The end of a window in one call (issue #26 item 2): the final state write (`state`), in the
    same node patch the removal of noderoll's own cordon when `uncordon`, then the deletion of the
    window's stage pods (`delete`, None: none to delete)."""

    state: WriteNodeStateInput
    uncordon: bool = False
    delete: DeleteStageJobsInput | None = None
    # The window gave an eviction notice: remove `noderoll.io/eviction-at` from the node's pods and the
    # node's `noderoll.io/MaintenanceScheduled` condition.
    clear_notice: bool = False


@dataclass
class CloseWindowResult:
    """What the deletion of the stage pods did, or why it failed ("" when it did not: the pods are
    then left for the package's next window and their TTL, as a failed `delete_stage_jobs` left them)."""

    deleted: DeleteStageJobsResult = field(default_factory=DeleteStageJobsResult)
    delete_error: str = ""

"""Stage Jobs: create (or adopt) the Job of one stage and its check and wait for its pod. Does I/O.

The stage pod contract is in docs/architecture.md and its manifest in `activities.stage_pod`: one pod
per stage, the package image's folder copied by an init container, then noderoll's agent running
the stage and its check as containers named after their modes (NodeWright does the same), so a
window pays one Job round trip per stage instead of two. Creating a Job reads the Package (uid and
generation for SKYHOOK_RESOURCE_ID) and, for a stage, the node (its metadata for the package). Job and ConfigMap names derive
from (package, version, node, mode, check, attempt, window), so an activity retried after a worker
crash finds and adopts the Job its first attempt created instead of running the stage twice. The
wait is one pod watch resumed from its last resourceVersion every few seconds (to heartbeat), not a
poll. The result carries the exit code, the mode of the container that decided it (the stage or its
check) and the log tail the kubelet (or fleetsim) put into `state.terminated.message`.

A stage pod that disappears before it finished (deleted by a human, by the pod GC because its node
was deleted) fails the attempt and its Job is ended (`end_job`): the Job controller would otherwise
run the stage again in a replacement pod under the same attempt, unseen by noderoll.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

import kube
from activities import stage_pod
from activities.io import StageJob
from activities.stage_pod import StagePodIdentity, StagePodSettings
from api.keys import GROUP, PACKAGE_PLURAL, PACKAGE_POD_NAMESPACE, STAGE_PACKAGE_CONTAINER, VERSION
from kube.nodes import read_node

WATCH_SECONDS = 5
# While a stage pod runs, its node is looked at this often: a deleted node's pod never finishes
# (no kubelet) until the pod GC removes it, 40 s or more later.
NODE_CHECK_SECONDS = 30


def job_name(job: StageJob) -> str:
    """Deterministic, readable Job name of at most 63 characters (prefix + hash of the identity)."""
    parts = [job.package, job.version, job.node, job.mode, str(job.attempt), job.window]
    if job.check:
        parts.append(job.check)  # a stage+check Job never shares a name with a stage-only one
    if job.modes:
        parts.append(",".join(job.modes))  # a pod of several stages (and maybe the interrupt)
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:10]
    prefix = f"nr-{job.package[:24].rstrip('-')}-{job.mode[:18].rstrip('-')}"
    return f"{prefix}-{digest}"


def job_modes(job: StageJob) -> list[str]:
    """The modes the Job's pod runs, in order: the stage, then its check when it has one (pure)."""
    return stage_pod.modes(job)


def jobs_per_window(interrupt: bool) -> int:
    """Stage Jobs one node window creates for a package (fresh install, every attempt succeeds; pure):
    one pod for every stage before the interrupt (each with its check, the interrupt last) and one for
    the post-interrupt stage (issue #14). Tests count Jobs with it."""
    return 2 if interrupt else 1


def job_manifest(job: StageJob, name: str, identity: StagePodIdentity | None = None,
                 settings: StagePodSettings | None = None) -> dict[str, Any]:
    """The Job object of a stage (pure; `activities.stage_pod` builds it)."""
    return stage_pod.job_manifest(job, name, identity, settings)


def _package_identity(package: str) -> tuple[str, int]:
    """The Package's uid and generation (for SKYHOOK_RESOURCE_ID); ("", 0) when it is gone."""
    try:
        obj = kube.custom().get_cluster_custom_object(GROUP, VERSION, PACKAGE_PLURAL, package)
    except ApiException as err:
        if kube.is_not_found(err):
            return "", 0  # deleted (an uninstall after the Package's deletion): the id keeps its shape
        kube.raise_for(err, f"read Package {package}")
    meta = obj.get("metadata") or {}
    return str(meta.get("uid", "")), int(meta.get("generation") or 0)


def _read_node(node: str) -> dict[str, Any]:
    return kube.api_client().sanitize_for_serialization(read_node(node))


def ensure_job(job: StageJob) -> tuple[str, bool, str]:
    """Create the ConfigMap (the package's config and the node's metadata; none for an interrupt)
    and the Job, or adopt them; return (name, adopted, the created Job's resourceVersion or "")."""
    name = job_name(job)
    settings = stage_pod.current_settings()
    uid, generation = _package_identity(job.package)
    identity = StagePodIdentity(package_uid=uid, generation=generation, metadata=stage_pod.runs_package(job))
    if identity.metadata:
        data = {**stage_pod.node_metadata(_read_node(job.node), job, settings), **dict(job.config)}
        config_map = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": PACKAGE_POD_NAMESPACE, "labels": stage_pod.labels(job)},
            "data": data,
        }
        try:
            kube.core().create_namespaced_config_map(PACKAGE_POD_NAMESPACE, config_map)
        except ApiException as err:
            if not kube.is_conflict(err):
                kube.raise_for(err, f"create ConfigMap {name}")
    try:
        created = kube.batch().create_namespaced_job(PACKAGE_POD_NAMESPACE, job_manifest(job, name, identity, settings))
        return name, False, str(created.metadata.resource_version or "")
    except ApiException as err:
        if kube.is_conflict(err):
            return name, True, ""  # created by an earlier attempt of this activity: adopt it
        kube.raise_for(err, f"create Job {name}")


@dataclass
class PodOutcome:
    """A finished stage pod (exit code -1 when the Job failed without a pod result).

    `mode` names the container that decided the outcome: the failing one, else the last one.
    """

    exit_code: int
    log_tail: str
    mode: str = ""
    # Agent containers (modes) that exited 0, in order (the package copy is not a mode).
    completed: tuple[str, ...] = ()
    # Seconds each finished container ran (by name), from its terminated state.
    durations: dict[str, float] = field(default_factory=dict)


def _statuses(pod: client.V1Pod) -> list[client.V1ContainerStatus]:
    status = pod.status
    if status is None:
        return []
    return [*(status.init_container_statuses or []), *(status.container_statuses or [])]


def completed_modes(pod: client.V1Pod) -> tuple[str, ...]:
    """The agent containers (modes) that exited 0, in the order they run, up to the first that did
    not (pure): how far a pod of several stages got."""
    done: list[str] = []
    for container in _statuses(pod):
        terminated = container.state.terminated if container.state else None
        if terminated is None or int(terminated.exit_code) != 0:
            break
        if container.name != STAGE_PACKAGE_CONTAINER:
            done.append(container.name)
    return tuple(done)


def container_seconds(pod: client.V1Pod) -> dict[str, float]:
    """How long each finished container ran (terminated startedAt to finishedAt), by name. Pure."""
    found: dict[str, float] = {}
    for container in _statuses(pod):
        terminated = container.state.terminated if container.state else None
        if terminated is not None and terminated.started_at and terminated.finished_at:
            found[container.name] = max(0.0, (terminated.finished_at - terminated.started_at).total_seconds())
    return found


def pod_outcome(pod: client.V1Pod) -> PodOutcome | None:
    """The outcome of a finished pod, None while it runs (pure).

    Containers are looked at in order (init containers first): the first that exited non-zero
    decides; a pod that ended without such a container (deadline, eviction) fails in the first
    container that did not finish.
    """
    status = pod.status
    if status is None or status.phase not in ("Succeeded", "Failed"):
        return None
    last: PodOutcome | None = None
    pending = ""
    completed = completed_modes(pod)
    for container in _statuses(pod):
        terminated = container.state.terminated if container.state else None
        if terminated is None:
            pending = container.name
            break
        last = PodOutcome(int(terminated.exit_code), terminated.message or "", container.name, completed,
                          container_seconds(pod))
        if last.exit_code != 0:
            return last
    if status.phase == "Succeeded" and last is not None:
        return last
    message = status.message or status.reason or ""
    return PodOutcome(0 if status.phase == "Succeeded" else -1, message, pending or (last.mode if last else ""),
                      completed, container_seconds(pod))


# Waiting reasons of a stage pod that waiting does not cure: the attempt fails at once and its Job is
# deleted (it must not start later, after noderoll moved on). noderoll's own attempts, with backoff,
# are the retry; the kubelet's endless pull retries would otherwise hold the window for the whole
# stage timeout with no message anywhere.
UNSTARTABLE_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})


def unstartable(pod: client.V1Pod) -> PodOutcome | None:
    """A failed outcome for a pod one of whose containers cannot start (pure), else None."""
    for container in _statuses(pod):
        waiting = container.state.waiting if container.state else None
        if waiting is not None and waiting.reason in UNSTARTABLE_REASONS:
            return PodOutcome(-1, f"stage pod cannot start: {waiting.reason}: {waiting.message or ''}",
                              container.name)
    return None


def delete_job(name: str) -> None:
    try:
        kube.batch().delete_namespaced_job(name, PACKAGE_POD_NAMESPACE, propagation_policy="Background")
    except ApiException as err:
        if not kube.is_not_found(err):
            kube.raise_for(err, f"delete Job {name}")


def end_job(name: str) -> None:
    """End a Job as failed without deleting it: `activeDeadlineSeconds: 1` makes the Job controller
    mark it Failed (DeadlineExceeded) and remove its pods, so no replacement pod runs the stage again
    while the Job stays for inspection (and as the record of the failed attempt)."""
    try:
        kube.batch().patch_namespaced_job(name, PACKAGE_POD_NAMESPACE, {"spec": {"activeDeadlineSeconds": 1}})
    except ApiException as err:
        if not kube.is_not_found(err):
            kube.raise_for(err, f"end Job {name}")


def job_failure(name: str) -> PodOutcome | None:
    """A Job that failed without a finished pod (deadline exceeded, pod deleted) as an outcome."""
    try:
        job = kube.batch().read_namespaced_job(name, PACKAGE_POD_NAMESPACE)
    except ApiException as err:
        if kube.is_not_found(err):
            raise RuntimeError(f"Job {name} disappeared while it ran") from err
        kube.raise_for(err, f"read Job {name}")
    for condition in (job.status and job.status.conditions) or []:
        if condition.type == "Failed" and condition.status == "True":
            return PodOutcome(-1, f"Job failed: {condition.reason}: {condition.message or ''}")
    return None


def finished_outcome(name: str, pod: client.V1Pod) -> PodOutcome | None:
    outcome = pod_outcome(pod)
    if outcome is None:
        outcome = unstartable(pod)
        if outcome is not None:
            delete_job(name)
    return outcome


def check_job(name: str) -> tuple[PodOutcome | None, str]:
    """One look at the Job's pods: (outcome or None, list resourceVersion to watch from).

    Served from the watch cache (`resourceVersion=0`): a pod it does not show yet only means no
    outcome yet (the Job's own failure is read fresh), and the watch from the list's version sees it."""
    try:
        pods = kube.core().list_namespaced_pod(PACKAGE_POD_NAMESPACE, label_selector=f"job-name={name}",
                                               resource_version="0")
    except ApiException as err:
        kube.raise_for(err, f"list pods of Job {name}")
    for pod in pods.items:
        outcome = finished_outcome(name, pod)
        if outcome is not None:
            return outcome, pods.metadata.resource_version
    return job_failure(name), pods.metadata.resource_version


def watch_job_pods(name: str, resource_version: str, seconds: int) -> None:
    """Block until a pod of the Job changes or `seconds` pass (a watch, so no busy polling)."""
    stream = watch.Watch()
    try:
        for event in stream.stream(
            kube.core().list_namespaced_pod,
            PACKAGE_POD_NAMESPACE,
            label_selector=f"job-name={name}",
            resource_version=resource_version,
            timeout_seconds=seconds,
        ):
            if pod_outcome(event["object"]) is not None or unstartable(event["object"]) is not None:
                return
    except ApiException as err:
        if kube.is_gone(err):
            return  # resourceVersion too old: the caller lists again
        kube.raise_for(err, f"watch pods of Job {name}")
    finally:
        stream.stop()

"""Stage Jobs: create (or adopt) the Job of one stage and wait for its pod to finish. Does I/O.

The stage pod contract is in docs/architecture.md. Job and ConfigMap names derive from (package,
version, node, mode, attempt, window), so an activity retried after a worker crash finds and adopts
the Job its first attempt created instead of running the stage twice. The wait is a pod watch
(restarted every few seconds to heartbeat), not a tight poll. The result carries the exit code and
the log tail the kubelet (or fleetsim) put into `state.terminated.message`.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from temporalio import activity

from activities import kube
from activities.heartbeats import wait_slice
from activities.io import RunStageJobResult, StageJob
from api.keys import PACKAGE_POD_NAMESPACE
from worker import metrics

CONTAINER = "agent"
HOST_ROOT = "/host"
CONFIG_DIR = "/noderoll-config"
WATCH_SECONDS = 5
# Finished Jobs stay for inspection (`noderoll logs`, kubectl) and are then garbage-collected
# where the TTL controller runs (GA in 1.23; ignored by older apiservers).
TTL_SECONDS_AFTER_FINISHED = 7 * 24 * 3600
LABEL_PACKAGE = "noderoll.io/package"
LABEL_NODE = "noderoll.io/node"
LABEL_MODE = "noderoll.io/mode"
LABEL_COMPONENT = "noderoll.io/component"
ANNOTATION_VERSION = "noderoll.io/package-version"


def job_name(job: StageJob) -> str:
    """Deterministic, readable Job name of at most 63 characters (prefix + hash of the identity)."""
    identity = "\0".join([job.package, job.version, job.node, job.mode, str(job.attempt), job.window])
    digest = hashlib.sha256(identity.encode()).hexdigest()[:10]
    prefix = f"nr-{job.package[:24].rstrip('-')}-{job.mode[:18].rstrip('-')}"
    return f"{prefix}-{digest}"


def _labels(job: StageJob) -> dict[str, str]:
    return {
        LABEL_PACKAGE: job.package,
        LABEL_NODE: job.node,
        LABEL_MODE: job.mode,
        LABEL_COMPONENT: "stage",
    }


def _env(job: StageJob) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": "NODEROLL_PACKAGE", "value": job.package},
        {"name": "NODEROLL_VERSION", "value": job.version},
        {"name": "NODEROLL_NODE", "value": job.node},
        {"name": "NODEROLL_MODE", "value": job.mode},
        {"name": "NODEROLL_ROOT", "value": HOST_ROOT},
        {"name": "NODEROLL_CONFIG_DIR", "value": CONFIG_DIR},
    ]
    if job.interrupt is not None:
        env.append({"name": "NODEROLL_INTERRUPT", "value": json.dumps(job.interrupt, sort_keys=True)})
    return env + list(job.env)


def job_manifest(job: StageJob, name: str) -> dict[str, Any]:
    """The Job object of a stage (pure): pinned with nodeName, backoffLimit 0, host root + config mounted."""
    labels = _labels(job)
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": job.image,
        "args": [job.mode],
        "env": _env(job),
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {"privileged": True},
        "volumeMounts": [
            {"name": "host", "mountPath": HOST_ROOT},
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
        ],
    }
    if job.resources:
        container["resources"] = job.resources
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": PACKAGE_POD_NAMESPACE,
            "labels": labels,
            "annotations": {ANNOTATION_VERSION: job.version},
        },
        "spec": {
            # noderoll owns retries (a new Job per attempt), so the Job itself never retries.
            "backoffLimit": 0,
            "activeDeadlineSeconds": job.timeout_seconds,
            "ttlSecondsAfterFinished": TTL_SECONDS_AFTER_FINISHED,
            "template": {
                "metadata": {"labels": labels, "annotations": {ANNOTATION_VERSION: job.version}},
                "spec": {
                    "nodeName": job.node,
                    "restartPolicy": "Never",
                    "hostPID": True,
                    "tolerations": job.tolerations,
                    "containers": [container],
                    "volumes": [
                        {"name": "host", "hostPath": {"path": "/"}},
                        {"name": "config", "configMap": {"name": name}},
                    ],
                },
            },
        },
    }


def ensure_job(job: StageJob) -> tuple[str, bool]:
    """Create the ConfigMap and the Job, or adopt them when they exist; return (name, adopted)."""
    name = job_name(job)
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": PACKAGE_POD_NAMESPACE, "labels": _labels(job)},
        "data": dict(job.config),
    }
    try:
        kube.core().create_namespaced_config_map(PACKAGE_POD_NAMESPACE, config_map)
    except ApiException as err:
        if not kube.is_conflict(err):
            kube.raise_for(err, f"create ConfigMap {name}")
    try:
        kube.batch().create_namespaced_job(PACKAGE_POD_NAMESPACE, job_manifest(job, name))
        return name, False
    except ApiException as err:
        if kube.is_conflict(err):
            return name, True  # created by an earlier attempt of this activity: adopt it
        kube.raise_for(err, f"create Job {name}")


@dataclass
class PodOutcome:
    """A finished stage pod (exit code -1 when the Job failed without a pod result)."""

    exit_code: int
    log_tail: str


def pod_outcome(pod: client.V1Pod) -> PodOutcome | None:
    """The outcome of a finished pod, None while it runs (pure)."""
    status = pod.status
    if status is None or status.phase not in ("Succeeded", "Failed"):
        return None
    for container in status.container_statuses or []:
        terminated = container.state.terminated if container.state else None
        if container.name == CONTAINER and terminated is not None:
            return PodOutcome(int(terminated.exit_code), terminated.message or "")
    return PodOutcome(0 if status.phase == "Succeeded" else -1, status.message or status.reason or "")


# Waiting reasons of a stage pod that waiting does not cure: the attempt fails at once and its Job is
# deleted (it must not start later, after noderoll moved on). noderoll's own attempts, with backoff,
# are the retry; the kubelet's endless pull retries would otherwise hold the window for the whole
# stage timeout with no message anywhere.
UNSTARTABLE_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})


def unstartable(pod: client.V1Pod) -> PodOutcome | None:
    """A failed outcome for a pod whose agent container cannot start (pure), else None."""
    statuses = (pod.status.container_statuses if pod.status else None) or []
    for container in statuses:
        waiting = container.state.waiting if container.state else None
        if container.name == CONTAINER and waiting is not None and waiting.reason in UNSTARTABLE_REASONS:
            return PodOutcome(-1, f"stage pod cannot start: {waiting.reason}: {waiting.message or ''}")
    return None


def _delete_job(name: str) -> None:
    try:
        kube.batch().delete_namespaced_job(name, PACKAGE_POD_NAMESPACE, propagation_policy="Background")
    except ApiException as err:
        if not kube.is_not_found(err):
            kube.raise_for(err, f"delete Job {name}")


def _job_failure(name: str) -> PodOutcome | None:
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


def check_job(name: str) -> tuple[PodOutcome | None, str]:
    """One look at the Job's pods: (outcome or None, list resourceVersion to watch from)."""
    try:
        pods = kube.core().list_namespaced_pod(PACKAGE_POD_NAMESPACE, label_selector=f"job-name={name}")
    except ApiException as err:
        kube.raise_for(err, f"list pods of Job {name}")
    for pod in pods.items:
        outcome = pod_outcome(pod)
        if outcome is not None:
            return outcome, pods.metadata.resource_version
        outcome = unstartable(pod)
        if outcome is not None:
            _delete_job(name)
            return outcome, pods.metadata.resource_version
    return _job_failure(name), pods.metadata.resource_version


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
        if err.status == 410:
            return  # resourceVersion too old: the caller lists again
        kube.raise_for(err, f"watch pods of Job {name}")
    finally:
        stream.stop()


def wait_job(name: str, deadline: float) -> PodOutcome:
    """Wait for the Job's pod to finish, heartbeating; past `deadline` the stage counts as failed."""
    while True:
        outcome, resource_version = check_job(name)
        if outcome is not None:
            return outcome
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return PodOutcome(-1, f"Job {name} did not finish in time")
        activity.heartbeat({"job": name})
        watch_job_pods(name, resource_version, max(1, int(min(wait_slice(WATCH_SECONDS), remaining))))


@activity.defn(name="run_stage_job")
def run_stage_job(input: StageJob) -> RunStageJobResult:
    """Run one stage (or check) as a Job pinned to the node; return its exit code and log tail."""
    started = time.monotonic()
    name, adopted = ensure_job(input)
    # A small margin over the Job's own activeDeadlineSeconds, so the Job's verdict normally wins.
    outcome = wait_job(name, time.monotonic() + input.timeout_seconds + 30)
    # An adopted Job started before this attempt: its duration is unknown here, so it is not observed.
    if not adopted:
        metrics.record_stage_duration(input.package, input.mode, time.monotonic() - started)
    if outcome.exit_code != 0:
        metrics.record_stage_failure(input.package, input.mode)
    return RunStageJobResult(job_name=name, exit_code=outcome.exit_code, log_tail=outcome.log_tail, adopted=adopted)

"""Waiting for a Job's pod: the one pod waiter of stage Jobs, stage pods and interrupts. Does I/O.

One watch of the Job's pods (label `job-name`), resumed from the last resourceVersion seen
(`kube.watching.watch_from`, a slice of a few seconds at a time so the activity wrapper can
heartbeat between slices): a Job the caller has just created is watched from the Job's own
resourceVersion (its pod comes later), so a 5 s stage costs one or two watches and no list. A list
is needed only for a Job adopted from an earlier attempt, or when a watch's resourceVersion expired
(410); it is served from the apiserver's watch cache (never a read of every pod of the namespace
from etcd), fresh enough by construction (docs/architecture.md, "Reads"):

* nothing remembered: `resourceVersion=0` (the cache as it is). A pod the cache does not show yet
  is not taken for gone: a Job without a pod is checked by a GET of the Job (fresh), and the watch
  from the list's resourceVersion delivers the pod when it comes;
* a pod remembered (this wait's watch, or an earlier attempt's heartbeat details: its uid and
  the resourceVersion it was seen at, `JobWait(previous=...)`): `resourceVersionMatch=NotOlderThan`
  that resourceVersion, so the list shows every change up to the moment the pod was seen, and a pod
  missing from it really was deleted (a stale list never makes a running stage look gone and run again).

The waited pod is remembered: when it is deleted before it finished (by a human, by the pod GC
because its node was deleted), or replaced by the Job controller, the wait fails and the Job is
ended (`end_job`: failed, kept; the Job controller would otherwise run the pod again under the same
attempt, unseen by noderoll), and when the node itself is gone `check_node` raises `NodeNotFound`.
A pod outcome carries the exit code, the mode of the container that decided it and the log tail the
kubelet (or fleetsim) put into `state.terminated.message`.

The watch reads its events as raw JSON: most of a pod's events (created, started, running) only say
that it has not finished, which `may_decide` reads from three fields; only an event that may decide
(finished, unstartable, deleted, another pod) becomes a typed `V1Pod`. The typed client's decoding
of every event was 17% of the worker's CPU in a 1,000-node profile (docs/benchmarks.md).
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio.exceptions import ApplicationError

import kube
from api.keys import PACKAGE_POD_NAMESPACE
from api.stage_containers import is_copy
from kube.nodes import read_node
from kube.watching import BOOKMARK, Watched, event_version, watch_from
from protocol import errors

log = logging.getLogger(__name__)

# Seconds of one watch slice (the activity heartbeats between slices).
WATCH_SECONDS = 5
# While a pod runs, its node is looked at this often: a deleted node's pod never finishes
# (no kubelet) until the pod GC removes it, 40 s or more later.
NODE_CHECK_SECONDS = 30
# How a node deleted while its Job's pod runs is reported (NodeNotFound).
NODE_DELETED = "does not exist (deleted during the window)"


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
    # When each finished container started and ended (by name, RFC 3339): `noderoll report`'s stage bars.
    times: dict[str, list[str]] = field(default_factory=dict)


def _statuses(pod: client.V1Pod) -> list[client.V1ContainerStatus]:
    status = pod.status
    if status is None:
        return []
    return [*(status.init_container_statuses or []), *(status.container_statuses or [])]


def completed_modes(pod: client.V1Pod) -> tuple[str, ...]:
    """The agent containers (by name: their modes, `p<i>-<mode>` in a pod of several Packages) that
    exited 0, in the order they run, up to the first that did not (pure): how far the pod got."""
    done: list[str] = []
    for container in _statuses(pod):
        terminated = container.state.terminated if container.state else None
        if terminated is None or int(terminated.exit_code) != 0:
            break
        if not is_copy(container.name):
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


def container_times(pod: client.V1Pod) -> dict[str, list[str]]:
    """When each finished container started and ended ([startedAt, finishedAt], RFC 3339), by name. Pure."""
    found: dict[str, list[str]] = {}
    for container in _statuses(pod):
        terminated = container.state.terminated if container.state else None
        if terminated is not None and terminated.started_at and terminated.finished_at:
            found[container.name] = [terminated.started_at.isoformat(), terminated.finished_at.isoformat()]
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
                          container_seconds(pod), container_times(pod))
        if last.exit_code != 0:
            return last
    if status.phase == "Succeeded" and last is not None:
        return last
    message = status.message or status.reason or ""
    return PodOutcome(0 if status.phase == "Succeeded" else -1, message, pending or (last.mode if last else ""),
                      completed, container_seconds(pod), container_times(pod))


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


def may_decide(raw: dict[str, Any]) -> bool:
    """False for a pod's raw JSON that `finished_outcome` surely finds undecided: not `Succeeded` or
    `Failed`, and no container waiting for a reason in `UNSTARTABLE_REASONS` (pure)."""
    status = raw.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        return True
    containers = [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
    return any(((c.get("state") or {}).get("waiting") or {}).get("reason") in UNSTARTABLE_REASONS
               for c in containers)


@functools.cache
def _decoder() -> client.ApiClient:
    # Decoding needs no configuration or connection: a client of its own, also outside a cluster.
    return client.ApiClient()


def pod_from_json(raw: dict[str, Any]) -> client.V1Pod:
    """A pod's raw JSON (a watch event's object) as the typed client's `V1Pod`."""
    pod: client.V1Pod = _decoder().deserialize(json.dumps(raw), "V1Pod", "application/json")
    return pod


def _list_stage_pods(**kwargs: Any) -> Any:
    # No docstring on purpose: `watch.Watch.stream` then yields each event's raw JSON (module docstring).
    return kube.core().list_namespaced_pod(PACKAGE_POD_NAMESPACE, **kwargs)


# Served from the apiserver's watch cache whatever its version (module docstring).
ANY_VERSION = "0"
NOT_OLDER_THAN = "NotOlderThan"


class JobWait:
    """The wait for one Job's pod: the pod's uid once seen, and the resourceVersion to watch from."""

    def __init__(self, name: str, node: str, created: str = "", previous: tuple[str, str] = ("", ""),
                 on_seen: Callable[[dict[str, str]], None] | None = None) -> None:
        self.name = name
        self.node = node
        # Called with `details()` whenever our pod is seen at a newer resourceVersion (the activity
        # heartbeats them at once, not only between watch slices).
        self.on_seen = on_seen
        # Created by this attempt (its resourceVersion): the pod comes later, so the wait starts with
        # a watch from the Job's resourceVersion; and a later look without pods is the Job
        # controller not having created the pod yet, not a Job that failed without one.
        self.created = bool(created)
        # (pod uid, resourceVersion it was seen at) an earlier attempt was waiting for (its heartbeat).
        self.pod_uid, self.seen = previous
        self.pod_name = ""
        self.resource_version = created
        self.node_checked = time.monotonic()

    def details(self) -> dict[str, str]:
        """Heartbeat details: what a retried attempt needs to recognise the pod (module docstring)."""
        return {"job": self.name, "pod": self.pod_uid, "seen": self.seen}

    def _gone(self) -> PodOutcome:
        """Our pod vanished (or was replaced) before it finished: fail the attempt, end the Job."""
        log.info("stage pod %s of Job %s deleted before it finished", self.pod_name or self.pod_uid, self.name)
        end_job(self.name)
        self.check_node()
        return PodOutcome(-1, f"stage pod {self.pod_name or self.pod_uid} was deleted before it finished "
                              f"(Job {self.name} ended; the stage runs again as the next attempt)")

    def check_node(self) -> None:
        """Raise NodeNotFound (non-retryable) when the Job's node no longer exists (the Job is ended)."""
        self.node_checked = time.monotonic()
        if not self.node:
            return
        try:
            read_node(self.node, NODE_DELETED)
        except ApplicationError as err:
            if err.type == errors.NODE_NOT_FOUND:
                end_job(self.name)
            raise

    def _track(self, uid: str, name: str, version: str) -> bool:
        """Remember the attempt's pod (the first seen) and the version it was seen at; False for
        another pod (a replacement: ours is gone)."""
        if not self.pod_uid:
            self.pod_uid, self.pod_name = uid, name
        if uid != self.pod_uid:
            return False
        self.pod_name = name
        if version and version != self.seen:
            self.seen = version
            if self.on_seen is not None:
                self.on_seen(self.details())
        return True

    def _see(self, pod: client.V1Pod, version: str, deleted: bool = False) -> PodOutcome | None:
        if not self._track(pod.metadata.uid, pod.metadata.name, version):
            return None if deleted else self._gone()
        outcome = finished_outcome(self.name, pod)
        if outcome is None and deleted:
            return self._gone()
        return outcome

    def look(self) -> PodOutcome | None:
        """List the Job's pods once, from the watch cache (also the resourceVersion the next watch
        starts from): not older than the version our pod was seen at, when one was."""
        version = {"resource_version": self.seen, "resource_version_match": NOT_OLDER_THAN} if (
            self.pod_uid and self.seen) else {"resource_version": ANY_VERSION}
        try:
            pods = kube.core().list_namespaced_pod(PACKAGE_POD_NAMESPACE, label_selector=f"job-name={self.name}",
                                                   **version)
        except ApiException as err:
            kube.raise_for(err, f"list pods of Job {self.name}")
        self.resource_version = pods.metadata.resource_version
        ours = [p for p in pods.items if not self.pod_uid or p.metadata.uid == self.pod_uid]
        if self.pod_uid and not ours:
            return self._gone()
        if ours:
            # Without a remembered pod, the oldest is the attempt's (a Job of backoffLimit 0 has one).
            return self._see(min(ours, key=lambda p: p.metadata.creation_timestamp), self.resource_version)
        if self.created:
            self.created = False
            return None
        return job_failure(self.name)

    def on_event(self, event: dict[str, Any]) -> PodOutcome | None:
        """One watch event: the resourceVersion to resume from, and the outcome when our pod finished."""
        self.resource_version = event_version(event, self.resource_version)
        if event["type"] == BOOKMARK:
            return None  # only a newer resourceVersion to resume from
        raw = event.get("raw_object") or {}
        deleted = event["type"] == "DELETED"
        if not deleted and not may_decide(raw):
            meta = raw.get("metadata") or {}
            if self._track(str(meta.get("uid") or ""), str(meta.get("name") or ""), self.resource_version):
                return None
            return self._gone()  # a replacement pod: ours is gone
        return self._see(pod_from_json(raw), self.resource_version, deleted=deleted)

    def watch(self, seconds: int) -> PodOutcome | None:
        """Watch from the last resourceVersion for `seconds`; an outcome, or None (resourceVersion
        cleared when the watch has to be replaced by a fresh list)."""
        pods = Watched(_list_stage_pods, f"pods of Job {self.name}", {"label_selector": f"job-name={self.name}"})
        self.resource_version, outcome = watch_from(pods, self.resource_version, seconds, self.on_event)
        return outcome

    def step(self, seconds: int) -> PodOutcome | None:
        """One turn of the wait (the caller heartbeats between turns): the node's check when due, then
        a list when there is no resourceVersion to watch from, else a watch of at most `seconds`."""
        if time.monotonic() - self.node_checked >= NODE_CHECK_SECONDS:
            self.check_node()
        if not self.resource_version:
            return self.look()
        return self.watch(seconds)

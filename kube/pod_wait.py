"""Waiting for a stage pod: the one pod waiter of stage pods and interrupts. Does I/O.

One watch of the pod (field selector `metadata.name`), resumed from the last resourceVersion seen
(`kube.watching.watch_from`, a slice of a few seconds at a time so the activity wrapper can
heartbeat between slices): a pod the caller has just created is watched from its own
resourceVersion, so a 5 s stage costs one watch and no list. A read is needed only for a pod
adopted from an earlier attempt, or when a watch's resourceVersion expired (410): one GET of the
pod (fresh from etcd: a single object, and a pod missing from it really was deleted, so a stale
answer never makes a running stage look gone and run again).

The waited pod is remembered by uid: when it is deleted before it finished (by a human, by the pod
GC because its node was deleted), or a pod of its name with another uid is seen, the wait fails
(the stage runs again as the next attempt, in a new pod), and when the node itself is gone
`check_node` raises `NodeNotFound` (and deletes the pod). A pod outcome carries the exit code, the
mode of the container that decided it and the log tail the kubelet (or fleetsim) put into
`state.terminated.message`.

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
# How a node deleted while its stage pod runs is reported (NodeNotFound).
NODE_DELETED = "does not exist (deleted during the window)"


@dataclass
class PodOutcome:
    """A finished stage pod (exit code -1 when the pod ended without a container's result).

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


# Waiting reasons of a stage pod that waiting does not cure: the attempt fails at once and its pod is
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


def delete_pod(name: str) -> None:
    """Delete a stage pod (gone already is fine): an unstartable pod, a pod past its wait's deadline,
    the pod of a deleted node. Its ConfigMap goes with the window's others (`delete_stage_jobs`)."""
    try:
        kube.core().delete_namespaced_pod(name, PACKAGE_POD_NAMESPACE)
    except ApiException as err:
        if not kube.is_not_found(err):
            kube.raise_for(err, f"delete stage pod {name}")


def finished_outcome(name: str, pod: client.V1Pod) -> PodOutcome | None:
    outcome = pod_outcome(pod)
    if outcome is None:
        outcome = unstartable(pod)
        if outcome is not None:
            delete_pod(name)
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


# What of a pod's metadata the wait reads (`_see`); the outcome reads only its status.
_IDENTITY = ("name", "namespace", "uid", "resourceVersion")


def pod_from_json(raw: dict[str, Any]) -> client.V1Pod:
    """A pod's raw JSON (a watch event's object) as the typed client's `V1Pod`, with only what the
    wait reads: the pod's identity and its status. Its spec and the rest of its metadata (managed
    fields) were most of the decoding's cost and nothing reads them."""
    meta = raw.get("metadata") or {}
    read = {"metadata": {key: meta[key] for key in _IDENTITY if key in meta}, "status": raw.get("status")}
    pod: client.V1Pod = _decoder().deserialize(json.dumps(read), "V1Pod", "application/json")
    return pod


def _list_stage_pods(**kwargs: Any) -> Any:
    # No docstring on purpose: `watch.Watch.stream` then yields each event's raw JSON (module docstring).
    return kube.core().list_namespaced_pod(PACKAGE_POD_NAMESPACE, **kwargs)


class PodWait:
    """The wait for one stage pod: its uid once seen, and the resourceVersion to watch from."""

    def __init__(self, name: str, node: str, created: str = "", previous: tuple[str, str] = ("", ""),
                 on_seen: Callable[[dict[str, str]], None] | None = None) -> None:
        self.name = name
        self.node = node
        # Called with `details()` whenever our pod is seen at a newer resourceVersion (the activity
        # heartbeats them at once, not only between watch slices).
        self.on_seen = on_seen
        # (pod uid, resourceVersion it was seen at) an earlier attempt was waiting for (its heartbeat).
        self.pod_uid, self.seen = previous
        # Created by this attempt (its resourceVersion): the wait starts with a watch from there.
        self.resource_version = created
        self.node_checked = time.monotonic()

    def details(self) -> dict[str, str]:
        """Heartbeat details: what a retried attempt needs to recognise the pod (module docstring)."""
        return {"job": self.name, "pod": self.pod_uid, "seen": self.seen}

    def _gone(self) -> PodOutcome:
        """Our pod vanished (or another took its name) before it finished: the attempt failed."""
        log.info("stage pod %s (uid %s) deleted before it finished", self.name, self.pod_uid or "unseen")
        self.check_node()
        return PodOutcome(-1, f"stage pod {self.name} was deleted before it finished "
                              f"(the stage runs again as the next attempt)")

    def check_node(self) -> None:
        """Raise NodeNotFound (non-retryable) when the pod's node no longer exists (the pod is deleted)."""
        self.node_checked = time.monotonic()
        if not self.node:
            return
        try:
            read_node(self.node, NODE_DELETED)
        except ApplicationError as err:
            if err.type == errors.NODE_NOT_FOUND:
                delete_pod(self.name)
            raise

    def _track(self, uid: str, version: str) -> bool:
        """Remember the attempt's pod (the first seen) and the version it was seen at; False for
        another pod of the same name (ours is gone)."""
        if not self.pod_uid:
            self.pod_uid = uid
        if uid != self.pod_uid:
            return False
        if version and version != self.seen:
            self.seen = version
            if self.on_seen is not None:
                self.on_seen(self.details())
        return True

    def _see(self, pod: client.V1Pod, version: str, deleted: bool = False) -> PodOutcome | None:
        if not self._track(pod.metadata.uid, version):
            return None if deleted else self._gone()
        outcome = finished_outcome(self.name, pod)
        if outcome is None and deleted:
            return self._gone()
        return outcome

    def look(self) -> PodOutcome | None:
        """Read the pod once (fresh; its resourceVersion is where the next watch starts)."""
        try:
            pod = kube.core().read_namespaced_pod(self.name, PACKAGE_POD_NAMESPACE)
        except ApiException as err:
            if kube.is_not_found(err):
                return self._gone()
            kube.raise_for(err, f"read stage pod {self.name}")
        self.resource_version = pod.metadata.resource_version or ""
        return self._see(pod, self.resource_version)

    def on_event(self, event: dict[str, Any]) -> PodOutcome | None:
        """One watch event: the resourceVersion to resume from, and the outcome when our pod finished."""
        self.resource_version = event_version(event, self.resource_version)
        if event["type"] == BOOKMARK:
            return None  # only a newer resourceVersion to resume from
        raw = event.get("raw_object") or {}
        deleted = event["type"] == "DELETED"
        if not deleted and not may_decide(raw):
            meta = raw.get("metadata") or {}
            if self._track(str(meta.get("uid") or ""), self.resource_version):
                return None
            return self._gone()  # another pod of our name: ours is gone
        return self._see(pod_from_json(raw), self.resource_version, deleted=deleted)

    def watch(self, seconds: int) -> PodOutcome | None:
        """Watch from the last resourceVersion for `seconds`; an outcome, or None (resourceVersion
        cleared when the watch has to be replaced by a fresh read)."""
        pods = Watched(_list_stage_pods, f"stage pod {self.name}", {"field_selector": f"metadata.name={self.name}"})
        self.resource_version, outcome = watch_from(pods, self.resource_version, seconds, self.on_event)
        return outcome

    def step(self, seconds: int) -> PodOutcome | None:
        """One turn of the wait (the caller heartbeats between turns): the node's check when due, then
        a read when there is no resourceVersion to watch from, else a watch of at most `seconds`."""
        if time.monotonic() - self.node_checked >= NODE_CHECK_SECONDS:
            self.check_node()
        if not self.resource_version:
            return self.look()
        return self.watch(seconds)

"""Drain activities: wait for protected pods, then evict the node's pods. Does I/O.

`wait_protected_pods` waits (bounded) while pods matching a Package's `podNonInterruptLabels` run on
the node. `drain_node` evicts through the Eviction API, so PodDisruptionBudgets are enforced by the
apiserver: a 429 means "not now" and is retried with backoff until `timeoutSeconds`; on timeout the
failure names the pods still there and the PDBs that cover them. Skipped like `kubectl drain`:
DaemonSet pods, mirror pods, finished pods and noderoll's own stage pods. Pods with emptyDir data
block the drain unless `deleteEmptyDirData`. Eviction speaks `policy/v1` and falls back to
`policy/v1beta1` when the apiserver does not serve v1 (Kubernetes < 1.22).

Both report while they wait, not only when they give up (`_Report`, decisions in
`planning.drain`): the node condition `noderoll.io/Draining` (True while evicting, reason
`EvictionRefused` once PDBs refused for `BLOCKED_AFTER_SECONDS`, `WaitingForProtectedPods`; False
when done), one Event per node and reason updated in place by every wait, and the blockers in
the heartbeat details. These two activities are the only writers of that condition.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio import activity
from temporalio.exceptions import ApplicationError

import kube
import metrics
from activities.heartbeats import beat, keep_alive, wait_slice
from activities.node_events import record_event
from activities.nodes import set_draining
from activities.pod_create import prestart
from api.enums import DrainReason
from api.keys import PACKAGE_POD_NAMESPACE, STAGE_COMPONENT, STAGE_COMPONENT_LABEL
from api.selectors import LabelSelector
from kube.nodes import node_not_found
from planning.drain import (
    DrainNotice,
    PdbView,
    evicting_message,
    eviction_refused_message,
    pdb_view,
    protected_pods_message,
)
from protocol import errors
from protocol.node_activities import (
    DrainNodeInput,
    DrainNodeResult,
    NodeEvent,
    WaitProtectedPodsInput,
    WaitProtectedPodsResult,
)

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
MAX_BACKOFF_SECONDS = 10.0
log = logging.getLogger(__name__)

_policy_version_lock = threading.Lock()
_policy_version: str | None = None


def policy_version() -> str:
    """`policy/v1` when the apiserver serves it, else `policy/v1beta1` (discovered once per process)."""
    global _policy_version
    with _policy_version_lock:
        if _policy_version is None:
            try:
                kube.request_json("GET", "/apis/policy/v1")
                _policy_version = "policy/v1"
            except ApiException as err:
                if not kube.is_not_found(err):
                    kube.raise_for(err, "discover policy API versions")
                _policy_version = "policy/v1beta1"
        return _policy_version


class _NodePods:
    """The pods bound to one node, listed by field selector, from the apiserver's watch cache when it
    is fresh enough (docs/architecture.md, "Reads").

    The first list must show every pod bound before the cordon: it comes from the cache when the
    cache's resourceVersion is at least that of a fresh read of the node (taken after the cordon:
    resourceVersions are etcd revisions, ordered across kinds), else from etcd (a quorum read, once
    per wait: the pods' cache advances only with pod events, so on a quiet cluster it may stay
    behind the node's version). Each later list is not older than the one before (`NotOlderThan` a
    version of the pods' own cache: never one it cannot reach). So "no pods left" is never a lagging
    cache's answer, and a drain no longer reads every pod of the cluster from etcd every second
    (what the 1,000-node benchmark's apiserver spent its memory on)."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.version = ""

    def _list(self, **version: str) -> client.V1PodList:
        return kube.core().list_pod_for_all_namespaces(field_selector=f"spec.nodeName={self.node}", **version)

    def list(self) -> list[client.V1Pod]:
        try:
            if self.version:
                pods = self._list(resource_version=self.version, resource_version_match="NotOlderThan")
            else:
                floor = kube.core().read_node(self.node).metadata.resource_version or ""
                pods = self._list(resource_version="0")
                if not _at_least(pods.metadata.resource_version, floor):
                    pods = self._list()  # quorum read: the cache may not show the latest bindings yet
                    # The pods' own versions: the cache reaches them (not the list's, an etcd revision
                    # the pods' cache may never reach on a quiet cluster).
                    self.version = max((p.metadata.resource_version or "0" for p in pods.items), key=_revision,
                                       default="")
                    return list(pods.items)
        except ApiException as err:
            if kube.is_not_found(err):
                raise node_not_found(self.node) from err
            kube.raise_for(err, f"list pods of node {self.node}")
        self.version = pods.metadata.resource_version or self.version
        return list(pods.items)


def _revision(version: str | None) -> int:
    """An etcd-backed resourceVersion as a number (-1 when it is not one: compare nothing)."""
    try:
        return int(version or "")
    except ValueError:
        return -1


def _at_least(version: str | None, floor: str) -> bool:
    """Whether a list at `version` includes every change up to `floor` (both etcd revisions)."""
    current, wanted = _revision(version), _revision(floor)
    return current >= 0 and wanted >= 0 and current >= wanted


def _running(pod: client.V1Pod) -> bool:
    return (pod.status.phase if pod.status else None) in ("Running", "Pending", None)


def _ref(pod: client.V1Pod) -> str:
    return f"{pod.metadata.namespace}/{pod.metadata.name}"


def _skipped(pod: client.V1Pod) -> bool:
    """Pods a drain leaves alone (DaemonSet, mirror, finished, noderoll stage pods)."""
    meta = pod.metadata
    if any(owner.kind == "DaemonSet" for owner in meta.owner_references or []):
        return True
    if MIRROR_ANNOTATION in (meta.annotations or {}):
        return True
    if meta.namespace == PACKAGE_POD_NAMESPACE and (meta.labels or {}).get(STAGE_COMPONENT_LABEL) == STAGE_COMPONENT:
        return True
    return not _running(pod)


def _has_local_data(pod: client.V1Pod) -> bool:
    return any(volume.empty_dir is not None for volume in (pod.spec.volumes or []))


def _spent_in_earlier_attempts() -> float:
    """Seconds this activity already waited in earlier attempts (worker lost, API down).

    A wait's bound (`timeoutSeconds`) is one budget for the whole activity, not per attempt: without
    this, an apiserver outage that fails attempts could stretch a 600 s drain to five times that.
    `scheduled_time` is when the activity was first scheduled; attempt 1 has spent nothing.
    """
    info = activity.info()
    if info.attempt <= 1:
        return 0.0
    return max(0.0, (info.current_attempt_scheduled_time - info.scheduled_time).total_seconds())


class _Report:
    """Writes a wait's `noderoll.io/Draining` condition and Event when `DrainNotice` says so. I/O."""

    def __init__(self, node: str) -> None:
        info = activity.info()
        self.node = node
        # Stable across retries of the activity, new per window (activities.node_events).
        self.key = f"{info.workflow_run_id}/{info.activity_id}"
        self.notice = DrainNotice()
        self.writes = 0

    @property
    def reason(self) -> str | None:
        """The reason last written (None: nothing written yet)."""
        return self.notice.last[0] if self.notice.last else None

    def update(self, reason: DrainReason, message: str, event: str | None = None, count: int = 0) -> None:
        """Condition True with `reason` and `message` (and the wait's Event), when due."""
        now = time.monotonic()
        if not self.notice.due(now, reason, message):
            return
        uid = set_draining(self.node, True, reason.value, message, transition=not self.notice.active)
        self.writes += 1
        if event is not None:
            warning = reason is DrainReason.EVICTION_REFUSED
            record_event(self.node, NodeEvent(event, message, key=self.key, warning=warning), count or self.writes, uid)
        self.notice.written(now, reason, message)

    def finish(self, reason: DrainReason, message: str) -> None:
        """Condition False (only when this wait set it True)."""
        if self.notice.active:
            set_draining(self.node, False, reason.value, message, transition=True)
            self.notice.last = None

    def failed(self, message: str) -> None:
        """Condition False with `DrainFailed`, before the failure is raised; never masks it."""
        try:
            self.finish(DrainReason.DRAIN_FAILED, message)
        except Exception as err:  # noqa: BLE001 - the activity's own failure is what must surface
            log.warning("Draining condition of %s not ended: %s", self.node, err)


@activity.defn(name="wait_protected_pods")
@keep_alive
def wait_protected_pods(input: WaitProtectedPodsInput) -> WaitProtectedPodsResult:
    """Wait until no Running/Pending pod on the node matches the selectors; bounded by timeout_seconds."""
    selectors = [LabelSelector.model_validate(s) for s in input.selectors if s]
    selectors = [s for s in selectors if not s.is_empty()]
    started = time.monotonic() - _spent_in_earlier_attempts()
    waited_for: set[str] = set()
    report = _Report(input.node)
    on_node = _NodePods(input.node)
    while True:
        protected = sorted(
            _ref(pod)
            for pod in on_node.list()
            if _running(pod) and any(s.matches(pod.metadata.labels or {}) for s in selectors)
        )
        if not protected:
            report.finish(DrainReason.PROTECTED_PODS_FINISHED, "protected pods finished: " + ", ".join(sorted(waited_for)))
            return WaitProtectedPodsResult(time.monotonic() - started, sorted(waited_for))
        waited_for.update(protected)
        elapsed = time.monotonic() - started
        if elapsed > input.timeout_seconds:
            message = f"protected pods still running on {input.node} after {input.timeout_seconds}s: " + ", ".join(protected)
            report.failed(message)
            raise errors.fatal(message, errors.PROTECTED_PODS_TIMEOUT, {"pods": protected})
        # The condition and one Event (updated when the pods change), so `kubectl describe node`,
        # `noderoll nodes` and the Package status say why the window waits.
        report.update(DrainReason.WAITING_FOR_PROTECTED_PODS, protected_pods_message(protected), "WaitingForProtectedPods")
        beat({"waiting_for": protected, "elapsed_seconds": round(elapsed)})
        time.sleep(wait_slice(input.poll_seconds))


def _evict(pod: client.V1Pod, grace_period_seconds: int | None) -> bool:
    """Ask for an eviction; True when accepted or the pod is gone, False when a PDB refused (429)."""
    body: dict[str, Any] = {
        "apiVersion": policy_version(),
        "kind": "Eviction",
        "metadata": {"name": pod.metadata.name, "namespace": pod.metadata.namespace},
    }
    if grace_period_seconds is not None:
        body["deleteOptions"] = {"gracePeriodSeconds": grace_period_seconds}
    try:
        path = f"/api/v1/namespaces/{pod.metadata.namespace}/pods/{pod.metadata.name}/eviction"
        kube.request_json("POST", path, body)
        return True
    except ApiException as err:
        kind = kube.classify(err)
        if kind is kube.ApiErrorKind.NOT_FOUND:
            return True
        if kind is kube.ApiErrorKind.TOO_MANY_REQUESTS:
            return False
        kube.raise_for(err, f"evict pod {_ref(pod)}")


def _pdbs(namespace: str) -> list[dict[str, Any]]:
    path = f"/apis/{policy_version()}/namespaces/{namespace}/poddisruptionbudgets"
    try:
        body = kube.request_json("GET", path)
    except ApiException as err:
        kube.raise_for(err, f"list PodDisruptionBudgets in {namespace}")
    return list((body or {}).get("items") or [])


def pdbs_covering(pods: list[client.V1Pod]) -> list[PdbView]:
    """PDBs that select any of `pods`, with their status (allowed disruptions), sorted by name."""
    found: dict[str, PdbView] = {}
    for namespace in sorted({pod.metadata.namespace for pod in pods}):
        for pdb in _pdbs(namespace):
            selector = LabelSelector.model_validate(pdb.get("spec", {}).get("selector") or {})
            if selector.is_empty() or not any(
                pod.metadata.namespace == namespace and selector.matches(pod.metadata.labels or {}) for pod in pods
            ):
                continue
            view = pdb_view(pdb)
            found[view.name] = view
    return [found[k] for k in sorted(found)]


def blocking_pdbs(pods: list[client.V1Pod]) -> list[str]:
    """PDBs that select any of `pods`, described with their allowed disruptions."""
    return [view.describe() for view in pdbs_covering(pods)]


@activity.defn(name="drain_node")
@keep_alive
def drain_node(input: DrainNodeInput) -> DrainNodeResult:
    """Evict every evictable pod of the node and wait until they are gone; bounded by timeout_seconds.
    Once drained, create the window's first stage pod (`input.then`, ADR 0022)."""
    report = _Report(input.node)
    try:
        result = _drain(input, report)
    except ApplicationError as err:
        if err.non_retryable and err.type != errors.NODE_NOT_FOUND:
            report.failed(err.message)
        raise
    result.next_pod = prestart(input.then)
    return result


def _drain(input: DrainNodeInput, report: _Report) -> DrainNodeResult:
    started = time.monotonic() - _spent_in_earlier_attempts()
    result = DrainNodeResult()
    backoff = input.poll_seconds
    on_node = _NodePods(input.node)
    while True:
        pods = [pod for pod in on_node.list() if not _skipped(pod)]
        if not pods:
            result.seconds = time.monotonic() - started
            metrics.record_drain("drained", result.seconds)
            report.finish(DrainReason.DRAINED, f"evicted {len(result.evicted)} pod(s) in {result.seconds:.0f}s")
            return result
        if not input.delete_empty_dir_data:
            local = sorted(_ref(pod) for pod in pods if _has_local_data(pod))
            if local:
                metrics.record_drain("blocked", time.monotonic() - started)
                raise errors.fatal(
                    f"drain of {input.node} blocked: pods with emptyDir data (set drain.deleteEmptyDirData): "
                    + ", ".join(local),
                    errors.DRAIN_BLOCKED,
                    {"pods": local},
                )
        if report.reason is None:
            report.update(DrainReason.EVICTING, evicting_message(len(pods)))  # the window's stage is `drain`
        refused = _evict_round(input, pods, result)
        elapsed = time.monotonic() - started
        if elapsed > input.timeout_seconds:
            remaining = sorted(_ref(pod) for pod in pods)
            pdbs = blocking_pdbs(pods)
            metrics.record_drain("timeout", elapsed)
            raise errors.fatal(
                f"drain of {input.node} timed out after {input.timeout_seconds}s; blocking pods: "
                + ", ".join(remaining) + "; PodDisruptionBudgets: " + (", ".join(pdbs) or "none"),
                errors.DRAIN_TIMEOUT,
                {"pods": remaining, "pdbs": pdbs},
            )
        blocked = report.notice.eviction_round(time.monotonic(), bool(refused))
        details: dict[str, Any] = {"remaining": sorted(_ref(pod) for pod in pods), "refused": result.refused}
        if blocked:
            message = eviction_refused_message([_ref(p) for p in refused], pdbs_covering(refused))
            report.update(DrainReason.EVICTION_REFUSED, message, "DrainBlocked", count=result.refused)
            details["blocked"] = message
        elif report.reason == DrainReason.EVICTION_REFUSED.value:
            report.update(DrainReason.EVICTING, evicting_message(len(pods)))
        beat(details)
        # 429s back off exponentially (the PDB needs a replacement pod to become ready first);
        # pods merely terminating are polled at the base interval.
        backoff = min(backoff * 2, MAX_BACKOFF_SECONDS) if refused else input.poll_seconds
        time.sleep(wait_slice(backoff))


def _evict_round(input: DrainNodeInput, pods: list[client.V1Pod], result: DrainNodeResult) -> list[client.V1Pod]:
    """Ask to evict every pod not yet terminating; returns the pods whose eviction was refused (429)."""
    refused = []
    for pod in pods:
        if pod.metadata.deletion_timestamp is not None:
            continue  # evicted already, terminating gracefully
        if _evict(pod, input.grace_period_seconds):
            if _ref(pod) not in result.evicted:
                result.evicted.append(_ref(pod))
        else:
            refused.append(pod)
            metrics.record_eviction_retry("pdb")
    result.refused += len(refused)
    return refused

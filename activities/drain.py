"""Drain activities: wait for protected pods, then evict the node's pods. Does I/O.

`wait_protected_pods` waits (bounded) while pods matching a Package's `podNonInterruptLabels` run on
the node. `drain_node` evicts through the Eviction API, so PodDisruptionBudgets are enforced by the
apiserver: a 429 means "not now" and is retried with backoff until `timeoutSeconds`; on timeout the
failure names the pods still there and the PDBs that cover them. Skipped like `kubectl drain`:
DaemonSet pods, mirror pods, finished pods and noderoll's own stage pods. Pods with emptyDir data
block the drain unless `deleteEmptyDirData`. Eviction speaks `policy/v1` and falls back to
`policy/v1beta1` when the apiserver does not serve v1 (Kubernetes < 1.22). With a policy's drain rules
(`spec.workloads.rules`, `planning.node.drain_rules` decides every round) pods are also waited for
(`WaitForCompletion`, reason `WaitingForCompletion`), deleted without the Eviction API (`Delete`) or
left (`Leave`); each blocking pod is named with its rule; pods that came after the window's eviction
notice get their own (`noderoll.io/eviction-at`) and are not evicted before it.

Both report while they wait, not only when they give up (`_Report`, decisions in
`planning.node.drain`): the node condition `noderoll.io/Draining` (True while evicting, reason
`EvictionRefused` once PDBs refused for `BLOCKED_AFTER_SECONDS`, `WaitingForProtectedPods`; False
when done), one Event per node and reason updated in place by every wait, and the blockers in
the heartbeat details. These two activities are the only writers of that condition.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime, timedelta
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
from api.selectors import LabelSelector
from api.workloads import DrainRule
from kube.node_pods import NodePods, pod_facts, set_eviction_at
from planning.node.drain import (
    DrainNotice,
    PdbView,
    evicting_message,
    eviction_refused_message,
    pdb_view,
    protected_pods_message,
)
from planning.node.drain_rules import (
    DrainRound,
    PodFacts,
    RoundInput,
    completion_message,
    described,
    drain_bound,
    plan_round,
)
from protocol import errors
from protocol.activity_refs import DRAIN_NODE, WAIT_PROTECTED_PODS
from protocol.node_activities import (
    DrainNodeInput,
    DrainNodeResult,
    NodeEvent,
    WaitProtectedPodsInput,
    WaitProtectedPodsResult,
)

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


def _running(pod: client.V1Pod) -> bool:
    return (pod.status.phase if pod.status else None) in ("Running", "Pending", None)


def _ref(pod: client.V1Pod) -> str:
    return f"{pod.metadata.namespace}/{pod.metadata.name}"


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


@activity.defn(name=WAIT_PROTECTED_PODS.name)
@keep_alive
def wait_protected_pods(input: WaitProtectedPodsInput) -> WaitProtectedPodsResult:
    """Wait until no Running/Pending pod on the node matches the selectors; bounded by timeout_seconds."""
    selectors = [LabelSelector.model_validate(s) for s in input.selectors if s]
    selectors = [s for s in selectors if not s.is_empty()]
    started = time.monotonic() - _spent_in_earlier_attempts()
    waited_for: set[str] = set()
    report = _Report(input.node)
    on_node = NodePods(input.node)
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


@activity.defn(name=DRAIN_NODE.name)
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
    """The drain's rounds (planning.node.drain_rules.plan_round decides each) until no pod is left to wait for."""
    spent = _spent_in_earlier_attempts()
    started = time.monotonic() - spent
    # WaitForCompletion counts from the drain's first attempt, on the wall clock the pods' annotations use.
    began = datetime.now(UTC) - timedelta(seconds=spent)
    rules = [DrainRule.model_validate(r) for r in input.rules]
    bound = drain_bound(input.timeout_seconds, rules, input.notice_seconds)
    result = DrainNodeResult()
    backoff = input.poll_seconds
    on_node = NodePods(input.node)
    while True:
        listed = {_ref(pod): pod for pod in on_node.list()}
        plan = plan_round(RoundInput([pod_facts(p) for p in listed.values()], rules, began, datetime.now(UTC),
                                     input.notice_seconds))
        if plan.done:
            result.seconds = time.monotonic() - started
            metrics.record_drain("drained", result.seconds)
            report.finish(DrainReason.DRAINED, f"evicted {len(result.evicted)} pod(s) in {result.seconds:.0f}s")
            return result
        if not input.delete_empty_dir_data and plan.local:
            local = [p.ref for p in plan.local]
            metrics.record_drain("blocked", time.monotonic() - started)
            raise errors.fatal(
                f"drain of {input.node} blocked: pods with emptyDir data (set drain.deleteEmptyDirData): "
                + ", ".join(local),
                errors.DRAIN_BLOCKED,
                {"pods": local},
            )
        if report.reason is None:
            report.update(DrainReason.EVICTING, evicting_message(len(plan.remaining)))  # the window's stage is `drain`
        for ref, at in plan.announce.items():
            set_eviction_at(ref, at)  # came after the window's notice: its own notice first
        _delete_round(plan.delete, result)
        refused = _evict_round(input, [listed[p.ref] for p in plan.evict], result)
        elapsed = time.monotonic() - started
        if elapsed > bound:
            metrics.record_drain("timeout", elapsed)
            raise _timed_out(input.node, bound, plan, [listed[p.ref] for p in plan.remaining])
        _report_round(report, plan, refused, result)
        # 429s back off exponentially (the PDB needs a replacement pod to become ready first);
        # pods merely terminating are polled at the base interval.
        backoff = min(backoff * 2, MAX_BACKOFF_SECONDS) if refused else input.poll_seconds
        time.sleep(wait_slice(backoff))


def _timed_out(node: str, bound: int, plan: DrainRound, pods: list[client.V1Pod]) -> ApplicationError:
    """The drain's failure: the pods still there (with the rule each waits on) and the PDBs covering them."""
    remaining = sorted(p.ref for p in plan.remaining)
    pdbs = blocking_pdbs(pods)
    return errors.fatal(
        f"drain of {node} timed out after {bound}s; blocking pods: "
        + ", ".join(described(remaining, plan.rules)) + "; PodDisruptionBudgets: " + (", ".join(pdbs) or "none"),
        errors.DRAIN_TIMEOUT,
        {"pods": remaining, "pdbs": pdbs},
    )


def _report_round(report: _Report, plan: DrainRound, refused: list[client.V1Pod], result: DrainNodeResult) -> None:
    """The Draining condition, its Event and the heartbeat after a round: refused evictions (once blocked),
    pods a WaitForCompletion rule waits for, or evicting."""
    blocked = report.notice.eviction_round(time.monotonic(), bool(refused))
    details: dict[str, Any] = {"remaining": sorted(p.ref for p in plan.remaining), "refused": result.refused}
    if blocked:
        message = eviction_refused_message(described([_ref(p) for p in refused], plan.rules), pdbs_covering(refused))
        report.update(DrainReason.EVICTION_REFUSED, message, "DrainBlocked", count=result.refused)
        details["blocked"] = message
    elif plan.completing:
        message = completion_message(plan.completing)
        report.update(DrainReason.WAITING_FOR_COMPLETION, message, "WaitingForCompletion")
        details["waiting"] = message
    elif report.reason in (DrainReason.EVICTION_REFUSED.value, DrainReason.WAITING_FOR_COMPLETION.value):
        report.update(DrainReason.EVICTING, evicting_message(len(plan.remaining)))
    beat(details)


def _delete_round(pods: list[PodFacts], result: DrainNodeResult) -> None:
    """Delete each pod (rule action `Delete`) with its own grace period, without the Eviction API."""
    for pod in pods:
        try:
            kube.core().delete_namespaced_pod(pod.name, pod.namespace)
        except ApiException as err:
            if not kube.is_not_found(err):
                kube.raise_for(err, f"delete pod {pod.ref}")
        if pod.ref not in result.deleted:
            result.deleted.append(pod.ref)


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

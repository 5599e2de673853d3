"""The eviction notice of a node window (`spec.workloads.noticeSeconds`): give it, and take it back. Does I/O.

`announce_eviction` runs after the window's cordon (no new pod lands) and before its drain: each pod the
drain will evict or delete gets `noderoll.io/eviction-at` (decided by `planning.node.eviction_notice.notices`),
then the node the condition `noderoll.io/MaintenanceScheduled=True` and an Event `EvictionScheduled`.
Idempotent: a retried attempt writes the same values (the time comes from the workflow). `withdraw_notice`
(the window's close, activities/window_close.py) removes the annotation from every pod still on the node
and the condition from the node; a node gone has nothing to withdraw.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from kubernetes.client.exceptions import ApiException
from temporalio import activity

import kube
from activities.node_events import emit_event
from activities.nodes import node_condition
from api.keys import CONDITION_MAINTENANCE_SCHEDULED
from api.workloads import DrainRule
from kube.node_pods import NodePods, pod_facts, set_eviction_at
from kube.nodes import node_not_found
from planning.node.eviction_notice import EVENT_SCHEDULED, REASON_SCHEDULED, condition_message, notices
from protocol.activity_refs import ANNOUNCE_EVICTION
from protocol.node_activities import AnnounceEvictionInput, AnnounceEvictionResult, NodeEvent

STRATEGIC_PATCH = "application/strategic-merge-patch+json"


def _patch_condition(node: str, condition: dict[str, Any]) -> str:
    """Write (or with `$patch: delete`, remove) one node condition; the node's uid."""
    try:
        written = kube.untyped(kube.core().patch_node_status, node, {"status": {"conditions": [condition]}},
                               _content_type=STRATEGIC_PATCH)
    except ApiException as err:
        if kube.is_not_found(err):
            raise node_not_found(node) from err
        kube.raise_for(err, f"patch condition {CONDITION_MAINTENANCE_SCHEDULED} of node {node}")
    return str((written.get("metadata") or {}).get("uid") or "")


@activity.defn(name=ANNOUNCE_EVICTION.name)
def announce_eviction(input: AnnounceEvictionInput) -> AnnounceEvictionResult:
    """Annotate every pod the drain will evict with its eviction time, then set the node's condition."""
    rules = [DrainRule.model_validate(r) for r in input.rules]
    notice_at = datetime.fromisoformat(input.notice_at)
    told = notices([pod_facts(p) for p in NodePods(input.node).list()], rules, notice_at)
    result = AnnounceEvictionResult()
    for ref, at in told.items():
        if set_eviction_at(ref, at):
            result.pods[ref] = at
        activity.heartbeat(ref)
    message = condition_message(notice_at, len(result.pods), input.fleet)
    uid = _patch_condition(input.node, node_condition(CONDITION_MAINTENANCE_SCHEDULED, True, REASON_SCHEDULED, message))
    info = activity.info()
    emit_event(input.node, NodeEvent(EVENT_SCHEDULED, message, key=f"{info.workflow_run_id}/{info.activity_id}"), uid)
    return result


def withdraw_notice(node: str) -> None:
    """Remove `noderoll.io/eviction-at` from the node's pods and its MaintenanceScheduled condition."""
    for pod in NodePods(node).list():
        if pod_facts(pod).eviction_at:
            set_eviction_at(f"{pod.metadata.namespace}/{pod.metadata.name}", None)
    _patch_condition(node, {"type": CONDITION_MAINTENANCE_SCHEDULED, "$patch": "delete"})

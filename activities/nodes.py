"""Node activities: read, cordon, uncordon, write noderoll state (+ conditions, Events). Does I/O.

Also the node writes of the drain activities (activities/drain.py, their only caller, so each key
keeps one writer): the `noderoll.io/Draining` condition (`set_draining`). Events on Nodes are
aggregated per (node, reason) by `activities.node_events` (module `activities.node_events`).

Each is idempotent. Ownership of a cordon is recorded in `noderoll.io/cordoned-by`: `cordon_node`
never claims a node someone else cordoned, and `uncordon_node` only undoes our own cordon, so a node
an operator cordoned stays cordoned (both rules: `kube.cordon`). Metadata writes are merge patches
carrying the resourceVersion just read (`kube.nodes.patch_node_with_retry`): a concurrent edit by
someone else makes the apiserver answer 409, and we re-read and re-apply instead of overwriting blindly.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio import activity

import kube
from activities.node_events import emit_event, emit_events
from api.keys import (
    CONDITION_DRAINING,
    CONDITION_ERRORING,
    CONDITION_STATE_MALFORMED,
    CONDITION_UPDATING,
    CORDONED_BY_ANNOTATION,
    CORDONED_BY_VALUE,
    NODE_STATE_ANNOTATION,
    NODE_STATUS_LABEL,
    SKIPPED_LABEL,
)
from kube.cordon import cordon_patch, lift_own_cordon
from kube.node_snapshot import node_facts
from kube.nodes import node_not_found, patch_node_with_retry
from kube.nodes import read_node as read_node_or_fail
from planning.node.node_marks import READABLE_MESSAGE, REASON_READABLE
from protocol.activity_refs import CORDON_NODE, READ_NODE, UNCORDON_NODE, WRITE_NODE_STATE
from protocol.node_activities import (
    CordonNodeResult,
    NodeEvent,
    NodeInput,
    ReadNodeResult,
    UncordonNodeResult,
    WriteNodeStateInput,
    cordon_view,
)


def get_node(name: str) -> client.V1Node:
    """Read the Node; a missing one is the non-retryable `NodeNotFound`."""
    return read_node_or_fail(name)


def snapshot(node: client.V1Node) -> ReadNodeResult:
    """The window's view of a Node object (pure conversion, `kube.node_snapshot`)."""
    facts = node_facts(node)
    return ReadNodeResult(name=facts.name, unschedulable=facts.unschedulable, cordoned_by=facts.cordoned_by,
                          boot_id=facts.boot_id, ready=facts.ready, labels=facts.labels, taints=facts.taints,
                          state_annotation=facts.state_annotation,
                          resource_version=node.metadata.resource_version or "")


def seen_node(seen: ReadNodeResult | None) -> client.V1Node | None:
    """The Node in what `cordon_node`'s build reads (`cordon_view`: the cordon, its owner and the
    resourceVersion); None without a resourceVersion (a result recorded before it was carried). Pure."""
    if seen is None or not seen.resource_version:
        return None
    annotations = {CORDONED_BY_ANNOTATION: seen.cordoned_by} if seen.cordoned_by else None
    return client.V1Node(
        metadata=client.V1ObjectMeta(name=seen.name, annotations=annotations, resource_version=seen.resource_version),
        spec=client.V1NodeSpec(unschedulable=seen.unschedulable or None))


@activity.defn(name=READ_NODE.name)
def read_node(input: NodeInput) -> ReadNodeResult:
    """Snapshot of the node (missing node: non-retryable `NodeNotFound`)."""
    return snapshot(get_node(input.node))


@activity.defn(name=CORDON_NODE.name)
def cordon_node(input: NodeInput) -> CordonNodeResult:
    """Mark the node unschedulable and record that noderoll did it; leave someone else's cordon alone."""
    outcome = CordonNodeResult(cordoned_by_noderoll=False)

    def build(node: client.V1Node) -> dict[str, Any] | None:
        facts = node_facts(node)
        outcome.was_unschedulable = facts.unschedulable
        # Already cordoned: ours (a retried activity) or someone else's (we must not take it over).
        outcome.cordoned_by_noderoll = not facts.unschedulable or facts.cordoned_by == CORDONED_BY_VALUE
        return cordon_patch(facts)

    node = patch_node_with_retry(input.node, build, seen_node(input.seen))
    if outcome.cordoned_by_noderoll and not outcome.was_unschedulable:
        # Keyed by the activity's identity: stable across retries of this activity, new per window.
        info = activity.info()
        key = f"{info.workflow_run_id}/{info.activity_id}"
        emit_event(input.node, NodeEvent("Cordoned", "noderoll cordoned the node for a node window", key=key),
                   node.metadata.uid or "")
    return outcome


@activity.defn(name=UNCORDON_NODE.name)
def uncordon_node(input: NodeInput) -> UncordonNodeResult:
    """Undo noderoll's own cordon (annotation present); a node cordoned by anyone else stays cordoned
    (`kube.cordon.lift_own_cordon`)."""
    return UncordonNodeResult(uncordoned=lift_own_cordon(input.node))


def node_condition(kind: str, on: bool, reason: str, message: str) -> dict[str, Any]:
    """A NodeCondition as patch JSON (message cut to 1,024 characters), stamped now."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "type": kind,
        "status": "True" if on else "False",
        "reason": reason,
        "message": message[:1024],
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }


@activity.defn(name=WRITE_NODE_STATE.name)
def write_node_state(input: WriteNodeStateInput) -> ReadNodeResult:
    """Write one state transition (`write_state`); the node as written, in what `cordon_node` reads
    (`cordon_view`: its cordon and resourceVersion), so the cordon after it needs no read."""
    return cordon_view(snapshot(write_state(input)))


def write_state(input: WriteNodeStateInput, uncordon: bool = False) -> client.V1Node:
    """Write one state transition: the conditions, then annotation + status label (one patch), Events;
    with `uncordon`, the same patch lifts noderoll's own cordon (`close_window`).

    The conditions go first: whoever reads the record (annotation, label) then sees conditions that
    agree with it. Written the other way round, a reader between the two requests saw a node labelled
    `erroring` whose `noderoll.io/Erroring` condition was still False (the bad-input tier, loaded).
    """
    reason = input.status.replace("-", " ").title().replace(" ", "")
    conditions = [
        node_condition(CONDITION_UPDATING, input.updating, reason, input.message or input.status),
        node_condition(CONDITION_ERRORING, input.erroring, reason, input.message or input.status),
    ]
    if input.state_annotation is not None:
        # The window writes the annotation now, so it reads (planning/node/node_marks.py: the other writer).
        conditions.append(node_condition(CONDITION_STATE_MALFORMED, False, REASON_READABLE, READABLE_MESSAGE))
    try:
        # Strategic merge: NodeStatus.conditions merge by `type`, so the kubelet's conditions stay.
        kube.untyped(
            kube.core().patch_node_status,
            input.node,
            {"status": {"conditions": conditions}},
            _content_type="application/strategic-merge-patch+json",
        )
    except ApiException as err:
        if kube.is_not_found(err):
            raise node_not_found(input.node) from err
        kube.raise_for(err, f"patch conditions of node {input.node}")
    # `noderoll.io/skipped` goes with every state write but a skipping window's last (a merge patch
    # removing an absent label changes nothing).
    metadata: dict[str, Any] = {"labels": {NODE_STATUS_LABEL: input.status, SKIPPED_LABEL: input.skipped or None}}
    if input.state_annotation is not None:
        metadata["annotations"] = {NODE_STATE_ANNOTATION: input.state_annotation}
    clear = [*input.clear_annotations, *([CORDONED_BY_ANNOTATION] if uncordon else [])]
    if clear:
        metadata.setdefault("annotations", {}).update(dict.fromkeys(clear))
    body: dict[str, Any] = {"metadata": metadata}
    if uncordon:
        # noderoll's own cordon (the window knows it cordoned): lifted in the same patch, as
        # `uncordon_node` lifts it (the annotation gone, `unschedulable` unset).
        body["spec"] = {"unschedulable": None}
    # No read first and no resourceVersion: the node workflow is the only writer of these two keys
    # and the patch does not depend on the node's content (one request instead of two).
    try:
        written = kube.core().patch_node(input.node, body, _content_type="application/merge-patch+json")
    except ApiException as err:
        if kube.is_not_found(err):
            raise node_not_found(input.node) from err
        kube.raise_for(err, f"patch node {input.node}")
    # One Event per (node, reason), updated in place (activities.node_events): a node's Events do
    # not grow with the windows run on it.
    emit_events(input.node, list(input.events), written.metadata.uid or "")
    return written


def set_draining(node: str, draining: bool, reason: str, message: str, transition: bool) -> str:
    """Write the `noderoll.io/Draining` condition; `transition`: its status changes now (sets the time).
    Returns the node's uid (for its Events)."""
    condition = node_condition(CONDITION_DRAINING, draining, reason, message)
    if not transition:
        del condition["lastTransitionTime"]  # strategic merge keeps the stored one
    try:
        written = kube.untyped(kube.core().patch_node_status, node, {"status": {"conditions": [condition]}},
                               _content_type="application/strategic-merge-patch+json")
    except ApiException as err:
        if kube.is_not_found(err):
            raise node_not_found(node) from err
        kube.raise_for(err, f"patch condition {CONDITION_DRAINING} of node {node}")
    return str((written.get("metadata") or {}).get("uid") or "")

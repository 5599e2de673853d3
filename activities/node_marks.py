"""`mark_blocked_nodes`: show on nodes that no window can update that they are blocked. Does I/O.

The decision is pure (`planning.node.node_marks.decide_mark`), made again here on the node as read right
before the write; every write carries that read's resourceVersion, so a node written by anyone in
between (a node window starting: label `in-progress`) is read and decided again instead of being
overwritten (409). Nothing is written while a window runs on the node: the node workflow stays the
single writer of a node in a window. Per node, in this order: the `noderoll.io/status` label (a
merge patch), the condition `noderoll.io/StateMalformed` (a strategic merge patch of the status:
conditions merge by type, so the kubelet's and the window's stay), then the Event (one per node and
reason, `activities.node_events`; keyed by a digest of the annotation, so a repeated mark counts once). A node that no longer exists is
skipped. Idempotent: a repeated call finds everything shown already and writes nothing.
"""

from __future__ import annotations

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import TypeAdapter
from temporalio import activity

import kube
from activities.node_events import emit_event
from activities.nodes import node_condition
from api.keys import CONDITION_STATE_MALFORMED, NODE_STATUS_LABEL
from kube.node_snapshot import node_facts, node_view
from kube.nodes import CONFLICT_RETRIES, find_node
from planning.node.node_marks import NodeMark, decide_mark
from planning.node.targets import NodeView
from protocol.activities import MarkBlockedNodesInput, MarkBlockedNodesResult
from protocol.activity_refs import MARK_BLOCKED_NODES
from protocol.node_activities import NodeEvent

MERGE_PATCH = "application/merge-patch+json"
# The marks travel as JSON (`protocol.activities.MarkBlockedNodesInput`).
_MARKS = TypeAdapter(list[NodeMark])
STRATEGIC_PATCH = "application/strategic-merge-patch+json"


def marked_view(node: client.V1Node) -> NodeView:
    """The parts of a Node that `decide_mark` reads (the whole state annotation). Pure conversion."""
    return node_view(node_facts(node))


def _mark_one(mark: NodeMark) -> bool:
    """Decide on a fresh read and write; True when something was written."""
    core = kube.core()
    for _ in range(CONFLICT_RETRIES):
        node = find_node(mark.node)
        if node is None:
            return False
        write = decide_mark(mark, marked_view(node))
        if write is None:
            return False
        version = node.metadata.resource_version
        try:
            if write.set_label:
                patch = {"metadata": {"labels": {NODE_STATUS_LABEL: write.label}, "resourceVersion": version}}
                version = core.patch_node(mark.node, patch, _content_type=MERGE_PATCH).metadata.resource_version
            if write.malformed is not None:
                condition = node_condition(CONDITION_STATE_MALFORMED, write.malformed, write.condition_reason,
                                           write.condition_message)
                patch = {"metadata": {"resourceVersion": version}, "status": {"conditions": [condition]}}
                core.patch_node_status(mark.node, patch, _content_type=STRATEGIC_PATCH)
        except ApiException as err:
            if kube.is_conflict(err):
                continue  # written in between (a window starting?): read and decide again
            if kube.is_not_found(err):
                return False
            kube.raise_for(err, f"mark node {mark.node} {mark.kind.value}")
        if write.event is not None:
            event = write.event
            emit_event(mark.node, NodeEvent(event.reason, event.message, event.key, event.warning),
                       node.metadata.uid or "")
        return True
    raise RuntimeError(f"mark node {mark.node}: still conflicting after {CONFLICT_RETRIES} attempts")


@activity.defn(name=MARK_BLOCKED_NODES.name)
def mark_blocked_nodes(input: MarkBlockedNodesInput) -> MarkBlockedNodesResult:
    """Write each mark that still applies (module docstring); heartbeats once per node."""
    result = MarkBlockedNodesResult()
    for mark in _MARKS.validate_python(input.marks):
        if _mark_one(mark):
            result.written.append(mark.node)
        activity.heartbeat(mark.node)
    return result

"""Snapshot of the fleet's Nodes for target selection. Does I/O (Kubernetes API, read only).

`list_target_nodes` lists Nodes (paged) and returns, per node, only what target selection and
batch planning read: name, labels, taints, creation time and the raw `noderoll.io/state`
annotation. The decision (selector, ignore label, taints, done nodes) is pure:
`planning.targets.select_targets`.
"""

from __future__ import annotations

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio import activity

from activities import kube
from activities.io import ListTargetNodesInput, ListTargetNodesResult, NodeSnapshot
from api.keys import NODE_STATE_ANNOTATION

PAGE_SIZE = 500


def node_snapshot(node: client.V1Node) -> NodeSnapshot:
    """The parts of a V1Node that target selection needs (also used by the bridge)."""
    meta, spec = node.metadata, node.spec
    taints = [
        {"key": t.key or "", "value": t.value or "", "effect": t.effect or ""} for t in (spec.taints or [])
    ]
    return NodeSnapshot(
        name=meta.name,
        labels=dict(meta.labels or {}),
        taints=taints,
        created=meta.creation_timestamp.isoformat() if meta.creation_timestamp else "",
        state_annotation=(meta.annotations or {}).get(NODE_STATE_ANNOTATION, ""),
    )


@activity.defn(name="list_target_nodes")
def list_target_nodes(input: ListTargetNodesInput) -> ListTargetNodesResult:
    """Every Node (narrowed by `input.label_selector` when given), sorted by name."""
    nodes: list[NodeSnapshot] = []
    token: str | None = None
    while True:
        try:
            page = kube.core().list_node(
                label_selector=input.label_selector or None, limit=PAGE_SIZE, _continue=token
            )
        except ApiException as err:
            kube.raise_for(err, "list nodes")
        nodes.extend(node_snapshot(n) for n in page.items)
        activity.heartbeat(len(nodes))
        token = page.metadata._continue
        if not token:
            break
    return ListTargetNodesResult(nodes=sorted(nodes, key=lambda n: n.name))

"""Snapshot of the fleet's Nodes for target selection. Does I/O (Kubernetes API, read only).

`list_target_nodes` lists Nodes (paged) and returns, per node, only what target selection and
batch planning read: name, labels, taints, creation time and the raw `noderoll.io/state`
annotation (reduced to the package's entry and those of its dependencies). The decision (selector, ignore label, taints, done nodes) is pure:
`planning.targets.select_targets`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio import activity

from activities import kube
from activities.io import ListTargetNodesInput, ListTargetNodesResult, NodeSnapshot
from api.keys import NODE_STATE_ANNOTATION

PAGE_SIZE = 500


def _only_packages(raw: str, packages: Sequence[str]) -> str:
    """The state annotation reduced to the entries of `packages`; unparseable text is kept as it is."""
    try:
        data = json.loads(raw)
        entries = {p: data["packages"].get(p) for p in packages}
    except (ValueError, KeyError, TypeError, AttributeError):
        return raw
    return json.dumps({"packages": {p: e for p, e in entries.items() if e is not None}}, sort_keys=True)


def node_snapshot(node: client.V1Node, package: str = "", also: Sequence[str] = ()) -> NodeSnapshot:
    """The parts of a V1Node that target selection needs (also used by the bridge)."""
    meta, spec = node.metadata, node.spec
    taints = [
        {"key": t.key or "", "value": t.value or "", "effect": t.effect or ""} for t in (spec.taints or [])
    ]
    raw = (meta.annotations or {}).get(NODE_STATE_ANNOTATION, "")
    return NodeSnapshot(
        name=meta.name,
        labels=dict(meta.labels or {}),
        taints=taints,
        created=meta.creation_timestamp.isoformat() if meta.creation_timestamp else "",
        state_annotation=_only_packages(raw, [package, *also]) if package and raw else raw,
    )


def list_node_snapshots(label_selector: str = "", package: str = "", also: Sequence[str] = ()) -> list[NodeSnapshot]:
    """Every Node (narrowed by `label_selector` when given) as snapshots, sorted by name; heartbeats per page."""
    nodes: list[NodeSnapshot] = []
    token: str | None = None
    while True:
        try:
            page = kube.core().list_node(label_selector=label_selector or None, limit=PAGE_SIZE, _continue=token)
        except ApiException as err:
            kube.raise_for(err, "list nodes")
        nodes.extend(node_snapshot(n, package, also) for n in page.items)
        activity.heartbeat(len(nodes))
        token = page.metadata._continue
        if not token:
            break
    return sorted(nodes, key=lambda n: n.name)


@activity.defn(name="list_target_nodes")
def list_target_nodes(input: ListTargetNodesInput) -> ListTargetNodesResult:
    """Every Node (narrowed by `input.label_selector` when given), sorted by name."""
    return ListTargetNodesResult(nodes=list_node_snapshots(input.label_selector, input.package, input.also))

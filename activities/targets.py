"""Snapshot of the fleet's Nodes for target selection. Does I/O (Kubernetes API, read only).

`list_target_nodes` lists Nodes (paged) and returns, per node, only what target selection and
batch planning read: name, labels, taints, creation time, the raw `noderoll.io/state`
annotation (reduced to the package's entry and those of its dependencies; kept whole when it
cannot be read, so the rollout holds the node as its node workflow would), the `noderoll.io/status`
label and whether `noderoll.io/StateMalformed` is True (what `planning.node_marks` compares with).
The decision (selector, ignore label, taints, done nodes) is pure: `planning.targets.select_targets`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio import activity

import kube
from activities.io import ListTargetNodesInput, ListTargetNodesResult, NodeSnapshot
from api.keys import CONDITION_STATE_MALFORMED, NODE_STATE_ANNOTATION, NODE_STATUS_LABEL
from api.node_state import parse_node_state

PAGE_SIZE = 500


def _only_packages(raw: str, packages: Sequence[str]) -> str:
    """The state annotation reduced to the entries of `packages`; an unreadable one is kept as it is.

    Unreadable means anywhere, not only in these entries: the node workflow reads the whole
    annotation and holds the node, so the rollout must see the same garbage.
    """
    if parse_node_state(raw)[1] is not None:
        return raw
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
    conditions = (node.status.conditions if node.status else None) or []
    return NodeSnapshot(
        name=meta.name,
        labels=dict(meta.labels or {}),
        taints=taints,
        created=meta.creation_timestamp.isoformat() if meta.creation_timestamp else "",
        state_annotation=_only_packages(raw, [package, *also]) if package and raw else raw,
        status_label=(meta.labels or {}).get(NODE_STATUS_LABEL, ""),
        state_malformed=any(c.type == CONDITION_STATE_MALFORMED and c.status == "True" for c in conditions),
    )


def list_node_snapshots(label_selector: str = "", package: str = "", also: Sequence[str] = ()) -> list[NodeSnapshot]:
    """Every Node (narrowed by `label_selector` when given) as snapshots, sorted by name; heartbeats per page."""
    nodes: list[NodeSnapshot] = []
    token: str | None = None
    while True:
        # From the apiserver's watch cache (one answer, `limit` ignored there): fresh enough, since
        # every window reads its node again before it plans (docs/architecture.md, "Reads").
        version = {"_continue": token} if token else {"resource_version": "0"}
        try:
            page = kube.core().list_node(label_selector=label_selector or None, limit=PAGE_SIZE, **version)
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

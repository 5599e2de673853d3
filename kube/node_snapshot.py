"""The one Node snapshot (`NodeFacts`): what noderoll reads of a Node object, and the one converter. Pure.

`node_facts` takes a Node as the typed client returns it (`V1Node`: reads, lists) or as its API
JSON (the bridge's watch cache), and answers a `NodeFacts` with every part any caller reads:
the node window (`activities.nodes.snapshot`: cordon, boot id, Ready), the fleet's target selection
(`activities.fleet`), the node marks (`activities.node_marks`) and the bridge
(`crd_bridge.node_changes`). `node_view` turns it into the pure core's `planning.node.targets.NodeView`.
Taints are `{"key", "value", "effect"}` with "" for an absent part. The node window's wire type
`protocol.node_activities.ReadNodeResult` is a projection of it (`activities.nodes.snapshot`;
workflows import the wire types, so they cannot import this module).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from api.keys import (
    CONDITION_STATE_MALFORMED,
    CORDONED_BY_ANNOTATION,
    NODE_STATE_ANNOTATION,
    NODE_STATUS_LABEL,
)
from planning.node.targets import NodeView


@dataclass
class NodeFacts:
    """One Node as noderoll sees it, observed once: what target selection and the node marks read,
    and what the node window reads besides."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    # Each taint as {"key", "value", "effect"}.
    taints: list[dict[str, str]] = field(default_factory=list)
    created: str = ""
    # The raw `noderoll.io/state` annotation ("" when absent); parsed by the pure core.
    state_annotation: str = ""
    # The `noderoll.io/status` label ("" when absent) and whether `noderoll.io/StateMalformed` is True.
    status_label: str = ""
    state_malformed: bool = False
    unschedulable: bool = False
    # Value of `noderoll.io/cordoned-by` ("" when absent).
    cordoned_by: str = ""
    boot_id: str = ""
    ready: bool = False
    # `status.allocatable`: resource -> quantity (what capacity floors count).
    allocatable: dict[str, str] = field(default_factory=dict)


def _json_parts(node: client.V1Node) -> dict[str, Any]:
    """The parts of a V1Node that `node_facts` reads, in the API JSON shape (no full serialisation)."""
    meta, spec, status = node.metadata, node.spec, node.status
    info = status.node_info if status else None
    return {
        "metadata": {
            "name": meta.name,
            "labels": meta.labels,
            "annotations": meta.annotations,
            "creationTimestamp": meta.creation_timestamp.isoformat() if meta.creation_timestamp else "",
        },
        "spec": {
            "unschedulable": bool(spec and spec.unschedulable),
            "taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in (spec.taints if spec else None) or []],
        },
        "status": {
            "conditions": [{"type": c.type, "status": c.status} for c in (status.conditions if status else None) or []],
            "nodeInfo": {"bootID": info.boot_id if info else ""},
            "allocatable": dict(status.allocatable or {}) if status else {},
        },
    }


def _condition(conditions: list[Mapping[str, Any]], kind: str) -> str:
    return next((str(c.get("status") or "") for c in conditions if c.get("type") == kind), "")


def node_facts(node: client.V1Node | Mapping[str, Any]) -> NodeFacts:
    """The snapshot of a Node object, typed (`V1Node`) or API JSON."""
    obj = _json_parts(node) if isinstance(node, client.V1Node) else node
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    labels = dict(meta.get("labels") or {})
    annotations = meta.get("annotations") or {}
    conditions = status.get("conditions") or []
    return NodeFacts(
        name=str(meta.get("name") or ""),
        labels=labels,
        taints=[{"key": str(t.get("key") or ""), "value": str(t.get("value") or ""),
                 "effect": str(t.get("effect") or "")} for t in spec.get("taints") or []],
        created=str(meta.get("creationTimestamp") or ""),
        state_annotation=str(annotations.get(NODE_STATE_ANNOTATION) or ""),
        status_label=labels.get(NODE_STATUS_LABEL, ""),
        state_malformed=_condition(conditions, CONDITION_STATE_MALFORMED) == "True",
        unschedulable=bool(spec.get("unschedulable")),
        cordoned_by=str(annotations.get(CORDONED_BY_ANNOTATION) or ""),
        boot_id=str((status.get("nodeInfo") or {}).get("bootID") or ""),
        ready=_condition(conditions, "Ready") == "True",
        allocatable={str(k): str(v) for k, v in (status.get("allocatable") or {}).items()},
    )


def node_view(node: NodeFacts, maintenance: str = "") -> NodeView:
    """The pure core's view of a snapshot (target selection, node marks, the bridge's decisions);
    `maintenance`: the NodeMaintenance of another requestor naming it (`kube.node_maintenance`)."""
    return NodeView(node.name, node.labels, node.taints, node.state_annotation, node.status_label,
                    node.state_malformed, node.ready, node.unschedulable, node.allocatable, maintenance)

"""noderoll's cordon of a Node: claimed with `noderoll.io/cordoned-by`, lifted only when it is ours. Does I/O.

Ownership of a cordon is recorded in the annotation `noderoll.io/cordoned-by` (DESIGN.md, contract):
noderoll never claims a node someone else cordoned, and lifts only its own cordon, so a node an
operator cordoned stays cordoned. Both rules are here once, each a merge patch built from the Node
as read (`kube.nodes.patch_node_with_retry`: a concurrent edit is read again, not overwritten). Used
by the node window's activities (`activities.nodes`: `cordon_node`, `uncordon_node`) and by
`noderoll migrate --finish-legacy`, which lifts what the retired engine left cordoned.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client

from api.keys import CORDONED_BY_ANNOTATION, CORDONED_BY_VALUE
from kube.node_snapshot import NodeFacts, node_facts
from kube.nodes import patch_node_with_retry


def cordon_patch(node: NodeFacts) -> dict[str, Any] | None:
    """The patch that cordons `node` for noderoll; None when it is cordoned already (ours, or someone
    else's, which noderoll must not take over). Pure."""
    if node.unschedulable:
        return None
    return {"metadata": {"annotations": {CORDONED_BY_ANNOTATION: CORDONED_BY_VALUE}}, "spec": {"unschedulable": True}}


def uncordon_patch(node: NodeFacts) -> dict[str, Any] | None:
    """The patch that lifts noderoll's own cordon of `node`; None when the node carries no noderoll
    cordon (uncordoned, or cordoned by anyone else). Pure."""
    if node.cordoned_by != CORDONED_BY_VALUE:
        return None
    return {"metadata": {"annotations": {CORDONED_BY_ANNOTATION: None}}, "spec": {"unschedulable": None}}


def lift_own_cordon(name: str) -> bool:
    """Undo noderoll's own cordon of the Node; True when this call lifted it. A node cordoned by anyone
    else stays cordoned; a missing node raises `kube.nodes.node_not_found`."""
    lifted = False

    def build(node: client.V1Node) -> dict[str, Any] | None:
        nonlocal lifted
        patch = uncordon_patch(node_facts(node))
        lifted = patch is not None
        return patch

    patch_node_with_retry(name, build)
    return lifted

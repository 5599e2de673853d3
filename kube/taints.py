"""The runtime-required taint on Nodes: add or remove `noderoll.io/runtime-required`. Does I/O.

Used by the bridge, which decides per node with `planning.node.runtime_taint.decide_runtime_taint`.
Idempotent: adding a taint that is there, or removing one that is not, writes nothing. The write is
a JSON patch guarded by `test` on the node's resourceVersion, so a concurrent edit of the node
(kubelet, another controller) makes it fail. Given `resource_version` (the version the decision
was made on), a node that is no longer at that version is left alone and False returned: the
decision was made on a stale view and is made again on the newer one. Without it a conflict is
read again and rebuilt.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubernetes.client.exceptions import ApiException

import kube
from api.keys import RUNTIME_REQUIRED_TAINT_EFFECT, RUNTIME_REQUIRED_TAINT_KEY, RUNTIME_REQUIRED_TAINT_VALUE
from kube.nodes import find_node

CONFLICT_RETRIES = 8


@dataclass
class SetTaintInput:
    """Whether `node` should carry the runtime-required taint."""

    node: str
    present: bool
    # The Node's resourceVersion the decision was made on; None: act on whatever is current.
    resource_version: str | None = None


def set_runtime_required_taint(input: SetTaintInput) -> bool:
    """Add or remove the taint on `input.node`; True when the node was changed."""
    for _ in range(CONFLICT_RETRIES):
        node = find_node(input.node)
        if node is None:
            return False
        if input.resource_version is not None and node.metadata.resource_version != input.resource_version:
            return False
        # sanitize_for_serialization gives the API (camelCase) form of each taint.
        taints = [kube.api_client().sanitize_for_serialization(t) for t in (node.spec.taints or [])]
        has = any(t.get("key") == RUNTIME_REQUIRED_TAINT_KEY for t in taints)
        if has == input.present:
            return False
        if input.present:
            new = [*taints, {"key": RUNTIME_REQUIRED_TAINT_KEY, "value": RUNTIME_REQUIRED_TAINT_VALUE,
                             "effect": RUNTIME_REQUIRED_TAINT_EFFECT}]
        else:
            new = [t for t in taints if t.get("key") != RUNTIME_REQUIRED_TAINT_KEY]
        body = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": node.metadata.resource_version},
            {"op": "replace" if node.spec.taints else "add", "path": "/spec/taints", "value": new},
        ]
        try:
            kube.core().patch_node(input.node, body)
            return True
        except ApiException as err:
            # 409/422 from the `test` op: someone changed the node in between; read again.
            if err.status in (409, 422) or kube.is_conflict(err):
                if input.resource_version is not None:
                    return False
                continue
            if kube.is_not_found(err):
                return False
            kube.raise_for(err, f"patch taints of node {input.node}")
    raise RuntimeError(f"taints of node {input.node}: too many concurrent changes")

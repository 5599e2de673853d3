"""Drain-ahead's marks on a Node: one fleet's claim on `noderoll.io/upcoming`. Does I/O.

`set_upcoming(node, fleet, want, taint)` adds or removes `fleet`'s entry in the annotation
`noderoll.io/upcoming-for` and makes the label `noderoll.io/upcoming=true` and the taint
`noderoll.io/upcoming:PreferNoSchedule` follow the entries (`planning.rollout.drain_ahead.owners_after`).
One merge patch carrying the resourceVersion it was decided on: a node changed in between (a window
cordoning it, the kubelet) answers 409 and is read and decided again. Idempotent: a node that shows
the claim already is not written; a node that does not exist is skipped.
"""

from __future__ import annotations

from typing import Any

from kubernetes.client.exceptions import ApiException

import kube
from api.keys import UPCOMING_FOR_ANNOTATION, UPCOMING_KEY, UPCOMING_TAINT_EFFECT, UPCOMING_VALUE
from kube.nodes import find_node
from planning.rollout.drain_ahead import owners_after

CONFLICT_RETRIES = 8
MERGE_PATCH = "application/merge-patch+json"


def set_upcoming(node_name: str, fleet: str, want: bool, taint: bool) -> bool:
    """Claim (`want`) or release `fleet`'s mark on the node; False when the node does not exist."""
    for _ in range(CONFLICT_RETRIES):
        node = find_node(node_name)
        if node is None:
            return False
        annotations = node.metadata.annotations or {}
        marks = owners_after(annotations.get(UPCOMING_FOR_ANNOTATION, ""), fleet, want, taint)
        # sanitize_for_serialization gives the API (camelCase) form of each taint.
        taints: list[dict[str, Any]] = [kube.api_client().sanitize_for_serialization(t)
                                        for t in (node.spec.taints or [])]
        has_taint = any(t.get("key") == UPCOMING_KEY for t in taints)
        has_label = (node.metadata.labels or {}).get(UPCOMING_KEY) == UPCOMING_VALUE
        annotation = marks.annotation()
        if (has_label, has_taint, annotations.get(UPCOMING_FOR_ANNOTATION)) == (marks.label, marks.taint, annotation):
            return True
        patch: dict[str, Any] = {"metadata": {
            "resourceVersion": node.metadata.resource_version,
            "labels": {UPCOMING_KEY: UPCOMING_VALUE if marks.label else None},
            "annotations": {UPCOMING_FOR_ANNOTATION: annotation},
        }}
        if has_taint != marks.taint:
            kept = [t for t in taints if t.get("key") != UPCOMING_KEY]
            added = [{"key": UPCOMING_KEY, "effect": UPCOMING_TAINT_EFFECT}] if marks.taint else []
            patch["spec"] = {"taints": kept + added}
        try:
            kube.core().patch_node(node_name, patch, _content_type=MERGE_PATCH)
            return True
        except ApiException as err:
            if kube.is_conflict(err):
                continue  # changed in between: read and decide again
            if kube.is_not_found(err):
                return False
            kube.raise_for(err, f"mark node {node_name} upcoming")
    raise RuntimeError(f"upcoming mark of node {node_name}: still conflicting after {CONFLICT_RETRIES} attempts")

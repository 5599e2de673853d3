"""The pods bound to one node: listed cheaply (`NodePods`), seen as the drain rules see them (`pod_facts`),
and annotated with their eviction notice. Does I/O (but `pod_facts`, a pure conversion).

Read by the drain activities (activities/drain.py) and the eviction notice (activities/eviction_notice.py,
activities/window_close.py).
"""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

import kube
from api.keys import EVICTION_AT_ANNOTATION, PACKAGE_POD_NAMESPACE, STAGE_COMPONENT, STAGE_COMPONENT_LABEL
from kube.nodes import node_not_found
from planning.node.drain_rules import PodFacts, uses_gpu

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
MERGE_PATCH = "application/merge-patch+json"


class NodePods:
    """The pods bound to one node, listed by field selector, from the apiserver's watch cache when it
    is fresh enough (docs/architecture.md, "Reads").

    The first list must show every pod bound before the cordon: it comes from the cache when the
    cache's resourceVersion is at least that of a fresh read of the node (taken after the cordon:
    resourceVersions are etcd revisions, ordered across kinds), else from etcd (a quorum read, once
    per wait: the pods' cache advances only with pod events, so on a quiet cluster it may stay
    behind the node's version). Each later list is not older than the one before (`NotOlderThan` a
    version of the pods' own cache: never one it cannot reach). So "no pods left" is never a lagging
    cache's answer, and a drain no longer reads every pod of the cluster from etcd every second
    (what the 1,000-node benchmark's apiserver spent its memory on)."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.version = ""

    def _list(self, **version: str) -> client.V1PodList:
        return kube.core().list_pod_for_all_namespaces(field_selector=f"spec.nodeName={self.node}", **version)

    def list(self) -> list[client.V1Pod]:
        try:
            if self.version:
                pods = self._list(resource_version=self.version, resource_version_match="NotOlderThan")
            else:
                floor = kube.core().read_node(self.node).metadata.resource_version or ""
                pods = self._list(resource_version="0")
                if not _at_least(pods.metadata.resource_version, floor):
                    pods = self._list()  # quorum read: the cache may not show the latest bindings yet
                    # The pods' own versions: the cache reaches them (not the list's, an etcd revision
                    # the pods' cache may never reach on a quiet cluster).
                    self.version = max((p.metadata.resource_version or "0" for p in pods.items), key=_revision,
                                       default="")
                    return list(pods.items)
        except ApiException as err:
            if kube.is_not_found(err):
                raise node_not_found(self.node) from err
            kube.raise_for(err, f"list pods of node {self.node}")
        self.version = pods.metadata.resource_version or self.version
        return list(pods.items)


def _revision(version: str | None) -> int:
    """An etcd-backed resourceVersion as a number (-1 when it is not one: compare nothing)."""
    try:
        return int(version or "")
    except ValueError:
        return -1


def _at_least(version: str | None, floor: str) -> bool:
    """Whether a list at `version` includes every change up to `floor` (both etcd revisions)."""
    current, wanted = _revision(version), _revision(floor)
    return current >= 0 and wanted >= 0 and current >= wanted


def _resources(pod: client.V1Pod) -> list[dict[str, Any]]:
    """Every container's (init containers too) requests and limits, as API JSON."""
    spec = pod.spec
    containers = [*(spec.init_containers or []), *(spec.containers or [])] if spec else []
    return [{"requests": dict(c.resources.requests or {}), "limits": dict(c.resources.limits or {})}
            for c in containers if c.resources is not None]


def pod_facts(pod: client.V1Pod) -> PodFacts:
    """What the drain rules read of a pod (planning/node/drain_rules.py). Pure conversion."""
    meta = pod.metadata
    annotations, labels = meta.annotations or {}, meta.labels or {}
    return PodFacts(
        namespace=meta.namespace or "", name=meta.name or "", labels=dict(labels),
        gpu=uses_gpu(_resources(pod)),
        phase=(pod.status.phase if pod.status else None) or "",
        terminating=meta.deletion_timestamp is not None,
        eviction_at=annotations.get(EVICTION_AT_ANNOTATION, ""),
        local_data=any(volume.empty_dir is not None for volume in (pod.spec.volumes or [])) if pod.spec else False,
        daemon_set=any(owner.kind == "DaemonSet" for owner in meta.owner_references or []),
        mirror=MIRROR_ANNOTATION in annotations,
        stage_pod=meta.namespace == PACKAGE_POD_NAMESPACE and labels.get(STAGE_COMPONENT_LABEL) == STAGE_COMPONENT,
    )


def set_eviction_at(ref: str, value: str | None) -> bool:
    """Set (or with None remove) a pod's `noderoll.io/eviction-at`; False when the pod is gone."""
    namespace, _, name = ref.partition("/")
    try:
        kube.core().patch_namespaced_pod(name, namespace, {"metadata": {"annotations": {EVICTION_AT_ANNOTATION: value}}},
                                         _content_type=MERGE_PATCH)
    except ApiException as err:
        if kube.is_not_found(err):
            return False
        kube.raise_for(err, f"annotate pod {ref} {EVICTION_AT_ANNOTATION}")
    return True

"""`delete_stage_jobs`: delete a window's stage Jobs (and their pods and ConfigMaps) once the
window's outcome is recorded on the node. Does I/O.

Why (issue #14): stage Jobs used to stay for their 7-day TTL, and with them their pods; a
1,000-node rollout left thousands of each, and the apiserver and etcd grew until the machine ran
out of memory. The node workflow calls this after its final state write, so what the Jobs said is
on the node (`noderoll.io/state`) and in the window's history before they go.

Per package of the window, every stage Job on the node is deleted (`propagationPolicy:
Background`: the garbage collector removes the pods), older windows' Jobs too, except the Jobs
named in `keep`: the latest failed attempt of a package that ended erroring, kept for `noderoll
logs` until the package's next window (a retry, or the next rollout) deletes it. The Jobs'
ConfigMaps go at the same time (the kept pod has finished: it no longer mounts them).

Selectors only (the labels every stage Job carries). A collection delete lists from etcd: the
apiserver takes a `resourceVersion` on a delete as a precondition of every object's deletion (409
Conflict for `0`), not as "serve the list from the watch cache". That read is cheap now that the
namespace holds only the Jobs in flight and the kept failures. The list of the keep path (rare) is
served from the watch cache (`resourceVersion=0`): a Job it misses (created a moment ago; a window's
Jobs were created seconds before) is deleted by that package's next window on the node.
"""

from __future__ import annotations

from kubernetes.client.exceptions import ApiException
from temporalio import activity

import kube
from api.keys import (
    PACKAGE_POD_NAMESPACE,
    STAGE_COMPONENT,
    STAGE_COMPONENT_LABEL,
    STAGE_NODE_LABEL,
    STAGE_PACKAGE_LABEL,
)
from protocol.node_activities import DeleteStageJobsInput, DeleteStageJobsResult

PROPAGATION = "Background"
# Served from the apiserver's watch cache (module docstring).
CACHED = "0"


def stage_selector(node: str, packages: list[str]) -> str:
    """The label selector of the stage Jobs (and ConfigMaps) of `packages` on `node`. Pure."""
    return f"{STAGE_COMPONENT_LABEL}={STAGE_COMPONENT},{STAGE_NODE_LABEL}={node},{STAGE_PACKAGE_LABEL} in ({','.join(sorted(set(packages)))})"


def _relabel(owners: dict[str, str]) -> None:
    """Label each kept Job of several Packages with the Package it is kept for (its first Package's
    label otherwise), so that Package's next window on the node deletes it."""
    for name, package in sorted(owners.items()):
        try:
            kube.batch().patch_namespaced_job(name, PACKAGE_POD_NAMESPACE,
                                              {"metadata": {"labels": {STAGE_PACKAGE_LABEL: package}}})
        except ApiException as err:
            if not kube.is_not_found(err):
                raise


def _delete_jobs(selector: str, keep: set[str]) -> list[str]:
    batch = kube.batch()
    if not keep:
        # One request: the apiserver lists and deletes each (no resourceVersion: module docstring).
        batch.delete_collection_namespaced_job(PACKAGE_POD_NAMESPACE, label_selector=selector,
                                               propagation_policy=PROPAGATION)
        return []
    listing = batch.list_namespaced_job(PACKAGE_POD_NAMESPACE, label_selector=selector, resource_version=CACHED)
    deleted = []
    for job in listing.items:
        name = job.metadata.name
        if name in keep:
            continue
        try:
            batch.delete_namespaced_job(name, PACKAGE_POD_NAMESPACE, propagation_policy=PROPAGATION)
            deleted.append(name)
        except ApiException as err:
            if not kube.is_not_found(err):
                raise
    return deleted


@activity.defn(name="delete_stage_jobs")
def delete_stage_jobs(input: DeleteStageJobsInput) -> DeleteStageJobsResult:
    """Delete the stage Jobs and ConfigMaps of `input.packages` on `input.node` but `input.keep`."""
    if not input.packages:
        return DeleteStageJobsResult()
    selector = stage_selector(input.node, input.packages)
    try:
        deleted = _delete_jobs(selector, set(input.keep))
        _relabel({job: package for job, package in input.owners.items() if job in input.keep})
        kube.core().delete_collection_namespaced_config_map(PACKAGE_POD_NAMESPACE, label_selector=selector)
    except ApiException as err:
        kube.raise_for(err, f"delete stage Jobs of {', '.join(input.packages)} on {input.node}")
    return DeleteStageJobsResult(deleted=deleted, kept=sorted(input.keep))

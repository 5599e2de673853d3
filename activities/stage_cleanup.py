"""`delete_stage_jobs`: delete a window's stage pods (and their ConfigMaps) once the window's
outcome is recorded on the node. Does I/O. (The activity keeps its name from the time the stages
ran in Jobs: recorded histories call it so; ADR 0018.)

Why (issue #14): stage Jobs used to stay for their 7-day TTL, and with them their pods; a
1,000-node rollout left thousands of each, and the apiserver and etcd grew until the machine ran
out of memory. The node workflow calls this after its final state write, so what the pods said is
on the node (`noderoll.io/state`) and in the window's history before they go.

Per package of the window, every stage pod on the node is deleted, older windows' pods too, except
the pods named in `keep`: the latest failed attempt of a package that ended erroring, kept for
`noderoll logs` until the package's next window (a retry, or the next rollout) deletes it. The
pods' ConfigMaps go at the same time (the kept pod has finished: it no longer mounts them). A pod
left behind (this deletion failed, or the Package is gone for good) has no TTL: `kubectl delete
pods -n noderoll-system -l noderoll.io/component=stage --field-selector=status.phase!=Running` removes them.

Selectors only (the labels every stage pod carries). A collection delete lists from etcd: the
apiserver takes a `resourceVersion` on a delete as a precondition of every object's deletion (409
Conflict for `0`), not as "serve the list from the watch cache". That read is cheap now that the
namespace holds only the pods in flight and the kept failures. The list of the keep path (rare) is
served from the watch cache (`resourceVersion=0`): a pod it misses (created a moment ago; a window's
pods were created seconds before) is deleted by that package's next window on the node.

Collection deletes are taken in turns, `DELETE_CONCURRENCY` at once per worker process: each lists
the namespace from etcd, and when a batch's windows end in the same seconds their lists add up in
the apiserver and etcd (the 1,000-node bench, 250 windows a batch: a 10.4-10.9 GiB peak when the
windows' ends came together, 2.4-2.8 GiB when they were spread; ADR 0021). A deletion waits at most
`DELETE_TURN_WAIT_SECONDS` for its turn and then goes ahead, so the activity's 60 s per attempt holds.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

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
from protocol.activity_refs import DELETE_STAGE_JOBS
from protocol.node_activities import DeleteStageJobsInput, DeleteStageJobsResult

# Served from the apiserver's watch cache (module docstring).
CACHED = "0"
# Collection deletes at once per worker process, and how long one waits for its turn (module docstring).
DELETE_CONCURRENCY = 8
DELETE_TURN_WAIT_SECONDS = 20.0
_turns = threading.BoundedSemaphore(DELETE_CONCURRENCY)


@contextmanager
def _turn() -> Iterator[None]:
    """A turn among the worker's collection deletes, or none after `DELETE_TURN_WAIT_SECONDS`."""
    got = _turns.acquire(timeout=DELETE_TURN_WAIT_SECONDS)
    try:
        yield
    finally:
        if got:
            _turns.release()


def stage_selector(node: str, packages: list[str]) -> str:
    """The label selector of the stage pods (and ConfigMaps) of `packages` on `node`. Pure."""
    return f"{STAGE_COMPONENT_LABEL}={STAGE_COMPONENT},{STAGE_NODE_LABEL}={node},{STAGE_PACKAGE_LABEL} in ({','.join(sorted(set(packages)))})"


def _relabel(owners: dict[str, str]) -> None:
    """Label each kept pod of several Packages with the Package it is kept for (its first Package's
    label otherwise), so that Package's next window on the node deletes it."""
    for name, package in sorted(owners.items()):
        try:
            kube.core().patch_namespaced_pod(name, PACKAGE_POD_NAMESPACE,
                                              {"metadata": {"labels": {STAGE_PACKAGE_LABEL: package}}})
        except ApiException as err:
            if not kube.is_not_found(err):
                raise


def _delete_pods(selector: str, keep: set[str]) -> list[str]:
    core = kube.core()
    if not keep:
        # One request: the apiserver lists and deletes each (no resourceVersion: module docstring).
        kube.untyped(core.delete_collection_namespaced_pod, PACKAGE_POD_NAMESPACE, label_selector=selector)
        return []
    listing = core.list_namespaced_pod(PACKAGE_POD_NAMESPACE, label_selector=selector, resource_version=CACHED)
    deleted = []
    for pod in listing.items:
        name = pod.metadata.name
        if name in keep:
            continue
        try:
            core.delete_namespaced_pod(name, PACKAGE_POD_NAMESPACE)
            deleted.append(name)
        except ApiException as err:
            if not kube.is_not_found(err):
                raise
    return deleted


@activity.defn(name=DELETE_STAGE_JOBS.name)
def delete_stage_jobs(input: DeleteStageJobsInput) -> DeleteStageJobsResult:
    """Delete the stage pods and ConfigMaps of `input.packages` on `input.node` but `input.keep`."""
    if not input.packages:
        return DeleteStageJobsResult()
    selector = stage_selector(input.node, input.packages)
    try:
        with _turn():
            deleted = _delete_pods(selector, set(input.keep))
            _relabel({job: package for job, package in input.owners.items() if job in input.keep})
            kube.untyped(kube.core().delete_collection_namespaced_config_map, PACKAGE_POD_NAMESPACE,
                         label_selector=selector)
    except ApiException as err:
        kube.raise_for(err, f"delete stage pods of {', '.join(input.packages)} on {input.node}")
    return DeleteStageJobsResult(deleted=deleted, kept=sorted(input.keep))

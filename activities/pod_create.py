"""Stage pods: create (or adopt) a stage pod (one Package's stages, or several Packages' in one pod
per window phase, or the merged interrupt) and its ConfigMap. Does I/O.

The stage pod contract is in docs/architecture.md and its manifest in `activities.stage_pod`: per
Package the package image's folder copied by an init container, then noderoll's agent running each
stage and its check as containers named after their modes (NodeWright does the same). The pod is
a bare Pod pinned with nodeName, no Job around it (ADR 0018). Creating it reads, when the fleet's
order does not carry them, each Package (uid and generation for SKYHOOK_RESOURCE_ID) and, for a
stage pod, the node (its metadata for the packages). Pod and ConfigMap names derive from (package,
version, node, mode, attempt, window, the pod's modes, and every further Package with its version
and modes), so an activity retried after a worker crash finds and adopts the pod its first attempt
created instead of running the stages twice; and a retried activity whose predecessor had already
seen its pod (heartbeat details) never creates it again: a pod deleted since is a failed attempt,
not a reason to run the stages a second time under the same attempt.

The pod a window runs next can be created by the activity before it, once that one succeeded
(`prestart`, ADR 0022: the drain creates the first stage pod, a stage pod whose every stage succeeded
the interrupt's, the interrupt the first post-interrupt pod), so the pod starts while the workflow
takes its next step; the activity that runs it is handed the `PrestartedPod` and adopts it.

Waiting for the pod (a watch of that one pod resumed from its last resourceVersion, which notices
a pod deleted before it finished) is `kube.pod_wait`; the activities' heartbeating loop around it
is `activities.stage_wait.wait_job`.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

import kube
from activities import stage_pod, verify_pod
from activities.stage_pod import StagePodIdentity
from api.keys import GROUP, PACKAGE_PLURAL, PACKAGE_POD_NAMESPACE, VERSION
from kube.nodes import read_node_json
from protocol.node_activities import NextPod, PrestartedPod, StageJob

log = logging.getLogger(__name__)


def pod_name(job: StageJob, following: list[StageJob] | None = None) -> str:
    """Deterministic, readable pod (and ConfigMap) name of at most 63 characters (prefix + hash of the identity);
    `following`: the further Packages of a pod of several (their packages, versions and modes)."""
    parts = [job.package, job.version, job.node, job.mode, str(job.attempt), job.window]
    if job.modes:
        parts.append(",".join(job.modes))  # a pod of several stages (and maybe the interrupt)
    for other in following or []:
        parts.extend([other.package, other.version, ",".join(stage_pod.modes(other))])
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:10]
    prefix = f"nr-{job.package[:24].rstrip('-')}-{job.mode[:18].rstrip('-')}"
    return f"{prefix}-{digest}"


def pods_per_window(interrupt: bool) -> int:
    """Stage pods one node window creates, whatever its number of Packages (fresh installs, every
    attempt succeeds; pure): one pod for every Package's stages before the interrupt (each with its
    check), the merged interrupt in a pod of its own, and one pod for the post-interrupt stages
    (ADR 0016; a two-Package reboot window ran 4 before, one Package's 2). Tests count pods with it."""
    return 3 if interrupt else 1


def _package_identity(package: str) -> tuple[str, int]:
    """The Package's uid and generation (for SKYHOOK_RESOURCE_ID); ("", 0) when it is gone."""
    try:
        obj = kube.custom().get_cluster_custom_object(GROUP, VERSION, PACKAGE_PLURAL, package)
    except ApiException as err:
        if kube.is_not_found(err):
            return "", 0  # deleted (an uninstall after the Package's deletion): the id keeps its shape
        kube.raise_for(err, f"read Package {package}")
    meta = obj.get("metadata") or {}
    return str(meta.get("uid", "")), int(meta.get("generation") or 0)


@dataclass(frozen=True)
class EnsuredPod:
    """A stage pod created or adopted: its name, and when this call created it, its resourceVersion
    and uid (the wait watches from the one and heartbeats the other at once)."""

    name: str
    adopted: bool
    resource_version: str = ""
    uid: str = ""


def ensure_pod(job: StageJob, following: list[StageJob] | None = None, seen: str = "",
               prestarted: PrestartedPod | None = None) -> EnsuredPod:
    """Create the ConfigMap (every Package's config and the node's metadata; none for an interrupt)
    and the pod, or adopt them.
    `following`: the further Packages of a pod of several (one pod per window phase, ADR 0016).
    `seen`: the uid of the pod an earlier attempt of the activity was waiting for: adopted as it is,
    never created again (module docstring).
    `prestarted`: this pod, created by the activity before (`prestart`): taken as this call's own
    creation (watched from its resourceVersion), not created again."""
    parts = [job, *(following or [])]
    name = pod_name(job, following)
    if seen:
        return EnsuredPod(name, adopted=True)
    if prestarted is not None and prestarted.name == name:
        return EnsuredPod(name, not prestarted.uid, prestarted.resource_version, prestarted.uid)
    settings = stage_pod.current_settings()
    if verify_pod.is_verify(job):
        # No package, no ConfigMap, no Package read: the verify image alone (activities/verify_pod.py).
        return _create(name, verify_pod.pod_manifest(job, name, settings))
    metadata = any(stage_pod.runs_package(part) for part in parts)
    identities = []
    for part in parts:
        # The fleet's order names the Package's uid and generation; a window of older orders reads them.
        uid, generation = (part.package_uid, part.generation) if part.package_uid else _package_identity(part.package)
        identities.append(StagePodIdentity(package_uid=uid, generation=generation, metadata=metadata))
    if metadata:
        data = {**stage_pod.node_metadata(read_node_json(job.node), parts, settings), **stage_pod.config_map_data(parts)}
        config_map = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": PACKAGE_POD_NAMESPACE, "labels": stage_pod.labels(job)},
            "data": data,
        }
        try:
            kube.untyped(kube.core().create_namespaced_config_map, PACKAGE_POD_NAMESPACE, config_map)
        except ApiException as err:
            if not kube.is_conflict(err):
                kube.raise_for(err, f"create ConfigMap {name}")
    manifest = stage_pod.pod_manifest(parts if following else job, name, identities if following else identities[0],
                                      settings)
    return _create(name, manifest)


def _create(name: str, manifest: dict[str, Any]) -> EnsuredPod:
    """Create the pod, or adopt the one of that name an earlier attempt of the activity created."""
    try:
        created = kube.untyped(kube.core().create_namespaced_pod, PACKAGE_POD_NAMESPACE, manifest).get("metadata") or {}
        return EnsuredPod(name, False, str(created.get("resourceVersion") or ""), str(created.get("uid") or ""))
    except ApiException as err:
        if kube.is_conflict(err):
            return EnsuredPod(name, adopted=True)  # created by an earlier attempt of this activity: adopt it
        kube.raise_for(err, f"create stage pod {name}")


def prestart(then: NextPod | None) -> PrestartedPod | None:
    """Create the window's next pod `then` (module docstring, ADR 0022) for the activity that will run
    it; None when there is none or its creation failed: that activity then creates it itself, so a
    failure here never fails the activity that succeeded."""
    if then is None:
        return None
    try:
        pod = ensure_pod(then.job, then.following or None)
    except Exception as err:  # noqa: BLE001 - best effort: the pod's own activity creates it
        log.warning("creating the next pod of %s on %s failed (left to its activity): %s",
                    then.job.package, then.job.node, err)
        return None
    return PrestartedPod(pod.name, pod.uid, pod.resource_version)

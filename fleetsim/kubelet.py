"""fleetsim's kubelet: one watch on all pods, acting for those bound to simulated nodes. Does API I/O.

Ordinary pods go Running and Ready (or complete after `fleetsim.noderoll.io/run-seconds`); stage
pods (`noderoll.io/component=stage`) run the package agent (fleetsim/stagepods.py); a pod with a
deletionTimestamp terminates after its grace period (capped by `max_grace_seconds`, stretched by a
`slow-termination` fault) and is then removed with a grace-0 delete, as a kubelet does.

Like a kubelet's status manager, it owns its pods' Ready condition: a running pod of an up node
found not Ready (the node lifecycle controller marks the pods of a node it sees NotReady, also
pods bound to the node just after it came back) is posted Ready again `STATUS_SYNC_SECONDS` later.
While a node reboots its kubelet is down: nothing happens to its pods (new ones stay Pending,
deleted ones Terminating) until `resume_node` runs them again after the reboot.
"""

from __future__ import annotations

import logging
import signal
import time
from typing import Any

from api.keys import STAGE_COMPONENT, STAGE_COMPONENT_LABEL
from fleetsim import podstatus, stagepods
from fleetsim.agents import AgentRun
from fleetsim.context import RUN_SECONDS_ANNOTATION, SimContext, SimNode
from fleetsim.kube import KUBELET_RETRY_SECONDS, KubeError, patch_status, pod_path, until_landed
from fleetsim.nodes import node_ip, now_rfc3339

log = logging.getLogger(__name__)
DEFAULT_GRACE_SECONDS = 30
# The kubelet's status manager reconciles every 10 s; fleetsim reacts to the watch event, a little later.
STATUS_SYNC_SECONDS = 2.0


def is_stage_pod(pod: dict[str, Any]) -> bool:
    """A package stage pod (the stage pod contract's component label)."""
    return (pod["metadata"].get("labels") or {}).get(STAGE_COMPONENT_LABEL) == STAGE_COMPONENT


def on_pod_event(ctx: SimContext, kind: str, pod: dict[str, Any]) -> None:
    """Dispatch one watch event (called on the watch thread: must not block)."""
    node = ctx.nodes.get((pod.get("spec") or {}).get("nodeName") or "")
    if node is None:
        return
    uid = pod["metadata"]["uid"]
    if kind == "DELETED":
        with ctx.lock:
            ctx.started.discard(uid)
            ctx.terminating.discard(uid)
            ctx.runs.pop(uid, None)
        return
    if node.rebooting:
        return  # the kubelet is down; `resume_node` looks at every pod of the node when it is back
    if pod["metadata"].get("deletionTimestamp"):
        with ctx.lock:
            if uid in ctx.terminating:
                return
            ctx.terminating.add(uid)
        ctx.scheduler.submit(lambda: _terminate(ctx, node, pod))
        return
    phase = (pod.get("status") or {}).get("phase")
    if phase == "Running" and not is_stage_pod(pod) and not podstatus.is_ready(pod):
        _sync_ready_later(ctx, pod)
    if phase in ("Succeeded", "Failed", "Running"):
        return  # already handled (possibly by an earlier fleetsim run)
    with ctx.lock:
        if uid in ctx.started:
            return
        ctx.started.add(uid)
    if is_stage_pod(pod):
        # The kubelet's pod start-up (sandbox, image pulls), modelled as a fixed delay.
        ctx.scheduler.call_later(ctx.options.pod_startup_seconds, lambda: _run_stage_pod(ctx, node, pod))
    else:
        ctx.scheduler.submit(lambda: start_pod(ctx, node, pod))


def _run_stage_pod(ctx: SimContext, node: SimNode, pod: dict[str, Any]) -> None:
    """Run a stage pod (fleetsim/stagepods.py), then do what its runner says comes next."""
    after = stagepods.run_stage_pod(ctx, node, pod, resume_node)
    if after is stagepods.After.NOTHING:
        return
    with ctx.lock:
        ctx.started.discard(pod["metadata"]["uid"])  # the next pod event (or the retry) starts it again
    if after is stagepods.After.RETRY:
        ctx.scheduler.call_later(stagepods.CONFIGMAP_RETRY_SECONDS, lambda: _look_again(ctx, pod))


def _look_again(ctx: SimContext, pod: dict[str, Any]) -> None:
    """Handle the pod as it is now, as if a watch event had brought it (a stage pod waiting for a ConfigMap)."""
    try:
        fresh = ctx.kube.request("GET", pod_path(pod))
    except KubeError as err:
        if err.transient:  # no answer (an apiserver restarting) is not "gone": look again later
            ctx.scheduler.call_later(stagepods.CONFIGMAP_RETRY_SECONDS, lambda: _look_again(ctx, pod))
        return  # else gone
    on_pod_event(ctx, "MODIFIED", fresh)


def _sync_ready_later(ctx: SimContext, pod: dict[str, Any]) -> None:
    """Post the pod Ready again soon, once (stage pods excluded: their runner owns their status)."""
    uid = pod["metadata"]["uid"]
    with ctx.lock:
        if uid in ctx.syncing:
            return
        ctx.syncing.add(uid)
    ctx.scheduler.call_later(STATUS_SYNC_SECONDS, lambda: _sync_ready(ctx, pod))


def _sync_ready(ctx: SimContext, pod: dict[str, Any]) -> None:
    uid = pod["metadata"]["uid"]
    with ctx.lock:
        ctx.syncing.discard(uid)
    try:
        fresh = ctx.kube.request("GET", pod_path(pod))
    except KubeError as err:
        if err.status == 404:
            return
        raise
    node = ctx.nodes.get((fresh.get("spec") or {}).get("nodeName") or "")
    status = fresh.get("status") or {}
    if (node is None or node.rebooting or fresh["metadata"]["uid"] != uid or status.get("phase") != "Running"
            or fresh["metadata"].get("deletionTimestamp") or podstatus.is_ready(fresh)):
        return
    log.info("pod %s/%s on %s: Ready again (was marked not Ready)", fresh["metadata"]["namespace"],
             fresh["metadata"]["name"], node.name)
    patch_status(ctx.kube, fresh, {"conditions": podstatus.kubelet_conditions(fresh, True, now_rfc3339())})


def next_pod_ip(ctx: SimContext, node: SimNode) -> str:
    """A fresh pod IP on the node's /24-ish range (wraps; uniqueness is not needed by anyone here)."""
    with ctx.lock:
        node.pod_counter += 1
        counter = node.pod_counter
    return f"172.{16 + node.index // 256 % 16}.{node.index % 256}.{2 + counter % 250}"


def start_pod(ctx: SimContext, node: SimNode, pod: dict[str, Any], restarted: bool = False) -> None:
    """Make an ordinary pod Running and Ready; schedule its completion when it has a run time.

    `restarted`: its containers start again after a node reboot (in a new sandbox: a new pod IP).
    """
    if node.rebooting:
        with ctx.lock:
            ctx.started.discard(pod["metadata"]["uid"])  # the node went down first: `resume_node` starts it
        return
    now = now_rfc3339()
    start_time = (pod.get("status") or {}).get("startTime", now) if restarted else now
    status = podstatus.running_status(pod, node_ip(node.index), next_pod_ip(ctx, node), (start_time, now), restarted)
    patch_status(ctx.kube, pod, status)
    seconds = (pod["metadata"].get("annotations") or {}).get(RUN_SECONDS_ANNOTATION)
    if seconds and (pod.get("spec") or {}).get("restartPolicy", "Always") != "Always":
        uid = pod["metadata"]["uid"]
        with ctx.lock:
            ctx.runs[uid] = now
        ctx.scheduler.call_later(float(seconds), lambda: _complete(ctx, pod, now))


def _complete(ctx: SimContext, pod: dict[str, Any], started: str) -> None:
    uid = pod["metadata"]["uid"]
    with ctx.lock:
        # Not when it is being deleted, lost its run to a reboot, or runs again since (OnFailure).
        if uid in ctx.terminating or uid not in ctx.started or ctx.runs.get(uid) != started:
            return
        ctx.runs.pop(uid, None)
    patch_status(ctx.kube, pod, podstatus.terminated_status(pod, 0, "", (started, now_rfc3339())))


def resume_node(ctx: SimContext, node: SimNode) -> dict[str, int]:
    """The node's kubelet runs again after a reboot: every pod bound to it is looked at once more.

    Running pods lost their containers: `restartPolicy` Always or OnFailure (a lost container exits
    non-zero) start them again, Never ends the pod Failed. Pods bound meanwhile start now, pods deleted
    meanwhile are removed at once (nothing runs any more: no grace period to wait for). Stage pods are left to their runner (the one
    running at a reboot is the interrupt pod that asked for it). Returns counts per outcome.
    """
    # From the watch cache, not older than what the pod watch delivered (and ignored while the node
    # was down): every pod bound meanwhile is in it (docs/architecture.md, "Reads").
    query = {"fieldSelector": f"spec.nodeName={node.name}"}
    if ctx.pods_version:
        query.update(resourceVersion=ctx.pods_version, resourceVersionMatch="NotOlderThan")
    # Retried while the apiserver is away, as a kubelet back from a reboot keeps trying: a single try
    # that met an apiserver restart left the rebooting stage pod unfinished for good (chaos test (c)).
    listing = until_landed(lambda: ctx.kube.request("GET", "/api/v1/pods", query=query), done=(),
                           seconds=KUBELET_RETRY_SECONDS, stopping=ctx.stopping)
    now = now_rfc3339()
    counts = {"restarted": 0, "failed": 0, "other": 0}
    for pod in listing.get("items", []):
        uid = pod["metadata"]["uid"]
        phase = (pod.get("status") or {}).get("phase")
        if pod["metadata"].get("deletionTimestamp") and not is_stage_pod(pod):
            with ctx.lock:
                ctx.terminating.add(uid)
            # Its containers died with the reboot: no grace period left to honour.
            ctx.scheduler.submit(lambda deleted=pod: _remove(ctx, deleted, None))
            counts["other"] += 1
        elif phase != "Running" or pod["metadata"].get("deletionTimestamp") or is_stage_pod(pod):
            counts["other"] += 1
            on_pod_event(ctx, "MODIFIED", pod)
        elif (pod.get("spec") or {}).get("restartPolicy", "Always") == "Never":
            with ctx.lock:
                ctx.started.discard(uid)
                ctx.runs.pop(uid, None)
            patch_status(ctx.kube, pod, podstatus.lost_in_reboot_status(pod, now))
            counts["failed"] += 1
        else:
            with ctx.lock:
                ctx.started.add(uid)
            start_pod(ctx, node, pod, restarted=True)
            counts["restarted"] += 1
    return counts


def termination_seconds(ctx: SimContext, node: SimNode, pod: dict[str, Any]) -> float:
    """How long this pod takes to stop: its grace period, capped, or a slow-termination fault's time."""
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed", "Pending", None):
        return 0.0  # nothing runs: a kubelet removes such pods at once
    meta, spec = pod["metadata"], pod.get("spec") or {}
    grace = meta.get("deletionGracePeriodSeconds")
    if grace is None:
        grace = spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS)
    fault = ctx.options.faults.take("slow-termination", node.name)
    if fault is not None:
        return min(float(grace), fault.seconds)
    return min(float(grace), ctx.options.max_grace_seconds)


def _terminate(ctx: SimContext, node: SimNode, pod: dict[str, Any]) -> None:
    uid = pod["metadata"]["uid"]
    delay = termination_seconds(ctx, node, pod)
    proc = ctx.procs.get(uid)
    if proc is not None:
        proc.send_signal(signal.SIGTERM)  # the agent stops before its next step
    ctx.scheduler.call_later(delay, lambda: _remove(ctx, pod, proc))


def _remove(ctx: SimContext, pod: dict[str, Any], proc: AgentRun | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.kill()  # grace period over: SIGKILL, like the kubelet
    uid = pod["metadata"]["uid"]
    body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
    try:
        # 404: gone already; 409: the uid precondition failed (a new pod under the same name).
        until_landed(lambda: ctx.kube.request("DELETE", pod_path(pod), body), done=(404, 409))
    except KubeError:
        # Not removed: forget it, so the next listing or event of the pod terminates it again.
        with ctx.lock:
            ctx.terminating.discard(uid)
        raise


def watch_pods(ctx: SimContext) -> None:
    """List then watch all pods until stopped, re-listing when the watch expires or errs (410)."""
    while not ctx.stopping.is_set():
        try:
            # From the watch cache (as an informer lists): the watch from its version sees the rest.
            listing = ctx.kube.request("GET", "/api/v1/pods", query={"resourceVersion": "0"})
            for pod in listing.get("items", []):
                on_pod_event(ctx, "ADDED", pod)
            version = ctx.pods_version = listing["metadata"]["resourceVersion"]
            while not ctx.stopping.is_set():
                query = {"resourceVersion": version, "allowWatchBookmarks": "true", "timeoutSeconds": "300"}
                for event in ctx.kube.watch("/api/v1/pods", query):
                    if event.type == "ERROR":
                        raise KubeError(int(event.object.get("code", 500)), "WATCH", "/api/v1/pods", str(event.object))
                    version = ctx.pods_version = event.object["metadata"].get("resourceVersion", version)
                    if event.type != "BOOKMARK":
                        on_pod_event(ctx, event.type, event.object)
        except (KubeError, OSError, KeyError) as err:
            if ctx.stopping.is_set():
                return
            log.warning("pod watch restarts after: %s", err)
            time.sleep(1)

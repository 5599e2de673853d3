"""A simulated node reboot: NotReady, a new boot id, its pods' containers restarted, Ready again. API I/O.

The node goes NotReady *before* the interrupt pod is marked Succeeded, so whoever sees the pod
succeed already sees the reboot under way; the new `bootID` appears together with Ready=True after
`reboot_seconds`. A `reboot-never-returns` fault leaves the node NotReady with the old boot id.
"""

from __future__ import annotations

import logging
import uuid

from fleetsim import podstatus
from fleetsim.context import SimContext, SimNode
from fleetsim.kube import patch_status
from fleetsim.nodes import now_rfc3339, set_ready

log = logging.getLogger(__name__)


def restart_node_pods(ctx: SimContext, node: SimNode) -> int:
    """Every running pod of the node restarts its containers (restartCount + 1). Returns how many."""
    pods = ctx.kube.request("GET", "/api/v1/pods", query={"fieldSelector": f"spec.nodeName={node.name}"})
    started = now_rfc3339()
    count = 0
    for pod in pods.get("items", []):
        if pod["metadata"].get("deletionTimestamp") or (pod.get("status") or {}).get("phase") != "Running":
            continue
        patch_status(ctx.kube, pod, podstatus.restarted_status(pod, started))
        count += 1
    return count


def begin_reboot(ctx: SimContext, node: SimNode) -> None:
    """Take the node down now; bring it back after reboot_seconds (unless a fault keeps it down)."""
    node.rebooting = True
    set_ready(ctx, node, False, "fleetsim: node is rebooting")
    if ctx.options.faults.take("reboot-never-returns", node.name) is not None:
        log.info("node %s: reboot never returns (fault)", node.name)
        return
    ctx.scheduler.call_later(ctx.options.reboot_seconds, lambda: _come_back(ctx, node))


def _come_back(ctx: SimContext, node: SimNode) -> None:
    if ctx.stopping.is_set():
        return
    node.boot_id = str(uuid.uuid4())
    restarted = restart_node_pods(ctx, node)
    set_ready(ctx, node, True, "fleetsim is posting ready status")
    node.rebooting = False
    log.info("node %s rebooted: bootID %s, %d pod(s) restarted", node.name, node.boot_id, restarted)

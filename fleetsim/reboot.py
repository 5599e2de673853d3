"""A simulated node reboot: NotReady, a new boot id, its pods run again, Ready again. API I/O.

The node goes NotReady *before* the interrupt pod is marked Succeeded, so whoever sees the pod
succeed already sees the reboot under way; the new `bootID` appears together with Ready=True after
`reboot_seconds`. While the node is down its kubelet does nothing (`kubelet.on_pod_event`); when it
is back, `kubelet.resume_node` restarts, fails or starts its pods before the node reports Ready. A
`reboot-never-returns` fault leaves the node NotReady with the old boot id.

The stage-pod runner takes the node down (`begin_reboot`) with the kubelet's `resume_node`, which the
kubelet hands it (this module imports neither of them: no import circle).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

from fleetsim.context import SimContext, SimNode
from fleetsim.nodes import set_ready

log = logging.getLogger(__name__)


# The kubelet's `resume_node`: runs the node's pods again once it is back; counts per outcome.
Resume = Callable[[SimContext, SimNode], dict[str, int]]


def begin_reboot(ctx: SimContext, node: SimNode, resume: Resume) -> None:
    """Take the node down now; bring it back after reboot_seconds times the node's time factor
    (unless a fault keeps it down)."""
    node.rebooting = True
    set_ready(ctx, node, False, "fleetsim: node is rebooting")
    if ctx.options.faults.take("reboot-never-returns", node.name) is not None:
        log.info("node %s: reboot never returns (fault)", node.name)
        return
    ctx.scheduler.call_later(ctx.options.reboot_seconds * node.time_factor, lambda: _come_back(ctx, node, resume))


def _come_back(ctx: SimContext, node: SimNode, resume_node: Resume) -> None:
    if ctx.stopping.is_set():
        return
    node.boot_id = str(uuid.uuid4())
    node.rebooting = False  # the kubelet runs again: pod events are handled from here on
    counts = resume_node(ctx, node)
    set_ready(ctx, node, True, "fleetsim is posting ready status")
    log.info("node %s rebooted: bootID %s, pods %s", node.name, node.boot_id, counts)

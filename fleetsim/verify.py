"""GPU verify pods (label `noderoll.io/mode=verify`, api/verify.py): the simulated GPUs answer. API I/O.

A window's verify pod runs its DeploymentPolicy's verify image; fleetsim runs no image and has no
GPUs, so the simulated node answers as the example verify image (deploy/examples/verify/gpu-health)
would on a real one: its one container exits 0 with a line naming the node's GPUs (`--gpus`) as
having passed, unless

* a fault `unhealthy-gpus` matches the node (`--unhealthy-gpus REGEX`, or a faults-file rule with
  `nodes`, `exitCode` (default 1) and `times`): the GPUs fail the diagnostic, exit `exitCode`;
* the node has no GPU (`--gpus 0`): exit 1, as the example image fails where no GPU tool answers;
* a fault `hang` with mode `verify` matches: the pod stays Running until deleted (the verify's
  deadline, `timeoutSeconds`, then fails it).

Like a stage pod it starts `--pod-startup-seconds` after fleetsim saw it, and its output is kept in
`<sandbox>/<node>/var/log/noderoll/pods/<pod>.log` and, as the log tail, in the container's
`state.terminated.message`.
"""

from __future__ import annotations

import logging
from typing import Any

from api.keys import STAGE_MODE_LABEL
from fleetsim import podstatus
from fleetsim.context import FleetOptions, SimContext, SimNode
from fleetsim.kube import patch_status
from fleetsim.nodes import gpus_of, node_ip, now_rfc3339

log = logging.getLogger(__name__)
VERIFY_MODE = "verify"
UNHEALTHY_GPUS = "unhealthy-gpus"


def is_verify_pod(pod: dict[str, Any]) -> bool:
    """A window's GPU verify pod (its mode label). Pure."""
    return (pod["metadata"].get("labels") or {}).get(STAGE_MODE_LABEL) == VERIFY_MODE


def verdict(options: FleetOptions, node: SimNode) -> tuple[int, str]:
    """The exit code and output of the node's simulated GPU diagnostic (module rules; spends a fault)."""
    gpus = gpus_of(options, node.index)
    fault = options.faults.take(UNHEALTHY_GPUS, node.name, VERIFY_MODE)
    if fault is not None:
        return fault.exit_code, (f"fleetsim: simulated GPU diagnostic on {node.name}: FAIL: {gpus} GPU(s), "
                                 f"GPU 0 failed (fault {UNHEALTHY_GPUS}): exit {fault.exit_code}\n")
    if not gpus:
        return 1, f"fleetsim: {node.name} has no simulated GPU: no GPU tool answers\n"
    return 0, f"fleetsim: simulated GPU diagnostic on {node.name}: PASS: {gpus} GPU(s) healthy\n"


def run_verify_pod(ctx: SimContext, node: SimNode, pod: dict[str, Any]) -> None:
    """Play kubelet for one verify pod, from Pending to Succeeded/Failed (module rules; on the pool)."""
    uid, name = pod["metadata"]["uid"], pod["metadata"]["name"]
    started = now_rfc3339()
    ip = node_ip(node.index)
    patch_status(ctx.kube, pod, podstatus.stage_running_status(pod, ip, ip, started))
    if ctx.options.faults.take("hang", node.name, VERIFY_MODE) is not None:
        log.info("verify pod %s on %s hangs (fault)", name, node.name)
        return
    code, output = verdict(ctx.options, node)
    with ctx.lock:
        if uid in ctx.terminating or uid not in ctx.started:
            return  # deleted meanwhile
    logs = ctx.sandbox(node.name) / "var" / "log" / "noderoll" / "pods"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / f"{name}.log").write_text(output, encoding="utf-8")
    container = (pod["spec"].get("containers") or [{}])[-1].get("name", VERIFY_MODE)
    patch_status(ctx.kube, pod, podstatus.finished_status(pod, [(container, code, podstatus.log_tail(output))],
                                                          (started, now_rfc3339())))

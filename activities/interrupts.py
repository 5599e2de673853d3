"""The merged interrupt of a node window: run it and confirm it took effect. Does I/O.

Services (and noop) are confirmed by the interrupt Job succeeding. A reboot is confirmed by the
node itself: a new `bootID` and `Ready=True` again within `reboot_timeout_seconds`, seen through a
watch of that one node (a few events per reboot, not a read every 2 s). The pod of a
reboot may be killed by the very reboot it triggers, so its exit code only matters when the node
never rebooted.
"""

from __future__ import annotations

import time
from typing import Any

from kubernetes import client
from temporalio import activity
from temporalio.exceptions import ApplicationError

import kube
import metrics
from activities.heartbeats import beat, keep_alive, wait_slice
from activities.jobs import ensure_job, job_name
from activities.nodes import snapshot
from activities.stage_wait import wait_job
from api.enums import InterruptType
from kube.nodes import node_not_found, read_node
from kube.pod_wait import WATCH_SECONDS, JobWait, PodOutcome
from kube.watching import BOOKMARK, Watched, watch_from
from protocol import errors
from protocol.node_activities import RunInterruptInput, RunInterruptResult

# How a node that is gone during its reboot is reported (NodeNotFound).
REBOOT_GONE = "disappeared during its reboot"


def _read_node(name: str) -> client.V1Node:
    return read_node(name, REBOOT_GONE)


def _node_view(name: str) -> tuple[str, bool]:
    view = snapshot(_read_node(name))
    return view.boot_id, view.ready


def _next_node(current: client.V1Node, seconds: int) -> client.V1Node:
    """The node after its next change, or as it was after `seconds` (a watch of this one node from
    its resourceVersion: a reboot costs a few watch events instead of a read every 2 s)."""
    name = current.metadata.name

    def changed(event: dict[str, Any]) -> client.V1Node | None:
        if event["type"] == BOOKMARK:
            return None
        if event["type"] == "DELETED":
            raise node_not_found(name, REBOOT_GONE)
        return event["object"]

    watched = Watched(kube.core().list_node, f"node {name}", {"field_selector": f"metadata.name={name}"})
    version, node = watch_from(watched, current.metadata.resource_version, seconds, changed)
    if not version:
        return _read_node(name)  # resourceVersion too old: read it again
    return node or current


def _rebooted_since(input: RunInterruptInput) -> bool:
    boot_id, _ = _node_view(input.job.node)
    return bool(boot_id) and bool(input.boot_id_before) and boot_id != input.boot_id_before


def confirm_reboot(input: RunInterruptInput, name: str) -> RunInterruptResult:
    """Wait for the node's reboot (new boot id, Ready) while the interrupt Job `name` has not failed."""
    node = input.job.node
    deadline = time.monotonic() + input.reboot_timeout_seconds
    current = _read_node(node)
    # The interrupt pod, waited for as a stage pod is (kube.pod_wait): a pod deleted or replaced
    # before it finished fails the interrupt and ends its Job.
    wait = JobWait(name, node)
    outcome: PodOutcome | None = None
    while True:
        view = snapshot(current)
        boot_id, ready = view.boot_id, view.ready
        rebooted = bool(boot_id) and boot_id != input.boot_id_before
        if rebooted and ready:
            return RunInterruptResult(name, 0, boot_id_after=boot_id, log_tail=outcome.log_tail if outcome else "")
        # Until the interrupt pod finished (once rebooted the Job no longer matters, and may not exist:
        # see run_interrupt); its pods are listed once (again only after 410), then watched.
        if outcome is None and not rebooted and not wait.resource_version:
            outcome = wait.look()
        if outcome is not None and outcome.exit_code != 0 and not rebooted:
            # The interrupt pod failed before the node went down: nothing rebooted.
            return RunInterruptResult(name, outcome.exit_code, boot_id_after=boot_id, log_tail=outcome.log_tail)
        if time.monotonic() > deadline:
            state = "rebooted but not Ready" if rebooted else f"boot id still {boot_id or 'unknown'}"
            raise errors.fatal(
                f"reboot of {node} not confirmed within {input.reboot_timeout_seconds}s: {state}",
                errors.INTERRUPT_TIMEOUT,
            )
        beat({"job": name, "boot_id": boot_id, "ready": ready})
        seconds = max(1, int(wait_slice(WATCH_SECONDS)))
        if outcome is None and not rebooted:
            outcome = wait.step(seconds)
            current = _read_node(node)
        else:
            current = _next_node(current, seconds)


@activity.defn(name="run_interrupt")
@keep_alive
def run_interrupt(input: RunInterruptInput) -> RunInterruptResult:
    """Run the interrupt Job; a reboot waits for a new boot id and Ready, others for Job success."""
    kind = (input.job.interrupt or {}).get("type", "")
    if kind not in set(InterruptType):
        raise errors.fatal(f"unknown interrupt type {kind!r}", errors.INVALID_SPEC)
    if kind == InterruptType.REBOOT and _rebooted_since(input):
        # A later attempt after the node already rebooted (e.g. it came back too slowly): only wait
        # for Ready; creating another interrupt Job would reboot the node a second time.
        name = job_name(input.job)
    else:
        name, _, _ = ensure_job(input.job)
    try:
        if kind == InterruptType.REBOOT:
            result = confirm_reboot(input, name)
        else:
            outcome = wait_job(name, time.monotonic() + input.job.timeout_seconds + 30, input.job.node)
            boot_id, _ = _node_view(input.job.node)
            result = RunInterruptResult(name, outcome.exit_code, boot_id_after=boot_id, log_tail=outcome.log_tail)
    except ApplicationError:
        # A reboot that never came back, or a node that vanished: a failed interrupt too.
        metrics.record_interrupt(kind, "failed")
        raise
    metrics.record_interrupt(kind, "succeeded" if result.exit_code == 0 else "failed")
    return result

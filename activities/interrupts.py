"""The merged interrupt of a node window: run it and confirm it took effect. Does I/O.

Services (and noop) are confirmed by the interrupt pod succeeding. A reboot is confirmed by the
node itself: a new `bootID` and `Ready=True` again within `reboot_timeout_seconds`, seen through a
watch of that one node that ends only when the node is back (inside `keep_alive`, slices of up to
`REBOOT_WATCH_SECONDS`: usually one watch request per reboot, not one per node event or a read every
few seconds). The pod of a reboot may be killed by the very reboot it triggers, so its exit code only
matters when the node never rebooted: it is looked at between the node's watch slices, and a
failed pod is believed only after a fresh read of the node shows no new boot id.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kubernetes import client
from temporalio import activity
from temporalio.exceptions import ApplicationError

import kube
import metrics
from activities.heartbeats import beat, keep_alive, watch_slice
from activities.nodes import snapshot
from activities.pod_create import ensure_pod, pod_name, prestart
from activities.stage_wait import previous_pod, wait_job
from api.enums import InterruptType
from kube.nodes import node_not_found, read_node
from kube.pod_wait import WATCH_SECONDS, PodOutcome, PodWait
from kube.watching import BOOKMARK, Watched, watch_from
from protocol import errors
from protocol.activity_refs import RUN_INTERRUPT
from protocol.node_activities import RunInterruptInput, RunInterruptResult

# How a node that is gone during its reboot is reported (NodeNotFound).
REBOOT_GONE = "disappeared during its reboot"
# Seconds of one watch of the rebooting node inside `keep_alive` (the interrupt pod is looked at between slices).
REBOOT_WATCH_SECONDS = 30
# Seconds of the look at the interrupt pod between the node's watch slices (a watch from the last version).
POD_LOOK_SECONDS = 1


def _read_node(name: str) -> client.V1Node:
    return read_node(name, REBOOT_GONE)


def _node_view(name: str) -> tuple[str, bool]:
    view = snapshot(_read_node(name))
    return view.boot_id, view.ready


def new_boot(boot_id: str, boot_id_before: str) -> bool:
    """The node reports a boot id, and not the one it had before the interrupt. Pure."""
    return bool(boot_id) and boot_id != boot_id_before


def _rebooted_since(input: RunInterruptInput, node: client.V1Node) -> bool:
    return bool(input.boot_id_before) and new_boot(snapshot(node).boot_id, input.boot_id_before)


def back_after_reboot(node: client.V1Node, boot_id_before: str) -> bool:
    """The node runs a boot other than `boot_id_before` and is Ready. Pure."""
    view = snapshot(node)
    return new_boot(view.boot_id, boot_id_before) and view.ready


def _next_node(current: client.V1Node, seconds: int, back: Callable[[client.V1Node], bool]) -> client.V1Node:
    """The node once `back(node)`, or as last seen after `seconds` (a watch of this one node from its
    resourceVersion: one request while the node goes down and comes back, not one per event)."""
    name = current.metadata.name
    latest = [current]

    def changed(event: dict[str, Any]) -> client.V1Node | None:
        if event["type"] == BOOKMARK:
            return None
        if event["type"] == "DELETED":
            raise node_not_found(name, REBOOT_GONE)
        latest[0] = event["object"]
        return latest[0] if back(latest[0]) else None

    watched = Watched(kube.core().list_node, f"node {name}", {"field_selector": f"metadata.name={name}"})
    version, node = watch_from(watched, current.metadata.resource_version, seconds, changed)
    if not version:
        return _read_node(name)  # resourceVersion too old: read it again
    return node or latest[0]


def confirm_reboot(input: RunInterruptInput, name: str, current: client.V1Node | None = None,
                   created: str = "") -> RunInterruptResult:
    """Wait for the node's reboot (new boot id, Ready) while the interrupt pod `name` has not failed.
    `current`: the node as read just before (saves a read); `created`: the resourceVersion of the pod
    just created (watched from there, no read)."""
    node = input.job.node
    deadline = time.monotonic() + input.reboot_timeout_seconds
    current = current or _read_node(node)
    # The interrupt pod, waited for as a stage pod is (kube.pod_wait): a pod deleted or replaced
    # before it finished fails the interrupt.
    wait = PodWait(name, node, created)
    outcome: PodOutcome | None = None
    while True:
        view = snapshot(current)
        boot_id, ready = view.boot_id, view.ready
        rebooted = new_boot(boot_id, input.boot_id_before)
        if rebooted and ready:
            return RunInterruptResult(name, 0, boot_id_after=boot_id, log_tail=outcome.log_tail if outcome else "")
        # Until the interrupt pod finished (once rebooted the pod no longer matters, and may not exist:
        # see run_interrupt): its pods listed once (again only after 410), then a short watch from the
        # last version between the node's slices.
        if outcome is None and not rebooted:
            outcome = wait.step(POD_LOOK_SECONDS) if wait.resource_version else wait.look()
            if outcome is not None and outcome.exit_code != 0:
                # Killed by its own reboot, or failed with the node never going down: a fresh read says which.
                current = _read_node(node)
                boot_id = snapshot(current).boot_id
                if not new_boot(boot_id, input.boot_id_before):
                    # The interrupt pod failed before the node went down: nothing rebooted.
                    return RunInterruptResult(name, outcome.exit_code, boot_id_after=boot_id,
                                              log_tail=outcome.log_tail)
                continue
        if time.monotonic() > deadline:
            state = "rebooted but not Ready" if rebooted else f"boot id still {boot_id or 'unknown'}"
            raise errors.fatal(
                f"reboot of {node} not confirmed within {input.reboot_timeout_seconds}s: {state}",
                errors.INTERRUPT_TIMEOUT,
            )
        beat({"job": name, "boot_id": boot_id, "ready": ready})
        left = deadline - time.monotonic() + 1
        seconds = max(1, int(min(watch_slice(WATCH_SECONDS, REBOOT_WATCH_SECONDS), left)))
        current = _next_node(current, seconds, lambda n: back_after_reboot(n, input.boot_id_before))


@activity.defn(name=RUN_INTERRUPT.name)
@keep_alive
def run_interrupt(input: RunInterruptInput) -> RunInterruptResult:
    """Run the interrupt pod (or adopt the one the stage pod before created: `input.prestarted`); a
    reboot waits for a new boot id and Ready, others for the pod's success; then create the window's
    first post-interrupt pod (`input.then`, ADR 0022)."""
    kind = (input.job.interrupt or {}).get("type", "")
    if kind not in set(InterruptType):
        raise errors.fatal(f"unknown interrupt type {kind!r}", errors.INVALID_SPEC)
    before = _read_node(input.job.node) if kind == InterruptType.REBOOT else None
    if before is not None and _rebooted_since(input, before):
        # A later attempt after the node already rebooted (e.g. it came back too slowly): only wait
        # for Ready; creating another interrupt pod would reboot the node a second time.
        name, created = pod_name(input.job), ""
    else:
        pod = ensure_pod(input.job, seen=previous_pod()[0], prestarted=input.prestarted)
        name, created = pod.name, pod.resource_version
    try:
        if kind == InterruptType.REBOOT:
            result = confirm_reboot(input, name, before, created)
        else:
            outcome = wait_job(name, time.monotonic() + input.job.timeout_seconds + 30, input.job.node)
            boot_id, _ = _node_view(input.job.node)
            result = RunInterruptResult(name, outcome.exit_code, boot_id_after=boot_id, log_tail=outcome.log_tail)
    except ApplicationError:
        # A reboot that never came back, or a node that vanished: a failed interrupt too.
        metrics.record_interrupt(kind, "failed")
        raise
    metrics.record_interrupt(kind, "succeeded" if result.exit_code == 0 else "failed")
    if result.exit_code == 0:
        # The node is back (a reboot: new boot id, Ready): the first post-interrupt pod (ADR 0022).
        result.next_pod = prestart(input.then)
    return result

"""`wait_job`: the heartbeating wait for a stage or interrupt pod (`run_stage_pod`, `run_interrupt`). Does I/O.

The wait itself is `kube.pod_wait.PodWait` (one watch of the pod resumed from the last
resourceVersion, a read only for an adopted pod or after 410; a pod deleted before it finished
fails the attempt; a deleted node is `NodeNotFound`). Here it is wrapped for activities: the
heartbeat details carry the pod's uid and the resourceVersion it was seen at (sent as the watch
sees them), so a retried attempt recognises the pod its predecessor waited for (`previous_pod`),
and does not create it again (`activities.pod_create.ensure_pod`). A pod still running at the
wait's deadline is deleted: nothing runs on after noderoll gave up on it.
Inside `keep_alive` (the stage and interrupt activities) a watch slice lasts up to the node check's
interval (`NODE_CHECK_SECONDS`), usually the whole pod: one watch request per pod instead of one per
5 s (docs/benchmarks.md, issue #26's requests per window).
"""

from __future__ import annotations

import time
from typing import Any

from temporalio import activity

from activities.heartbeats import beat, watch_slice
from kube.pod_wait import NODE_CHECK_SECONDS, WATCH_SECONDS, PodOutcome, PodWait, delete_pod


def previous_pod() -> tuple[str, str]:
    """(pod uid, resourceVersion it was seen at) an earlier attempt of this activity was waiting for
    (("", "") when none or no activity)."""
    try:
        details = activity.info().heartbeat_details
    except RuntimeError:
        return "", ""
    first: Any = details[0] if details else None
    if not isinstance(first, dict):
        return "", ""
    return str(first.get("pod", "")), str(first.get("seen", ""))


def wait_job(name: str, deadline: float, node: str = "", created: str = "", uid: str = "") -> PodOutcome:
    """Wait for the stage pod to finish, heartbeating; past `deadline` the stage counts as failed
    and the pod is deleted. `created`, `uid`: the resourceVersion and uid of the pod the caller has
    just created ("": adopted); the first heartbeat carries the uid, so a retry after a crash at any
    point after the creation knows the pod was made (`previous_pod`)."""
    previous = previous_pod()
    if uid and not previous[0]:
        previous = (uid, created)
    wait = PodWait(name, node, created, previous=previous, on_seen=beat)
    outcome = None if wait.resource_version else wait.look()
    while outcome is None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            delete_pod(name)
            return PodOutcome(-1, f"stage pod {name} did not finish in time (deleted)")
        beat(wait.details())
        outcome = wait.step(max(1, int(min(watch_slice(WATCH_SECONDS, NODE_CHECK_SECONDS), remaining))))
    return outcome

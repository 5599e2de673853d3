"""`wait_job`: the heartbeating wait for a stage or interrupt Job's pod (`run_stage_pod`, `run_interrupt`). Does I/O.

The wait itself is `kube.pod_wait.JobWait` (one pod watch resumed from the last resourceVersion, a
list only for an adopted Job or after 410; a pod deleted or replaced before it finished fails the
attempt and ends its Job; a deleted node is `NodeNotFound`). Here it is wrapped for activities: the
heartbeat details carry the pod's uid and the resourceVersion it was seen at (sent as the watch
sees them), so a retried attempt recognises the pod its predecessor waited for (`_previous_pod`).
Inside `keep_alive` (the stage and interrupt activities) a watch slice lasts up to the node check's
interval (`NODE_CHECK_SECONDS`), usually the whole pod: one watch request per pod instead of one per
5 s (docs/benchmarks.md, issue #26's requests per window).
"""

from __future__ import annotations

import time
from typing import Any

from temporalio import activity

from activities.heartbeats import beat, watch_slice
from kube.pod_wait import NODE_CHECK_SECONDS, WATCH_SECONDS, JobWait, PodOutcome


def _previous_pod() -> tuple[str, str]:
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


def wait_job(name: str, deadline: float, node: str = "", created: str = "") -> PodOutcome:
    """Wait for the Job's pod to finish, heartbeating; past `deadline` the stage counts as failed.
    `created`: the resourceVersion of the Job the caller has just created ("": adopted)."""
    wait = JobWait(name, node, created, previous=_previous_pod(), on_seen=beat)
    outcome = None if wait.resource_version else wait.look()
    while outcome is None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return PodOutcome(-1, f"Job {name} did not finish in time")
        beat(wait.details())
        outcome = wait.step(max(1, int(min(watch_slice(WATCH_SECONDS, NODE_CHECK_SECONDS), remaining))))
    return outcome

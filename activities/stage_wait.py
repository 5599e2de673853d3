"""The `run_stage_job` activity, and `wait_job`: the heartbeating wait for a Job's pod. Does I/O.

The wait itself is `kube.pod_wait.JobWait` (one pod watch resumed from the last resourceVersion, a
list only for an adopted Job or after 410; a pod deleted or replaced before it finished fails the
attempt and ends its Job; a deleted node is `NodeNotFound`). Here it is wrapped for activities: a
heartbeat between watch slices carries the pod's uid and the resourceVersion it was seen at, so a
retried attempt recognises the pod its predecessor waited for (`_previous_pod`).
"""

from __future__ import annotations

import time
from typing import Any

from temporalio import activity

import metrics
from activities.heartbeats import beat, keep_alive, wait_slice
from activities.io import RunStageJobResult, StageJob
from activities.jobs import ensure_job
from kube.pod_wait import WATCH_SECONDS, JobWait, PodOutcome


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
    wait = JobWait(name, node, created, previous=_previous_pod())
    outcome = None if wait.resource_version else wait.look()
    while outcome is None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return PodOutcome(-1, f"Job {name} did not finish in time")
        beat(wait.details())
        outcome = wait.step(max(1, int(min(wait_slice(WATCH_SECONDS), remaining))))
    return outcome


@activity.defn(name="run_stage_job")
@keep_alive
def run_stage_job(input: StageJob) -> RunStageJobResult:
    """Run one stage (and its check, in the same pod) as a Job pinned to the node."""
    started = time.monotonic()
    name, adopted, version = ensure_job(input)
    # A small margin over the Job's own activeDeadlineSeconds, so the Job's verdict normally wins.
    outcome = wait_job(name, time.monotonic() + input.timeout_seconds + 30, input.node, created=version)
    mode = outcome.mode if outcome.mode in (input.mode, input.check) else input.mode
    # An adopted Job started before this attempt: its duration is unknown here, so it is not observed.
    if not adopted:
        metrics.record_stage_duration(input.package, input.mode, time.monotonic() - started)
    if outcome.exit_code != 0:
        metrics.record_stage_failure(input.package, mode)
    return RunStageJobResult(job_name=name, exit_code=outcome.exit_code, log_tail=outcome.log_tail,
                             adopted=adopted, mode=mode, completed=list(outcome.completed))

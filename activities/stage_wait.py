"""Waiting for a stage Job's pod, and the `run_stage_job` activity. Does I/O.

One list, then one watch of the Job's pods resumed from the last resourceVersion seen (a slice of a
few seconds at a time, to heartbeat), so a 5 s stage costs one list and one or two watches. The
attempt's pod is remembered (also in the heartbeat details, for an activity retried after a worker
crash): when it is deleted before it finished, or replaced by the Job controller, the attempt fails
and the Job is ended (failed, kept), and when the node itself is gone the activity fails with
`NodeNotFound`.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from temporalio import activity

from activities import errors, kube
from activities.heartbeats import beat, keep_alive, wait_slice
from activities.io import RunStageJobResult, StageJob
from activities.jobs import (
    NODE_CHECK_SECONDS,
    WATCH_SECONDS,
    PodOutcome,
    end_job,
    ensure_job,
    finished_outcome,
    job_failure,
)
from api.keys import PACKAGE_POD_NAMESPACE
from worker import metrics

log = logging.getLogger(__name__)


def _previous_pod() -> str:
    """The pod uid an earlier attempt of this activity was waiting for ("" when none or no activity)."""
    try:
        details = activity.info().heartbeat_details
    except RuntimeError:
        return ""
    first: Any = details[0] if details else None
    return str(first.get("pod", "")) if isinstance(first, dict) else ""


class JobWait:
    """The wait for one Job's pod: the pod's uid once seen, and the resourceVersion to watch from."""

    def __init__(self, name: str, node: str, created: bool = False) -> None:
        self.name = name
        self.node = node
        # Just created by this attempt: a first look without pods is the Job controller not having
        # created the pod yet, not a Job that failed without one (no `get jobs` for it).
        self.created = created
        self.pod_uid = _previous_pod()
        self.pod_name = ""
        self.resource_version = ""
        self.node_checked = time.monotonic()

    def _gone(self) -> PodOutcome:
        """Our pod vanished (or was replaced) before it finished: fail the attempt, end the Job."""
        log.info("stage pod %s of Job %s deleted before it finished", self.pod_name or self.pod_uid, self.name)
        end_job(self.name)
        self.check_node()
        return PodOutcome(-1, f"stage pod {self.pod_name or self.pod_uid} was deleted before it finished "
                              f"(Job {self.name} ended; the stage runs again as the next attempt)")

    def check_node(self) -> None:
        """Raise NodeNotFound (non-retryable) when the Job's node no longer exists."""
        self.node_checked = time.monotonic()
        if not self.node:
            return
        try:
            kube.core().read_node(self.node)
        except ApiException as err:
            if kube.is_not_found(err):
                end_job(self.name)
                raise errors.fatal(f"node {self.node} does not exist (deleted during the window)",
                                   errors.NODE_NOT_FOUND) from err
            kube.raise_for(err, f"read node {self.node}")

    def _see(self, pod: client.V1Pod, deleted: bool = False) -> PodOutcome | None:
        uid = pod.metadata.uid
        if not self.pod_uid:
            self.pod_uid, self.pod_name = uid, pod.metadata.name
        if uid != self.pod_uid:
            return None if deleted else self._gone()  # a replacement pod: ours is gone
        self.pod_name = pod.metadata.name
        outcome = finished_outcome(self.name, pod)
        if outcome is None and deleted:
            return self._gone()
        return outcome

    def look(self) -> PodOutcome | None:
        """List the Job's pods once (also the resourceVersion the next watch starts from)."""
        try:
            pods = kube.core().list_namespaced_pod(PACKAGE_POD_NAMESPACE, label_selector=f"job-name={self.name}")
        except ApiException as err:
            kube.raise_for(err, f"list pods of Job {self.name}")
        self.resource_version = pods.metadata.resource_version
        ours = [p for p in pods.items if not self.pod_uid or p.metadata.uid == self.pod_uid]
        if self.pod_uid and not ours:
            return self._gone()
        if ours:
            # Without a remembered pod, the oldest is the attempt's (a Job of backoffLimit 0 has one).
            return self._see(min(ours, key=lambda p: p.metadata.creation_timestamp))
        if self.created:
            self.created = False
            return None
        return job_failure(self.name)

    def watch(self, seconds: int) -> PodOutcome | None:
        """Watch from the last resourceVersion for `seconds`; an outcome, or None (resourceVersion
        cleared when the watch has to be replaced by a fresh list)."""
        stream = watch.Watch()
        try:
            for event in stream.stream(
                kube.core().list_namespaced_pod, PACKAGE_POD_NAMESPACE, label_selector=f"job-name={self.name}",
                resource_version=self.resource_version, timeout_seconds=seconds,
            ):
                pod = event["object"]
                self.resource_version = pod.metadata.resource_version or self.resource_version
                outcome = self._see(pod, deleted=event["type"] == "DELETED")
                if outcome is not None:
                    return outcome
        except ApiException as err:
            if err.status != 410:
                kube.raise_for(err, f"watch pods of Job {self.name}")
            self.resource_version = ""  # too old: list again
        finally:
            stream.stop()
        return None


def wait_job(name: str, deadline: float, node: str = "", created: bool = False) -> PodOutcome:
    """Wait for the Job's pod to finish, heartbeating; past `deadline` the stage counts as failed.
    `created`: the caller has just created the Job."""
    wait = JobWait(name, node, created)
    outcome = wait.look()
    while outcome is None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return PodOutcome(-1, f"Job {name} did not finish in time")
        beat({"job": name, "pod": wait.pod_uid})
        if time.monotonic() - wait.node_checked >= NODE_CHECK_SECONDS:
            wait.check_node()
        if not wait.resource_version:
            outcome = wait.look()
            continue
        outcome = wait.watch(max(1, int(min(wait_slice(WATCH_SECONDS), remaining))))
    return outcome


@activity.defn(name="run_stage_job")
@keep_alive
def run_stage_job(input: StageJob) -> RunStageJobResult:
    """Run one stage (and its check, in the same pod) as a Job pinned to the node."""
    started = time.monotonic()
    name, adopted = ensure_job(input)
    # A small margin over the Job's own activeDeadlineSeconds, so the Job's verdict normally wins.
    outcome = wait_job(name, time.monotonic() + input.timeout_seconds + 30, input.node, created=not adopted)
    mode = outcome.mode if outcome.mode in (input.mode, input.check) else input.mode
    # An adopted Job started before this attempt: its duration is unknown here, so it is not observed.
    if not adopted:
        metrics.record_stage_duration(input.package, input.mode, time.monotonic() - started)
    if outcome.exit_code != 0:
        metrics.record_stage_failure(input.package, mode)
    return RunStageJobResult(job_name=name, exit_code=outcome.exit_code, log_tail=outcome.log_tail,
                             adopted=adopted, mode=mode)

"""Waiting for a stage Job's pod, and the `run_stage_job` activity. Does I/O.

One watch of the Job's pods (label `job-name`), resumed from the last resourceVersion seen (a slice
of a few seconds at a time, to heartbeat): a Job this attempt created is watched from the Job's own
resourceVersion (its pod comes later), so a 5 s stage costs one or two watches and no list. A list
is needed only for a Job adopted from an earlier attempt, or when a watch's resourceVersion expired
(410); it is served from the apiserver's watch cache (never a read of every pod of the namespace
from etcd), fresh enough by construction (docs/architecture.md, "Reads"):

* nothing remembered: `resourceVersion=0` (the cache as it is). A pod the cache does not show yet
  is not taken for gone: a Job without a pod is checked by a GET of the Job (fresh), and the watch
  from the list's resourceVersion delivers the pod when it comes;
* a pod remembered (this attempt's watch, or an earlier attempt's heartbeat details: its uid and
  the resourceVersion it was seen at): `resourceVersionMatch=NotOlderThan` that resourceVersion, so
  the list shows every change up to the moment the pod was seen, and a pod missing from it really
  was deleted (a stale list never makes a running stage look gone and run again).

The attempt's pod is remembered: when it is deleted before it finished, or replaced by the Job
controller, the attempt fails and the Job is ended (failed, kept), and when the node itself is gone
the activity fails with `NodeNotFound`.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from temporalio import activity

import kube
import metrics
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
from kube.nodes import node_not_found

log = logging.getLogger(__name__)


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


# Served from the apiserver's watch cache whatever its version (module docstring).
ANY_VERSION = "0"
NOT_OLDER_THAN = "NotOlderThan"


class JobWait:
    """The wait for one Job's pod: the pod's uid once seen, and the resourceVersion to watch from."""

    def __init__(self, name: str, node: str, created: str = "") -> None:
        self.name = name
        self.node = node
        # Created by this attempt (its resourceVersion): the pod comes later, so the wait starts with
        # a watch from the Job's resourceVersion; and a later look without pods is the Job
        # controller not having created the pod yet, not a Job that failed without one.
        self.created = bool(created)
        self.pod_uid, self.seen = _previous_pod()
        self.pod_name = ""
        self.resource_version = created
        self.node_checked = time.monotonic()

    def details(self) -> dict[str, str]:
        """Heartbeat details: what a retried attempt needs to recognise the pod (module docstring)."""
        return {"job": self.name, "pod": self.pod_uid, "seen": self.seen}

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
                raise node_not_found(self.node, "does not exist (deleted during the window)") from err
            kube.raise_for(err, f"read node {self.node}")

    def _see(self, pod: client.V1Pod, version: str, deleted: bool = False) -> PodOutcome | None:
        uid = pod.metadata.uid
        if not self.pod_uid:
            self.pod_uid, self.pod_name = uid, pod.metadata.name
        if uid != self.pod_uid:
            return None if deleted else self._gone()  # a replacement pod: ours is gone
        self.pod_name = pod.metadata.name
        self.seen = version or self.seen
        outcome = finished_outcome(self.name, pod)
        if outcome is None and deleted:
            return self._gone()
        return outcome

    def look(self) -> PodOutcome | None:
        """List the Job's pods once, from the watch cache (also the resourceVersion the next watch
        starts from): not older than the version our pod was seen at, when one was."""
        version = {"resource_version": self.seen, "resource_version_match": NOT_OLDER_THAN} if (
            self.pod_uid and self.seen) else {"resource_version": ANY_VERSION}
        try:
            pods = kube.core().list_namespaced_pod(PACKAGE_POD_NAMESPACE, label_selector=f"job-name={self.name}",
                                                   **version)
        except ApiException as err:
            kube.raise_for(err, f"list pods of Job {self.name}")
        self.resource_version = pods.metadata.resource_version
        ours = [p for p in pods.items if not self.pod_uid or p.metadata.uid == self.pod_uid]
        if self.pod_uid and not ours:
            return self._gone()
        if ours:
            # Without a remembered pod, the oldest is the attempt's (a Job of backoffLimit 0 has one).
            return self._see(min(ours, key=lambda p: p.metadata.creation_timestamp), self.resource_version)
        if self.created:
            self.created = False
            return None
        return job_failure(self.name)

    def on_event(self, event: dict[str, Any]) -> PodOutcome | None:
        """One watch event: the resourceVersion to resume from, and the outcome when our pod finished."""
        if event["type"] == "BOOKMARK":
            # Only a newer resourceVersion to resume from (the object is the raw JSON).
            raw = (event.get("raw_object") or {}).get("metadata") or {}
            self.resource_version = str(raw.get("resourceVersion") or self.resource_version)
            return None
        pod = event["object"]
        self.resource_version = pod.metadata.resource_version or self.resource_version
        return self._see(pod, self.resource_version, deleted=event["type"] == "DELETED")

    def watch(self, seconds: int) -> PodOutcome | None:
        """Watch from the last resourceVersion for `seconds`; an outcome, or None (resourceVersion
        cleared when the watch has to be replaced by a fresh list)."""
        stream = watch.Watch()
        try:
            for event in stream.stream(
                kube.core().list_namespaced_pod, PACKAGE_POD_NAMESPACE, label_selector=f"job-name={self.name}",
                resource_version=self.resource_version, timeout_seconds=seconds, allow_watch_bookmarks=True,
            ):
                outcome = self.on_event(event)
                if outcome is not None:
                    return outcome
        except ApiException as err:
            if not kube.is_gone(err):
                kube.raise_for(err, f"watch pods of Job {self.name}")
            self.resource_version = ""  # too old: list again
        finally:
            stream.stop()
        return None


def wait_job(name: str, deadline: float, node: str = "", created: str = "") -> PodOutcome:
    """Wait for the Job's pod to finish, heartbeating; past `deadline` the stage counts as failed.
    `created`: the resourceVersion of the Job the caller has just created ("": adopted)."""
    wait = JobWait(name, node, created)
    outcome = None if wait.resource_version else wait.look()
    while outcome is None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return PodOutcome(-1, f"Job {name} did not finish in time")
        beat(wait.details())
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

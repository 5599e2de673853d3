"""`run_verify_pod`: the GPU verify of a node window (`spec.verify`, api/verify.py). Does I/O.

Creates the verify pod (`activities.verify_pod`; or adopts the one the activity before created,
ADR 0022, or the one an earlier attempt of this activity created: its name derives from the window),
waits for it as for a stage pod (`activities.stage_wait.wait_job`: a watch of that one pod; a pod that
cannot start, its image not pullable, fails at once and is deleted; past the verify's
`timeoutSeconds` plus a margin it is deleted) and returns its exit code and log tail. One attempt:
what the GPUs said is the window's answer, and `retry` runs the window again.
"""

from __future__ import annotations

import time

from temporalio import activity

from activities.heartbeats import keep_alive
from activities.pod_create import ensure_pod
from activities.stage_wait import previous_pod, wait_job
from protocol.activity_refs import RUN_VERIFY_POD
from protocol.node_activities import RunVerifyPodInput, RunVerifyPodResult

# Past the pod's own deadline (the kubelet's verdict normally comes first).
DEADLINE_MARGIN_SECONDS = 30


@activity.defn(name=RUN_VERIFY_POD.name)
@keep_alive
def run_verify_pod(input: RunVerifyPodInput) -> RunVerifyPodResult:
    """Run the window's verify pod on the node and wait until it ends (module docstring)."""
    job = input.job
    pod = ensure_pod(job, seen=previous_pod()[0], prestarted=input.prestarted)
    outcome = wait_job(pod.name, time.monotonic() + job.timeout_seconds + DEADLINE_MARGIN_SECONDS, job.node,
                       created=pod.resource_version, uid=pod.uid)
    return RunVerifyPodResult(pod.name, outcome.exit_code, outcome.log_tail)

"""`run_stage_pod`: one stage pod running several stages in order, each followed by its check, and
the window's merged interrupt last when it carries it. Does I/O.

Issue #14: a reboot package's window runs at most two stage pods, everything before the interrupt
in one (the interrupt included) and everything after it in the other, instead of a Job per stage
and one for the interrupt. Every stage keeps its record and its check: each stage and each check is
its own container, named after its mode (the stage pod contract in `activities.stage_pod`), so the
container that failed names the mode, and the result lists the modes that succeeded (how far the
pod got). The node window retries a failed stage from that stage in a new pod
(`workflows/node_pods.py`).

The interrupt, when the pod carries it, runs only once every stage before it succeeded (it is the
pod's last container). The wait ends when the pod ends: fleetsim ends it right after the node went
down; a real kubelet marks it Failed when the node is back (the reboot killed the interrupt
container), its stage containers still terminated with 0, so the stages count as done either way.
A reboot is then confirmed as `run_interrupt` confirms it (a new boot id with Ready, seen through a
watch of the node), and one not confirmed in time is reported as the interrupt's failure
(`interrupt_exit` -1), never as a stage's.
"""

from __future__ import annotations

import time

from temporalio import activity
from temporalio.exceptions import ApplicationError

import metrics
from activities import stage_pod
from activities.heartbeats import keep_alive
from activities.interrupts import confirm_reboot
from activities.jobs import ensure_job
from activities.stage_pod import INTERRUPT_MODE
from activities.stage_wait import wait_job
from api.enums import InterruptType
from kube.pod_wait import PodOutcome
from protocol import errors
from protocol.node_activities import RunInterruptInput, RunStagePodInput, RunStagePodResult, StageJob


def _observe(job: StageJob, outcome: PodOutcome) -> None:
    """Per stage: its duration (stage and check containers) and, for the one that failed, a failure."""
    modes = [m for m in stage_pod.modes(job) if m != INTERRUPT_MODE]
    for mode in modes:
        if mode.endswith("-check"):
            continue
        if mode in outcome.durations:
            check = f"{mode}-check"
            metrics.record_stage_duration(job.package, mode,
                                          outcome.durations[mode] + outcome.durations.get(check, 0.0))
    if outcome.exit_code != 0 and outcome.mode in modes:
        metrics.record_stage_failure(job.package, outcome.mode)


def _interrupt(input: RunStagePodInput, name: str, outcome: PodOutcome, result: RunStagePodResult) -> None:
    """The stages succeeded and the interrupt container started: its outcome into `result`."""
    kind = str((input.job.interrupt or {}).get("type", ""))
    if kind == InterruptType.REBOOT:
        try:
            confirmed = confirm_reboot(RunInterruptInput(input.job, input.boot_id_before,
                                                         input.reboot_timeout_seconds), name)
        except ApplicationError as err:
            if err.type != errors.INTERRUPT_TIMEOUT:
                raise  # the node is gone: the window ends
            result.interrupt_exit, result.interrupt_log = -1, f"{err.type}: {err.message}"
        else:
            result.interrupt_exit, result.boot_id_after = confirmed.exit_code, confirmed.boot_id_after
            result.interrupt_log = confirmed.log_tail
    else:
        result.interrupt_exit, result.interrupt_log = outcome.exit_code, outcome.log_tail
    metrics.record_interrupt(kind, "succeeded" if result.interrupt_exit == 0 else "failed")


@activity.defn(name="run_stage_pod")
@keep_alive
def run_stage_pod(input: RunStagePodInput) -> RunStagePodResult:
    """Run the stages of `input.job.modes` in one pod pinned to the node (the interrupt last when set)."""
    job = input.job
    kind = str((job.interrupt or {}).get("type", ""))
    if job.interrupt is not None and kind not in set(InterruptType):
        raise errors.fatal(f"unknown interrupt type {kind!r}", errors.INVALID_SPEC)
    name, adopted, version = ensure_job(job)
    # A small margin over the Job's own activeDeadlineSeconds, so the Job's verdict normally wins.
    outcome = wait_job(name, time.monotonic() + job.timeout_seconds + 30, job.node, created=version)
    stages = [m for m in stage_pod.modes(job) if m != INTERRUPT_MODE]
    completed = [m for m in outcome.completed if m != INTERRUPT_MODE]
    if not adopted:
        _observe(job, outcome)
    if completed != stages or job.interrupt is None:
        mode = outcome.mode if outcome.mode in stages else (stages[len(completed)] if len(completed) < len(stages)
                                                             else stages[-1])
        # A pod that ended before a stage finished without a failing container (deadline, deleted) fails too.
        code = outcome.exit_code if completed == stages else (outcome.exit_code or -1)
        return RunStagePodResult(name, code, outcome.log_tail, mode, completed, adopted, containers=outcome.times)
    result = RunStagePodResult(name, 0, "", stages[-1] if stages else INTERRUPT_MODE, completed, adopted,
                               containers=outcome.times)
    _interrupt(input, name, outcome, result)
    return result

"""`run_stage_pod`: one stage pod running several stages in order, each followed by its check: of one
Package, or (`RunStagePodInput.following`) of several, one pod per window phase. Does I/O.

Issue #26 (ADR 0016): a window runs every Package's stages before the interrupt in one pod and
every Package's stages after it in another; the merged interrupt has a pod of its own
(`run_interrupt`). Every stage keeps its record and its check: each stage and each check is its own
container (the stage pod contract in `activities.stage_pod`; names in `api.stage_containers`), so
the container that failed names the Package and the mode (`run_phase_pod` maps it back), and the
result lists each Package's modes that succeeded (how far the pod got). The node window retries a
failed stage from that stage in a new pod (`workflows/node_pods.py`).

A pod of one Package may still carry the interrupt (the path of windows recorded before issue #26:
issue #14 put the merged interrupt last in the last Package's pre-interrupt pod). It runs only once
every stage before it succeeded (it is the pod's last container). The wait ends when the pod ends:
fleetsim ends it right after the node went down; a real kubelet marks it Failed when the node is
back (the reboot killed the interrupt container), its stage containers still terminated with 0, so
the stages count as done either way. A reboot is then confirmed as `run_interrupt` confirms it (a
new boot id with Ready, seen through a watch of the node), and one not confirmed in time is
reported as the interrupt's failure (`interrupt_exit` -1), never as a stage's. A pod of several
Packages never carries the interrupt.
"""

from __future__ import annotations

import time

from temporalio import activity
from temporalio.exceptions import ApplicationError

import metrics
from activities import stage_pod
from activities.heartbeats import keep_alive
from activities.interrupts import confirm_reboot
from activities.pod_create import ensure_pod, prestart
from activities.stage_pod import INTERRUPT_MODE
from activities.stage_wait import previous_pod, wait_job
from api.enums import InterruptType
from api.stage_containers import container_name, split_container
from kube.pod_wait import PodOutcome
from protocol import errors
from protocol.activity_refs import RUN_STAGE_POD
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


def _observe_part(index: int, count: int, job: StageJob, outcome: PodOutcome, decided: tuple[str, str]) -> None:
    """`_observe` for one Package of a pod of several (its containers carry its index)."""
    named = {container_name(index, count, mode): mode for mode in stage_pod.modes(job)}
    durations = {named[c]: seconds for c, seconds in outcome.durations.items() if c in named}
    failed = decided[1] if decided[0] == job.package else ""
    _observe(job, PodOutcome(outcome.exit_code if failed else 0, "", failed, (), durations))


def run_phase_pod(input: RunStagePodInput) -> RunStagePodResult:
    """One pod of several Packages' stages (one pod per window phase, ADR 0016): each Package's
    copy container and agent containers in order; the outcome attributed to the Package whose
    container decided it, from the container names (`api.stage_containers`)."""
    parts = [input.job, *input.following]
    names = [part.package for part in parts]
    pod = ensure_pod(input.job, input.following, seen=previous_pod()[0], prestarted=input.prestarted)
    name, adopted = pod.name, pod.adopted
    deadline = time.monotonic() + sum(part.timeout_seconds for part in parts) + 30
    outcome = wait_job(name, deadline, input.job.node, created=pod.resource_version, uid=pod.uid)
    completed: dict[str, list[str]] = {n: [] for n in names}
    for container in outcome.completed:
        package, mode = split_container(container, names)
        if package in completed:
            completed[package].append(mode)
    decided = split_container(outcome.mode, names) if outcome.mode else ("", "")
    if not adopted:
        for index, part in enumerate(parts):
            _observe_part(index, len(parts), part, outcome, decided)
    undone = next((part for part in parts if completed[part.package] != stage_pod.modes(part)), None)
    if undone is None:
        last = parts[-1]
        return RunStagePodResult(name, 0, "", stage_pod.modes(last)[-1], completed[last.package], adopted,
                                 package=last.package, completed_by_package=completed)
    # The first Package that did not finish decided: its failing container (its copy container: its
    # next stage), or, for a pod that ended without a failing container (deadline, deleted), its next stage.
    own = stage_pod.modes(undone)
    mode = decided[1] if decided[0] == undone.package and decided[1] in own else own[len(completed[undone.package])]
    code = outcome.exit_code or -1
    return RunStagePodResult(name, code, outcome.log_tail, mode, completed[undone.package], adopted,
                             package=undone.package, completed_by_package=completed)


@activity.defn(name=RUN_STAGE_POD.name)
@keep_alive
def run_stage_pod(input: RunStagePodInput) -> RunStagePodResult:
    """Run the stages of `input.job.modes` in one pod pinned to the node (the interrupt last when set;
    with `input.following`, the stages of several Packages: `run_phase_pod`); once they all
    succeeded, create the window's next pod (`input.then`, ADR 0022)."""
    result = _run(input)
    # Exit 0 only when every stage and check of every Package of the pod did (both run paths).
    if input.then is not None and input.job.interrupt is None and result.exit_code == 0:
        result.next_pod = prestart(input.then)
    return result


def _run(input: RunStagePodInput) -> RunStagePodResult:
    job = input.job
    if input.following:
        if job.interrupt is not None or any(part.interrupt is not None for part in input.following):
            raise errors.fatal("a pod of several Packages never carries the interrupt", errors.INVALID_SPEC)
        return run_phase_pod(input)
    kind = str((job.interrupt or {}).get("type", ""))
    if job.interrupt is not None and kind not in set(InterruptType):
        raise errors.fatal(f"unknown interrupt type {kind!r}", errors.INVALID_SPEC)
    pod = ensure_pod(job, seen=previous_pod()[0], prestarted=input.prestarted)
    name, adopted = pod.name, pod.adopted
    # A small margin over the pod's own activeDeadlineSeconds, so the kubelet's verdict normally wins.
    outcome = wait_job(name, time.monotonic() + job.timeout_seconds + 30, job.node,
                       created=pod.resource_version, uid=pod.uid)
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

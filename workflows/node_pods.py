"""A node window's stages in pods of several stages (issue #14). Deterministic, no I/O.

Windows run since the patch `stages-in-one-pod` (`workflows/node_window.py`) run each package's
stages before the window's interrupt in ONE pod and its stages after the interrupt in another
(`run_stage_pod`, `planning/pod_steps.py`), where they used to run a Job per stage and one for the
interrupt: a reboot package's window runs two stage pods instead of four. Every stage keeps its
check (its own container, right after the stage) and its record (the pod reports the modes that
succeeded; the entry in `noderoll.io/state` says the stage and attempt that failed).

The merged interrupt runs as the last container of the window's last package's pre-interrupt pod
(the interrupt container needs no package files, so any package's pod can carry it), once every
stage of the window before it succeeded. If that package failed, was skipped, or has no stage
before the interrupt, the interrupt runs in its own pod as before (`WindowRun._interrupt`).

Retries: a stage (or its check) that fails is retried, after the usual backoff, from that stage in
a new pod that runs it and the stages after it (and the interrupt, if this pod carried it); the
stages before it are done and do not run again. Attempts count per stage, as with a Job per stage:
a stage is given up after `stage_attempts` failed attempts of its own. An interrupt that the pod
reached and that failed (or a pod whose activity failed, so that it is unknown whether the
interrupt ran) is not carried again: its further attempts run in interrupt pods of their own
(`run_interrupt` never reboots a node twice).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.io import RunInterruptResult, RunStagePodInput, RunStagePodResult
    from api.enums import Stage, State
    from api.interrupts import InterruptRequest, merge_interrupts
    from planning.node_plan import NodeWindow, StageStep
    from planning.pod_steps import pod_modes, pod_progress
    from planning.window import EntryUpdate, log_tail, package_limits, retry_backoff
    from workflows.node_window_types import Failure, cause, node_gone

if TYPE_CHECKING:
    from workflows.node_window import WindowRun

WAIT_MARGIN_SECONDS = 120


class PodStages:
    """Runs a window's stages in pods (module docstring); writes into the `WindowRun` it serves."""

    def __init__(self, run: WindowRun) -> None:
        self.run = run
        # The merged interrupt: carried by a pod that reached it (or may have), and whether it is done.
        self.interrupt_tried = False
        self.interrupt_done = False
        self.interrupt_result: RunInterruptResult | None = None

    async def run_window(self, window: NodeWindow, wait_retry: object) -> None:
        """Every package's stages before the interrupt, the interrupt, then the stages after it."""
        run, plans = self.run, self.run.ctx.plan.packages
        self.wait_retry = wait_retry
        order = list(window.packages)
        carrier = order[-1] if order and plans[order[-1]].steps_before_interrupt() else None
        for name in order:
            if run.dependency_failed(name):
                continue
            steps = plans[name].steps_before_interrupt()
            if steps:
                await self.run_steps(name, steps, self._with_interrupt() if name == carrier else [])
        with_interrupt = self._with_interrupt()
        if not self.interrupt_done:
            first = 2 if self.interrupt_result is not None else 1
            await run.interrupt(with_interrupt, first, self.interrupt_result)
        for name in with_interrupt:
            after = plans[name].steps_after_interrupt()
            if name not in run.failures and after:
                await self.run_steps(name, after, [])

    def _with_interrupt(self) -> list[str]:
        run, plans = self.run, self.run.ctx.plan.packages
        return [n for n in run.ctx.window.packages
                if n not in run.failures and n not in run.skipped and plans[n].needs_interrupt]

    async def run_steps(self, name: str, steps: tuple[StageStep, ...], carry: list[str]) -> None:
        """Run `steps` in pods until done or a stage's attempts are exhausted (recorded as its Failure)."""
        run = self.run
        attempts = run.ctx.settings.stage_attempts
        failed_attempts: dict[Stage, int] = {}
        remaining = list(steps)
        while remaining:
            first = remaining[0]
            attempt = failed_attempts.get(first.stage, 0) + 1
            run.set_entry(name, EntryUpdate(first.stage, State.IN_PROGRESS, attempt))
            names = carry if carry and not self.interrupt_tried else []
            merged = merge_interrupts(run.ctx.plan.packages[n].interrupt for n in names) if names else None
            result = await self._pod(name, remaining, attempt, (names, merged))
            progress = pod_progress(remaining, result.completed, result.mode)
            run.note_job(name, result.job_name, failed=progress.failed is not None)
            remaining = remaining[progress.done:]
            if progress.failed is None:
                if merged is not None:
                    self._interrupted(name, names, merged, result)
                return
            failed = progress.failed
            count = failed_attempts[failed.stage] = failed_attempts.get(failed.stage, 0) + 1
            run.set_entry(name, EntryUpdate(failed.stage, State.IN_PROGRESS, count))
            if count >= attempts:
                tail = log_tail(result.log_tail)
                message = f"{progress.failed_mode} failed after {attempts} attempts (exit code {result.exit_code})"
                run.failures[name] = Failure(failed.stage.value, message, tail)
                run.set_entry(name, EntryUpdate(failed.stage, State.ERRORING, attempts, f"{message}: {tail}"[-2000:]))
                return
            await workflow.sleep(retry_backoff(run.ctx.settings.retry_backoff_seconds, count))

    async def _pod(self, name: str, steps: list[StageStep], attempt: int,
                   interrupt: tuple[list[str], InterruptRequest | None]) -> RunStagePodResult:
        run = self.run
        names, merged = interrupt
        job = run.stage_job(name, steps[0].mode, attempt)
        job.modes = pod_modes(steps, merged is not None)
        spec = run.ctx.specs[name]
        # The Job's deadline covers every stage of the pod (each within the package's stage limit).
        job.timeout_seconds = package_limits(spec, run.default_limits()).stage * len(steps)
        reboot_timeout = 0
        if merged is not None:
            job.interrupt = {"type": merged.type.value, "services": list(merged.services)}
            reboot_timeout = run.limits(names).interrupt
            job.timeout_seconds += reboot_timeout
        run.ctx.set_phase("Running")
        try:
            result: RunStagePodResult = await workflow.execute_activity(
                "run_stage_pod", RunStagePodInput(job, run.ctx.snapshot.boot_id, reboot_timeout),
                result_type=RunStagePodResult,
                start_to_close_timeout=timedelta(seconds=job.timeout_seconds + reboot_timeout + WAIT_MARGIN_SECONDS),
                heartbeat_timeout=timedelta(seconds=run.ctx.settings.heartbeat_seconds),
                retry_policy=self.wait_retry,  # type: ignore[arg-type]
                summary=f"{name} {', '.join(job.modes)} #{attempt}",
            )
        except ActivityError as err:
            if node_gone(err):
                raise  # ends the window
            # The pod could not be run or watched at all: its first stage counts as failed, and
            # whether it reached the interrupt is unknown.
            result = RunStagePodResult(job_name="", exit_code=-1, log_tail=cause(err))
        if merged is not None and (result.interrupt_exit is not None or not result.job_name):
            self.interrupt_tried = True  # reached (or maybe): never carried again (module docstring)
        return result

    def _interrupted(self, name: str, names: list[str], merged: InterruptRequest, result: RunStagePodResult) -> None:
        """The pod's stages succeeded and it ran the interrupt: record its outcome."""
        run = self.run
        run.interrupted = True
        outcome = RunInterruptResult(result.job_name, -1 if result.interrupt_exit is None else result.interrupt_exit,
                                     result.boot_id_after, result.interrupt_log)
        run.last_interrupt_job = (name, result.job_name)
        if outcome.exit_code != 0:
            self.interrupt_result = outcome
            return
        self.interrupt_done = True
        for package in names:
            run.set_entry(package, EntryUpdate(Stage.INTERRUPT, State.COMPLETE, 1))
        run.note_interrupt(merged, names, outcome)

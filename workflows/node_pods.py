"""A node window's stages and its merged interrupt, in pods pinned to the node. Deterministic, no I/O.

One pod per window phase (issue #26, ADR 0016; `workflow.patched("one-pod-per-phase")`): every
Package's stages before the window's interrupt run in ONE pod (each Package's copy container and
agent containers, in the window's dependency order), the merged interrupt in a pod of its own
(`run_interrupt`), and every Package's stages after it in one more pod: a reboot window runs three
pods whatever its number of Packages. Every stage keeps its check (its own container, right after
the stage) and its record (the pod reports each Package's modes that succeeded; the entry in
`noderoll.io/state` says the stage and attempt that failed). A Package whose `dependsOn` Package
failed or was skipped earlier in the window is not run before the interrupt (skipped, its record
left as it was).

Retries: the first container that failed decides; its Package's stage (or check) is retried, after
the usual backoff, from that stage in a new pod that runs it, its later stages and the Packages
after it; the Packages before it and its stages before the failed one are done and do not run
again. Attempts count per Package and stage: a stage is given up after `stage_attempts` failed
attempts of its own. The interrupt is retried in interrupt pods of its own (`run_interrupt` never
reboots a node twice).

Windows recorded before the patch replay the earlier path (issue #14, ADR 0010): a pod per Package
before the interrupt, the last one carrying the merged interrupt as its last container, and a pod
per Package after it; an interrupt that such a pod reached and that failed (or a pod whose
activity failed) was retried in interrupt pods of its own.

Everything that happens is recorded in the window's `WindowLedger`; a deleted node (`NodeNotFound`)
ends the window at once (the `ActivityError` is raised to the sequencer).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from api.enums import Stage, State
    from api.interrupts import InterruptRequest, merge_interrupts
    from planning.node.node_plan import StageStep
    from planning.node.pod_steps import phase_progress, pod_modes, pod_progress
    from planning.node.window import EntryUpdate, log_tail, package_limits, retry_backoff
    from protocol.activity_refs import RUN_INTERRUPT, RUN_STAGE_POD
    from protocol.node_activities import (
        NextPod,
        RunInterruptInput,
        RunInterruptResult,
        RunStagePodInput,
        RunStagePodResult,
    )
    from workflows.api_retries import WAIT_RETRY
    from workflows.node_pod_jobs import (
        NextPods,
        interrupt_job,
        interrupt_owner,
        interrupt_pod,
        phase_jobs,
        post_first_pod,
    )
    from workflows.node_window_types import Failure, WindowContext, WindowLedger, cause, node_gone

WAIT_MARGIN_SECONDS = 120
# The only path since the one-engine release (ADR 0013; `workflows/node_window.py` says why deprecated).
SKIP_DEPENDENTS_OF_FAILED = "skip-dependents-of-failed"
# One pod per window phase (ADR 0016): every Package's stages before the interrupt in one pod, the
# merged interrupt in a pod of its own, every Package's stages after it in one pod. Windows recorded
# before it (a pod per Package and phase, the interrupt carried by the last) replay the old path.
ONE_POD_PER_PHASE = "one-pod-per-phase"


class PodStages:
    """Runs a window's stages and interrupt in pods (module docstring), recording into its ledger."""

    def __init__(self, ctx: WindowContext, ledger: WindowLedger,
                 verify_pod: Callable[[], NextPod | None] = lambda: None) -> None:
        self.ctx = ctx
        self.ledger = ledger
        # The window's GPU verify pod, created ahead by the window's last pod (workflows/node_verify.py).
        self.verify_pod = verify_pod
        # The merged interrupt: carried by a pod that reached it (or may have), and whether it is done.
        self.interrupt_tried = False
        self.interrupt_done = False
        self.interrupt_result: RunInterruptResult | None = None
        # The pod the last activity created for the next call (ADR 0022).
        self.next_pods = NextPods()

    async def run_window(self) -> None:
        """Every package's stages before the interrupt, the interrupt, then the stages after it."""
        if workflow.patched(ONE_POD_PER_PHASE):
            await self._run_phases()
            return
        plans = self.ctx.plan.packages
        order = list(self.ctx.window.packages)
        carrier = order[-1] if order and plans[order[-1]].steps_before_interrupt() else None
        for name in order:
            if self._dependency_failed(name):
                continue
            steps = plans[name].steps_before_interrupt()
            if steps:
                await self._run_steps(name, steps, self._with_interrupt() if name == carrier else [])
        with_interrupt = self._with_interrupt()
        if not self.interrupt_done:
            first = 2 if self.interrupt_result is not None else 1
            await self._interrupt(with_interrupt, first, self.interrupt_result)
        for name in with_interrupt:
            after = plans[name].steps_after_interrupt()
            if name not in self.ledger.failures and after:
                await self._run_steps(name, after, [])

    def _with_interrupt(self) -> list[str]:
        plans = self.ctx.plan.packages
        return [n for n in self.ledger.healthy(self.ctx.window.packages) if plans[n].needs_interrupt]

    def _dependency_failed(self, name: str) -> bool:
        """True (and `name` skipped) when a `dependsOn` package failed or was skipped earlier in this window."""
        ledger = self.ledger
        failed = sorted(d for d in self.ctx.specs[name].depends_on if d in ledger.failures or d in ledger.skipped)
        if not failed:
            return False
        workflow.deprecate_patch(SKIP_DEPENDENTS_OF_FAILED)
        ledger.skipped[name] = f"not run: dependency {', '.join(failed)} failed on this node in this window"
        # Nothing ran: the package's record stays what it was before the window.
        ledger.leave_as_recorded(name, self.ctx.recorded)
        return True

    # --- one pod per phase (ADR 0016) ----------------------------------------------------------

    async def _run_phases(self) -> None:
        plans = self.ctx.plan.packages
        order = list(self.ctx.window.packages)
        await self._phase({n: plans[n].steps_before_interrupt() for n in order}, skip_dependents=True)
        with_interrupt = self._with_interrupt()
        if with_interrupt:
            then = post_first_pod(self.ctx, self.ledger, with_interrupt) or self.verify_pod()
            await self._interrupt(with_interrupt, 1, None, then)
        await self._phase({n: plans[n].steps_after_interrupt() for n in with_interrupt
                           if n not in self.ledger.failures}, skip_dependents=False)

    def _skip_dependents(self, order: list[str], ran: set[str]) -> None:
        """Skip every Package of `order` that has not run its phase and whose dependency failed or
        was skipped in this window (in order, so a skip reaches the dependents of a skipped one)."""
        for name in order:
            if name not in ran and name not in self.ledger.skipped and name not in self.ledger.failures:
                self._dependency_failed(name)

    async def _phase(self, steps: dict[str, tuple[StageStep, ...]], skip_dependents: bool) -> None:
        """Run every Package's `steps` in pods of several Packages until each is done or failed: a
        pod runs what is left of each, in order; the Package that failed is retried from its failed
        stage in the next pod (after the backoff), with the Packages after it; a Package whose
        dependency failed or was skipped is skipped (before the interrupt only: after it, every
        Package's stages before it ran)."""
        ledger = self.ledger
        order = list(steps)
        pending = {n: list(s) for n, s in steps.items() if s}
        ran: set[str] = set()
        failed_attempts: dict[tuple[str, Stage], int] = {}
        while True:
            if skip_dependents:
                self._skip_dependents(order, ran)
            names = [n for n in pending if n not in ledger.skipped and n not in ledger.failures]
            if not names:
                return
            attempts = {n: failed_attempts.get((n, pending[n][0].stage), 0) + 1 for n in names}
            for name in names:
                ledger.set_entry(name, EntryUpdate(pending[name][0].stage, State.IN_PROGRESS, attempts[name]))
            # Before the interrupt, the interrupt's pod is created once this pod's stages all succeeded;
            # after it, the verify pod (the window's last phase).
            then = interrupt_pod(self.ctx, self._with_interrupt()) if skip_dependents else self.verify_pod()
            result = await self._phase_pod(names, pending, attempts, then)
            completed = result.completed_by_package or {names[0]: result.completed}
            progress = phase_progress({n: pending[n] for n in names}, completed,
                                      (result.package or names[0], result.mode))
            if len(names) > 1 and result.job_name:
                ledger.job_labels[result.job_name] = names[0]
            for name, done in progress.done.items():
                ledger.note_job(name, result.job_name, failed=name == progress.failed)
                pending[name] = pending[name][done:]
                if not pending[name]:
                    del pending[name]
                    ran.add(name)
            if progress.progress is None or progress.progress.failed is None:
                continue
            name, failed = progress.failed, progress.progress.failed
            count = failed_attempts[(name, failed.stage)] = failed_attempts.get((name, failed.stage), 0) + 1
            ledger.set_entry(name, EntryUpdate(failed.stage, State.IN_PROGRESS, count))
            limit = self.ctx.settings.stage_attempts
            if count >= limit:
                tail = log_tail(result.log_tail)
                message = f"{progress.progress.failed_mode} failed after {limit} attempts (exit code {result.exit_code})"
                ledger.fail(name, Failure(failed.stage.value, message, tail),
                            EntryUpdate(failed.stage, State.ERRORING, limit, f"{message}: {tail}"[-2000:]))
                del pending[name]
                continue
            await workflow.sleep(retry_backoff(self.ctx.settings.retry_backoff_seconds, count))

    async def _phase_pod(self, names: list[str], pending: dict[str, list[StageStep]],
                         attempts: dict[str, int], then: NextPod | None) -> RunStagePodResult:
        """One pod running what is left of each of `names` (a Package alone: the pod of one Package);
        `then`: the window's next pod, created by the activity once every stage of this one succeeded."""
        ctx = self.ctx
        jobs = phase_jobs(ctx, names, pending, attempts)
        ctx.set_phase("Running")
        timeout = sum(job.timeout_seconds for job in jobs) + WAIT_MARGIN_SECONDS
        try:
            result: RunStagePodResult = await workflow.execute_activity(
                RUN_STAGE_POD.name, RunStagePodInput(jobs[0], ctx.snapshot.boot_id, 0, following=jobs[1:],
                                                  prestarted=self.next_pods.take(NextPod(jobs[0], jobs[1:])),
                                                  then=then),
                result_type=RunStagePodResult,
                start_to_close_timeout=timedelta(seconds=timeout),
                heartbeat_timeout=timedelta(seconds=ctx.settings.heartbeat_seconds),
                retry_policy=WAIT_RETRY,
                summary="; ".join(f"{job.package} {', '.join(job.modes)} #{job.attempt}" for job in jobs)[:200],
            )
        except ActivityError as err:
            if node_gone(err):
                raise  # ends the window
            # The pod could not be run or watched at all: the first Package's first stage counts as failed.
            result = RunStagePodResult(job_name="", exit_code=-1, log_tail=cause(err))
        self.next_pods.offer(then, result.next_pod)
        return result

    # --- stage pods -----------------------------------------------------------------------------

    async def _run_steps(self, name: str, steps: tuple[StageStep, ...], carry: list[str]) -> None:
        """Run `steps` in pods until done or a stage's attempts are exhausted (recorded as its Failure)."""
        ledger = self.ledger
        attempts = self.ctx.settings.stage_attempts
        failed_attempts: dict[Stage, int] = {}
        remaining = list(steps)
        while remaining:
            first = remaining[0]
            attempt = failed_attempts.get(first.stage, 0) + 1
            ledger.set_entry(name, EntryUpdate(first.stage, State.IN_PROGRESS, attempt))
            names = carry if carry and not self.interrupt_tried else []
            merged = merge_interrupts(self.ctx.plan.packages[n].interrupt for n in names) if names else None
            result = await self._pod(name, remaining, attempt, names, merged)
            progress = pod_progress(remaining, result.completed, result.mode)
            ledger.note_job(name, result.job_name, failed=progress.failed is not None)
            remaining = remaining[progress.done:]
            if progress.failed is None:
                if merged is not None:
                    self._carried_interrupt(name, names, merged, result)
                return
            failed = progress.failed
            count = failed_attempts[failed.stage] = failed_attempts.get(failed.stage, 0) + 1
            ledger.set_entry(name, EntryUpdate(failed.stage, State.IN_PROGRESS, count))
            if count >= attempts:
                tail = log_tail(result.log_tail)
                message = f"{progress.failed_mode} failed after {attempts} attempts (exit code {result.exit_code})"
                ledger.fail(name, Failure(failed.stage.value, message, tail),
                            EntryUpdate(failed.stage, State.ERRORING, attempts, f"{message}: {tail}"[-2000:]))
                return
            await workflow.sleep(retry_backoff(self.ctx.settings.retry_backoff_seconds, count))

    async def _pod(self, name: str, steps: list[StageStep], attempt: int, names: list[str],
                   merged: InterruptRequest | None) -> RunStagePodResult:
        ctx = self.ctx
        job = ctx.stage_job(name, steps[0].mode, attempt)
        job.modes = pod_modes(steps, merged is not None)
        # The pod's deadline covers every stage of the pod (each within the package's stage limit).
        job.timeout_seconds = package_limits(ctx.specs[name], ctx.default_limits()).stage * len(steps)
        reboot_timeout = 0
        if merged is not None:
            job.interrupt = {"type": merged.type.value, "services": list(merged.services)}
            reboot_timeout = ctx.limits(names).interrupt
            job.timeout_seconds += reboot_timeout
        ctx.set_phase("Running")
        try:
            result: RunStagePodResult = await workflow.execute_activity(
                RUN_STAGE_POD.name, RunStagePodInput(job, ctx.snapshot.boot_id, reboot_timeout),
                result_type=RunStagePodResult,
                start_to_close_timeout=timedelta(seconds=job.timeout_seconds + reboot_timeout + WAIT_MARGIN_SECONDS),
                heartbeat_timeout=timedelta(seconds=ctx.settings.heartbeat_seconds),
                retry_policy=WAIT_RETRY,
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

    def _carried_interrupt(self, name: str, names: list[str], merged: InterruptRequest,
                           result: RunStagePodResult) -> None:
        """The pod's stages succeeded and it ran the interrupt: record its outcome."""
        ledger = self.ledger
        ledger.interrupted = True
        outcome = RunInterruptResult(result.job_name, -1 if result.interrupt_exit is None else result.interrupt_exit,
                                     result.boot_id_after, result.interrupt_log)
        ledger.last_interrupt_job = (name, result.job_name)
        if outcome.exit_code != 0:
            self.interrupt_result = outcome
            return
        self.interrupt_done = True
        for package in names:
            ledger.set_entry(package, EntryUpdate(Stage.INTERRUPT, State.COMPLETE, 1))
        self._note_interrupt(merged, names, outcome)

    # --- interrupt pods -------------------------------------------------------------------------

    async def _interrupt(self, names: list[str], first_attempt: int, last: RunInterruptResult | None,
                         then: NextPod | None = None) -> None:
        """The merged interrupt of `names` in interrupt pods, attempts `first_attempt`.. (`last`: the
        result of the attempt before, made in a stage pod that carried it; `then`: the first
        post-interrupt pod, created by the activity once the interrupt succeeded)."""
        merged = merge_interrupts(self.ctx.plan.packages[n].interrupt for n in names)
        if merged is None:
            return
        ctx, ledger = self.ctx, self.ledger
        ctx.set_phase("Interrupting")
        owner = interrupt_owner(ctx, names, merged)
        attempts = ctx.settings.stage_attempts
        reboot_timeout = ctx.limits(names).interrupt
        result = last or RunInterruptResult(job_name="", exit_code=-1)
        for attempt in range(first_attempt, attempts + 1):
            for name in names:
                ledger.set_entry(name, EntryUpdate(Stage.INTERRUPT, State.IN_PROGRESS, attempt))
            job = interrupt_job(ctx, names, merged, attempt)
            prestarted = self.next_pods.take(NextPod(job))
            try:
                result = await workflow.execute_activity(
                    RUN_INTERRUPT.name,
                    RunInterruptInput(job, ctx.snapshot.boot_id, reboot_timeout, prestarted, then),
                    result_type=RunInterruptResult,
                    start_to_close_timeout=timedelta(seconds=reboot_timeout + job.timeout_seconds + WAIT_MARGIN_SECONDS),
                    heartbeat_timeout=timedelta(seconds=ctx.settings.heartbeat_seconds), retry_policy=WAIT_RETRY,
                    summary=f"interrupt {merged.type.value} for {', '.join(names)}")
            except ActivityError as err:
                if node_gone(err):
                    raise
                result = RunInterruptResult(job_name="", exit_code=-1, log_tail=cause(err))
            ledger.interrupted = True
            if result.job_name:
                ledger.last_interrupt_job = (owner, result.job_name)
            self.next_pods.offer(then, result.next_pod)
            if result.exit_code == 0:
                self._note_interrupt(merged, names, result)
                for name in names:
                    ledger.set_entry(name, EntryUpdate(Stage.INTERRUPT, State.COMPLETE, attempt))
                return
            if attempt < attempts:
                await workflow.sleep(retry_backoff(ctx.settings.retry_backoff_seconds, attempt))
        tail = log_tail(result.log_tail)
        message = f"interrupt {merged.type.value} failed after {attempts} attempts (exit code {result.exit_code})"
        ledger.note_job(*ledger.last_interrupt_job, failed=True)
        for name in names:
            ledger.fail(name, Failure(Stage.INTERRUPT.value, message, tail),
                        EntryUpdate(Stage.INTERRUPT, State.ERRORING, attempts, f"{message}: {tail}"[-2000:]))

    def _note_interrupt(self, merged: InterruptRequest, names: list[str], result: RunInterruptResult) -> None:
        """The interrupt succeeded: its Event."""
        self.ledger.notes.append(self.ctx.event("Interrupted", f"{merged.type.value} for {', '.join(names)}" + (
            f" (boot id {result.boot_id_after})" if merged.type.value == "reboot" else "")))

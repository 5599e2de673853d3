"""One node window, executed inside the node workflow: leases, cordon, drain, stages, interrupt,
uncordon, node state. Deterministic, no I/O (every side effect is an activity called by name).

The plan comes from `planning.node_plan` (one `NodeWindow`); this module only sequences it:

1. write the state `in-progress` (one patch + conditions + an Event);
2. when the window needs a drain: a lease from every budget of its requests (sorted, one at a
   time, so two windows never deadlock holding one budget each), cordon, wait for protected pods,
   drain;
3. every package's stages before the interrupt, in one pod per package (each stage followed by its
   check; `workflows/node_pods.py`, runs since the patch `stages-in-one-pod`; before it, one Job per
   stage); a failed stage or check is retried from that stage (new pod) up to `stage_attempts`
   times with doubling backoff;
4. the merged interrupt of the packages still healthy (the last container of the last package's
   pre-interrupt pod, else its own pod), then their post-interrupt stages (one pod per package);
5. uncordon (only our cordon, and not when a package failed after the node was drained), write the
   final state, delete the window's stage Jobs but the latest failed one of an erroring package
   (`delete_stage_jobs`, since the patch `delete-stage-jobs`), release the leases (also on
   failure), return one result per package.

A node deleted during the window (`NodeNotFound` from any activity) ends it at once: every package
errors with "node ... does not exist", nothing is retried and nothing more is written.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.io import (
        CordonNodeResult,
        DeleteStageJobsInput,
        DeleteStageJobsResult,
        DrainNodeInput,
        DrainNodeResult,
        NodeEvent,
        NodeInput,
        RunInterruptInput,
        RunInterruptResult,
        RunStageJobResult,
        StageJob,
        UncordonNodeResult,
        WaitProtectedPodsInput,
        WaitProtectedPodsResult,
        WriteNodeStateInput,
    )
    from api.enums import PlanAction, Stage, State
    from api.interrupts import InterruptRequest, merge_interrupts
    from api.node_state import PackageNodeState, config_hashes, dump_node_state
    from planning.node_plan import NodeWindow, StageStep
    from planning.window import (
        EntryUpdate,
        TimeLimits,
        drain_settings,
        log_tail,
        node_status,
        package_limits,
        protected_selectors,
        retry_backoff,
        stage_tolerations,
        updated_entry,
        window_limits,
    )
    from workflows.api_retries import API_RETRY, CLOSE_RETRY, WAIT_RETRY
    from workflows.messages import (
        NodeResult,
    )
    from workflows.node_leases import WindowLeases
    from workflows.node_pods import PodStages
    from workflows.node_window_types import Failure, WindowContext, WindowOutcome, cause, node_gone

# Short Kubernetes calls; their retries and the waits' are `workflows.api_retries`.
API_TIMEOUT = timedelta(seconds=60)
DRAIN_STAGE = "drain"
WINDOW_STAGE = "window"
# Runs of node workflows recorded before this patch ran a stage and its check as two Jobs.
STAGE_AND_CHECK_ONE_JOB = "stage-and-check-one-job"
# Runs recorded before this patch ran a dependent's stages even when its dependency had failed
# earlier in the same window.
SKIP_DEPENDENTS_OF_FAILED = "skip-dependents-of-failed"
# Runs recorded before this patch planned with `legacy_resume` and wrote no `targetConfig` (issue #12).
CONFIG_STAGE_ON_CONFIG_CHANGE = "config-stage-on-config-change"
# Runs recorded before these patches ran a Job per stage and one for the interrupt, and kept every
# stage Job (issue #14; workflows/node_pods.py).
STAGES_IN_ONE_POD = "stages-in-one-pod"
DELETE_STAGE_JOBS = "delete-stage-jobs"


class WindowRun:
    """Executes one `NodeWindow` (see the module docstring)."""

    def __init__(self, ctx: WindowContext) -> None:
        self.ctx = ctx
        self.node = ctx.settings.node
        self.state = ctx.recorded.model_copy(deep=True)
        self.failures: dict[str, Failure] = {}
        # Packages not run because a dependency failed earlier in this window -> why.
        self.skipped: dict[str, str] = {}
        self.cordoned = False
        self.drained = False
        self.interrupted = False
        # Events gathered during the window, written with the final state (one write per window).
        self.notes: list[NodeEvent] = []
        # Stage Jobs (issue #14): packages that ran one in this window, the latest failed one per
        # package, and the package and Job of the last interrupt attempt (deleted or kept at the end).
        self.job_packages: set[str] = set()
        self.failed_jobs: dict[str, str] = {}
        self.last_interrupt_job: tuple[str, str] = ("", "")

    # --- activities -------------------------------------------------------------------------

    def _heartbeat(self) -> timedelta:
        return timedelta(seconds=self.ctx.settings.heartbeat_seconds)

    async def _write(self, in_window: bool, events: list[NodeEvent], retry: RetryPolicy = API_RETRY) -> None:
        status = node_status(self.state, in_window)
        # As the label: erroring while any package's record says so, failed in this window or an earlier
        # one (it waits for `retry`); this window's failures alone turned the condition False under an
        # `erroring` label when a later window ran another package.
        earlier = {n: e.last_error or "erroring" for n, e in self.state.packages.items()
                   if e.state == State.ERRORING and n not in self.failures}
        erroring = bool(self.failures or earlier)
        message = "; ".join([*(f"{n}: {f.stage}: {f.message}" for n, f in sorted(self.failures.items())),
                             *(f"{n}: {error}" for n, error in sorted(earlier.items()))])
        await workflow.execute_activity(
            "write_node_state",
            WriteNodeStateInput(
                node=self.node, state_annotation=dump_node_state(self.state), status=status.value,
                updating=in_window, erroring=erroring,
                message=message or f"window {self.ctx.key}: {status.value}", events=events,
            ),
            start_to_close_timeout=API_TIMEOUT, retry_policy=retry, summary=f"state {status.value}",
        )

    def _event(self, reason: str, message: str, warning: bool = False) -> NodeEvent:
        return NodeEvent(reason=reason, message=message, key=f"{self.ctx.key}/{reason}/{message[:40]}",
                         warning=warning)

    def stage_job(self, name: str, mode: str, attempt: int, check: str | None = None) -> StageJob:
        spec = self.ctx.specs[name]
        return StageJob(
            package=name, version=spec.version, node=self.node, mode=mode, image=spec.image,
            attempt=attempt, window=self.ctx.key, check=check,
            env=[{"name": e.name, "value": e.value} for e in spec.env],
            resources=spec.resources.model_dump(by_alias=True) if spec.resources else {},
            tolerations=stage_tolerations(self.ctx.snapshot.taints, spec),
            config=dict(spec.config), timeout_seconds=package_limits(spec, self.default_limits()).stage,
            agent_image=spec.agent_image or "", image_pull_secrets=[s.name for s in spec.image_pull_secrets],
            node_order=self.ctx.requests[name].node_order if name in self.ctx.requests else 0,
        )

    def default_limits(self) -> TimeLimits:
        settings = self.ctx.settings
        return TimeLimits(settings.protected_pods_timeout_seconds, settings.stage_timeout_seconds,
                          settings.reboot_timeout_seconds)

    def limits(self, names: list[str]) -> TimeLimits:
        # The Packages' `limits` (the largest of the window's packages); the settings are the defaults.
        return window_limits([self.ctx.specs[n] for n in names], self.default_limits())

    async def _run_job(self, job: StageJob) -> RunStageJobResult:
        try:
            return await workflow.execute_activity(
                "run_stage_job", job, result_type=RunStageJobResult,
                start_to_close_timeout=timedelta(seconds=job.timeout_seconds + 120),
                heartbeat_timeout=self._heartbeat(), retry_policy=WAIT_RETRY,
                summary=f"{job.package} {job.mode} #{job.attempt}",
            )
        except ActivityError as err:
            if node_gone(err):
                raise  # ends the window (execute)
            # The Job could not be run or watched at all: counts as a failed attempt.
            return RunStageJobResult(job_name="", exit_code=-1, log_tail=cause(err))

    # --- the steps --------------------------------------------------------------------------

    def note_job(self, package: str, job_name: str, failed: bool) -> None:
        """A stage Job ran for `package` (and failed): deleted, or kept as its latest failure, at the end."""
        if job_name:
            self.job_packages.add(package)
            if failed:
                self.failed_jobs[package] = job_name

    def set_entry(self, name: str, update: EntryUpdate) -> None:
        self.state.packages[name] = updated_entry(self.state.packages[name], update, workflow.now().isoformat())

    def _start_entries(self) -> None:
        for name in self.ctx.window.packages:
            spec, package_plan = self.ctx.specs[name], self.ctx.plan.packages[name]
            previous = self.state.packages.get(name)
            base = PackageNodeState(version=spec.version, image=spec.image,
                                    config=previous.config if previous and previous.version == spec.version else {})
            update: dict[str, object] = {"action": package_plan.action}
            if workflow.patched(CONFIG_STAGE_ON_CONFIG_CHANGE):
                # What this operation applies, so a resume after it stopped can tell a newer config.
                update["target_config"] = config_hashes(spec.config)
            self.state.packages[name] = base.model_copy(update=update)
            self.set_entry(name, EntryUpdate(package_plan.stages[0], State.IN_PROGRESS))

    async def _prepare_node(self) -> None:
        """Cordon, wait for protected pods, drain (raises ActivityError when bounded waits expire)."""
        specs = [self.ctx.specs[n] for n in self.ctx.window.packages]
        self.ctx.set_phase("Draining")
        cordon = await workflow.execute_activity(
            "cordon_node", NodeInput(self.node), result_type=CordonNodeResult,
            start_to_close_timeout=API_TIMEOUT, retry_policy=API_RETRY, summary="cordon")
        self.cordoned = cordon.cordoned_by_noderoll
        selectors = protected_selectors(specs)
        if selectors:
            timeout = self.limits(list(self.ctx.window.packages)).protected_pods
            await workflow.execute_activity(
                "wait_protected_pods", WaitProtectedPodsInput(self.node, selectors, timeout),
                result_type=WaitProtectedPodsResult,
                start_to_close_timeout=timedelta(seconds=timeout + 120), heartbeat_timeout=self._heartbeat(),
                retry_policy=WAIT_RETRY, summary="wait for protected pods")
        drain = drain_settings(specs)
        drained = await workflow.execute_activity(
            "drain_node",
            DrainNodeInput(self.node, drain.timeout_seconds, drain.grace_period_seconds, drain.delete_empty_dir_data),
            result_type=DrainNodeResult,
            start_to_close_timeout=timedelta(seconds=drain.timeout_seconds + 120),
            heartbeat_timeout=self._heartbeat(), retry_policy=WAIT_RETRY, summary="drain")
        self.drained = True
        self.notes.append(self._event("Drained", f"evicted {len(drained.evicted)} pod(s) in {drained.seconds:.0f}s"
                                      f" ({drained.refused} eviction(s) refused by PodDisruptionBudgets)"))

    async def _run_step(self, name: str, step: StageStep) -> bool:
        """One stage and its check, retried as a pair; False (and a Failure recorded) when exhausted."""
        attempts = self.ctx.settings.stage_attempts
        last = RunStageJobResult(job_name="", exit_code=-1)
        failed_mode = step.mode
        for attempt in range(1, attempts + 1):
            self.set_entry(name, EntryUpdate(step.stage, State.IN_PROGRESS, attempt))
            if workflow.patched(STAGE_AND_CHECK_ONE_JOB):
                last = await self._run_job(self.stage_job(name, step.mode, attempt, step.check))
                # The check's own exit code and log, reported as the check's failure.
                failed_mode = step.check if step.check and last.mode == step.check else step.mode
            else:
                last = await self._run_job(self.stage_job(name, step.mode, attempt))
                failed_mode = step.mode
                if last.succeeded and step.check is not None:
                    last = await self._run_job(self.stage_job(name, step.check, attempt))
                    failed_mode = step.check
            self.note_job(name, last.job_name, not last.succeeded)
            if last.succeeded:
                return True
            if attempt < attempts:
                await workflow.sleep(retry_backoff(self.ctx.settings.retry_backoff_seconds, attempt))
        tail = log_tail(last.log_tail)
        message = f"{failed_mode} failed after {attempts} attempts (exit code {last.exit_code})"
        self.failures[name] = Failure(step.stage.value, message, tail)
        self.set_entry(name, EntryUpdate(step.stage, State.ERRORING, attempts, f"{message}: {tail}"[-2000:]))
        return False

    async def _run_steps(self, name: str, steps: tuple[StageStep, ...]) -> None:
        self.ctx.set_phase("Running")
        for step in steps:
            if not await self._run_step(name, step):
                return

    def _interrupt_owner(self, names: list[str], merged: InterruptRequest) -> str:
        # The first package (by name) asking for the winning type runs the interrupt pod with its image.
        plans = self.ctx.plan.packages
        return next((n for n in sorted(names) if plans[n].interrupt and plans[n].interrupt.type is merged.type),
                    sorted(names)[0])

    async def interrupt(self, names: list[str], first_attempt: int = 1, last: RunInterruptResult | None = None) -> None:
        """The merged interrupt of `names` in interrupt pods, attempts `first_attempt`.. (`last`: the
        result of the attempt before, made in a stage pod that carried it)."""
        merged = merge_interrupts(self.ctx.plan.packages[n].interrupt for n in names)
        if merged is None:
            return
        self.ctx.set_phase("Interrupting")
        owner = self._interrupt_owner(names, merged)
        attempts = self.ctx.settings.stage_attempts
        reboot_timeout = self.limits(names).interrupt
        result = last or RunInterruptResult(job_name="", exit_code=-1)
        for attempt in range(first_attempt, attempts + 1):
            for name in names:
                self.set_entry(name, EntryUpdate(Stage.INTERRUPT, State.IN_PROGRESS, attempt))
            job = self.stage_job(owner, Stage.INTERRUPT.value, attempt)
            job.interrupt = {"type": merged.type.value, "services": list(merged.services)}
            try:
                result = await workflow.execute_activity(
                    "run_interrupt",
                    RunInterruptInput(job, self.ctx.snapshot.boot_id, reboot_timeout),
                    result_type=RunInterruptResult,
                    start_to_close_timeout=timedelta(seconds=reboot_timeout + job.timeout_seconds + 120),
                    heartbeat_timeout=self._heartbeat(), retry_policy=WAIT_RETRY,
                    summary=f"interrupt {merged.type.value} for {', '.join(names)}")
            except ActivityError as err:
                if node_gone(err):
                    raise
                result = RunInterruptResult(job_name="", exit_code=-1, log_tail=cause(err))
            self.interrupted = True
            if result.job_name:
                self.last_interrupt_job = (owner, result.job_name)
            if result.exit_code == 0:
                self.note_interrupt(merged, names, result)
                for name in names:
                    self.set_entry(name, EntryUpdate(Stage.INTERRUPT, State.COMPLETE, attempt))
                return
            if attempt < attempts:
                await workflow.sleep(retry_backoff(self.ctx.settings.retry_backoff_seconds, attempt))
        tail = log_tail(result.log_tail)
        message = f"interrupt {merged.type.value} failed after {attempts} attempts (exit code {result.exit_code})"
        self.note_job(*self.last_interrupt_job, failed=True)
        for name in names:
            self.failures[name] = Failure(Stage.INTERRUPT.value, message, tail)
            self.set_entry(name, EntryUpdate(Stage.INTERRUPT, State.ERRORING, attempts, f"{message}: {tail}"[-2000:]))

    def note_interrupt(self, merged: InterruptRequest, names: list[str], result: RunInterruptResult) -> None:
        """The interrupt succeeded: its Event."""
        self.notes.append(self._event("Interrupted", f"{merged.type.value} for {', '.join(names)}" + (
            f" (boot id {result.boot_id_after})" if merged.type.value == "reboot" else "")))

    def _finish_entries(self) -> None:
        for name in self.ctx.window.packages:
            if name in self.failures or name in self.skipped:
                continue
            plan = self.ctx.plan.packages[name]
            if plan.action is PlanAction.UNINSTALL:
                # Absent means uninstalled (NodeWright's semantics, kept).
                self.state.packages.pop(name, None)
                continue
            entry = self.state.packages[name]
            self.state.packages[name] = entry.model_copy(
                update={"config": config_hashes(self.ctx.specs[name].config), "target_config": None})
            self.set_entry(name, EntryUpdate(plan.stages[-1], State.COMPLETE, entry.attempts))

    def _fail_all(self, stage: str, message: str) -> None:
        for name in self.ctx.window.packages:
            if name not in self.failures and name not in self.skipped:
                self.failures[name] = Failure(stage, message)
                entry = self.state.packages[name]
                self.set_entry(name, EntryUpdate(entry.stage, State.ERRORING, entry.attempts, f"{stage}: {message}"[-2000:]))

    # --- the window -------------------------------------------------------------------------

    async def execute(self) -> WindowOutcome:
        """Run the window; never raises for package failures (they become erroring results)."""
        window = self.ctx.window
        names = ", ".join(f"{n} {self.ctx.specs[n].version}" for n in window.packages)
        self._start_entries()
        leases = WindowLeases(self.node, self.ctx.key, self.ctx.grants)
        left_cordoned = gone = False
        try:
            try:
                if window.needs_drain:
                    await leases.acquire(self.ctx.requests.values(), API_TIMEOUT, API_RETRY, self.ctx.set_phase)
                await self._write(True, [self._event("WindowStarted", f"node window for {names}"
                                                     + (" (drain)" if window.needs_drain else ""))])
                await self._stages(window)
            except ActivityError as err:
                # A Kubernetes call failed beyond its retries (API down, node deleted): the window
                # ends erroring instead of failing the workflow and losing the queue.
                gone = node_gone(err)
                self._fail_all(WINDOW_STAGE, f"node {self.node} does not exist" if gone else cause(err))
            self._finish_entries()
            left_cordoned = self.cordoned and bool(self.failures) and (self.drained or self.interrupted)
            if not gone:  # a deleted node has no cordon to lift and no state to write
                await self._close(left_cordoned)
            await self._delete_jobs()
        finally:
            await leases.release()
        return WindowOutcome(results=self._results(), left_cordoned=left_cordoned and not gone, node_gone=gone)

    async def _delete_jobs(self) -> None:
        """Once the outcome is on the node: delete the window's stage Jobs (older ones of its packages
        too), keeping the latest failed one of each package that ended erroring (issue #14)."""
        # A package that failed without a Job of its own this window (drain, dependency, API) keeps
        # what it had: its last failed Job is still the one worth reading.
        packages = sorted(n for n in self.job_packages if n not in self.failures or n in self.failed_jobs)
        if not packages or not workflow.patched(DELETE_STAGE_JOBS):
            return
        keep = sorted({self.failed_jobs[n] for n in packages if n in self.failures and n in self.failed_jobs})
        try:
            await workflow.execute_activity(
                "delete_stage_jobs", DeleteStageJobsInput(self.node, packages, keep),
                result_type=DeleteStageJobsResult, start_to_close_timeout=API_TIMEOUT, retry_policy=API_RETRY,
                summary="delete stage Jobs")
        except ActivityError as err:
            # Left for the next window of these packages on this node (and the Jobs' TTL).
            workflow.logger.warning("deleting stage Jobs of %s on %s failed: %s", packages, self.node, cause(err))

    async def _close(self, left_cordoned: bool) -> None:
        """Uncordon (unless left cordoned) and write the final state, retried until the API answers;
        errors no retry mends (the node gone, a 4xx) are only logged."""
        try:
            if self.cordoned and not left_cordoned:
                await workflow.execute_activity(
                    "uncordon_node", NodeInput(self.node), result_type=UncordonNodeResult,
                    start_to_close_timeout=API_TIMEOUT, retry_policy=CLOSE_RETRY, summary="uncordon")
            await self._write(False, self._final_events(left_cordoned), CLOSE_RETRY)
        except ActivityError as err:
            workflow.logger.warning("closing window %s on %s failed: %s", self.ctx.key, self.node, cause(err))

    async def _stages(self, window: NodeWindow) -> None:
        if window.needs_drain:
            try:
                await self._prepare_node()
            except ActivityError as err:
                # The host was not touched: fail the window, uncordon (left_cordoned needs a drain).
                self._fail_all(DRAIN_STAGE, cause(err))
                return
        if workflow.patched(STAGES_IN_ONE_POD):
            await PodStages(self).run_window(window, WAIT_RETRY)
            return
        for name in window.packages:
            if self.dependency_failed(name):
                continue
            await self._run_steps(name, self.ctx.plan.packages[name].steps_before_interrupt())
        healthy = [n for n in window.packages if n not in self.failures and n not in self.skipped]
        with_interrupt = [n for n in healthy if self.ctx.plan.packages[n].needs_interrupt]
        await self.interrupt(with_interrupt)
        for name in with_interrupt:
            if name not in self.failures:
                await self._run_steps(name, self.ctx.plan.packages[name].steps_after_interrupt())

    def dependency_failed(self, name: str) -> bool:
        """True (and `name` skipped) when a `dependsOn` package failed or was skipped earlier in this window."""
        failed = sorted(d for d in self.ctx.specs[name].depends_on if d in self.failures or d in self.skipped)
        if not failed or not workflow.patched(SKIP_DEPENDENTS_OF_FAILED):
            return False
        self.skipped[name] = f"not run: dependency {', '.join(failed)} failed on this node in this window"
        # Nothing ran: the package's record stays what it was before the window.
        previous = self.ctx.recorded.packages.get(name)
        if previous is None:
            self.state.packages.pop(name, None)
        else:
            self.state.packages[name] = previous.model_copy(deep=True)
        return True

    def _final_events(self, left_cordoned: bool) -> list[NodeEvent]:
        events = list(self.notes)
        for name in self.ctx.window.packages:
            failure = self.failures.get(name)
            if name in self.skipped:
                events.append(self._event("PackageSkipped", f"{name}: {self.skipped[name]}", True))
            elif failure is None:
                events.append(self._event("PackageComplete", f"{name} {self.ctx.specs[name].version} complete"))
            else:
                events.append(self._event("PackageErroring", f"{name}: {failure.stage}: {failure.message}", True))
        if left_cordoned:
            events.append(self._event("LeftCordoned", "node stays cordoned: a package failed after the drain", True))
        return events

    def _results(self) -> dict[str, NodeResult]:
        disrupted = self.cordoned or self.drained or self.interrupted
        results = {}
        for name, request in self.ctx.requests.items():
            failure = self.failures.get(name)
            entry = self.state.packages.get(name)
            if name in self.skipped:
                results[name] = NodeResult(
                    node=self.node, package=name, version=self.ctx.specs[name].version,
                    request_id=request.request_id, state=State.BLOCKED.value, message=self.skipped[name],
                    disrupted=disrupted)
                continue
            results[name] = NodeResult(
                node=self.node, package=name, version=self.ctx.specs[name].version,
                request_id=request.request_id,
                state=(State.ERRORING if failure else State.COMPLETE).value,
                stage=failure.stage if failure else (entry.stage.value if entry and entry.stage else None),
                message=failure.message if failure else "complete",
                disrupted=disrupted, log_tail=failure.log if failure else "",
            )
        return results

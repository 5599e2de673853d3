"""One node window for a fleet's `WindowRequest`, executed inside the node workflow. Deterministic, no I/O
(every side effect is an activity called by name).

`run_window` plans the node with `planning.node.node_plan` (every Package of the request in ONE window:
dependency order, one merged interrupt, configInterrupts included), answers the Packages with
nothing to do or that cannot run, and runs the window with `WindowRun`:

1. write the state `in-progress` (one patch + conditions + an Event);
2. when the window needs a drain: cordon, wait for protected pods, drain (the fleet caps how many
   nodes are in a window at once by its budgets, ADR 0007); with the policy's `spec.workloads`, an
   eviction notice before the drain, drain rules, and a timed-out drain skipped (`workflows/node_workloads.py`);
3. the stages and the merged interrupt in pods pinned to the node (`workflows/node_pods.py`), then
   the GPU verify when the request asks for one (`workflows/node_verify.py`, api/verify.py);
4. uncordon (only our cordon, and not when a package failed after the node was drained, nor after a
   failed verify with `onFailure: KeepCordoned`), write the final state, delete the window's stage
   pods but the latest failed one of an erroring package and a failed verify pod
   (`delete_stage_jobs`), and answer one `PackageOutcome` per Package.

A node whose `noderoll.io/state` cannot be read is held: every Package is answered `blocked` with
the reason, nothing runs, the annotation stays as it is for an operator to inspect, and the node is
marked (condition `noderoll.io/StateMalformed`, a Warning Event, label `blocked`). A node deleted
during the window (`NodeNotFound` from any activity) ends it at once: every package errors with
"node ... does not exist", nothing is retried and nothing more is written.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    from api.enums import NodeMarkKind, NodeStatus, PlanAction, State
    from api.node_state import PackageNodeState, config_hashes, dump_node_state, held_reason, parse_node_state
    from api.package import PackageSpec
    from api.workloads import WorkloadsSpec
    from planning.node import verify as verify_rules
    from planning.node.drain_rules import SKIPPED_DRAIN_TIMEOUT
    from planning.node.node_marks import NodeMark
    from planning.node.node_plan import NodePlanInput, plan_node
    from planning.node.window import EntryUpdate, drain_settings, node_status, protected_selectors
    from protocol import errors
    from protocol.activity_refs import (
        CLOSE_WINDOW,
        CORDON_NODE,
        DELETE_STAGE_JOBS,
        DRAIN_NODE,
        UNCORDON_NODE,
        WAIT_PROTECTED_PODS,
        WRITE_NODE_STATE,
    )
    from protocol.fleet import PackageOutcome, WindowRequest, WindowResult
    from protocol.node import NodeWorkflowInput
    from protocol.node_activities import (
        CloseWindowInput,
        CloseWindowResult,
        CordonNodeResult,
        DeleteStageJobsInput,
        DeleteStageJobsResult,
        DrainNodeInput,
        DrainNodeResult,
        NodeEvent,
        NodeInput,
        ReadNodeResult,
        UncordonNodeResult,
        WaitProtectedPodsInput,
        WaitProtectedPodsResult,
        WriteNodeStateInput,
        cordon_view,
    )
    from workflows.api_retries import API_RETRY, API_TIMEOUT, CLOSE_RETRY, WAIT_RETRY
    from workflows.node_marks import mark_nodes
    from workflows.node_pod_jobs import first_pod
    from workflows.node_pods import PodStages
    from workflows.node_verify import close_verify, next_verify_pod, run_verify
    from workflows.node_window_types import Failure, WindowContext, WindowLedger, cause, node_gone
    from workflows.node_workloads import WorkloadSteps
    from workflows.short_calls import short_call

DRAIN_STAGE = "drain"
WINDOW_STAGE = "window"
# Patches whose patched path is the only one since the one-engine release (ADR 0013), deprecated where
# they were checked: windows recorded with them replay (tests/histories/node/fleet-window-*), windows
# recorded before them (a Job per stage, no targetConfig, stage Jobs kept) do not, and none is open.
CONFIG_STAGE_ON_CONFIG_CHANGE = "config-stage-on-config-change"
STAGES_IN_ONE_POD = "stages-in-one-pod"
DELETE_STAGE_JOBS_PATCH = "delete-stage-jobs"
# Issue #26 item 2: uncordon, the final state and the stage pods' deletion in one activity
# (`close_window`); windows recorded before it replay their three activities.
CLOSE_IN_ONE_CALL = "close-in-one-call"


def _all(request: WindowRequest, state: State, message: str) -> dict[str, PackageOutcome]:
    return {o.name: PackageOutcome(state.value, str(o.spec.get("version", "")), message=message)
            for o in request.packages}


async def run_window(settings: NodeWorkflowInput, request: WindowRequest, snapshot: ReadNodeResult, key: str,
                     set_phase: Callable[[str], None]) -> WindowResult:
    """Plan and run one window for every Package of `request` on the node of `snapshot` (module docstring).

    `key` is unique per window within the node workflow (pod names, Event keys)."""
    node = settings.node
    recorded, problem = parse_node_state(snapshot.state_annotation)
    if problem:
        # Held: nothing runs, nothing is written over the annotation; the node shows why.
        reason = held_reason(problem)
        await mark_nodes([NodeMark(node, NodeMarkKind.STATE_MALFORMED, reason)])
        return WindowResult(node, request.request_id, _all(request, State.BLOCKED, reason))
    try:
        workloads = WorkloadsSpec.model_validate(request.workloads) if request.workloads is not None else None
    except ValidationError as err:
        return WindowResult(node, request.request_id, _all(request, State.BLOCKED,
                                                           f"{errors.INVALID_SPEC}: spec.workloads: {err}"))
    outcomes: dict[str, PackageOutcome] = {}
    specs: dict[str, PackageSpec] = {}
    for order in request.packages:
        try:
            specs[order.name] = PackageSpec.model_validate(order.spec)
        except ValidationError as err:
            outcomes[order.name] = PackageOutcome(State.ERRORING.value, str(order.spec.get("version", "")),
                                                  message=f"{errors.INVALID_SPEC}: {err}")
    verify, problem = verify_rules.parse_verify(request.verify)
    if problem:
        return WindowResult(node, request.request_id, _all(request, State.ERRORING, f"{errors.INVALID_SPEC}: {problem}"))
    uninstall = frozenset(o.name for o in request.packages if o.uninstall and o.name in specs)
    # `noderoll rerun`: Packages the fleet asks to run again although they are complete (node_plan rules);
    # and those whose window failed its GPU verify, when this one verifies (`retry`: planning/node/verify.py).
    rerun = {**verify_rules.reruns(recorded, [n for n in specs if n not in uninstall], verify is not None),
             **{o.name: o.rerun_stage for o in request.packages if o.rerun and o.name in specs}}
    plan = plan_node(NodePlanInput(node=node, recorded=recorded, desired=specs, uninstall=uninstall, rerun=rerun))
    if plan.error:
        return WindowResult(node, request.request_id, _all(request, State.BLOCKED, plan.error))
    for name, package_plan in sorted(plan.packages.items()):
        if package_plan.blocked:
            outcomes[name] = PackageOutcome(State.BLOCKED.value, package_plan.version, message=package_plan.blocked)
        elif not package_plan.has_work:
            outcomes[name] = PackageOutcome(State.COMPLETE.value, package_plan.version,
                                            message=package_plan.reason or "up to date")
    if plan.window is None:
        return WindowResult(node, request.request_id, outcomes)
    window = plan.window
    run = WindowRun(WindowContext(
        settings=settings, key=key, snapshot=snapshot, recorded=recorded, plan=plan, window=window,
        orders={o.name: o for o in request.packages if o.name in window.packages},
        specs={n: specs[n] for n in window.packages}, node_order=request.node_order, set_phase=set_phase,
        workloads=workloads, fleet=request.fleet_workflow_id,
        verify=verify,
    ))
    outcomes.update(await run.execute())
    ledger = run.ledger
    interrupt = window.interrupt.type.value if ledger.interrupted and window.interrupt is not None else ""
    return WindowResult(node, request.request_id, outcomes, cordoned=ledger.cordoned, drained=ledger.drained,
                        interrupt=interrupt, skipped=SKIPPED_DRAIN_TIMEOUT if ledger.drain_skipped else "")


class WindowRun:
    """Executes one planned window (see the module docstring); what happened is in `ledger`."""

    def __init__(self, ctx: WindowContext) -> None:
        self.ctx = ctx
        self.node = ctx.node
        self.ledger = WindowLedger(state=ctx.recorded.model_copy(deep=True))
        self.workloads = WorkloadSteps(ctx, self.ledger)
        # The node as the window's first state write left it (`cordon_node` patches from it).
        self.written: ReadNodeResult | None = None

    # --- activities -------------------------------------------------------------------------

    def _heartbeat(self) -> timedelta:
        return timedelta(seconds=self.ctx.settings.heartbeat_seconds)

    async def _write(self, in_window: bool, events: list[NodeEvent],
                     retry: RetryPolicy = API_RETRY) -> ReadNodeResult | None:
        """Write the state (a short call: `workflows.short_calls`); the node as written (None in histories
        recorded before it was returned)."""
        state = self._state_input(in_window, events)
        written: ReadNodeResult | None = await short_call(
            WRITE_NODE_STATE.name, state, ReadNodeResult | None, f"state {state.status}", retry)  # type: ignore[arg-type]
        return written

    def _state_input(self, in_window: bool, events: list[NodeEvent]) -> WriteNodeStateInput:
        ledger = self.ledger
        # A window that gave the node up shows it `blocked` (and `noderoll.io/skipped`) until its next window.
        skipped = bool(ledger.drain_skipped) and not in_window
        status = NodeStatus.BLOCKED if skipped else node_status(ledger.state, in_window)
        # As the label: erroring while any package's record says so, failed in this window or an earlier
        # one (it waits for `retry`); this window's failures alone turned the condition False under an
        # `erroring` label when a later window ran another package.
        earlier = {n: e.last_error or "erroring" for n, e in ledger.state.packages.items()
                   if e.state == State.ERRORING and n not in ledger.failures}
        verify = ledger.state.verify_failed
        erroring = bool(ledger.failures or earlier or verify)
        message = "; ".join([*(f"{n}: {f.stage}: {f.message}" for n, f in sorted(ledger.failures.items())),
                             *(f"{n}: {error}" for n, error in sorted(earlier.items())),
                             *([f"{verify_rules.VERIFY_STAGE}: {verify.message}"] if verify else [])])
        return WriteNodeStateInput(
            node=self.node, state_annotation=dump_node_state(ledger.state), status=status.value,
            updating=in_window, erroring=erroring,
            message=message or (ledger.drain_skipped if skipped else f"window {self.ctx.key}: {status.value}"),
            events=events, skipped=SKIPPED_DRAIN_TIMEOUT if skipped else "",
        )

    # --- the steps --------------------------------------------------------------------------

    def _start_entries(self) -> None:
        workflow.deprecate_patch(CONFIG_STAGE_ON_CONFIG_CHANGE)
        state = self.ledger.state
        for name in self.ctx.window.packages:
            spec, package_plan = self.ctx.specs[name], self.ctx.plan.packages[name]
            previous = state.packages.get(name)
            base = PackageNodeState(version=spec.version, image=spec.image,
                                    config=previous.config if previous and previous.version == spec.version else {})
            # `target_config`: what this operation applies, so a resume after it stopped can tell a newer config.
            state.packages[name] = base.model_copy(
                update={"action": package_plan.action, "target_config": config_hashes(spec.config)})
            self.ledger.set_entry(name, EntryUpdate(package_plan.stages[0], State.IN_PROGRESS))

    async def _prepare_node(self, pods: PodStages) -> None:
        """Cordon, wait for protected pods, drain (raises ActivityError when bounded waits expire);
        the drain creates `pods`' first pod once it succeeded."""
        specs = [self.ctx.specs[n] for n in self.ctx.window.packages]
        self.ctx.set_phase("Draining")
        cordon = await short_call(CORDON_NODE.name, NodeInput(self.node, seen=self.written or cordon_view(self.ctx.snapshot)),
                                  CordonNodeResult, "cordon")
        self.ledger.cordoned = cordon.cordoned_by_noderoll
        selectors = protected_selectors(specs)
        if selectors:
            timeout = self.ctx.limits(list(self.ctx.window.packages)).protected_pods
            await workflow.execute_activity(
                WAIT_PROTECTED_PODS.name, WaitProtectedPodsInput(self.node, selectors, timeout),
                result_type=WaitProtectedPodsResult,
                start_to_close_timeout=timedelta(seconds=timeout + 120), heartbeat_timeout=self._heartbeat(),
                retry_policy=WAIT_RETRY, summary="wait for protected pods")
        await self.workloads.give_notice()
        drain = drain_settings(specs)
        # The window's first stage pod is created by the drain once the node is drained (ADR 0022).
        then = first_pod(self.ctx)
        drained = await workflow.execute_activity(
            DRAIN_NODE.name,
            self.workloads.drain_input(DrainNodeInput(
                self.node, drain.timeout_seconds, drain.grace_period_seconds, drain.delete_empty_dir_data, then=then)),
            result_type=DrainNodeResult,
            start_to_close_timeout=timedelta(seconds=self.workloads.drain_seconds(drain.timeout_seconds) + 120),
            heartbeat_timeout=self._heartbeat(), retry_policy=WAIT_RETRY, summary="drain")
        pods.next_pods.offer(then, drained.next_pod)
        self.ledger.drained = True
        self.ledger.notes.append(self.ctx.event(
            "Drained", f"evicted {len(drained.evicted)} pod(s) in {drained.seconds:.0f}s"
                       f" ({drained.refused} eviction(s) refused by PodDisruptionBudgets)"
                       + (f"; deleted {len(drained.deleted)} pod(s)" if drained.deleted else "")))

    def _finish_entries(self) -> None:
        ledger = self.ledger
        for name in ledger.healthy(self.ctx.window.packages):
            plan = self.ctx.plan.packages[name]
            if plan.action is PlanAction.UNINSTALL:
                # Absent means uninstalled (NodeWright's semantics, kept).
                ledger.state.packages.pop(name, None)
                continue
            entry = ledger.state.packages[name]
            ledger.state.packages[name] = entry.model_copy(
                update={"config": config_hashes(self.ctx.specs[name].config), "target_config": None})
            ledger.set_entry(name, EntryUpdate(plan.stages[-1], State.COMPLETE, entry.attempts))

    def _fail_all(self, stage: str, message: str) -> None:
        ledger = self.ledger
        for name in ledger.healthy(self.ctx.window.packages):
            entry = ledger.state.packages[name]
            ledger.fail(name, Failure(stage, message),
                        EntryUpdate(entry.stage, State.ERRORING, entry.attempts, f"{stage}: {message}"[-2000:]))

    # --- the window -------------------------------------------------------------------------

    async def execute(self) -> dict[str, PackageOutcome]:
        """Run the window; never raises for package failures (they become erroring outcomes)."""
        ctx, ledger = self.ctx, self.ledger
        window = ctx.window
        names = ", ".join(f"{n} {ctx.specs[n].version}" for n in window.packages)
        self._start_entries()
        gone = False
        try:
            # The node as this write left it: the cordon patches from it (no read; a 409 if it changed since).
            self.written = await self._write(True, [ctx.event("WindowStarted", f"node window for {names}"
                                                              + (" (drain)" if window.needs_drain else ""))])
            await self._stages()
        except ActivityError as err:
            # A Kubernetes call failed beyond its retries (API down, node deleted): the window
            # ends erroring instead of failing the workflow and losing the queue.
            gone = node_gone(err)
            self._fail_all(WINDOW_STAGE, f"node {self.node} does not exist" if gone else cause(err))
        self._finish_entries()
        if not gone:
            close_verify(ctx, ledger)
        left_cordoned = ledger.cordoned and ((bool(ledger.failures) and (ledger.drained or ledger.interrupted))
                                             or ledger.keep_cordon)
        if not gone and workflow.patched(CLOSE_IN_ONE_CALL):
            await self._close_window(left_cordoned)
            return self._outcomes()
        if not gone:  # a deleted node has no cordon to lift and no state to write
            await self._close(left_cordoned)
        await self._delete_jobs()
        return self._outcomes()

    async def _stages(self) -> None:
        pods = PodStages(self.ctx, self.ledger, lambda: next_verify_pod(self.ctx, self.ledger))
        if self.ctx.window.needs_drain:
            try:
                await self._prepare_node(pods)
            except ActivityError as err:
                # The host was not touched: fail the window (or give the node up), uncordon (left_cordoned
                # needs a drain).
                if self.workloads.skips(err):
                    self.workloads.skip(cause(err))
                else:
                    self._fail_all(DRAIN_STAGE, cause(err))
                return
        workflow.deprecate_patch(STAGES_IN_ONE_POD)
        await pods.run_window()
        await run_verify(self.ctx, self.ledger, pods.next_pods)

    def _deletion(self) -> DeleteStageJobsInput | None:
        """The window's stage pods to delete (older ones of its packages too), keeping the latest
        failed one of each package that ended erroring (issue #14); None when it ran none."""
        ledger = self.ledger
        # A package that failed without a pod of its own this window (drain, dependency, API) keeps
        # what it had: its last failed pod is still the one worth reading.
        packages = sorted(n for n in ledger.job_packages if n not in ledger.failures or n in ledger.failed_jobs)
        if not packages:
            return None
        keep = sorted({ledger.failed_jobs[n] for n in packages if n in ledger.failures and n in ledger.failed_jobs}
                      | ({ledger.verify.pod} if ledger.verify and not ledger.verify.passed and ledger.verify.pod else set()))
        # A kept pod of several Packages is labelled with its first: name the Package it is kept for.
        owners = {ledger.failed_jobs[n]: n for n in packages if n in ledger.failures and n in ledger.failed_jobs
                  and ledger.job_labels.get(ledger.failed_jobs[n], n) != n}
        return DeleteStageJobsInput(self.node, packages, keep, owners)

    async def _close_window(self, left_cordoned: bool) -> None:
        """Uncordon (in the state write's patch), the final state and the stage pods' deletion in ONE
        activity (`close_window`, issue #26 item 2), retried until the API answers; errors no retry
        mends (the node gone, a 4xx) are only logged, and so is a failed deletion."""
        deletion = self._deletion()
        if deletion is not None:
            workflow.deprecate_patch(DELETE_STAGE_JOBS_PATCH)
        state = self._state_input(False, self._final_events(left_cordoned))
        try:
            result = await workflow.execute_activity(
                CLOSE_WINDOW.name,
                CloseWindowInput(state, self.ledger.cordoned and not left_cordoned, deletion, self.ledger.noticed),
                result_type=CloseWindowResult, start_to_close_timeout=API_TIMEOUT, retry_policy=CLOSE_RETRY,
                summary=f"close: state {state.status}")
        except ActivityError as err:
            workflow.logger.warning("closing window %s on %s failed: %s", self.ctx.key, self.node, cause(err))
            return
        if result.delete_error:
            workflow.logger.warning("deleting stage pods on %s failed: %s", self.node, result.delete_error)

    async def _delete_jobs(self) -> None:
        """Once the outcome is on the node: delete the window's stage pods (`_deletion`)."""
        deletion = self._deletion()
        if deletion is None:
            return
        workflow.deprecate_patch(DELETE_STAGE_JOBS_PATCH)
        packages = deletion.packages
        try:
            await workflow.execute_activity(
                DELETE_STAGE_JOBS.name, deletion,
                result_type=DeleteStageJobsResult, start_to_close_timeout=API_TIMEOUT, retry_policy=API_RETRY,
                summary="delete stage Jobs")
        except ActivityError as err:
            # Left for the next window of these packages on this node (bare pods have no TTL).
            workflow.logger.warning("deleting stage pods of %s on %s failed: %s", packages, self.node, cause(err))

    async def _close(self, left_cordoned: bool) -> None:
        """Uncordon (unless left cordoned) and write the final state, retried until the API answers;
        errors no retry mends (the node gone, a 4xx) are only logged."""
        try:
            if self.ledger.cordoned and not left_cordoned:
                await workflow.execute_activity(
                    UNCORDON_NODE.name, NodeInput(self.node), result_type=UncordonNodeResult,
                    start_to_close_timeout=API_TIMEOUT, retry_policy=CLOSE_RETRY, summary="uncordon")
            await self._write(False, self._final_events(left_cordoned), CLOSE_RETRY)
        except ActivityError as err:
            workflow.logger.warning("closing window %s on %s failed: %s", self.ctx.key, self.node, cause(err))

    def _final_events(self, left_cordoned: bool) -> list[NodeEvent]:
        ctx, ledger = self.ctx, self.ledger
        events = list(ledger.notes)
        for name in ctx.window.packages:
            failure = ledger.failures.get(name)
            if name in ledger.skipped:
                events.append(ctx.event("PackageSkipped", f"{name}: {ledger.skipped[name]}", True))
            elif failure is None:
                events.append(ctx.event("PackageComplete", f"{name} {ctx.specs[name].version} complete"))
            else:
                events.append(ctx.event("PackageErroring", f"{name}: {failure.stage}: {failure.message}", True))
        if left_cordoned:
            why = "a package failed after the drain" if ledger.failures else "its GPU verify failed"
            events.append(ctx.event("LeftCordoned", f"node stays cordoned: {why}", True))
        return events

    def _outcomes(self) -> dict[str, PackageOutcome]:
        ctx, ledger = self.ctx, self.ledger
        outcomes = {}
        for name in ctx.window.packages:
            version = ctx.specs[name].version
            failure = ledger.failures.get(name)
            entry = ledger.state.packages.get(name)
            if name in ledger.skipped:
                outcomes[name] = PackageOutcome(State.BLOCKED.value, version, message=ledger.skipped[name])
            elif failure is not None:
                outcomes[name] = PackageOutcome(State.ERRORING.value, version, failure.stage, failure.message,
                                                failure.log)
            elif ledger.verify_failure is not None:
                # Complete on the host (its record says so), but the window failed: the fleet counts the node failed.
                verified = ledger.verify_failure
                outcomes[name] = PackageOutcome(State.ERRORING.value, version, verify_rules.VERIFY_STAGE,
                                                verify_rules.failed_message(verified), verified.log_tail)
            else:
                outcomes[name] = PackageOutcome(State.COMPLETE.value, version,
                                                entry.stage.value if entry and entry.stage else None, "complete")
        return outcomes

"""The rollout of one Package across its nodes: `package/<name>`. Deterministic, no I/O.

Loop (observe -> plan -> act): list the Nodes (activity `list_target_nodes`), select targets
(`planning.targets`: selector, ignore label, untolerated taints -> blocked, nodes already done),
plan batches (`planning.batches`: canary first, strategy sizes capped by the budget), hand each
batch's nodes a `NodeRequest` on `node/<node>` (activity `request_node_windows`, signal-with-start),
collect `node_result` signals, evaluate the batch (grow, shrink, halt), until no node is left.
Then the rollout stays open (phase Complete) to pick up joining nodes and spec changes, re-listing
on `nodes_changed` and every `relist_seconds`; it ends when its Package is deleted.

Signals: `pause` (no new batch; requests already handed over finish), `resume` (clears pause and
halt, promotes a canary waiting for manual promotion), `halt` (requests not yet started on their
node are withdrawn with `cancel`; the batch resumes on `resume`), `retry` (failed nodes, or the
given ones, get another window: they re-enter the batches and their node workflow gets `retry`),
`spec_changed` (re-plan; nodes already at the new spec count as done), `nodes_changed`,
`deleted` (uninstall through the same batching when `uninstall.enabled`, then end).
Query `progress`: a `planning.status.RolloutProgress`.

Handlers only queue typed messages (`workflows.rollout_state.Message`); the loop applies them in
order, matching on their type, so state changes happen at one place: the run's `RolloutState`.
Continue-as-new carries `RolloutCarry` (planner state, outcomes) when history grows.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import assert_never

from temporalio import workflow
from temporalio.common import SearchAttributeKey

with workflow.unsafe.imports_passed_through():
    # In the sandbox, pydantic resolves the activity results' (string) annotations through the sandbox's
    # own sys.modules: their module is imported here, not only by the passed-through `rollout_targets`.
    import activities.io  # noqa: F401
    from api import keys
    from api.enums import CanaryPhase, Promotion, RolloutPhase
    from planning import batches
    from planning.status import RolloutProgress
    from workflows.messages import (
        ROLLOUT_WORKFLOW_TYPE,
        SIGNAL_NODE_RESULT,
        SIGNAL_NODES_CHANGED,
        SIGNAL_PACKAGE_DELETED,
        SIGNAL_SPEC_CHANGED,
        NodeResult,
        RetryRequest,
        RolloutInput,
        SpecChange,
    )
    from workflows.rollout_state import (
        Answer,
        Deleted,
        Halt,
        Message,
        NodesChanged,
        Pause,
        Resume,
        Retry,
        RolloutState,
        Rules,
        SpecChanged,
        carry_from_json,
    )
    from workflows.rollout_targets import PATCH_MARK_BLOCKED, PATCH_WINDOWS_IN_FLIGHT, RolloutTargets

# A keyword list since fleets (one value here); the command is the same, so recorded runs replay.
PACKAGE_KEY = SearchAttributeKey.for_keyword_list(keys.SEARCH_ATTR_PACKAGE)
PHASE_KEY = SearchAttributeKey.for_keyword(keys.SEARCH_ATTR_PHASE)
HISTORY_EVENT_LIMIT = 10_000
HISTORY_BYTES_LIMIT = 8 * 1024 * 1024
# `nodes_changed` comes at every cordon of every node: re-list at most this often (history size).
RELIST_MIN_INTERVAL = timedelta(seconds=30)
# Default payload of `retry` (never mutated).
EVERY_FAILED_NODE = RetryRequest()


@workflow.defn(name=ROLLOUT_WORKFLOW_TYPE)
class RolloutWorkflow(RolloutTargets):
    """One Package's rollout (see the module docstring; target resolution: `workflows.rollout_targets`)."""

    def __init__(self) -> None:
        # Messages may arrive before `run` (signal-with-start): handlers only queue them.
        self._inbox: list[Message] = []
        self._state = RolloutState()

    # --- messages ---------------------------------------------------------------------------

    @workflow.signal(name=keys.SIGNAL_PAUSE)
    def pause(self) -> None:
        """No new batch starts; requests already handed over finish."""
        self._inbox.append(Pause())

    @workflow.signal(name=keys.SIGNAL_RESUME)
    def resume(self) -> None:
        """Clear pause and halt; promote a canary that waits for manual promotion."""
        self._inbox.append(Resume())

    @workflow.signal(name=keys.SIGNAL_HALT)
    def halt(self) -> None:
        """Stop at the next safe point: withdraw requests not yet started on their node."""
        self._inbox.append(Halt())

    @workflow.signal(name=keys.SIGNAL_RETRY)
    def retry(self, request: RetryRequest = EVERY_FAILED_NODE) -> None:
        """Failed nodes (all, or `request.nodes`) get another window; clears a halt.

        Without a payload (`temporal workflow signal --name retry`) every failed node is retried.
        """
        self._inbox.append(Retry(request))

    @workflow.signal(name=SIGNAL_SPEC_CHANGED)
    def spec_changed(self, change: SpecChange) -> None:
        """The Package or its policy changed: re-plan, keeping work already done."""
        self._inbox.append(SpecChanged(change))

    @workflow.signal(name=SIGNAL_NODES_CHANGED)
    def nodes_changed(self) -> None:
        """Nodes joined or changed: re-list them (repeats before that re-list do not wake the loop)."""
        if not self._state.relist_requested:
            self._state.relist_requested = True
            self._inbox.append(NodesChanged())

    @workflow.signal(name=SIGNAL_PACKAGE_DELETED)
    def deleted(self) -> None:
        """The Package is gone: uninstall first when enabled, then end."""
        self._inbox.append(Deleted())

    @workflow.signal(name=SIGNAL_NODE_RESULT)
    def node_result(self, result: NodeResult) -> None:
        """A node workflow's answer to one of our requests."""
        self._inbox.append(Answer(result))

    @workflow.query(name=keys.QUERY_PROGRESS)
    def progress(self) -> RolloutProgress:
        """Counts per state, current batch, canary, blocked and erroring nodes."""
        state = self._state
        report = state.book.progress(state.phase, state.version)
        report.updated_at = workflow.now().isoformat()
        return report

    # --- main loop --------------------------------------------------------------------------

    @workflow.run
    async def run(self, input: RolloutInput) -> None:
        """Roll the Package out until it is deleted (see the module docstring)."""
        self._input = input
        state = self._state
        # Runs started by this code keep windows in flight as targets, wait for them before a batch
        # or the rollout ends, re-resolve targets before each batch and wait for dependencies;
        # runs recorded before it replay with the earlier rules.
        rules = Rules(strict=workflow.patched(PATCH_WINDOWS_IN_FLIGHT), marks=workflow.patched(PATCH_MARK_BLOCKED))
        if input.carry:
            carry = carry_from_json(input.carry)
        else:
            carry = state.carry
            carry.paused = input.paused
            state.replan = True
        state.start(input.package, carry, rules)
        state.take_spec(SpecChange(input.spec, input.generation, input.policy_name, input.policy))
        workflow.upsert_search_attributes([PACKAGE_KEY.value_set([input.package])])
        next_relist = workflow.now() + timedelta(seconds=input.relist_seconds)
        while True:
            self._apply_inbox()
            if state.carry.deleting and not state.carry.uninstalling:
                if state.spec is None or not state.spec.uninstall.enabled:
                    await self._withdraw()
                    return
                state.carry.uninstalling, state.replan = True, True
            if state.spec is None:
                self._set_phase(RolloutPhase.INVALID)
                await self._wait(None)
                continue
            if state.replan:
                await self._plan_from_scratch()
            elif (self._relist_wanted() and workflow.now() >= state.listed_at + RELIST_MIN_INTERVAL) or (
                workflow.now() >= next_relist
            ):
                await self._refresh_nodes()
            if workflow.now() >= next_relist:
                next_relist = workflow.now() + timedelta(seconds=input.relist_seconds)
            if self._should_continue_as_new():
                await workflow.wait_condition(workflow.all_handlers_finished)
                self._apply_inbox()
                workflow.continue_as_new(state.carry_over(input))
            if await self._step(next_relist):
                return

    def _apply_inbox(self) -> None:
        inbox, self._inbox = self._inbox, []
        for message in inbox:
            self._apply(message)

    def _apply(self, message: Message) -> None:
        state = self._state
        carry = state.carry
        match message:
            case Pause():
                carry.paused = True
            case Resume():
                carry.paused, carry.halted, carry.promote = False, False, True
                if carry.planner is not None and carry.planner.halted:
                    batches.resume_after_halt(carry.planner)
            case Halt():
                carry.halted = True
            case Retry(request):
                state.retry(request)
            case SpecChanged(change):
                before = state.spec_json
                state.take_spec(change)
                # Requests in flight for the very same package spec stay valid across the re-plan.
                state.keep_in_flight = state.spec is not None and state.spec_json == before
                state.replan = True
                # Never report the previous plan's Complete under the new generation.
                self._set_phase(RolloutPhase.PENDING)
            case NodesChanged():
                state.relist = True
            case Deleted():
                carry.deleting = True
            case Answer(result):
                self._take_result(result)
            case _:
                assert_never(message)

    def _take_result(self, result: NodeResult) -> None:
        state = self._state
        if result.package != self._input.package or not state.book.is_current(result):
            return  # another package's answer, or one to a request of an earlier plan
        if state.rules.marks and result.held:
            state.book.hold(result)
        else:
            state.book.record(result)

    async def _step(self, next_relist: datetime) -> bool:
        """Do one thing the planner asks for; True when the rollout is over."""
        state = self._state
        carry = state.carry
        planner = carry.planner
        assert planner is not None
        remaining = state.book.remaining()
        phase = batches.planner_phase(planner, remaining)
        if carry.halted or phase is batches.PlannerPhase.HALTED:
            if planner.halted:
                carry.message = f"halted: {planner.halt_reason}; signal resume or retry to continue"
            elif not carry.message.startswith("halted"):
                carry.message = "halted by signal; signal resume to continue"
            # Requests not yet started on their node are withdrawn; windows already running finish.
            await self._withdraw()
            self._set_phase(RolloutPhase.HALTED)
            await self._wait(None)
        elif phase is batches.PlannerPhase.IN_BATCH:
            await self._run_batch(planner, remaining)
        elif phase is batches.PlannerPhase.CANARY_HOLD:
            await self._hold_canary(planner)
        elif phase is batches.PlannerPhase.READY:
            if carry.paused:
                self._set_phase(RolloutPhase.PAUSED)
                await self._wait(None)
            elif state.rules.strict and carry.in_flight:
                # Requests of an earlier plan still run (kept across a re-plan): the next batch waits.
                await self._wait_unfinished(next_relist)
            elif state.rules.strict and not state.resolved:
                # Nodes may have left the selector, joined or finished a dependency since the last
                # listing: re-resolve the targets, then plan the batch from them.
                await self._refresh_nodes()
            elif batch := batches.next_batch(planner, state.book.startable()):
                await self._send(batch)
            else:
                await self._wait_unfinished(next_relist)
        elif state.rules.strict and (carry.in_flight or (carry.waiting and not carry.uninstalling)):
            await self._wait_unfinished(next_relist)
        elif carry.uninstalling:
            self._set_phase(RolloutPhase.COMPLETE)
            return True
        else:
            failed = state.book.failed_nodes()
            self._set_phase(RolloutPhase.FAILED if failed else RolloutPhase.COMPLETE)
            if not failed:
                carry.message = ""
            if not await self._wait(max(next_relist - workflow.now(), timedelta(seconds=1))):
                state.relist = True
        return False

    async def _run_batch(self, planner: batches.BatchPlannerState, remaining: set[str]) -> None:
        state = self._state
        carry = state.carry
        batch = planner.current_batch
        if not carry.paused:
            # After a halt (or a crash between planning and sending) some nodes were never handed over.
            await self._send([n for n in batch if n in remaining and n not in carry.in_flight])
        results = state.book.batch_results(batch)
        if results is None:
            self._set_working_phase()
            await self._wait(None)
            return
        decision = batches.record_batch_result(planner, *results)
        state.resolved = False
        carry.message = decision.reason
        workflow.logger.info("batch %d of %s: %s", planner.batch_number, self._input.package, decision.reason)
        if planner.canary_phase is CanaryPhase.SOAKING:
            carry.soak_until = (workflow.now() + timedelta(seconds=decision.soak_seconds)).isoformat()
            carry.promote = False

    async def _hold_canary(self, planner: batches.BatchPlannerState) -> None:
        carry = self._state.carry
        self._set_phase(RolloutPhase.CANARY)
        if carry.soak_until and workflow.now() < datetime.fromisoformat(carry.soak_until):
            carry.message = f"canary passed; soaking until {carry.soak_until}"
            await self._wait(datetime.fromisoformat(carry.soak_until) - workflow.now())
            return
        if planner.canary_promotion is Promotion.MANUAL and not carry.promote:
            batches.await_promotion(planner)
            carry.message = "canary passed; waiting for manual promotion (signal resume)"
            await self._wait(None)
            return
        batches.promote_canary(planner)
        carry.soak_until, carry.promote = "", False
        self._state.resolved = False

    async def _wait_unfinished(self, next_relist: datetime) -> None:
        """Nothing to start now: windows still run, or nodes wait for a dependency (strict rollouts)."""
        carry = self._state.carry
        self._set_working_phase()
        if not carry.in_flight and carry.waiting:
            names = sorted(carry.waiting)
            carry.message = (
                f"waiting: {len(names)} node(s) wait for a dependency to complete there "
                f"(first {names[0]}: {carry.waiting[names[0]]}); re-checked when nodes change"
            )
        if not await self._wait(max(next_relist - workflow.now(), timedelta(seconds=1))):
            self._state.relist = True

    # --- helpers ------------------------------------------------------------------------------

    async def _wait(self, timeout: timedelta | None) -> bool:
        """Wait for a message (or the timeout); False when the timeout passed.

        A re-list asked for by `nodes_changed` but not yet due shortens the wait to when it is due.
        """
        if self._relist_wanted():
            due = max(self._state.listed_at + RELIST_MIN_INTERVAL - workflow.now(), timedelta(seconds=1))
            if timeout is None or due < timeout:
                try:
                    await workflow.wait_condition(lambda: bool(self._inbox), timeout=due)
                except TimeoutError:
                    return True  # not the caller's timeout: go round the loop, which re-lists
                return True
        try:
            await workflow.wait_condition(lambda: bool(self._inbox), timeout=timeout)
        except TimeoutError:
            return False
        return True

    def _relist_wanted(self) -> bool:
        """A `nodes_changed` re-list is pending and useful now.

        Strict rollouts re-resolve their targets before every batch, and the nodes of the batch that
        is out are theirs whatever their taints: while a batch is out, node changes (mostly our own
        windows' cordons and reboots) wait for that re-resolution instead of costing a listing each.
        """
        planner = self._state.carry.planner
        if self._state.rules.strict and planner is not None and planner.current and not self._state.carry.halted:
            return False
        return self._state.relist

    def _set_working_phase(self) -> None:
        state = self._state
        planner = state.carry.planner
        if state.carry.uninstalling:
            self._set_phase(RolloutPhase.UNINSTALLING)
        elif state.carry.paused:
            self._set_phase(RolloutPhase.PAUSED)
        elif planner is not None and planner.canary_phase is CanaryPhase.RUNNING:
            self._set_phase(RolloutPhase.CANARY)
        else:
            self._set_phase(RolloutPhase.PROGRESSING)

    def _set_phase(self, phase: RolloutPhase) -> None:
        state = self._state
        report = state.book.progress(phase, state.version)
        details = (
            f"**{phase.value}** {self._input.package} {state.version}: "
            f"{report.counts.get('complete', 0)}/{report.total_nodes} complete, batch {report.batch_number}"
        )
        if details != workflow.get_current_details():
            workflow.set_current_details(details)
        if phase is state.phase:
            return
        state.phase = phase
        workflow.upsert_search_attributes([PHASE_KEY.value_set(phase.value)])

    def _should_continue_as_new(self) -> bool:
        info = workflow.info()
        limit = self._input.history_limit or HISTORY_EVENT_LIMIT
        return (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() > limit
            or info.get_current_history_size() > HISTORY_BYTES_LIMIT
        )

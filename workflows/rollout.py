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

Handlers only queue messages; the loop applies them in order, so state changes happen at one place.
Continue-as-new carries `RolloutCarry` (planner state, outcomes) when history grows.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeKey

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    from activities.io import RequestNodeWindowsInput
    from api import keys
    from api.enums import CanaryPhase, Promotion, RolloutPhase
    from api.package import PackageSpec
    from api.policy import DEFAULT_COMPARTMENT, DeploymentPolicySpec
    from planning import batches
    from planning.compartments import DEFAULT_POLICY
    from planning.status import RolloutProgress
    from workflows.messages import (
        ROLLOUT_WORKFLOW_TYPE,
        SIGNAL_NODE_CANCEL,
        SIGNAL_NODE_RESULT,
        SIGNAL_NODE_RETRY,
        SIGNAL_NODES_CHANGED,
        SIGNAL_PACKAGE_DELETED,
        SIGNAL_SPEC_CHANGED,
        BudgetRef,
        NodeCancel,
        NodeRequest,
        NodeResult,
        RetryRequest,
        RolloutCarry,
        RolloutInput,
        SpecChange,
    )
    from workflows.rollout_state import NodeBook, carry_from_json, carry_to_json
    from workflows.rollout_targets import (
        ACTIVITY_TIMEOUT,
        PATCH_MARK_BLOCKED,
        PATCH_WINDOWS_IN_FLIGHT,
        RolloutTargets,
    )

# A keyword list since fleets (one value here); the command is the same, so recorded runs replay.
PACKAGE_KEY = SearchAttributeKey.for_keyword_list(keys.SEARCH_ATTR_PACKAGE)
PHASE_KEY = SearchAttributeKey.for_keyword(keys.SEARCH_ATTR_PHASE)
HISTORY_EVENT_LIMIT = 10_000
HISTORY_BYTES_LIMIT = 8 * 1024 * 1024
# Requests per `request_node_windows` call: keeps each activity payload well under 2 MB.
REQUEST_CHUNK = 50
# `nodes_changed` comes at every cordon of every node: re-list at most this often (history size).
RELIST_MIN_INTERVAL = timedelta(seconds=30)
# Default payload of `retry` (never mutated).
EVERY_FAILED_NODE = RetryRequest()


@workflow.defn(name=ROLLOUT_WORKFLOW_TYPE)
class RolloutWorkflow(RolloutTargets):
    """One Package's rollout (see the module docstring; target resolution: `workflows.rollout_targets`)."""

    def __init__(self) -> None:
        # Messages may arrive before `run` (signal-with-start): handlers only queue them.
        self._inbox: list[tuple[str, Any]] = []
        self._carry = RolloutCarry()
        self._book = NodeBook("", self._carry)
        self._phase = RolloutPhase.PENDING
        self._version = ""
        self._spec: PackageSpec | None = None
        self._spec_json: dict[str, Any] = {}
        self._policy: DeploymentPolicySpec = DEFAULT_POLICY
        self._generation = 0
        self._policy_name: str | None = None
        self._replan = False
        self._relist = False
        self._listed_at = datetime.min.replace(tzinfo=UTC)
        self._relist_requested = False
        self._strict = False
        self._marks = False
        self._resolved = False
        self._keep_in_flight = False

    # --- messages ---------------------------------------------------------------------------

    @workflow.signal(name=keys.SIGNAL_PAUSE)
    def pause(self) -> None:
        """No new batch starts; requests already handed over finish."""
        self._inbox.append(("pause", None))

    @workflow.signal(name=keys.SIGNAL_RESUME)
    def resume(self) -> None:
        """Clear pause and halt; promote a canary that waits for manual promotion."""
        self._inbox.append(("resume", None))

    @workflow.signal(name=keys.SIGNAL_HALT)
    def halt(self) -> None:
        """Stop at the next safe point: withdraw requests not yet started on their node."""
        self._inbox.append(("halt", None))

    @workflow.signal(name=keys.SIGNAL_RETRY)
    def retry(self, request: RetryRequest = EVERY_FAILED_NODE) -> None:
        """Failed nodes (all, or `request.nodes`) get another window; clears a halt.

        Without a payload (`temporal workflow signal --name retry`) every failed node is retried.
        """
        self._inbox.append(("retry", request))

    @workflow.signal(name=SIGNAL_SPEC_CHANGED)
    def spec_changed(self, change: SpecChange) -> None:
        """The Package or its policy changed: re-plan, keeping work already done."""
        self._inbox.append(("spec", change))

    @workflow.signal(name=SIGNAL_NODES_CHANGED)
    def nodes_changed(self) -> None:
        """Nodes joined or changed: re-list them (repeats before that re-list do not wake the loop)."""
        if not self._relist_requested:
            self._relist_requested = True
            self._inbox.append(("nodes", None))

    @workflow.signal(name=SIGNAL_PACKAGE_DELETED)
    def deleted(self) -> None:
        """The Package is gone: uninstall first when enabled, then end."""
        self._inbox.append(("deleted", None))

    @workflow.signal(name=SIGNAL_NODE_RESULT)
    def node_result(self, result: NodeResult) -> None:
        """A node workflow's answer to one of our requests."""
        self._inbox.append(("result", result))

    @workflow.query(name=keys.QUERY_PROGRESS)
    def progress(self) -> RolloutProgress:
        """Counts per state, current batch, canary, blocked and erroring nodes."""
        report = self._book.progress(self._phase, self._version)
        report.updated_at = workflow.now().isoformat()
        return report

    # --- main loop --------------------------------------------------------------------------

    @workflow.run
    async def run(self, input: RolloutInput) -> None:
        """Roll the Package out until it is deleted (see the module docstring)."""
        self._input = input
        # Runs started by this code keep windows in flight as targets, wait for them before a batch
        # or the rollout ends, re-resolve targets before each batch and wait for dependencies;
        # runs recorded before it replay with the earlier rules.
        self._strict = workflow.patched(PATCH_WINDOWS_IN_FLIGHT)
        self._marks = workflow.patched(PATCH_MARK_BLOCKED)
        if input.carry:
            self._carry = carry_from_json(input.carry)
        else:
            self._carry.paused = input.paused
            self._replan = True
        self._book = NodeBook(input.package, self._carry, self._strict)
        self._set_spec(SpecChange(input.spec, input.generation, input.policy_name, input.policy))
        workflow.upsert_search_attributes([PACKAGE_KEY.value_set([input.package])])
        next_relist = workflow.now() + timedelta(seconds=input.relist_seconds)
        while True:
            self._apply_inbox()
            if self._carry.deleting and not self._carry.uninstalling:
                if self._spec is None or not self._spec.uninstall.enabled:
                    await self._withdraw()
                    return
                self._carry.uninstalling, self._replan = True, True
            if self._spec is None:
                self._set_phase(RolloutPhase.INVALID)
                await self._wait(None)
                continue
            if self._replan:
                await self._plan_from_scratch()
            elif (self._relist_wanted() and workflow.now() >= self._listed_at + RELIST_MIN_INTERVAL) or (
                workflow.now() >= next_relist
            ):
                await self._refresh_nodes()
            if workflow.now() >= next_relist:
                next_relist = workflow.now() + timedelta(seconds=input.relist_seconds)
            if self._should_continue_as_new():
                await workflow.wait_condition(workflow.all_handlers_finished)
                self._apply_inbox()
                workflow.continue_as_new(self._carry_over())
            if await self._step(next_relist):
                return

    def _apply_inbox(self) -> None:
        carry = self._carry
        inbox, self._inbox = self._inbox, []
        for kind, payload in inbox:
            if kind == "pause":
                carry.paused = True
            elif kind == "resume":
                carry.paused, carry.halted, carry.promote = False, False, True
                if carry.planner is not None and carry.planner.halted:
                    batches.resume_after_halt(carry.planner)
            elif kind == "halt":
                carry.halted = True
            elif kind == "retry":
                self._apply_retry(payload)
            elif kind == "spec":
                before = self._spec_json
                self._set_spec(payload)
                # Requests in flight for the very same package spec stay valid across the re-plan.
                self._keep_in_flight = self._spec is not None and self._spec_json == before
                self._replan = True
                # Never report the previous plan's Complete under the new generation.
                self._set_phase(RolloutPhase.PENDING)
            elif kind == "nodes":
                self._relist = True
            elif kind == "deleted":
                carry.deleting = True
            elif kind == "result" and payload.package == self._input.package and self._book.is_current(payload):
                if self._marks and payload.held:
                    self._book.hold(payload)
                else:
                    self._book.record(payload)

    def _apply_retry(self, request: RetryRequest) -> None:
        carry = self._carry
        failed = self._book.failed_nodes()
        nodes = [n for n in failed if not request.nodes or n in request.nodes]
        for node in nodes:
            carry.outcomes.pop(node, None)
            carry.messages.pop(node, None)
            if node not in carry.retry_nodes:
                carry.retry_nodes.append(node)
        carry.halted = False
        if carry.planner is not None and carry.planner.halted:
            batches.resume_after_halt(carry.planner)

    def _set_spec(self, change: SpecChange) -> None:
        self._generation = change.generation
        try:
            self._spec = PackageSpec.model_validate(change.spec)
            self._policy = DeploymentPolicySpec.model_validate(change.policy) if change.policy else DEFAULT_POLICY
        except ValidationError as err:
            # The bridge validates first; a spec that still fails here waits for the next change.
            workflow.logger.warning("invalid spec for %s: %s", self._input.package, err)
            self._spec = None
            self._carry.message = f"invalid spec: {err}"
            return
        self._spec_json = self._spec.dump()
        self._policy_name = change.policy_name
        if not self._version:
            self._version = self._spec.version

    async def _step(self, next_relist: datetime) -> bool:
        """Do one thing the planner asks for; True when the rollout is over."""
        carry = self._carry
        planner = carry.planner
        assert planner is not None
        remaining = self._book.remaining()
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
            elif self._strict and carry.in_flight:
                # Requests of an earlier plan still run (kept across a re-plan): the next batch waits.
                await self._wait_unfinished(next_relist)
            elif self._strict and not self._resolved:
                # Nodes may have left the selector, joined or finished a dependency since the last
                # listing: re-resolve the targets, then plan the batch from them.
                await self._refresh_nodes()
            elif batch := batches.next_batch(planner, self._book.startable()):
                await self._send(batch)
            else:
                await self._wait_unfinished(next_relist)
        elif self._strict and (carry.in_flight or (carry.waiting and not carry.uninstalling)):
            await self._wait_unfinished(next_relist)
        elif carry.uninstalling:
            self._set_phase(RolloutPhase.COMPLETE)
            return True
        else:
            failed = self._book.failed_nodes()
            self._set_phase(RolloutPhase.FAILED if failed else RolloutPhase.COMPLETE)
            if not failed:
                carry.message = ""
            if not await self._wait(max(next_relist - workflow.now(), timedelta(seconds=1))):
                self._relist = True
        return False

    async def _run_batch(self, planner: batches.BatchPlannerState, remaining: set[str]) -> None:
        carry = self._carry
        batch = planner.current_batch
        if not carry.paused:
            # After a halt (or a crash between planning and sending) some nodes were never handed over.
            await self._send([n for n in batch if n in remaining and n not in carry.in_flight])
        results = self._book.batch_results(batch)
        if results is None:
            self._set_working_phase()
            await self._wait(None)
            return
        decision = batches.record_batch_result(planner, *results)
        self._resolved = False
        carry.message = decision.reason
        workflow.logger.info("batch %d of %s: %s", planner.batch_number, self._input.package, decision.reason)
        if planner.canary_phase is CanaryPhase.SOAKING:
            carry.soak_until = (workflow.now() + timedelta(seconds=decision.soak_seconds)).isoformat()
            carry.promote = False

    async def _hold_canary(self, planner: batches.BatchPlannerState) -> None:
        carry = self._carry
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
        self._resolved = False

    async def _wait_unfinished(self, next_relist: datetime) -> None:
        """Nothing to start now: windows still run, or nodes wait for a dependency (strict rollouts)."""
        carry = self._carry
        self._set_working_phase()
        if not carry.in_flight and carry.waiting:
            names = sorted(carry.waiting)
            carry.message = (
                f"waiting: {len(names)} node(s) wait for a dependency to complete there "
                f"(first {names[0]}: {carry.waiting[names[0]]}); re-checked when nodes change"
            )
        if not await self._wait(max(next_relist - workflow.now(), timedelta(seconds=1))):
            self._relist = True

    # --- acting ------------------------------------------------------------------------------

    async def _send(self, nodes: list[str]) -> None:
        """Hand `nodes` their requests (signal-with-start through an activity), then retry signals."""
        if not nodes:
            return
        carry, planner = self._carry, self._carry.planner
        assert planner is not None
        requests = []
        for node in nodes:
            compartment = planner.compartment_of(node) or DEFAULT_COMPARTMENT
            policy = self._policy_name or f"package:{self._input.package}"
            requests.append(NodeRequest(
                rollout_workflow_id=workflow.info().workflow_id,
                package=self._input.package,
                spec=self._spec_json,
                generation=self._generation,
                budget=BudgetRef(policy, compartment, batches.budget_limit(planner, compartment)),
                request_id=self._book.request_id(node),
                uninstall=carry.uninstalling,
                node_order=carry.node_order.setdefault(node, len(carry.node_order)),
            ))
            carry.in_flight[node] = requests[-1].request_id
        self._set_working_phase()
        for start in range(0, len(nodes), REQUEST_CHUNK):
            await workflow.execute_activity(
                "request_node_windows",
                RequestNodeWindowsInput(
                    requests=requests[start:start + REQUEST_CHUNK],
                    nodes=nodes[start:start + REQUEST_CHUNK],
                    task_queue=self._input.node_task_queue,
                ),
                start_to_close_timeout=ACTIVITY_TIMEOUT,
                heartbeat_timeout=timedelta(seconds=60),
                summary=f"request {len(nodes[start:start + REQUEST_CHUNK])} node window(s)",
            )
        for node in [n for n in nodes if n in carry.retry_nodes]:
            carry.retry_nodes.remove(node)
            await self._signal_node(node, SIGNAL_NODE_RETRY, None)

    async def _withdraw(self) -> None:
        """Withdraw every request in flight (halt, delete): only requests not yet started are dropped."""
        cancel = NodeCancel(workflow.info().workflow_id, self._input.package)
        for node in sorted(self._carry.in_flight):
            await self._signal_node(node, SIGNAL_NODE_CANCEL, cancel)
        self._carry.in_flight.clear()

    async def _signal_node(self, node: str, signal: str, payload: Any) -> None:
        handle = workflow.get_external_workflow_handle(keys.node_workflow_id(node))
        try:
            await (handle.signal(signal) if payload is None else handle.signal(signal, payload))
        except Exception as err:  # noqa: BLE001 - a node workflow that ended holds nothing of ours
            workflow.logger.info("signal %s to node %s not delivered: %s", signal, node, err)

    # --- helpers ------------------------------------------------------------------------------

    async def _wait(self, timeout: timedelta | None) -> bool:
        """Wait for a message (or the timeout); False when the timeout passed.

        A re-list asked for by `nodes_changed` but not yet due shortens the wait to when it is due.
        """
        if self._relist_wanted():
            due = max(self._listed_at + RELIST_MIN_INTERVAL - workflow.now(), timedelta(seconds=1))
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
        planner = self._carry.planner
        if self._strict and planner is not None and planner.current and not self._carry.halted:
            return False
        return self._relist

    def _set_working_phase(self) -> None:
        planner = self._carry.planner
        if self._carry.uninstalling:
            self._set_phase(RolloutPhase.UNINSTALLING)
        elif self._carry.paused:
            self._set_phase(RolloutPhase.PAUSED)
        elif planner is not None and planner.canary_phase is CanaryPhase.RUNNING:
            self._set_phase(RolloutPhase.CANARY)
        else:
            self._set_phase(RolloutPhase.PROGRESSING)

    def _set_phase(self, phase: RolloutPhase) -> None:
        report = self._book.progress(phase, self._version)
        details = (
            f"**{phase.value}** {self._input.package} {self._version}: "
            f"{report.counts.get('complete', 0)}/{report.total_nodes} complete, batch {report.batch_number}"
        )
        if details != workflow.get_current_details():
            workflow.set_current_details(details)
        if phase is self._phase:
            return
        self._phase = phase
        workflow.upsert_search_attributes([PHASE_KEY.value_set(phase.value)])

    def _should_continue_as_new(self) -> bool:
        info = workflow.info()
        limit = self._input.history_limit or HISTORY_EVENT_LIMIT
        return (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() > limit
            or info.get_current_history_size() > HISTORY_BYTES_LIMIT
        )

    def _carry_over(self) -> RolloutInput:
        return RolloutInput(
            package=self._input.package,
            spec=self._spec_json or self._input.spec,
            generation=self._generation,
            policy_name=self._policy_name,
            policy=self._policy.dump() if self._policy is not DEFAULT_POLICY else None,
            paused=self._carry.paused,
            node_task_queue=self._input.node_task_queue,
            relist_seconds=self._input.relist_seconds,
            history_limit=self._input.history_limit,
            carry=carry_to_json(self._carry),
        )

"""The rollout of every Package of one DeploymentPolicy: `fleet/<policy>`. Deterministic, no I/O.

One fleet per DeploymentPolicy (`fleet/default` for Packages naming none: one node at a time).
Its desired state is a `FleetSpec` (the policy and every Package naming it), handed over by the
bridge with signal `desired` (also the start signal). Loop (observe -> plan -> act):
list and classify the nodes (activity `list_fleet_nodes`, `planning.fleet_targets`), plan batches
(`planning.batches`: canary first, strategy sizes capped by each compartment's budget), hand each
node of a batch ONE `WindowRequest` carrying every Package pending there (activity
`request_windows`: signal-with-start `window` on `node/<node>`), collect `window_result`, evaluate
the batch (grow, shrink, halt), until no node has work left in the wave. A change of the desired
state starts a new wave once the windows in flight have answered (`planning.fleet_state`).
The fleet stays open while it has Packages (joining nodes, spec changes, a re-list every
`relist_seconds`) and ends once it has none and no window is out.

Budgets: a batch never holds more nodes of a compartment than its budget and a new batch starts
only when nothing is in flight, so the fleet never disrupts more nodes at once than the budget,
whatever the number of Packages (ADR 0007: the per-Package `budget/...` workflows are retired).

Signals (contract, each with an optional `Filter` {"packages": [...], "nodes": [...]}): `pause`,
`resume` (without a filter: also clears a halt and promotes a canary awaiting promotion), `halt`
(requests not yet started are withdrawn), `retry` (erroring or blocked nodes are asked again),
`rerun` (a `Rerun`: a complete Package runs again on its nodes, once per id; `planning.fleet_rerun`;
also from the Package's `noderoll.io/rerun` annotation in the desired state);
from the bridge `desired` and `nodes_changed`. Query `progress`: a
`planning.fleet_status.FleetProgress`. A node workflow that closes without answering is noticed
within `watchdog_seconds` and asked again (`planning.fleet_state.lost`).

Maintenance windows and analysis gates of the policy hold the next batch (`workflows.fleet_holds`);
with `canary.onFailure: rollback` a failed canary is rolled back (`workflows.fleet_rollback`).

Handlers only queue typed messages; the loop applies them in order.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from temporalio import workflow
from temporalio.common import SearchAttributeKey

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    from api.enums import CanaryPhase, Promotion, RolloutPhase
    from api.policy import DeploymentPolicySpec
    from planning import batches
    from planning import fleet_state as fs
    from planning.compartments import DEFAULT_POLICY
    from planning.fleet_rerun import STAGES, rerun_from_annotation
    from planning.fleet_status import FleetProgress, details_note, fleet_progress
    from protocol import names
    from protocol.fleet import Filter, FleetInput, FleetSpec, Rerun, WindowResult
    from workflows.fleet_acts import never
    from workflows.fleet_codec import state_from_json, state_to_json
    from workflows.fleet_rollback import FleetRollbacks

PACKAGE_KEY = SearchAttributeKey.for_keyword_list(names.SEARCH_ATTR_PACKAGE)
PHASE_KEY = SearchAttributeKey.for_keyword(names.SEARCH_ATTR_PHASE)
HISTORY_EVENT_LIMIT = 10_000
HISTORY_BYTES_LIMIT = 8 * 1024 * 1024
# `nodes_changed` comes at every cordon of every node: re-list at most this often.
RELIST_MIN_INTERVAL = timedelta(seconds=30)
EVERYTHING = Filter()


@dataclass(frozen=True)
class Desired:
    """Inbox: the bridge's new desired state."""

    spec: FleetSpec


@dataclass(frozen=True)
class Operator:
    """Inbox: an operator signal (`pause`, `resume`, `halt`, `retry`) and its filter."""

    signal: str
    scope: Filter


@dataclass(frozen=True)
class NodesChanged:
    """Inbox: the bridge saw Node changes that concern the fleet."""


@dataclass(frozen=True)
class Answer:
    """Inbox: a node workflow's answer."""

    result: WindowResult


@dataclass(frozen=True)
class RerunAsked:
    """Inbox: `rerun` (or the Package's `noderoll.io/rerun` annotation): run a complete Package again."""

    request: Rerun


Message = Desired | Operator | NodesChanged | Answer | RerunAsked


@workflow.defn(name=names.FLEET_WORKFLOW_TYPE)
class FleetWorkflow(FleetRollbacks):
    """The fleet of one DeploymentPolicy (see the module docstring)."""

    def __init__(self) -> None:
        # Signal-with-start delivers `desired` before `run`: handlers only queue.
        self._inbox: list[Message] = []
        self._state = fs.FleetState()
        self._phase = RolloutPhase.PENDING
        self._policy: DeploymentPolicySpec = DEFAULT_POLICY
        self._policy_name = ""
        self._relist = False
        self._relist_requested = False
        # A re-list wanted at once (a user action), not rate-limited like `nodes_changed`.
        self._relist_now = False
        self._listed_at = datetime.min.replace(tzinfo=UTC)
        # Targets were listed since the last batch was handed over.
        self._resolved = False
        self._packages_shown: list[str] = []
        self._to_withdraw: set[str] = set()
        self._withdrawing: set[str] = set()
        self._next_watchdog = never()

    # --- messages ---------------------------------------------------------------------------

    @workflow.signal(name=names.SIGNAL_FLEET_SPEC)
    def desired(self, spec: FleetSpec) -> None:
        """The bridge's desired state: the policy and every Package naming it."""
        self._inbox.append(Desired(spec))

    @workflow.signal(name=names.SIGNAL_PAUSE)
    def pause(self, scope: Filter = EVERYTHING) -> None:
        """No new windows (for the whole fleet, or for the given Packages / nodes)."""
        self._inbox.append(Operator(names.SIGNAL_PAUSE, scope))

    @workflow.signal(name=names.SIGNAL_RESUME)
    def resume(self, scope: Filter = EVERYTHING) -> None:
        """Clear pauses; without a filter also a halt, and promote a canary awaiting promotion."""
        self._inbox.append(Operator(names.SIGNAL_RESUME, scope))

    @workflow.signal(name=names.SIGNAL_HALT)
    def halt(self, scope: Filter = EVERYTHING) -> None:
        """Stop at the next safe point: requests not yet started are withdrawn."""
        self._inbox.append(Operator(names.SIGNAL_HALT, scope))

    @workflow.signal(name=names.SIGNAL_RETRY)
    def retry(self, scope: Filter = EVERYTHING) -> None:
        """Erroring and blocked nodes (all, or the given Packages / nodes) get another window."""
        self._inbox.append(Operator(names.SIGNAL_RETRY, scope))

    @workflow.signal(name=names.SIGNAL_RERUN)
    def rerun(self, request: Rerun) -> None:
        """Run a complete Package again on its nodes (or the given ones), once per id (planning.fleet_rerun)."""
        self._inbox.append(RerunAsked(request))

    @workflow.signal(name=names.SIGNAL_NODES_CHANGED)
    def nodes_changed(self) -> None:
        """Nodes joined or changed: re-list them (repeats before that re-list do not wake the loop)."""
        if not self._relist_requested:
            self._relist_requested = True
            self._inbox.append(NodesChanged())

    @workflow.signal(name=names.SIGNAL_WINDOW_RESULT)
    def window_result(self, result: WindowResult) -> None:
        """A node workflow's answer to one of our requests."""
        self._inbox.append(Answer(result))

    @workflow.query(name=names.QUERY_PROGRESS)
    def progress(self) -> FleetProgress:
        """Per Package, per node and for the fleet (planning.fleet_status)."""
        return fleet_progress(self._state, self._phase, workflow.now().isoformat())

    @workflow.query(name=names.QUERY_FLEET_SPEC)
    def desired_state(self) -> FleetSpec | None:
        """The desired state the fleet holds (what the bridge last handed over)."""
        return self._state.spec

    # --- main loop --------------------------------------------------------------------------

    @workflow.run
    async def run(self, input: FleetInput) -> None:
        """Roll the fleet's Packages out until it has none left (see the module docstring)."""
        self._input = input
        self._policy_name = input.policy_name
        if input.carry:
            self._state = state_from_json(input.carry)
            self._set_policy()
            self._show_packages()
        next_relist = workflow.now() + timedelta(seconds=input.relist_seconds)
        while True:
            self._apply_inbox()
            state = self._state
            if state.spec is None:
                await self._wait(None)
                continue
            if not state.spec.packages and not state.in_flight:
                # No Package left and no window out: end (a new Package starts a new run).
                await workflow.wait_condition(workflow.all_handlers_finished)
                if not self._inbox:
                    self._set_phase(RolloutPhase.COMPLETE)
                    return
                continue
            if state.wave_wanted and not state.in_flight and not fs.rolling_back(state):
                await self._start_wave()
            elif state.planner is not None and (
                (self._relist_wanted() and workflow.now() >= self._listed_at + RELIST_MIN_INTERVAL)
                or workflow.now() >= next_relist or self._relist_now
            ):
                await self._refresh()
            if workflow.now() >= next_relist:
                next_relist = workflow.now() + timedelta(seconds=input.relist_seconds)
            await self._watchdog()
            if self._should_continue_as_new():
                await workflow.wait_condition(workflow.all_handlers_finished)
                self._apply_inbox()
                workflow.continue_as_new(self._carry_over())
            await self._step(next_relist)

    def _apply_inbox(self) -> None:
        state = self._state
        inbox, self._inbox = self._inbox, []
        for message in inbox:
            if isinstance(message, Desired):
                self._take_spec(message.spec)
            elif isinstance(message, Operator):
                self._operator(message)
            elif isinstance(message, NodesChanged):
                self._relist = True
            elif isinstance(message, Answer):
                if fs.record_result(state, message.result):
                    self._withdrawing.discard(message.result.node)
            elif isinstance(message, RerunAsked):
                self._take_rerun(message.request)

    def _take_rerun(self, request: Rerun) -> None:
        if request.stage not in STAGES and request.id not in self._state.rerun_ids:
            self._state.message = f"rerun {request.id} of {request.package} refused: unknown stage {request.stage!r}"
            workflow.logger.warning("%s: %s", self._fleet_id(), self._state.message)
        elif fs.apply_rerun(self._state, request):
            workflow.logger.info("%s: rerun %s of %s from %s", self._fleet_id(), request.id, request.package,
                                 request.stage or "the start")
            self._resolved = False

    def _operator(self, message: Operator) -> None:
        state = self._state
        if message.signal == names.SIGNAL_PAUSE:
            fs.apply_pause(state, message.scope)
        elif message.signal == names.SIGNAL_RESUME:
            fs.apply_resume(state, message.scope)
        elif message.signal == names.SIGNAL_HALT:
            self._to_withdraw.update(fs.apply_halt(state, message.scope))
        elif message.signal == names.SIGNAL_RETRY:
            retried = fs.apply_retry(state, message.scope)
            workflow.logger.info("%s: retry %s", self._fleet_id(), retried or "nothing")
            self._resolved = False

    def _take_spec(self, spec: FleetSpec) -> None:
        state = self._state
        before = state.spec
        paused_before = {e.name: e.paused for e in (before.packages if before else [])}
        if {e.name: e.paused for e in spec.packages} != paused_before and state.planner is not None:
            # A Package paused or resumed by its spec or annotation: which nodes want it changes now.
            self._relist_now = True
        if fs.set_spec(state, spec):
            # Never report the previous wave's Complete while the new one is being planned.
            self._set_phase(RolloutPhase.PENDING)
        if before is None or before.policy != spec.policy:
            self._set_policy()
        self._show_packages()
        for entry in spec.packages:
            # The `noderoll.io/rerun` annotation; its id is taken once (repeated desired states ignore it).
            asked = rerun_from_annotation(entry.name, entry.rerun)
            if asked is not None:
                self._take_rerun(asked)

    def _show_packages(self) -> None:
        """`NoderollPackage`: every Package the fleet carries (a keyword list)."""
        spec = self._state.spec
        names_now = sorted(e.name for e in spec.packages) if spec else []
        if names_now != self._packages_shown:
            self._packages_shown = names_now
            workflow.upsert_search_attributes([PACKAGE_KEY.value_set(names_now)])

    def _set_policy(self) -> None:
        spec = self._state.spec
        if spec is None:
            return
        try:
            self._policy = DeploymentPolicySpec.model_validate(spec.policy) if spec.policy else DEFAULT_POLICY
        except ValidationError as err:
            # The bridge validates first; a policy that still fails keeps the last good one.
            workflow.logger.warning("invalid policy for %s: %s", self._fleet_id(), err)

    # --- steps --------------------------------------------------------------------------------

    async def _step(self, next_relist: datetime) -> None:
        """Do one thing the planner asks for (or wait)."""
        state = self._state
        planner = state.planner
        if planner is None or (state.wave_wanted and not fs.rolling_back(state)):
            if state.in_flight:
                state.message = f"finishing {len(state.in_flight)} window(s) before wave {state.wave + 1}"
            await self._wait_unfinished(next_relist)
            return
        if state.rollback is not None:
            await self._roll_back(state.rollback, next_relist)
            return
        phase = batches.planner_phase(planner, fs.remaining(state))
        if state.halted or phase is batches.PlannerPhase.HALTED:
            if planner.halted:
                state.message = f"halted: {planner.halt_reason}; signal resume or retry to continue"
            elif not state.message.startswith("halted"):
                state.message = "halted by signal; signal resume to continue"
            self._to_withdraw.update(state.in_flight)
            await self._withdraw()
            self._set_phase(RolloutPhase.HALTED)
            await self._wait_unfinished(next_relist, keep_phase=True)
        elif phase is batches.PlannerPhase.IN_BATCH:
            await self._run_batch(planner, next_relist)
        elif phase is batches.PlannerPhase.CANARY_HOLD:
            await self._hold_canary(planner)
        elif phase is batches.PlannerPhase.READY:
            await self._ready(planner, next_relist)
        elif state.in_flight:
            await self._wait_unfinished(next_relist)
        else:
            failed = fs.failed_nodes(state)
            self._set_phase(RolloutPhase.FAILED if failed else RolloutPhase.COMPLETE)
            if not failed and not state.departed:
                state.message = ""
            if not await self._wait(max(next_relist - workflow.now(), timedelta(seconds=1))):
                self._relist = True

    async def _ready(self, planner: batches.BatchPlannerState, next_relist: datetime) -> None:
        state = self._state
        if state.paused:
            self._set_phase(RolloutPhase.PAUSED)
            state.message = "paused by signal; signal resume to continue"
            await self._wait_unfinished(next_relist, keep_phase=True)
        elif state.in_flight:
            await self._wait_unfinished(next_relist)
        elif not self._resolved:
            # Nodes may have joined, left or finished a dependency since the last listing.
            await self._refresh()
        elif await self._held():
            return  # a gate or the maintenance windows hold the next batch (it sampled or waited)
        elif batch := batches.next_batch(planner, fs.startable(state), fs.canary_cover(state)):
            await self._send(batch)
        else:
            await self._wait_unfinished(next_relist)

    async def _run_batch(self, planner: batches.BatchPlannerState, next_relist: datetime) -> None:
        state = self._state
        batch = planner.current_batch
        if not state.paused and self._windows_open():
            # After a halt, a pause or a crash between planning and sending: nodes never handed over.
            startable = fs.startable(state)
            await self._send([n for n in batch if n in startable])
        else:
            await self._withdraw_outside_windows()
        results = fs.batch_results(state, batch)
        if results is None:
            if not await self._sample_continuous():
                await self._wait_unfinished(next_relist)
            return
        was_canary = planner.canary_phase is CanaryPhase.RUNNING
        decision = batches.record_batch_result(planner, *results)
        self._resolved = False
        state.message = decision.reason
        workflow.logger.info("%s wave %d batch %d: %s", self._fleet_id(), state.wave, planner.batch_number,
                             decision.reason)
        if planner.canary_phase is CanaryPhase.SOAKING:
            state.soak_until = (workflow.now() + timedelta(seconds=decision.soak_seconds)).isoformat()
            state.promote = False
        if was_canary and planner.canary_phase is CanaryPhase.FAILED:
            self._canary_failed(planner)
        self._open_gates(was_canary, planner)

    async def _hold_canary(self, planner: batches.BatchPlannerState) -> None:
        state = self._state
        self._set_phase(RolloutPhase.CANARY)
        if state.soak_until and workflow.now() < datetime.fromisoformat(state.soak_until):
            state.message = f"canary passed; soaking until {state.soak_until}"
            await self._wait(datetime.fromisoformat(state.soak_until) - workflow.now())
            return
        if await self._gates_hold():
            return
        if planner.canary_promotion is Promotion.MANUAL and not state.promote:
            batches.await_promotion(planner)
            state.message = "canary passed; waiting for manual promotion (signal resume)"
            await self._wait(None)
            return
        batches.promote_canary(planner)
        state.soak_until, state.promote = "", False
        self._resolved = False

    async def _wait_unfinished(self, next_relist: datetime, keep_phase: bool = False) -> None:
        """Nothing to start now: windows are out, or nodes wait (dependencies, pauses)."""
        if not keep_phase:
            self._set_working_phase()
        if not await self._wait(max(next_relist - workflow.now(), timedelta(seconds=1))):
            self._relist = True

    # --- helpers ------------------------------------------------------------------------------

    def _relist_wanted(self) -> bool:
        """A `nodes_changed` re-list is pending and useful now.

        While a batch is out, node changes (mostly our own windows' cordons and reboots) wait for
        the re-listing before the next batch instead of costing a listing each.
        """
        planner = self._state.planner
        if planner is not None and planner.current and not self._state.halted:
            return False
        return self._relist

    def _set_working_phase(self) -> None:
        state = self._state
        planner = state.planner
        if any(e.uninstall for e in (state.spec.packages if state.spec else [])) and fs.remaining(state):
            self._set_phase(RolloutPhase.UNINSTALLING)
        elif state.paused:
            self._set_phase(RolloutPhase.PAUSED)
        elif planner is not None and planner.canary_phase is CanaryPhase.RUNNING:
            self._set_phase(RolloutPhase.CANARY)
        else:
            self._set_phase(RolloutPhase.PROGRESSING)

    def _set_phase(self, phase: RolloutPhase) -> None:
        state = self._state
        report = fleet_progress(state, phase, "")
        shown = ", ".join(f"{p} {r.version}" for p, r in sorted(report.packages.items())) or "none"
        details = (
            f"**{phase.value}** {self._fleet_id()} wave {state.wave}, batch {report.batch_number}: "
            f"{report.counts.get('complete', 0)}/{report.total_nodes} nodes complete; packages: {shown}"
        ) + details_note(state, phase)
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

    def _carry_over(self) -> FleetInput:
        return FleetInput(
            policy_name=self._input.policy_name,
            node_task_queue=self._input.node_task_queue,
            relist_seconds=self._input.relist_seconds,
            watchdog_seconds=self._input.watchdog_seconds,
            history_limit=self._input.history_limit,
            carry=state_to_json(self._state),
        )

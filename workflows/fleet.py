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
whatever the number of Packages (ADR 0007, 0013).
Capacity floors and topology limits (ADR 0015) cap each batch by the latest listing
(`planning.disruption`); when they hold every node the fleet reports `Waiting` with the reason and
lists the nodes again after `RELIST_MIN_INTERVAL`.

Signals (contract, each with an optional `Filter` {"packages": [...], "nodes": [...]}): `pause`,
`resume` (without a filter: also clears a halt and promotes a canary awaiting promotion), `halt`
(requests not yet started are withdrawn), `retry` (erroring or blocked nodes are asked again),
`rerun` (a `Rerun`: a complete Package runs again on its nodes, once per id; `planning.fleet_rerun`;
also from the Package's `noderoll.io/rerun` annotation in the desired state);
from the bridge `desired` and `nodes_changed`. Query `progress`: a
`planning.fleet_status.FleetProgress`. A node workflow that closes without answering is noticed
within `watchdog_seconds` and asked again (`planning.fleet_state.lost`).

Maintenance windows and analysis gates of the policy hold the next batch (`workflows.fleet_holds`);
with `canary.onFailure: rollback` a failed canary is rolled back (`workflows.fleet_rollback`); with
`drainAhead` the nodes expected next are marked `noderoll.io/upcoming` and a node's window starts
at the earliest `drainAhead.seconds` after its mark (`workflows.fleet_ahead`).

Handlers only queue typed messages; the loop applies them in order. The run's whole state is one
`FleetRun` (`workflows/fleet_run.py`); the helpers `FleetActs`, `FleetHolds`, `FleetRollbacks` and
`FleetAhead` each receive it and act on it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from api import keys
    from api.enums import CanaryPhase, Promotion, RolloutPhase
    from planning import batches, disruption, rolling
    from planning import fleet_state as fs
    from planning.eta import record_batch_end
    from planning.fleet_status import FleetProgress, fleet_progress
    from protocol import names
    from protocol.clusters import GlobalTurn
    from protocol.fleet import Filter, FleetInput, FleetSpec, Rerun, WindowResult
    from protocol.fleet_codec import state_from_json
    from workflows.fleet_acts import FleetActs
    from workflows.fleet_ahead import FleetAhead
    from workflows.fleet_holds import FleetHolds
    from workflows.fleet_rollback import FleetRollbacks
    from workflows.fleet_run import (
        ONE_SECOND,
        Answer,
        Desired,
        FleetRun,
        NodesChanged,
        Operator,
        RerunAsked,
        TurnGiven,
        apply_inbox,
    )
    from workflows.fleet_turns import FleetTurns

EVERYTHING = Filter()


@workflow.defn(name=names.FLEET_WORKFLOW_TYPE)
class FleetWorkflow:
    """The fleet of one DeploymentPolicy (see the module docstring)."""

    def __init__(self) -> None:
        # Signal-with-start delivers `desired` before `run`: handlers only queue.
        self._run = FleetRun()
        self._acts = FleetActs(self._run)
        self._holds = FleetHolds(self._run, self._acts)
        self._rollbacks = FleetRollbacks(self._run, self._acts)
        self._turns = FleetTurns(self._run, self._acts)
        self._ahead = FleetAhead(self._run)
        # The last `progress` answer, with the key of the workflow task it was computed after.
        self._progress: tuple[tuple[int, datetime, RolloutPhase], FleetProgress] | None = None

    # --- messages ---------------------------------------------------------------------------

    @workflow.signal(name=names.SIGNAL_FLEET_SPEC)
    def desired(self, spec: FleetSpec) -> None:
        """The bridge's desired state: the policy and every Package naming it."""
        self._run.inbox.append(Desired(spec))

    @workflow.signal(name=names.SIGNAL_PAUSE)
    def pause(self, scope: Filter = EVERYTHING) -> None:
        """No new windows (for the whole fleet, or for the given Packages / nodes)."""
        self._run.inbox.append(Operator(names.SIGNAL_PAUSE, scope))

    @workflow.signal(name=names.SIGNAL_RESUME)
    def resume(self, scope: Filter = EVERYTHING) -> None:
        """Clear pauses; without a filter also a halt, and promote a canary awaiting promotion."""
        self._run.inbox.append(Operator(names.SIGNAL_RESUME, scope))

    @workflow.signal(name=names.SIGNAL_HALT)
    def halt(self, scope: Filter = EVERYTHING) -> None:
        """Stop at the next safe point: requests not yet started are withdrawn."""
        self._run.inbox.append(Operator(names.SIGNAL_HALT, scope))

    @workflow.signal(name=names.SIGNAL_RETRY)
    def retry(self, scope: Filter = EVERYTHING) -> None:
        """Erroring and blocked nodes (all, or the given Packages / nodes) get another window."""
        self._run.inbox.append(Operator(names.SIGNAL_RETRY, scope))

    @workflow.signal(name=names.SIGNAL_RERUN)
    def rerun(self, request: Rerun) -> None:
        """Run a complete Package again on its nodes (or the given ones), once per id (planning.fleet_rerun)."""
        self._run.inbox.append(RerunAsked(request))

    @workflow.signal(name=names.SIGNAL_NODES_CHANGED)
    def nodes_changed(self) -> None:
        """Nodes joined or changed: re-list them (repeats before that re-list do not wake the loop)."""
        if not self._run.relist_requested:
            self._run.relist_requested = True
            self._run.inbox.append(NodesChanged())

    @workflow.signal(name=names.SIGNAL_WINDOW_RESULT)
    def window_result(self, result: WindowResult) -> None:
        """A node workflow's answer to one of our requests."""
        self._run.inbox.append(Answer(result))

    @workflow.signal(name=names.SIGNAL_GLOBAL_TURN)
    def global_turn(self, turn: GlobalTurn) -> None:
        """`global/<policy>`'s answer: this cluster's turn and the global view (workflows.fleet_turns)."""
        self._run.inbox.append(TurnGiven(turn))

    @workflow.query(name=names.QUERY_PROGRESS)
    def progress(self) -> FleetProgress:
        """Per Package, per node and for the fleet (planning.fleet_status).

        Computed once per workflow task: the state changes only in one, and a query sees the last task's
        history length and time (so the key changes with every task). The bridge asks every 3 s and an
        answer over a thousand nodes costs about 10 ms of the worker's CPU; during long windows or while
        the fleet waits (a maintenance window, a gate) no task comes for minutes. In the bench's
        2-minute windows a task comes with every window result, and this measured no gain (ADR 0019).
        """
        key = (workflow.info().get_current_history_length(), workflow.now(), self._run.phase)
        if self._progress is None or self._progress[0] != key:
            report = fleet_progress(self._run.state, self._run.phase, workflow.now().isoformat(), self._run.fleet_id)
            self._progress = (key, report)
        return self._progress[1]

    @workflow.query(name=names.QUERY_FLEET_SPEC)
    def desired_state(self) -> FleetSpec | None:
        """The desired state the fleet holds (what the bridge last handed over)."""
        return self._run.state.spec

    # --- main loop --------------------------------------------------------------------------

    @workflow.run
    async def run(self, input: FleetInput) -> None:
        """Roll the fleet's Packages out until it has none left (see the module docstring)."""
        run, acts = self._run, self._acts
        run.input = input
        if input.carry:
            run.state = state_from_json(input.carry)
            run.set_policy()
            run.show_packages()
        next_relist = workflow.now() + timedelta(seconds=input.relist_seconds)
        while True:
            apply_inbox(run)
            state = run.state
            await self._ahead.sync()
            if state.spec is None:
                await acts.wait(None)
                continue
            if not state.spec.packages and not state.in_flight:
                # No Package left and no window out: end (a new Package starts a new run), and say so to
                # global/<policy> when the policy promotes across clusters (ADR 0017).
                await self._turns.ended()
                await workflow.wait_condition(workflow.all_handlers_finished)
                if not run.inbox:
                    run.set_phase(RolloutPhase.COMPLETE)
                    return
                continue
            # spec.clusters only (ADR 0017): report to global/<policy>, hold a change set not granted yet.
            await self._turns.sync()
            if state.wave_wanted and not state.in_flight and not fs.rolling_back(state):
                if self._turns.holds():
                    await self._turns.hold()
                    continue
                await acts.start_wave(self._turns.holds)
                if self._turns.holds():
                    continue  # a new change set arrived while the nodes were listed
            elif state.planner is not None and acts.relist_due(next_relist):
                await acts.refresh()
            if workflow.now() >= next_relist:
                next_relist = workflow.now() + timedelta(seconds=input.relist_seconds)
            await acts.watchdog()
            if run.should_continue_as_new():
                await workflow.wait_condition(workflow.all_handlers_finished)
                apply_inbox(run)
                workflow.continue_as_new(run.carry_over())
            await self._step(next_relist)

    # --- steps --------------------------------------------------------------------------------

    async def _step(self, next_relist: datetime) -> None:
        """Do one thing the planner asks for (or wait)."""
        run, acts = self._run, self._acts
        state = run.state
        planner = state.planner
        if planner is None or (state.wave_wanted and not fs.rolling_back(state)):
            if state.in_flight:
                state.message = f"finishing {len(state.in_flight)} window(s) before wave {state.wave + 1}"
            await acts.wait_unfinished(next_relist)
            return
        if state.rollback is not None:
            await self._rollbacks.roll_back(state.rollback, next_relist)
            return
        phase = batches.planner_phase(planner, fs.remaining(state))
        if state.halted or phase is batches.PlannerPhase.HALTED:
            if planner.halted:
                state.message = f"halted: {planner.halt_reason}; signal resume or retry to continue"
            elif not state.message.startswith("halted"):
                state.message = "halted by signal; signal resume to continue"
            run.to_withdraw.update(state.in_flight)
            await acts.withdraw()
            run.set_phase(RolloutPhase.HALTED)
            await self._turns.sync()
            await acts.wait_unfinished(next_relist, keep_phase=True)
        elif phase is batches.PlannerPhase.IN_BATCH:
            await self._run_batch(planner, next_relist)
        elif phase is batches.PlannerPhase.CANARY_HOLD:
            await self._hold_canary(planner)
        elif phase is batches.PlannerPhase.READY:
            await self._ready(planner, next_relist)
        elif state.in_flight:
            await acts.wait_unfinished(next_relist)
        else:
            failed = fs.failed_nodes(state)
            run.set_phase(RolloutPhase.FAILED if failed else RolloutPhase.COMPLETE)
            if not failed and not state.departed:
                state.message = ""
            await self._turns.sync()
            if not await acts.wait(max(next_relist - workflow.now(), ONE_SECOND)):
                run.relist = True

    async def _ready(self, planner: batches.BatchPlannerState, next_relist: datetime) -> None:
        run, acts = self._run, self._acts
        state = run.state
        if state.paused:
            run.set_phase(RolloutPhase.PAUSED)
            state.message = "paused by signal; signal resume to continue"
            await acts.wait_unfinished(next_relist, keep_phase=True)
        elif state.in_flight:
            await acts.wait_unfinished(next_relist)
        elif not run.resolved:
            # Nodes may have joined, left or finished a dependency since the last listing.
            await acts.refresh()
        elif await self._holds.held():
            return  # a gate or the maintenance windows hold the next batch (it sampled or waited)
        elif batch := self._next_batch(planner):
            if planner.waits:
                state.message = (f"batch {planner.batch_number}: {len(batch)} node(s); "
                                 f"{disruption.describe(planner.waits)}")
            await acts.send(await self._ahead.sendable(batch))
        elif planner.waits:
            # Floors or topology limits hold every node: say why, and look again soon (RELIST_MIN_INTERVAL).
            state.message = disruption.describe(planner.waits)
            run.set_phase(RolloutPhase.WAITING)
            run.relist = True
            await acts.wait_unfinished(next_relist, keep_phase=True)
        else:
            await acts.wait_unfinished(next_relist)

    def _next_batch(self, planner: batches.BatchPlannerState) -> list[str]:
        """The next batch; for `rolling` past its canary, the budget's windows (planning/rolling.py)."""
        state = self._run.state
        supply = fs.supply(state, self._run.policy)
        canary_due = planner.canary_count and planner.canary_phase is CanaryPhase.NONE
        if rolling.is_rolling(planner) and not canary_due:
            rolling.top_up(planner, fs.startable(state), supply)
            return planner.current_batch
        return batches.next_batch(planner, fs.startable(state), fs.canary_cover(state), supply)

    async def _roll(self, planner: batches.BatchPlannerState, next_relist: datetime) -> None:
        """`rolling`: the windows that ended leave the set and count; then, unless a pause, the
        maintenance windows or the gates hold new starts, the set is topped up to the budgets and
        its nodes not yet handed over are sent (no batch barrier)."""
        run, acts, holds = self._run, self._acts, self._holds
        state = run.state
        startable = fs.startable(state)
        ended = [n for n in planner.current_batch if n not in state.in_flight and n not in startable]
        if ended:
            ok, bad = fs.batch_results(state, ended) or ([], [])
            decision = rolling.record_finished(planner, ended, ok, bad)
            state.message = decision.reason
            if decision.halted:
                workflow.logger.info("%s wave %d: %s", run.fleet_id, state.wave, decision.reason)
                return
            if decision.evaluation_point:
                holds.open_gates(False, planner)
        if not state.paused and run.windows_open() and not await holds.gates_hold():
            rolling.top_up(planner, fs.startable(state), fs.supply(state, run.policy))
            if planner.waits:
                state.message = disruption.describe(planner.waits)
            todo = [n for n in planner.current_batch if n in fs.startable(state)]
            ready = await self._ahead.sendable(todo)
            await acts.send(ready)
            if len(ready) < len(todo):
                await self._wait_for_marks(len(todo) - len(ready), next_relist)
                return
        elif not run.windows_open():
            await holds.withdraw_outside_windows()
        if not planner.current:
            return  # every window ended and nothing is left to start: the wave's next step
        if not await holds.sample_continuous():
            await acts.wait_unfinished(next_relist)

    async def _run_batch(self, planner: batches.BatchPlannerState, next_relist: datetime) -> None:
        run, acts = self._run, self._acts
        state = run.state
        if rolling.rolls_now(planner):
            await self._roll(planner, next_relist)
            return
        batch = planner.current_batch
        if not state.paused and run.windows_open():
            # After a halt, a pause or a crash between planning and sending: nodes never handed over
            # (with drain-ahead, also those whose mark is not old enough yet).
            startable = fs.startable(state)
            todo = [n for n in batch if n in startable]
            ready = await self._ahead.sendable(todo)
            await acts.send(ready)
            if len(ready) < len(todo):
                await self._wait_for_marks(len(todo) - len(ready), next_relist)
                return
        else:
            await self._holds.withdraw_outside_windows()
        results = fs.batch_results(state, batch)
        if results is None:
            if not await self._holds.sample_continuous():
                await acts.wait_unfinished(next_relist)
            return
        was_canary = planner.canary_phase is CanaryPhase.RUNNING
        decision = batches.record_batch_result(planner, *results)
        record_batch_end(state.timings, workflow.now().isoformat())
        run.resolved = False
        state.message = decision.reason
        workflow.logger.info("%s wave %d batch %d: %s", run.fleet_id, state.wave, planner.batch_number,
                             decision.reason)
        if planner.canary_phase is CanaryPhase.SOAKING:
            state.soak_until = (workflow.now() + timedelta(seconds=decision.soak_seconds)).isoformat()
            state.promote = False
        if was_canary and planner.canary_phase is CanaryPhase.FAILED:
            self._rollbacks.canary_failed(planner)
        self._holds.open_gates(was_canary, planner)

    async def _wait_for_marks(self, held: int, next_relist: datetime) -> None:
        """Drain-ahead: batch nodes wait until they have been marked upcoming for `drainAhead.seconds`."""
        run = self._run
        wake = run.ahead_wake.isoformat() if run.ahead_wake else "the next mark"
        run.state.message = (f"drain-ahead: {held} node(s) of batch {run.state.planner.batch_number if run.state.planner else 0} "
                             f"marked {keys.UPCOMING_KEY}; their windows start from {wake}")
        await self._acts.wait_unfinished(next_relist)

    async def _hold_canary(self, planner: batches.BatchPlannerState) -> None:
        run, acts = self._run, self._acts
        state = run.state
        run.set_phase(RolloutPhase.CANARY)
        if state.soak_until and workflow.now() < datetime.fromisoformat(state.soak_until):
            state.message = f"canary passed; soaking until {state.soak_until}"
            await acts.wait(datetime.fromisoformat(state.soak_until) - workflow.now())
            return
        if await self._holds.gates_hold():
            return
        if planner.canary_promotion is Promotion.MANUAL and not state.promote:
            batches.await_promotion(planner)
            state.message = "canary passed; waiting for manual promotion (signal resume)"
            await acts.wait(None)
            return
        batches.promote_canary(planner)
        # The soak and the promotion are not a gap between batches (the ETA counts the soak itself).
        record_batch_end(state.timings, workflow.now().isoformat())
        state.soak_until, state.promote = "", False
        run.resolved = False

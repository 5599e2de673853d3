"""The fleet's decision machine: the loop of `fleet/<policy>` as a pure, deterministic state machine.

One fleet per DeploymentPolicy (`fleet/default` for Packages naming none: one node at a time). Its
desired state is a `FleetSpec` (the policy and every Package naming it), handed over by the bridge. The
loop (observe -> plan -> act): list and classify the nodes (`ListNodes`, `planning.rollout.fleet_targets`), plan
batches (`planning.rollout.batches`: canary first, strategy sizes capped by each compartment's budget; `rolling`:
the budget's windows at all times, `planning.rollout.rolling`), hand each node of a batch ONE `WindowRequest`
carrying every Package pending there (`RequestWindows`), take the answers, evaluate the batch (grow,
shrink, halt), until no node has work left in the wave. A change of the desired state starts a new wave
once the windows in flight have answered (`planning.rollout.fleet_state`). The fleet stays open while it has
Packages (joining nodes, spec changes, a re-list every `relist_seconds`) and ends once it has none and no
window is out.

Budgets: a batch never holds more nodes of a compartment than its budget and a new batch starts only when
nothing is in flight, so the fleet never disrupts more nodes at once than the budget, whatever the number
of Packages (ADR 0007, 0013). Capacity floors and topology limits (ADR 0015) cap each batch by the latest
listing (`planning.rollout.disruption`), and are checked again on a fresh read of the nodes when a window is
handed out (`planning.fleet.handout`, ADR 0023); when they hold every node the fleet reports `Waiting`.

`FleetMachine` wraps the loop: `start(input, now)` and then `feed(answer, now)` for the answer of each
command it returns (`planning.fleet.commands`); `receive(message)` queues a message. The fleet workflow,
`noderoll plan` and the ETA (`planning.views.simulate`) drive this same machine.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from api import keys
from api.enums import CanaryPhase, Promotion, RolloutPhase
from planning.fleet import acts, ahead, holds, rollbacks, turns
from planning.fleet.codec import state_from_json
from planning.fleet.commands import Command, Complete, ContinueAsNew, WaitHandlers
from planning.fleet.handout import refresh_supply, send_checked
from planning.fleet.inbox import apply_inbox
from planning.fleet.messages import Message
from planning.fleet.run import ONE_SECOND, FleetRun, Steps
from planning.rollout import batches, disruption, rolling
from planning.rollout import fleet_state as fs
from planning.views.eta import record_batch_end
from protocol.fleet import FleetInput


class FleetMachine:
    """The loop of one fleet run as a state machine (module docstring)."""

    def __init__(self, run: FleetRun | None = None) -> None:
        self.run = run if run is not None else FleetRun()
        self._steps: Steps[None] | None = None

    def receive(self, message: Message) -> None:
        """Queue a message (a signal handler's whole job)."""
        self.run.receive(message)

    def start(self, input: FleetInput, now: datetime) -> Command:
        """Begin the run; the first command."""
        self.run.now = now
        self._steps = run_fleet(self.run, input)
        return next(self._steps)

    def feed(self, answer: Any, now: datetime) -> Command:
        """The answer to the last command, at `now`; the next command."""
        assert self._steps is not None, "start() first"
        self.run.now = now
        return self._steps.send(answer)


def run_fleet(run: FleetRun, input: FleetInput) -> Steps[None]:
    """Roll the fleet's Packages out until it has none left (module docstring)."""
    run.input = input
    if input.carry:
        run.state = state_from_json(input.carry)
        yield from run.set_policy()
        yield from run.show_packages()
    next_relist = run.now + timedelta(seconds=input.relist_seconds)
    while True:
        yield from apply_inbox(run)
        state = run.state
        yield from ahead.sync(run)
        if state.spec is None:
            yield from acts.wait(run, None)
            continue
        if not state.spec.packages and not state.in_flight:
            # No Package left and no window out: end (a new Package starts a new run), and say so to
            # global/<policy> when the policy promotes across clusters (ADR 0017).
            yield from turns.ended(run)
            yield WaitHandlers()
            if not run.inbox:
                yield from run.set_phase(RolloutPhase.COMPLETE)
                yield Complete()
                return
            continue
        # spec.clusters only (ADR 0017): report to global/<policy>, hold a change set not granted yet.
        yield from turns.sync(run)
        if state.wave_wanted and not state.in_flight and not fs.rolling_back(state):
            if (yield from turns.holds(run)):
                yield from turns.hold(run)
                continue
            yield from acts.start_wave(run, lambda: turns.holds(run))
            if (yield from turns.holds(run)):
                continue  # a new change set arrived while the nodes were listed
        elif state.planner is not None and (yield from run.relist_due(next_relist)):
            yield from acts.refresh(run)
        if run.now >= next_relist:
            next_relist = yield from run.next_relist()
        yield from acts.watchdog(run)
        if (yield from run.should_continue_as_new()):
            yield WaitHandlers()
            yield from apply_inbox(run)
            yield ContinueAsNew(run.carry_over())
            return
        yield from _step(run, next_relist)


# --- steps --------------------------------------------------------------------------------------


def _step(run: FleetRun, next_relist: datetime) -> Steps[None]:
    """Do one thing the planner asks for (or wait)."""
    state = run.state
    planner = state.planner
    if planner is None or (state.wave_wanted and not fs.rolling_back(state)):
        if state.in_flight:
            state.message = f"finishing {len(state.in_flight)} window(s) before wave {state.wave + 1}"
        yield from acts.wait_unfinished(run, next_relist)
        return
    if state.rollback is not None:
        yield from rollbacks.roll_back(run, state.rollback, next_relist)
        return
    phase = batches.planner_phase(planner, fs.remaining(state))
    if state.halted or phase is batches.PlannerPhase.HALTED:
        if planner.halted:
            state.message = f"halted: {planner.halt_reason}; signal resume or retry to continue"
        elif not state.message.startswith("halted"):
            state.message = "halted by signal; signal resume to continue"
        run.to_withdraw.update(state.in_flight)
        yield from acts.withdraw(run)
        yield from run.set_phase(RolloutPhase.HALTED)
        yield from turns.sync(run)
        yield from acts.wait_unfinished(run, next_relist, keep_phase=True)
    elif phase is batches.PlannerPhase.IN_BATCH:
        yield from _run_batch(run, planner, next_relist)
    elif phase is batches.PlannerPhase.CANARY_HOLD:
        yield from _hold_canary(run, planner)
    elif phase is batches.PlannerPhase.READY:
        yield from _ready(run, planner, next_relist)
    elif state.in_flight:
        yield from acts.wait_unfinished(run, next_relist)
    else:
        failed = fs.failed_nodes(state)
        yield from run.set_phase(RolloutPhase.FAILED if failed else RolloutPhase.COMPLETE)
        if not failed and not state.departed:
            state.message = ""
        yield from turns.sync(run)
        if not (yield from acts.wait(run, max(next_relist - run.now, ONE_SECOND))):
            run.relist = True


def _ready(run: FleetRun, planner: batches.BatchPlannerState, next_relist: datetime) -> Steps[None]:
    state = run.state
    if state.paused:
        yield from run.set_phase(RolloutPhase.PAUSED)
        state.message = "paused by signal; signal resume to continue"
        yield from acts.wait_unfinished(run, next_relist, keep_phase=True)
    elif state.in_flight:
        yield from acts.wait_unfinished(run, next_relist)
    elif not run.resolved and (yield from run.listing_due()):
        # Nodes may have joined, left or finished a dependency since the last listing (at scale, a listing is
        # at most every `FleetRun.listing_interval`: the batch is planned on the last one meanwhile).
        yield from acts.refresh(run)
    elif (yield from holds.held(run)):
        return  # a gate or the maintenance windows hold the next batch (it sampled or waited)
    elif batch := (yield from _planned_batch(run, planner)):
        if planner.waits:
            state.message = (f"batch {planner.batch_number}: {len(batch)} node(s); "
                             f"{disruption.describe(planner.waits)}")
        yield from send_checked(run, (yield from ahead.sendable(run, batch)))
    elif planner.waits:
        # Floors or topology limits hold every node: say why, and look again soon (`FleetRun.relist_gap`).
        state.message = disruption.describe(planner.waits)
        yield from run.set_phase(RolloutPhase.WAITING)
        run.relist = True
        yield from acts.wait_unfinished(run, next_relist, keep_phase=True)
    else:
        yield from acts.wait_unfinished(run, next_relist)


def _planned_batch(run: FleetRun, planner: batches.BatchPlannerState) -> Steps[list[str]]:
    """The next batch, on the nodes as the bridge last reported them (a read first after an availability change)."""
    yield from refresh_supply(run)
    others = yield from run.others()
    return _next_batch(run, planner, others)


def _next_batch(run: FleetRun, planner: batches.BatchPlannerState, others: disruption.Others | None) -> list[str]:
    """The next batch; for `rolling` past its canary, the budget's windows (planning/rollout/rolling.py)."""
    state = run.state
    supply = fs.supply(state, run.policy)
    canary_due = planner.canary_count and planner.canary_phase is CanaryPhase.NONE
    if rolling.is_rolling(planner) and not canary_due:
        rolling.top_up(planner, fs.startable(state), supply, others)
        return planner.current_batch
    # The canary's cover reads every startable node: only when a canary is to be picked.
    cover = fs.canary_cover(state) if canary_due else []
    return batches.next_batch(planner, fs.startable(state), cover, supply, others)


def _roll(run: FleetRun, planner: batches.BatchPlannerState, next_relist: datetime) -> Steps[None]:
    """`rolling`: the windows that ended leave the set and count; then, unless a pause, the maintenance
    windows or the gates hold new starts, the set is topped up to the budgets and its nodes not yet handed
    over are sent (no batch barrier)."""
    state = run.state
    startable = fs.startable(state)
    ended = [n for n in planner.current_batch if n not in state.in_flight and n not in startable]
    if ended:
        ok, bad = fs.batch_results(state, ended) or ([], [])
        decision = rolling.record_finished(planner, ended, ok, bad)
        state.message = decision.reason
        if decision.halted:
            yield from run.log(f"wave {state.wave}: {decision.reason}")
            return
        if decision.evaluation_point:
            holds.open_gates(run, False, planner)
    if not state.paused and run.windows_open() and not (yield from holds.gates_hold(run)):
        yield from refresh_supply(run)
        others = yield from run.others()
        rolling.top_up(planner, fs.startable(state), fs.supply(state, run.policy), others)
        if planner.waits:
            state.message = disruption.describe(planner.waits)
        todo = [n for n in planner.current_batch if n in fs.startable(state)]
        ready = yield from ahead.sendable(run, todo)
        yield from send_checked(run, ready)
        if len(ready) < len(todo):
            yield from _wait_for_marks(run, len(todo) - len(ready), next_relist)
            return
    elif not run.windows_open():
        yield from holds.withdraw_outside_windows(run)
    if not planner.current:
        return  # every window ended and nothing is left to start: the wave's next step
    if not (yield from holds.sample_continuous(run)):
        yield from acts.wait_unfinished(run, next_relist)


def _run_batch(run: FleetRun, planner: batches.BatchPlannerState, next_relist: datetime) -> Steps[None]:
    state = run.state
    if rolling.rolls_now(planner):
        yield from _roll(run, planner, next_relist)
        return
    batch = planner.current_batch
    if not state.paused and run.windows_open():
        # After a halt, a pause or a crash between planning and sending: nodes never handed over
        # (with drain-ahead, also those whose mark is not old enough yet).
        startable = fs.startable(state)
        todo = [n for n in batch if n in startable]
        ready = yield from ahead.sendable(run, todo)
        yield from send_checked(run, ready)
        if len(ready) < len(todo):
            yield from _wait_for_marks(run, len(todo) - len(ready), next_relist)
            return
    else:
        yield from holds.withdraw_outside_windows(run)
    results = fs.batch_results(state, batch)
    if results is None:
        if not (yield from holds.sample_continuous(run)):
            yield from acts.wait_unfinished(run, next_relist)
        return
    was_canary = planner.canary_phase is CanaryPhase.RUNNING
    decision = batches.record_batch_result(planner, *results)
    record_batch_end(state.timings, run.stamp())
    run.resolved = False
    state.message = decision.reason
    yield from run.log(f"wave {state.wave} batch {planner.batch_number}: {decision.reason}")
    if planner.canary_phase is CanaryPhase.SOAKING:
        state.soak_until = (run.now + timedelta(seconds=decision.soak_seconds)).isoformat()
        state.promote = False
    if was_canary and planner.canary_phase is CanaryPhase.FAILED:
        yield from rollbacks.canary_failed(run, planner)
    holds.open_gates(run, was_canary, planner)


def _wait_for_marks(run: FleetRun, held: int, next_relist: datetime) -> Steps[None]:
    """Drain-ahead: batch nodes wait until they have been marked upcoming for `drainAhead.seconds`."""
    wake = run.ahead_wake.isoformat() if run.ahead_wake else "the next mark"
    planner = run.state.planner
    run.state.message = (f"drain-ahead: {held} node(s) of batch {planner.batch_number if planner else 0} "
                         f"marked {keys.UPCOMING_KEY}; their windows start from {wake}")
    yield from acts.wait_unfinished(run, next_relist)


def _hold_canary(run: FleetRun, planner: batches.BatchPlannerState) -> Steps[None]:
    state = run.state
    yield from run.set_phase(RolloutPhase.CANARY)
    if state.soak_until and run.now < datetime.fromisoformat(state.soak_until):
        state.message = f"canary passed; soaking until {state.soak_until}"
        yield from acts.wait(run, datetime.fromisoformat(state.soak_until) - run.now)
        return
    if (yield from holds.gates_hold(run)):
        return
    if planner.canary_promotion is Promotion.MANUAL and not state.promote:
        batches.await_promotion(planner)
        state.message = "canary passed; waiting for manual promotion (signal resume)"
        yield from acts.wait(run, None)
        return
    batches.promote_canary(planner)
    # The soak and the promotion are not a gap between batches (the ETA counts the soak itself).
    record_batch_end(state.timings, run.stamp())
    state.soak_until, state.promote = "", False
    run.resolved = False

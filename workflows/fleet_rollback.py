"""The rollback of a failed canary (`canary.onFailure: rollback`, ADR 0009). Deterministic, no I/O.

`FleetRollbacks` acts on the `FleetRun` it is given, through its `FleetActs`. Every decision is a
pure function of `planning/fleet_rollback.py` (through `planning.fleet_state`); this module only
sequences them:

* when the canary batch is evaluated as failed and the policy says `rollback`, the rollback is
  planned (`canary_failed`); without a known previous spec the fleet halts as with `halt`, saying why;
* while a rollback has nodes left (`roll_back`), each canary node to roll back gets ONE window (the
  activity `request_windows`, a `WindowRequest` whose orders carry the previous specs, or uninstall),
  at once: the canary fitted the budgets, so its rollback does too. The phase is `RollingBack`; the
  rollback is not held by pauses, maintenance windows or gates; `halt` withdraws what has not started;
* once every node answered: phase `RolledBack` (or `Halted` when a rollback failed), and the fleet
  waits for a new desired state, `resume` (re-attempt the wave) or `retry` (the failed rollbacks).
A policy without `onFailure: rollback` issues no command here, so recorded histories replay unchanged.
"""

from __future__ import annotations

from datetime import datetime

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from api.enums import CanaryFailure, RolloutPhase
    from planning import batches
    from planning import fleet_rollback as rollbacks
    from planning import fleet_state as fs
    from protocol.fleet import WindowRequest
    from workflows.fleet_acts import FleetActs
    from workflows.fleet_run import FleetRun


class FleetRollbacks:
    """The canary rollback of one fleet run."""

    def __init__(self, run: FleetRun, acts: FleetActs) -> None:
        self.run = run
        self.acts = acts

    def canary_failed(self, planner: batches.BatchPlannerState) -> None:
        """The canary batch was just evaluated as failed: plan its rollback when the policy asks for one."""
        run = self.run
        canary = run.policy.canary
        if canary is None or canary.on_failure is not CanaryFailure.ROLLBACK:
            return
        problem = fs.start_rollback(run.state)
        if problem:
            planner.halt_reason += f"; not rolled back: {problem}"
            workflow.logger.warning("%s: canary failed, no rollback: %s", run.fleet_id, problem)
            return
        run.state.message = rollbacks.message(run.state.rollback)  # type: ignore[arg-type]
        workflow.logger.warning("%s: %s", run.fleet_id, run.state.message)

    async def roll_back(self, rollback: rollbacks.Rollback, next_relist: datetime) -> None:
        """One step of the rollback: hand out its windows, wait for answers, then show how it ended."""
        run = self.run
        state = run.state
        if state.halted:
            run.to_withdraw.update(state.in_flight)
            await self.acts.withdraw()
        else:
            todo = [n for n in rollbacks.pending(rollback) if n not in state.in_flight]
            if todo:
                await self._send(rollback, todo)
        state.message = rollbacks.message(rollback, state.halted)
        phase = rollbacks.phase(rollback)
        run.set_phase(RolloutPhase.HALTED if state.halted else phase)
        await self.acts.wait_unfinished(next_relist, keep_phase=True)

    async def _send(self, rollback: rollbacks.Rollback, nodes: list[str]) -> None:
        """One rollback window per node (signal-with-start `window`), outside any maintenance window or pause."""
        state, fleet_id = self.run.state, self.run.fleet_id
        now = workflow.now().isoformat()
        requests = []
        for node in nodes:
            orders = rollbacks.orders_for(rollback, node)
            request_id = fs.request_id(state, fleet_id, node)
            state.in_flight[node] = fs.InFlight(request_id, [o.name for o in orders], now, rollback=True)
            requests.append(WindowRequest(fleet_id, request_id, orders, state.wave, fs.order_of(state, node)))
        workflow.logger.info("%s: rolling back %s", fleet_id, ", ".join(nodes))
        await self.acts.hand_over(requests, nodes)

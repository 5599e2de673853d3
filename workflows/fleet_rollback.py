"""The rollback of a failed canary (`canary.onFailure: rollback`, ADR 0009). Deterministic, no I/O.

`FleetRollbacks` is mixed into `workflows.fleet.FleetWorkflow` (which owns the attributes). Every
decision is a pure function of `planning/fleet_rollback.py` (through `planning.fleet_state`); this
module only sequences them:

* when the canary batch is evaluated as failed and the policy says `rollback`, the rollback is
  planned (`_canary_failed`); without a known previous spec the fleet halts as with `halt`, saying why;
* while a rollback has nodes left (`_roll_back`), each canary node to roll back gets ONE window (the
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
    from workflows.fleet_holds import FleetHolds


class FleetRollbacks(FleetHolds):
    """The canary rollback of a fleet (attributes owned by the workflow)."""

    async def _wait_unfinished(self, next_relist: datetime, keep_phase: bool = False) -> None:
        raise NotImplementedError  # FleetWorkflow._wait_unfinished

    def _canary_failed(self, planner: batches.BatchPlannerState) -> None:
        """The canary batch was just evaluated as failed: plan its rollback when the policy asks for one."""
        canary = self._policy.canary
        if canary is None or canary.on_failure is not CanaryFailure.ROLLBACK:
            return
        problem = fs.start_rollback(self._state)
        if problem:
            planner.halt_reason += f"; not rolled back: {problem}"
            workflow.logger.warning("%s: canary failed, no rollback: %s", self._fleet_id(), problem)
            return
        self._state.message = rollbacks.message(self._state.rollback)  # type: ignore[arg-type]
        workflow.logger.warning("%s: %s", self._fleet_id(), self._state.message)

    async def _roll_back(self, rollback: rollbacks.Rollback, next_relist: datetime) -> None:
        """One step of the rollback: hand out its windows, wait for answers, then show how it ended."""
        state = self._state
        if state.halted:
            self._to_withdraw.update(state.in_flight)
            await self._withdraw()
        else:
            todo = [n for n in rollbacks.pending(rollback) if n not in state.in_flight]
            if todo:
                await self._send_rollback(rollback, todo)
        state.message = rollbacks.message(rollback, state.halted)
        phase = rollbacks.phase(rollback)
        self._set_phase(RolloutPhase.HALTED if state.halted else phase)
        await self._wait_unfinished(next_relist, keep_phase=True)

    async def _send_rollback(self, rollback: rollbacks.Rollback, nodes: list[str]) -> None:
        """One rollback window per node (signal-with-start `window`), outside any maintenance window or pause."""
        state, fleet_id = self._state, self._fleet_id()
        now = workflow.now().isoformat()
        requests = []
        for node in nodes:
            orders = rollbacks.orders_for(rollback, node)
            request_id = fs.request_id(state, fleet_id, node)
            state.in_flight[node] = fs.InFlight(request_id, [o.name for o in orders], now, rollback=True)
            requests.append(WindowRequest(fleet_id, request_id, orders, state.wave, fs.order_of(state, node)))
        workflow.logger.info("%s: rolling back %s", fleet_id, ", ".join(nodes))
        await self._hand_over(requests, nodes)

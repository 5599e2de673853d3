"""The rollback of a failed canary (`canary.onFailure: rollback`, ADR 0009). Pure (machine steps over a
`FleetRun`).

Every decision is a function of `planning/rollout/fleet_rollback.py` (through `planning.rollout.fleet_state`); these
steps sequence them:

* when the canary batch is evaluated as failed and the policy says `rollback`, the rollback is
  planned (`canary_failed`); without a known previous spec the fleet halts as with `halt`, saying why;
* while a rollback has nodes left (`roll_back`), each canary node to roll back gets ONE window (a
  `WindowRequest` whose orders carry the previous specs, or uninstall), at once: the canary fitted the
  budgets, so its rollback does too. The phase is `RollingBack`; the rollback is not held by pauses,
  maintenance windows or gates; `halt` withdraws what has not started;
* once every node answered: phase `RolledBack` (or `Halted` when a rollback failed), and the fleet
  waits for a new desired state, `resume` (re-attempt the wave) or `retry` (the failed rollbacks).
"""

from __future__ import annotations

from datetime import datetime

from api.enums import CanaryFailure, RolloutPhase
from planning.fleet.acts import hand_over, wait_unfinished, withdraw
from planning.fleet.run import FleetRun, Steps
from planning.rollout import batches
from planning.rollout import fleet_rollback as rollbacks
from planning.rollout import fleet_state as fs


def canary_failed(run: FleetRun, planner: batches.BatchPlannerState) -> Steps[None]:
    """The canary batch was just evaluated as failed: plan its rollback when the policy asks for one."""
    canary = run.policy.canary
    if canary is None or canary.on_failure is not CanaryFailure.ROLLBACK:
        return
    problem = fs.start_rollback(run.state)
    if problem:
        planner.halt_reason += f"; not rolled back: {problem}"
        yield from run.log(f"canary failed, no rollback: {problem}", warning=True)
        return
    assert run.state.rollback is not None
    run.state.message = rollbacks.message(run.state.rollback)
    yield from run.log(run.state.message, warning=True)


def roll_back(run: FleetRun, rollback: rollbacks.Rollback, next_relist: datetime) -> Steps[None]:
    """One step of the rollback: hand out its windows, wait for answers, then show how it ended."""
    state = run.state
    if state.halted:
        run.to_withdraw.update(state.in_flight)
        yield from withdraw(run)
    else:
        todo = [n for n in rollbacks.pending(rollback) if n not in state.in_flight]
        if todo:
            yield from _send(run, rollback, todo)
    state.message = rollbacks.message(rollback, state.halted)
    phase = rollbacks.phase(rollback)
    yield from run.set_phase(RolloutPhase.HALTED if state.halted else phase)
    yield from wait_unfinished(run, next_relist, keep_phase=True)


def _send(run: FleetRun, rollback: rollbacks.Rollback, nodes: list[str]) -> Steps[None]:
    """One rollback window per node, outside any maintenance window or pause."""
    state, fleet_id = run.state, run.fleet_id
    requests = []
    for node in nodes:
        orders = rollbacks.orders_for(rollback, node)
        request_id = fs.request_id(state, fleet_id, node)
        state.in_flight[node] = fs.InFlight(request_id, [o.name for o in orders], run.stamp(), rollback=True)
        requests.append(fs.window_request(state, fleet_id, orders, node))
    fs.touch_nodes(state, nodes)
    yield from run.log(f"rolling back {', '.join(nodes)}")
    yield from hand_over(requests, nodes)

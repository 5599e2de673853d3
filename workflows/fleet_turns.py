"""A fleet's part in the promotion across clusters (`spec.clusters`, ADR 0017). Deterministic, no I/O.

`FleetTurns` acts on the `FleetRun` it is given. Only a fleet whose policy has `spec.clusters` does
anything here (`coordinated`), so a fleet without it issues exactly the commands it issued before
(the recorded histories replay; the first coordinated decision records the patch `global-turns`):
* before a wave of a change set the global workflow has not granted, the fleet holds (`holds`,
  `hold`): phase `Waiting` (`Halted`, `Paused` when it is), the global workflow's message, no
  listing, no window; a fleet of a cluster without a name holds for good (no stage can name it);
* whenever what it would report changes (`sync`: the change set, its state, its copy of
  `spec.clusters`), it reports to `global/<policy>` with the activity `report_to_global`;
* when it ends (no Package left), it reports `ended` (`ended`; patch `global-ended-report`), so that
  the global workflow ends once every cluster's fleet did;
* the global workflow's answers (`global_turn`) arrive through the inbox (`workflows.fleet_run`).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from api.enums import RolloutPhase
    from planning import cluster_turns as turns
    from protocol.activities import ReportToGlobalInput
    from protocol.clusters import ClusterReport
    from workflows.fleet_acts import FleetActs
    from workflows.fleet_run import FleetRun

GLOBAL_TURNS_PATCH = "global-turns"
ENDED_REPORT_PATCH = "global-ended-report"
REPORT_TIMEOUT = timedelta(minutes=1)


class FleetTurns:
    """Holds, reports and turns of one fleet run (module docstring)."""

    def __init__(self, run: FleetRun, acts: FleetActs) -> None:
        self.run = run
        self.acts = acts

    def coordinated(self) -> bool:
        """The policy has spec.clusters (only then is anything here done)."""
        if self.run.policy.clusters is None:
            return False
        return workflow.patched(GLOBAL_TURNS_PATCH)

    def holds(self) -> bool:
        """No wave for the current change set yet: the global workflow has not granted it."""
        if not self.coordinated():
            return False
        return not self.run.input.cluster or self.run.state.turns.granted != self.run.change()

    async def hold(self) -> None:
        """Wait for the turn (or any message): phase Waiting, the global workflow's word as message."""
        run = self.run
        state = run.state
        if not run.input.cluster:
            state.message = turns.NO_CLUSTER
        else:
            await self.sync()
            state.message = state.turns.message or f"asking global/{run.input.policy_name} for its turn"
        # A halt or pause (its own, or relayed by global/<policy>) shows as such while it waits.
        run.set_phase(RolloutPhase.HALTED if state.halted else RolloutPhase.PAUSED if state.paused
                      else RolloutPhase.WAITING)
        await self.acts.wait(None)

    async def sync(self) -> None:
        """Report to `global/<policy>` when the report changed since the last one sent."""
        run = self.run
        state = run.state
        if not run.input.cluster or state.spec is None or not self.coordinated():
            return
        change = run.change()
        planner_halted = state.planner is not None and state.planner.halted
        value = turns.report_state(state.turns, change, run.phase, planner_halted)
        await self._send(ClusterReport(
            cluster=run.input.cluster, fleet_workflow_id=run.fleet_id, change=change, state=value.value,
            clusters=turns.clusters_json(run.policy.clusters), summary=turns.change_summary(state.spec),
            message=state.message if value.value == "failed" else ""), value.value)

    async def ended(self) -> None:
        """The fleet ends (no Package left): tell `global/<policy>`, which ends once every cluster's fleet did."""
        run = self.run
        if not run.input.cluster or not self.coordinated() or not workflow.patched(ENDED_REPORT_PATCH):
            return
        await self._send(ClusterReport(
            cluster=run.input.cluster, fleet_workflow_id=run.fleet_id, change="", state=run.state.turns.state,
            clusters=turns.clusters_json(run.policy.clusters), ended=True), "ended")

    async def _send(self, report: ClusterReport, what: str) -> None:
        """`report_to_global` with `report`, unless it says nothing the last one sent did not."""
        run = self.run
        if turns.next_report(run.state.turns, report) is None:
            return
        await workflow.execute_activity(
            "report_to_global",
            ReportToGlobalInput(policy=run.input.policy_name, report=report),
            start_to_close_timeout=REPORT_TIMEOUT,
            summary=f"report {what} to global/{run.input.policy_name}",
        )

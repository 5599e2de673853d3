"""A fleet's part in the promotion across clusters (`spec.clusters`, ADR 0017). Pure (machine steps over a
`FleetRun`).

Only a fleet whose policy has `spec.clusters` does anything here (`coordinated`), so a fleet without it
issues exactly the commands it issued before (the first coordinated decision records the patch
`global-turns`):
* before a wave of a change set the global workflow has not granted, the fleet holds (`holds`,
  `hold`): phase `Waiting` (`Halted`, `Paused` when it is), the global workflow's message, no
  listing, no window; a fleet of a cluster without a name holds for good (no stage can name it);
* whenever what it would report changes (`sync`: the change set, its state, its copy of
  `spec.clusters`), it reports to `global/<policy>` with the activity `report_to_global`;
* a policy that drops `spec.clusters` while the fleet has reported to `global/<policy>` reports once
  more, `ended` (patch `global-dropped-report`), so the global workflow does not wait for it forever;
* when it ends (no Package left), it reports `ended` (patch `global-ended-report`), so that the global
  workflow ends once every cluster's fleet did;
* the global workflow's answers (`global_turn`) arrive through the inbox (`planning.fleet.inbox`).
"""

from __future__ import annotations

from api.enums import RolloutPhase
from planning.clusters import cluster_turns as turns
from planning.fleet.acts import wait
from planning.fleet.commands import ReportToGlobal
from planning.fleet.run import FleetRun, Steps
from protocol.activities import ReportToGlobalInput
from protocol.clusters import ClusterReport

GLOBAL_TURNS_PATCH = "global-turns"
ENDED_REPORT_PATCH = "global-ended-report"
DROPPED_REPORT_PATCH = "global-dropped-report"


def coordinated(run: FleetRun) -> Steps[bool]:
    """The policy has spec.clusters (only then is anything here done)."""
    if run.policy.clusters is None:
        return False
    return (yield from run.patched(GLOBAL_TURNS_PATCH))


def holds(run: FleetRun) -> Steps[bool]:
    """No wave for the current change set yet: the global workflow has not granted it."""
    if not (yield from coordinated(run)):
        return False
    return not run.input.cluster or run.state.turns.granted != run.change()


def hold(run: FleetRun) -> Steps[None]:
    """Wait for the turn (or any message): phase Waiting, the global workflow's word as message."""
    state = run.state
    if not run.input.cluster:
        state.message = turns.NO_CLUSTER
    else:
        yield from sync(run)
        state.message = state.turns.message or f"asking global/{run.input.policy_name} for its turn"
    # A halt or pause (its own, or relayed by global/<policy>) shows as such while it waits.
    yield from run.set_phase(RolloutPhase.HALTED if state.halted else RolloutPhase.PAUSED if state.paused
                             else RolloutPhase.WAITING)
    yield from wait(run, None)


def sync(run: FleetRun) -> Steps[None]:
    """Report to `global/<policy>` when the report changed since the last one sent."""
    state = run.state
    if not run.input.cluster or state.spec is None:
        return
    if not (yield from coordinated(run)):
        yield from _dropped(run)
        return
    change = run.change()
    planner_halted = state.planner is not None and state.planner.halted
    value = turns.report_state(state.turns, change, run.phase, planner_halted)
    yield from _send(run, ClusterReport(
        cluster=run.input.cluster, fleet_workflow_id=run.fleet_id, change=change, state=value.value,
        clusters=turns.clusters_json(run.policy.clusters), summary=turns.change_summary(state.spec),
        message=state.message if value.value == "failed" else ""), value.value)


def _dropped(run: FleetRun) -> Steps[None]:
    """The policy no longer has spec.clusters but the fleet reported before: say it ended, once."""
    state = run.state
    if run.policy.clusters is not None or not state.turns.sent or turns.reported_ended(state.turns):
        return
    if not (yield from run.patched(DROPPED_REPORT_PATCH)):
        return
    yield from _send(run, ClusterReport(cluster=run.input.cluster, fleet_workflow_id=run.fleet_id, change="",
                                        state=state.turns.state, clusters=None, ended=True), "ended")


def ended(run: FleetRun) -> Steps[None]:
    """The fleet ends (no Package left): tell `global/<policy>`, which ends once every cluster's fleet did."""
    if not run.input.cluster or not (yield from coordinated(run)):
        return
    if not (yield from run.patched(ENDED_REPORT_PATCH)):
        return
    yield from _send(run, ClusterReport(
        cluster=run.input.cluster, fleet_workflow_id=run.fleet_id, change="", state=run.state.turns.state,
        clusters=turns.clusters_json(run.policy.clusters), ended=True), "ended")


def _send(run: FleetRun, report: ClusterReport, what: str) -> Steps[None]:
    """`report_to_global` with `report`, unless it says nothing the last one sent did not."""
    if turns.next_report(run.state.turns, report) is None:
        return
    yield ReportToGlobal(ReportToGlobalInput(policy=run.input.policy_name, report=report), what)

"""A fleet's part in the promotion across clusters as machine steps (planning/fleet/turns.py): a policy that
drops spec.clusters after the fleet reported tells global/<policy> it ended, once."""

from __future__ import annotations

from typing import Any

from api.policy import DeploymentPolicySpec
from planning.fleet import commands as c
from planning.fleet import turns
from planning.fleet.run import FleetRun, Steps
from protocol.fleet import FleetInput
from tests.unit.fleet_builders import a_fleet_spec, an_entry

CLUSTERS = {"stages": [["a"], ["b"]]}
POLICY = {"default": {"budget": {"count": 1}}}


def drive(steps: Steps[Any], patched: bool = True) -> list[c.Command]:
    """Run `steps` to the end, answering `Patched` with `patched` and anything else with None."""
    seen: list[c.Command] = []
    try:
        command = next(steps)
        while True:
            seen.append(command)
            command = steps.send(patched if isinstance(command, c.Patched) else None)
    except StopIteration:
        return seen


def fleet(policy: dict[str, Any]) -> FleetRun:
    run = FleetRun(input=FleetInput(policy_name="gpu", cluster="a"), policy=DeploymentPolicySpec.model_validate(policy))
    run.state.spec = a_fleet_spec(an_entry("kernel"), policy=policy)
    return run


def test_a_policy_that_drops_spec_clusters_reports_ended_once() -> None:
    run = fleet({**POLICY, "clusters": CLUSTERS})
    reports = [x for x in drive(turns.sync(run)) if isinstance(x, c.ReportToGlobal)]
    assert [r.input.report.state for r in reports] == ["waiting"]
    run.policy = DeploymentPolicySpec.model_validate(POLICY)  # spec.clusters dropped
    dropped = [x for x in drive(turns.sync(run)) if isinstance(x, c.ReportToGlobal)]
    assert [(r.input.report.ended, r.input.report.clusters) for r in dropped] == [(True, None)]
    assert drive(turns.sync(run)) == []  # said once


def test_runs_recorded_before_the_rule_say_nothing_and_a_fleet_that_never_reported_neither() -> None:
    run = fleet({**POLICY, "clusters": CLUSTERS})
    drive(turns.sync(run))
    run.policy = DeploymentPolicySpec.model_validate(POLICY)
    assert not [x for x in drive(turns.sync(run), patched=False) if isinstance(x, c.ReportToGlobal)]
    never = fleet(POLICY)
    assert drive(turns.sync(never)) == []

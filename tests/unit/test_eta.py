"""The ETA (planning/views/eta.py, planning/views/fleet_eta.py): the fleet's machine run ahead, measured p50 per window
kind, defaults said as such, moved to the moment it is read."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from api.enums import RolloutPhase
from api.package import PackageSpec
from api.policy import DeploymentPolicySpec
from planning.fleet.run import FleetRun
from planning.rollout import batches
from planning.rollout import fleet_state as fs
from planning.rollout.fleet_targets import FleetPackage, FleetQuery, select_fleet
from planning.views.eta import (
    KEPT,
    Eta,
    SimulatedRun,
    Timings,
    WindowShape,
    eta_at,
    record_batch_end,
    record_hand_out,
    record_window,
    simulated_eta,
)
from planning.views.fleet_eta import fleet_eta
from planning.views.fleet_status import fleet_progress, read_at
from planning.views.rollout_plan import PlanInput, plan_fleet
from planning.views.status import render_package_status, render_policy_status
from protocol.fleet import FleetInput
from tests.unit.fleet_builders import a_fleet_spec, a_node, a_result, an_entry

NOW = "2025-01-01T00:00:00+00:00"
REBOOT = WindowShape("reboot", stages=3, drain=True)
NONE = WindowShape("none", stages=2)


def test_a_simulated_run_says_when_it_ends_and_what_it_rests_on() -> None:
    timings = Timings(windows={"reboot": [60, 70, 80], "none": [10]}, gaps=[4, 6])
    eta = simulated_eta(SimulatedRun(NOW, 90.0, 0.0, 2, [REBOOT, NONE, NONE], timings))
    assert (eta.seconds_left, eta.batches_left, eta.windows_left) == (90.0, 2, 3)
    assert eta.finish_at == "2025-01-01T00:02:00+00:00"  # 90 s, to the nearest minute
    assert eta.window_seconds == {"none": 10.0, "reboot": 70.0} and eta.gap_seconds == 5.0
    assert eta.source.startswith("measured: none p50 10s of 1 window(s); reboot p50 70s of 3")


def test_a_kind_never_measured_takes_the_defaults_and_says_which() -> None:
    eta = simulated_eta(SimulatedRun(NOW, 550.0, 0.0, 1, [REBOOT], Timings(windows={"none": [10]})))
    assert eta.window_seconds == {"reboot": 3 * 60 + 60 + 300}
    assert "defaults for reboot (never measured here" in eta.source


def test_nothing_left_has_no_finish_time() -> None:
    assert simulated_eta(SimulatedRun(NOW, 0.0, 0.0, 0, [], Timings())).finish_at == ""


def test_read_later_the_eta_counts_down_and_late_windows_push_the_end_back() -> None:
    eta = Eta(finish_at="2025-01-01T00:10:00+00:00", seconds_left=600.0, computed_at=NOW, running_seconds=120.0)
    on_time = eta_at(eta, "2025-01-01T00:01:00+00:00")
    assert on_time.seconds_left == 540.0 and on_time.finish_at == eta.finish_at
    late = eta_at(eta, "2025-01-01T00:05:00+00:00")  # the windows out should have answered 3 minutes ago
    assert late.seconds_left == 600.0 - 300 + 180 and late.finish_at == "2025-01-01T00:13:00+00:00"
    assert eta_at(eta, NOW) == eta and eta_at(Eta(), NOW) == Eta()


def test_recording_keeps_the_latest_durations_per_kind_and_the_gaps() -> None:
    timings = Timings()
    for second in range(KEPT + 5):
        record_window(timings, "reboot", NOW, f"2025-01-01T00:01:{second:02d}+00:00")
    record_window(timings, "", NOW, "2025-01-01T00:00:07+00:00")
    assert len(timings.windows["reboot"]) == KEPT and timings.windows["reboot"][-1] == 60 + KEPT + 4
    assert timings.windows["none"] == [7.0]
    record_batch_end(timings, NOW)
    record_hand_out(timings, "2025-01-01T00:00:12+00:00")
    record_hand_out(timings, "2025-01-01T00:00:30+00:00")  # a re-send within the batch: no gap
    assert timings.gaps == [12.0] and timings.batch_ended == ""


def started_run(policy: dict[str, Any], nodes: int = 4, timings: Timings | None = None) -> FleetRun:
    """A fleet run whose wave has just started over `nodes` fresh nodes (one reboot Package)."""
    spec = a_fleet_spec(an_entry("kernel", interrupt={"type": "reboot"}), policy=policy)
    state = fs.FleetState(timings=timings or Timings())
    fs.set_spec(state, spec)
    packages = {"kernel": FleetPackage(PackageSpec.model_validate(spec.packages[0].spec))}
    validated = DeploymentPolicySpec.model_validate(policy)
    fs.start_wave(state, select_fleet(FleetQuery(packages, [a_node(f"n{i}") for i in range(nodes)])), validated,
                  "fleet/gpu")
    return FleetRun(input=FleetInput(policy_name="gpu"), state=state, policy=validated,
                    phase=RolloutPhase.PROGRESSING, now=datetime.fromisoformat(NOW))


@pytest.mark.parametrize("policy", [
    pytest.param({"default": {"budget": {"count": 3}, "strategy": {"type": "exponential", "initialBatch": 1}}},
                 id="exponential"),
    pytest.param({"canary": {"count": 2, "soakSeconds": 45},
                  "default": {"budget": {"percent": 50}, "strategy": {"type": "linear", "initialBatch": 1, "delta": 2}}},
                 id="canary-linear"),
    pytest.param({"default": {"budget": {"count": 3}, "strategy": {"type": "rolling"}}}, id="rolling"),
])
def test_the_fleets_eta_is_the_plans_run_of_the_same_machine(policy: dict[str, Any]) -> None:
    """fleet_eta (from a running fleet's state) and plan_fleet run the same machine: same batches, same end."""
    spec = a_fleet_spec(an_entry("kernel", interrupt={"type": "reboot"}), policy=policy)
    nodes = [a_node(f"n{i}") for i in range(11)]
    plan = plan_fleet(PlanInput(spec, nodes, NOW))
    eta = fleet_eta(started_run(policy, nodes=11))
    assert eta is not None and plan.eta is not None
    assert eta.batches_left == plan.totals.batches and eta.seconds_left == plan.eta.seconds_left
    assert eta.windows_left == plan.totals.windows == 11


def test_the_eta_of_a_fleet_with_windows_out_counts_what_is_left_of_them() -> None:
    run = started_run({"default": {"budget": {"count": 2}, "strategy": {"type": "fixed", "initialBatch": 2}}},
                      timings=Timings(windows={"reboot": [100.0]}, gaps=[10.0]))
    assert run.state.planner is not None
    batch = batches.next_batch(run.state.planner, fs.startable(run.state))
    fs.hand_out(run.state, "fleet/gpu", batch, "2024-12-31T23:59:30+00:00")  # out for 30 s already
    eta = fleet_eta(run)
    assert eta is not None
    # 70 s left of the batch out, then one gap and one 100 s batch.
    assert (eta.seconds_left, eta.running_seconds, eta.batches_left) == (70.0 + 10 + 100, 70.0, 2)


def test_the_fleet_records_successful_windows_only() -> None:
    spec = a_fleet_spec(an_entry("a"))
    state = fs.FleetState()
    fs.set_spec(state, spec)
    packages = {"a": FleetPackage(PackageSpec.model_validate(spec.packages[0].spec))}
    fs.start_wave(state, select_fleet(FleetQuery(packages, [a_node("n1"), a_node("n2")])),
                  DeploymentPolicySpec.model_validate({"default": {"budget": {"count": 2}}}), "fleet/gpu")
    handed = dict(fs.hand_out(state, "fleet/gpu", ["n1", "n2"], NOW))
    fs.record_result(state, a_result("n1", handed["n1"].request_id, interrupt="reboot", a="complete"),
                     "2025-01-01T00:01:40+00:00")
    fs.record_result(state, a_result("n2", handed["n2"].request_id, a="erroring"), "2025-01-01T00:00:30+00:00")
    assert state.timings.windows == {"reboot": [100.0]}


def test_progress_and_the_statuses_carry_the_eta_while_the_fleet_works_and_not_when_halted() -> None:
    run = started_run({"default": {"budget": {"count": 2}, "strategy": {"type": "fixed", "initialBatch": 2}}})
    state = run.state
    progress = fleet_progress(state, RolloutPhase.PROGRESSING, NOW, eta=fleet_eta(run))
    assert progress.eta is not None and progress.eta.batches_left == 2
    assert progress.packages["kernel"].eta == progress.eta
    status = render_package_status(progress.packages["kernel"], 1)
    assert status["eta"] == {"finishAt": progress.eta.finish_at, "batchesLeft": 2, "source": progress.eta.source}
    assert render_policy_status([], 1, NOW, None, progress)["eta"]["finishAt"] == progress.eta.finish_at
    later = read_at(progress, "2025-01-01T00:05:00+00:00")
    assert later.eta is not None and later.eta.seconds_left == progress.eta.seconds_left - 300
    assert later.packages["kernel"].eta == later.eta
    state.halted = True
    assert fleet_eta(run) is None
    halted = fleet_progress(state, RolloutPhase.HALTED, NOW, eta=progress.eta)
    assert halted.eta is None and "eta" not in render_package_status(halted.packages["kernel"], 1)

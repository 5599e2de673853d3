"""The ETA (planning/eta.py, planning/fleet_eta.py): measured p50 per window kind, defaults said as such."""

from __future__ import annotations

from typing import Any

import pytest

from api.enums import RolloutPhase
from api.package import PackageSpec
from api.policy import DeploymentPolicySpec
from planning import fleet_state as fs
from planning.eta import (
    KEPT,
    EtaInput,
    Running,
    Timings,
    WindowShape,
    estimate,
    record_batch_end,
    record_hand_out,
    record_window,
)
from planning.fleet_eta import fleet_eta
from planning.fleet_status import fleet_progress
from planning.fleet_targets import FleetPackage, FleetQuery, select_fleet
from planning.rollout_plan import PlanInput, plan_fleet
from planning.status import render_package_status, render_policy_status
from tests.unit.fleet_builders import a_fleet_spec, a_node, a_result, an_entry

NOW = "2025-01-01T00:00:00+00:00"
REBOOT = WindowShape("reboot", stages=3, drain=True)
NONE = WindowShape("none", stages=2)


def test_each_batch_costs_its_longest_window_plus_one_gap() -> None:
    timings = Timings(windows={"reboot": [60, 70, 80], "none": [10]}, gaps=[4, 6])
    eta = estimate(EtaInput([[REBOOT, NONE], [NONE]], timings, NOW))
    assert eta.seconds_left == (5 + 70) + (5 + 10)
    assert (eta.batches_left, eta.windows_left) == (2, 3)
    assert eta.finish_at == "2025-01-01T00:02:00+00:00"  # 90 s, to the nearest minute
    assert eta.source.startswith("measured: none p50 10s of 1 window(s); reboot p50 70s of 3")


def test_windows_out_count_what_is_left_of_them_and_the_soak_is_added() -> None:
    timings = Timings(windows={"reboot": [100]})
    eta = estimate(EtaInput([], timings, NOW, running=[Running(REBOOT, 30), Running(REBOOT, 130)], soak_seconds=20))
    assert eta.seconds_left == 70 + 20 and eta.batches_left == 1


def test_a_kind_never_measured_takes_the_defaults_and_says_which() -> None:
    eta = estimate(EtaInput([[REBOOT]], Timings(windows={"none": [10]}), NOW))
    assert eta.seconds_left == 10 + 3 * 60 + 60 + 300
    assert "defaults for reboot (never measured here" in eta.source


def test_nothing_left_has_no_finish_time() -> None:
    assert estimate(EtaInput([], Timings(), NOW)).finish_at == ""


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


@pytest.mark.parametrize("policy", [
    pytest.param({"default": {"budget": {"count": 3}, "strategy": {"type": "exponential", "initialBatch": 1}}},
                 id="exponential"),
    pytest.param({"canary": {"count": 2}, "default": {"budget": {"percent": 50},
                                                       "strategy": {"type": "linear", "initialBatch": 1, "delta": 2}}},
                 id="canary-linear"),
])
def test_the_fleets_eta_counts_the_batches_the_plan_simulates(policy: dict[str, Any]) -> None:
    """fleet_eta (from a running fleet's state) and plan_fleet agree on the batches left of a fresh wave."""
    spec = a_fleet_spec(an_entry("kernel", interrupt={"type": "reboot"}), policy=policy)
    nodes = [a_node(f"n{i}") for i in range(11)]
    plan = plan_fleet(PlanInput(spec, nodes, NOW))
    state = fs.FleetState()
    fs.set_spec(state, spec)
    packages = {"kernel": FleetPackage(PackageSpec.model_validate(spec.packages[0].spec))}
    fs.start_wave(state, select_fleet(FleetQuery(packages, nodes)), DeploymentPolicySpec.model_validate(policy),
                  "fleet/gpu")
    eta = fleet_eta(state, NOW)
    assert eta is not None and plan.eta is not None
    assert eta.batches_left == plan.totals.batches and eta.seconds_left == plan.eta.seconds_left


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


def started_fleet(policy: dict[str, Any], nodes: int = 4) -> fs.FleetState:
    spec = a_fleet_spec(an_entry("kernel", interrupt={"type": "reboot"}), policy=policy)
    state = fs.FleetState()
    fs.set_spec(state, spec)
    packages = {"kernel": FleetPackage(PackageSpec.model_validate(spec.packages[0].spec))}
    fs.start_wave(state, select_fleet(FleetQuery(packages, [a_node(f"n{i}") for i in range(nodes)])),
                  DeploymentPolicySpec.model_validate(policy), "fleet/gpu")
    return state


def test_progress_and_the_statuses_carry_the_eta_while_the_fleet_works_and_not_when_halted() -> None:
    policy = {"default": {"budget": {"count": 2}, "strategy": {"type": "fixed", "initialBatch": 2}}}
    state = started_fleet(policy)
    progress = fleet_progress(state, RolloutPhase.PROGRESSING, NOW)
    assert progress.eta is not None and progress.eta.batches_left == 2
    assert progress.packages["kernel"].eta == progress.eta
    status = render_package_status(progress.packages["kernel"], 1)
    assert status["eta"] == {"finishAt": progress.eta.finish_at, "batchesLeft": 2, "source": progress.eta.source}
    assert render_policy_status([], 1, NOW, None, progress)["eta"]["finishAt"] == progress.eta.finish_at
    assert fleet_progress(state, RolloutPhase.PROGRESSING, "").eta is None  # the details line: no clock, no ETA
    state.halted = True
    halted = fleet_progress(state, RolloutPhase.HALTED, NOW)
    assert halted.eta is None and "eta" not in render_package_status(halted.packages["kernel"], 1)

"""What a waiting or gate-halted fleet reports: its progress, the Temporal UI details note, and the
statuses the bridge renders from it (planning/views/fleet_status.py, planning/views/status.py). Pure."""

from __future__ import annotations

from typing import Any

from api.enums import RolloutPhase
from api.policy import DeploymentPolicySpec
from planning.rollout import fleet_state as fs
from planning.rollout.fleet_targets import FleetSelection, NodeTargets
from planning.rollout.gates import GateFailure
from planning.views.fleet_status import details_note, fleet_progress
from planning.views.status import render_package_status, render_policy_status
from protocol.fleet import FleetSpec, PackageEntry

NOW = "2025-01-06T12:00:00+00:00"
OPENING = "2025-01-07T02:00:00+00:00"
FAILURE = GateFailure(gate="errors", query="sum(x)", condition="result < 1", value='{job="gpu"} 3', at=NOW,
                      reason="1 failed sample(s), more than failureLimit 0", when="betweenBatches", number=1)
POLICY: dict[str, Any] = {"default": {"budget": {"count": 1}}}


def state_with_work() -> fs.FleetState:
    """A fleet in wave 1 with two nodes: one done, one still to do."""
    state = fs.FleetState()
    fs.set_spec(state, FleetSpec("gpu", POLICY, 1, [PackageEntry("a", {"version": "1.0.0", "image": "x"}, 3)]))
    selection = FleetSelection({"n1": NodeTargets(done=["a"]), "n2": NodeTargets(pending=["a"])})
    fs.start_wave(state, selection, DeploymentPolicySpec.model_validate(POLICY), "fleet/gpu")
    return state


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == kind)


def test_waiting_fleet_reports_the_opening_everywhere() -> None:
    state = state_with_work()
    state.next_window, state.message = OPENING, f"outside the maintenance windows; the next opens {OPENING}"
    report = fleet_progress(state, RolloutPhase.WAITING, NOW)
    assert report.next_window == OPENING
    package = report.packages["a"]
    assert package.phase is RolloutPhase.WAITING and package.next_window == OPENING
    assert package.message == f"fleet/gpu: {state.message}"
    assert details_note(state, RolloutPhase.WAITING) == f"; next maintenance window opens {OPENING}"

    status = render_package_status(package, 3)
    assert (status["phase"], status["nextWindow"]) == ("Waiting", OPENING)
    assert "gateFailure" not in status
    assert condition(status, "Ready")["status"] == "False"
    assert (condition(status, "Progressing")["status"], condition(status, "Progressing")["reason"]) == ("True", "Waiting")
    assert condition(status, "Degraded")["status"] == "False"

    policy = render_policy_status([], 1, NOW, None, report)
    assert (policy["phase"], policy["nextWindow"], policy["message"]) == ("Waiting", OPENING, state.message)


def test_the_opening_is_shown_only_while_waiting() -> None:
    state = state_with_work()
    state.next_window = OPENING  # left over from a wait that ended
    report = fleet_progress(state, RolloutPhase.PROGRESSING, NOW)
    assert report.next_window == "" and report.packages["a"].next_window == ""
    assert details_note(state, RolloutPhase.PROGRESSING) == ""
    assert "nextWindow" not in render_policy_status([], 1, NOW, None, report)


def test_gate_halt_reports_query_value_and_time_everywhere() -> None:
    state = state_with_work()
    state.gates.failure, state.halted = FAILURE, True
    report = fleet_progress(state, RolloutPhase.HALTED, NOW)
    assert report.gate_failure == FAILURE and report.packages["a"].gate_failure == FAILURE
    assert details_note(state, RolloutPhase.HALTED) == (
        f'; gate errors failed at {NOW}: sum(x) = {{job="gpu"}} 3 (success condition result < 1; '
        "1 failed sample(s), more than failureLimit 0)")
    expected = {"gate": "errors", "query": "sum(x)", "condition": "result < 1", "value": '{job="gpu"} 3',
                "time": NOW, "reason": "1 failed sample(s), more than failureLimit 0", "when": "betweenBatches"}
    status = render_package_status(report.packages["a"], 3)
    assert status["phase"] == "Halted" and status["gateFailure"] == expected
    assert condition(status, "Degraded")["status"] == "True"
    assert render_policy_status([], 1, NOW, None, report)["gateFailure"] == expected


def test_a_package_with_nothing_left_shows_no_halt() -> None:
    state = state_with_work()
    state.targets["n2"] = NodeTargets(done=["a"])
    state.gates.failure, state.halted = FAILURE, True
    report = fleet_progress(state, RolloutPhase.HALTED, NOW)
    assert report.packages["a"].phase is RolloutPhase.COMPLETE and report.packages["a"].gate_failure is None


def test_a_fleet_held_by_its_gpu_budgets_says_why_in_the_temporal_ui() -> None:
    from planning.rollout.disruption import WaitNote

    state = state_with_work()
    assert state.planner is not None
    state.planner.waits = [WaitNote("default", "topology", 1, "rack r1 has 1 node in a window (max 1)")]
    assert details_note(state, RolloutPhase.WAITING) == "; waiting: rack r1 has 1 node in a window (max 1), 1 node held"
    state.next_window = OPENING  # a maintenance window first: it decides when anything may start
    assert details_note(state, RolloutPhase.WAITING) == f"; next maintenance window opens {OPENING}"

"""What a fleet that rolls back its failed canary reports: its progress, the Temporal UI details note,
and the Package and DeploymentPolicy statuses the bridge renders from it. Pure."""

from __future__ import annotations

from typing import Any

from api.enums import RolloutPhase, State
from planning.rollout import fleet_rollback as rb
from planning.rollout import fleet_state as fs
from planning.rollout import work_index
from planning.rollout.fleet_targets import NodeTargets
from planning.views.fleet_status import details_note, fleet_progress
from planning.views.status import render_package_status, render_policy_status
from tests.unit.fleet_builders import every_node
from tests.unit.test_fleet_rollback import answer, rolled_back_state, send

NOW = "2025-01-06T12:00:00+00:00"


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == kind)


def listed_after_rollback(state: fs.FleetState) -> None:
    """The listing after the rollback: every node has a and b pending again (back at 1.0.0 / absent)."""
    state.targets = {n: NodeTargets(pending=["a", "b"]) for n in state.targets}
    work_index.touch_all(state)  # as the fleet's listing does (planning.rollout.fleet_state.refresh_targets)


def test_rolling_back_then_rolled_back() -> None:
    state = rolled_back_state()
    rollback = state.rollback
    assert rollback is not None
    [node] = list(rollback.nodes)
    others = sorted(n for n in state.targets if n != node)
    send(state, node)
    state.message = rb.message(rollback)
    report = every_node(fleet_progress(state, RolloutPhase.ROLLING_BACK, NOW), state)
    assert report.rollback is not None and report.rollback.phase is RolloutPhase.ROLLING_BACK
    assert report.nodes[node].packages == {"a": State.IN_PROGRESS.value, "b": State.IN_PROGRESS.value}
    assert report.packages["a"].phase is RolloutPhase.ROLLING_BACK
    assert details_note(state, RolloutPhase.ROLLING_BACK) == f"; {rollback.reason}"

    answer(state, node, {"a": "complete", "b": "complete"})
    listed_after_rollback(state)
    state.message = rb.message(rollback)
    report = every_node(fleet_progress(state, RolloutPhase.ROLLED_BACK, NOW), state)
    assert report.rollback is not None and report.rollback.phase is RolloutPhase.ROLLED_BACK
    assert report.rollback.versions == {"a": "1.0.0"} and report.rollback.uninstalled == ["b"]
    assert report.rollback.nodes == [node]
    assert report.nodes[node].packages == {"a": State.WAITING.value, "b": State.WAITING.value}
    assert report.nodes[node].reason == ("a: rolled back to 1.0.0: the canary of wave 2 failed here; "
                                         "b: rolled back (uninstalled): the canary of wave 2 failed here")
    assert all(report.nodes[n].packages == {"a": "waiting", "b": "waiting"} for n in others), "never touched"
    package = report.packages["a"]
    assert package.phase is RolloutPhase.ROLLED_BACK and package.erroring == {}
    assert package.rollback is not None and package.rollback.versions == {"a": "1.0.0"}
    assert not package.rollback.uninstalled
    assert report.packages["b"].rollback.versions == {}  # type: ignore[union-attr]
    assert report.packages["b"].rollback.uninstalled == ["b"]  # type: ignore[union-attr]

    status = render_package_status(package, 2)
    assert status["phase"] == "RolledBack" and status["message"].startswith("fleet/gpu: wave 2 rolled back: canary failed")
    assert status["rollback"] == {
        "wave": 2, "phase": "RolledBack", "reason": f"canary failed on {node} (a: apply failed: exit 7; "
                                                    "b: apply failed: exit 7)",
        "canaryFailures": [{"node": node, "reason": "a: apply failed: exit 7; b: apply failed: exit 7"}],
        "nodes": [node], "versions": {"a": "1.0.0"}, "uninstalled": [], "failedNodes": [],
    }
    assert (condition(status, "Ready")["status"], condition(status, "Ready")["reason"]) == ("False", "RolledBack")
    assert (condition(status, "Degraded")["status"], condition(status, "Degraded")["reason"]) == ("True", "RolledBack")
    policy = render_policy_status([], 1, NOW, None, report)
    assert policy["phase"] == "RolledBack" and policy["rollback"]["versions"] == {"a": "1.0.0"}
    assert policy["rollback"]["uninstalled"] == ["b"]


def test_a_failed_rollback_halts_with_both_reasons_and_the_node_erroring() -> None:
    state = rolled_back_state()
    rollback = state.rollback
    assert rollback is not None
    [node] = list(rollback.nodes)
    send(state, node)
    answer(state, node, {"a": "erroring", "b": "complete"}, "apply failed: exit 9")
    state.message = rb.message(rollback)
    report = every_node(fleet_progress(state, RolloutPhase.HALTED, NOW), state)
    assert report.nodes[node].packages["a"] == State.ERRORING.value
    assert report.packages["a"].erroring == {node: "rollback failed: a: apply failed: exit 9"}
    assert report.packages["a"].phase is RolloutPhase.HALTED
    assert "rollback of wave 2 failed" in report.message and "after: canary failed on" in report.message
    status = render_package_status(report.packages["a"], 2)
    assert status["rollback"]["failedNodes"] == [{"node": node, "reason": "a: apply failed: exit 9"}]
    assert status["rollback"]["phase"] == "Halted"
    assert details_note(state, RolloutPhase.HALTED) == f"; {rollback.reason}"


def test_a_new_wave_clears_the_rollback() -> None:
    state = rolled_back_state()
    fs.apply_resume(state, fs.Filter())
    report = fleet_progress(state, RolloutPhase.PENDING, NOW)
    assert report.rollback is None and report.packages["a"].rollback is None
    assert "rollback" not in render_package_status(report.packages["a"], 2)

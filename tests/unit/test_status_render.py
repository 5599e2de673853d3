"""Package status rendering (planning/views/status.py): conditions and counts."""

from __future__ import annotations

from typing import Any

import pytest

from api.enums import CanaryPhase, RolloutPhase
from api.problems import ValidationProblem
from api.status import PackageStatus
from planning.views.status import (
    BLOCKED_SHOWN,
    RolloutProgress,
    package_view,
    render_invalid_package_status,
    render_package_status,
    render_policy_status,
)

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"


def conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


def test_complete_rollout_is_ready_for_its_generation() -> None:
    progress = RolloutProgress(
        phase=RolloutPhase.COMPLETE, version="1.0.0", total_nodes=3, counts={"complete": 3}, updated_at=T0
    )
    status = render_package_status(progress, generation=7)
    ready = conditions(status)["Ready"]
    assert (ready["status"], ready["observedGeneration"], ready["reason"]) == ("True", 7, "Complete")
    assert conditions(status)["Progressing"]["status"] == "False"
    assert conditions(status)["Degraded"]["status"] == "False"
    assert status["observedGeneration"] == 7 and status["progress"] == "3/3"
    assert PackageStatus.model_validate(status).nodes.complete == 3


@pytest.mark.parametrize(
    ("phase", "ready", "progressing", "degraded"),
    [
        (RolloutPhase.PENDING, "False", "True", "False"),
        (RolloutPhase.CANARY, "False", "True", "False"),
        (RolloutPhase.PROGRESSING, "False", "True", "False"),
        (RolloutPhase.PAUSED, "False", "False", "False"),
        (RolloutPhase.HALTED, "False", "False", "True"),
        (RolloutPhase.FAILED, "False", "False", "True"),
        (RolloutPhase.INVALID, "False", "False", "True"),
        (RolloutPhase.UNINSTALLING, "False", "True", "False"),
    ],
)
def test_conditions_per_phase(phase: RolloutPhase, ready: str, progressing: str, degraded: str) -> None:
    found = conditions(render_package_status(RolloutProgress(phase=phase, updated_at=T0), 1))
    assert (found["Ready"]["status"], found["Progressing"]["status"], found["Degraded"]["status"]) == (
        ready,
        progressing,
        degraded,
    )
    assert all(c["reason"] for c in found.values())


def test_erroring_and_blocked_nodes_are_listed_and_degrade() -> None:
    progress = RolloutProgress(
        phase=RolloutPhase.PROGRESSING,
        total_nodes=4,
        counts={"complete": 1, "erroring": 1, "blocked": 1, "in_progress": 1},
        blocked={"n2": "drain blocked by PDB web/db"},
        erroring={"n1": "apply-check exited 1"},
        batch_number=2,
        batch_size=2,
        canary_phase=CanaryPhase.PASSED,
        canary_nodes=["n0"],
        updated_at=T0,
    )
    status = render_package_status(progress, 3)
    assert status["erroringNodes"] == [{"node": "n1", "reason": "apply-check exited 1"}]
    assert status["blockedNodes"] == [{"node": "n2", "reason": "drain blocked by PDB web/db"}]
    assert status["currentBatch"] == {"number": 2, "size": 2}
    assert status["canary"] == {"phase": "Passed", "nodes": ["n0"]}
    assert status["nodes"]["inProgress"] == 1
    degraded = conditions(status)["Degraded"]
    assert degraded["status"] == "True" and degraded["reason"] == "NodesErroring"
    assert "1 node(s) erroring" in degraded["message"] and "1 node(s) blocked" in degraded["message"]


TAINT = "taints not tolerated: dedicated=infer:NoSchedule"


def blocked_progress(phase: RolloutPhase = RolloutPhase.COMPLETE, **blocked: str) -> RolloutProgress:
    return RolloutProgress(phase=phase, version="1.0.0", total_nodes=2 + len(blocked),
                           counts={"complete": 2, "blocked": len(blocked)}, blocked=blocked, updated_at=T0)


def test_complete_with_a_blocked_node_is_not_ready_and_names_it() -> None:
    status = render_package_status(blocked_progress(n3=TAINT), generation=4)
    ready = conditions(status)["Ready"]
    assert (ready["status"], ready["reason"], ready["observedGeneration"]) == ("False", "NodesBlocked", 4)
    assert ready["message"] == f"2/3 nodes complete; 1 node(s) blocked: n3 ({TAINT})"
    # The phase says it too (printer column), and so does the message (wide printer column).
    assert status["phase"] == "Blocked" and status["message"] == f"1 node(s) blocked: n3 ({TAINT})"
    assert status["blockedNodes"] == [{"node": "n3", "reason": TAINT}] and status["progress"] == "2/3"
    degraded = conditions(status)["Degraded"]
    assert (degraded["status"], degraded["reason"]) == ("True", "NodesBlocked")
    assert conditions(status)["Progressing"]["status"] == "False"


def test_ready_as_soon_as_the_block_lifts() -> None:
    blocked = render_package_status(blocked_progress(n3=TAINT), 1)
    lifted = RolloutProgress(phase=RolloutPhase.COMPLETE, version="1.0.0", total_nodes=3, counts={"complete": 3},
                             updated_at=T1)
    status = render_package_status(lifted, 1, previous=blocked)
    ready = conditions(status)["Ready"]
    assert (ready["status"], ready["reason"], ready["lastTransitionTime"]) == ("True", "Complete", T1)
    assert status["phase"] == "Complete" and status["blockedNodes"] == []


def test_blocked_nodes_in_the_ready_message_are_capped() -> None:
    long_reason = "noderoll.io/state unreadable: " + "x" * 500
    blocked = {f"n{i:02d}": long_reason for i in range(BLOCKED_SHOWN + 3)}
    status = render_package_status(blocked_progress(**blocked), 1)
    message = conditions(status)["Ready"]["message"]
    assert f"{BLOCKED_SHOWN + 3} node(s) blocked" in message
    assert "and 3 more (see status.blockedNodes and status.blockedReasons)" in message
    assert all(f"n{i:02d}" in message for i in range(BLOCKED_SHOWN)) and f"n{BLOCKED_SHOWN:02d}" not in message
    assert len(message) < 1500 and "..." in message
    # The status lists the first 5 of the reason, and counts them all (planning.views.capped; issue 45).
    assert [n["node"] for n in status["blockedNodes"]] == [f"n{i:02d}" for i in range(5)]
    assert status["blockedReasons"] == [{"reason": long_reason[:197] + "...", "nodes": BLOCKED_SHOWN + 3}]


@pytest.mark.parametrize(
    ("phase", "reason"),
    [
        pytest.param(RolloutPhase.PROGRESSING, "NodesBlocked", id="progressing"),
        pytest.param(RolloutPhase.PAUSED, "NodesBlocked", id="paused"),
        pytest.param(RolloutPhase.HALTED, "Halted", id="halted-says-more"),
        pytest.param(RolloutPhase.FAILED, "Failed", id="failed-says-more"),
    ],
)
def test_blocked_nodes_keep_ready_false_whatever_the_phase(phase: RolloutPhase, reason: str) -> None:
    progress = blocked_progress(phase, n3=TAINT)
    progress.message = "batch 2 of 3"
    status = render_package_status(progress, 1)
    ready = conditions(status)["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", reason)
    assert ready["message"] == f"2/3 nodes complete; batch 2 of 3; 1 node(s) blocked: n3 ({TAINT})"
    assert status["phase"] == phase.value and status["message"] == "batch 2 of 3"


def test_package_view_changes_only_a_complete_rollout_with_blocked_nodes() -> None:
    plain = RolloutProgress(phase=RolloutPhase.COMPLETE)
    assert package_view(plain) is plain
    shown = package_view(blocked_progress(n3=TAINT))
    assert shown.phase is RolloutPhase.BLOCKED and "n3" in shown.message
    said = package_view(blocked_progress(n3=TAINT)).message
    assert package_view(package_view(blocked_progress(n3=TAINT))).message == said


def test_transition_time_kept_while_status_unchanged() -> None:
    first = render_package_status(RolloutProgress(phase=RolloutPhase.PROGRESSING, updated_at=T0), 1)
    second = render_package_status(
        RolloutProgress(phase=RolloutPhase.PROGRESSING, updated_at=T1), 1, previous=first
    )
    assert conditions(second)["Progressing"]["lastTransitionTime"] == T0
    third = render_package_status(
        RolloutProgress(phase=RolloutPhase.COMPLETE, updated_at=T1), 1, previous=second
    )
    assert conditions(third)["Ready"]["lastTransitionTime"] == T1
    assert conditions(third)["Degraded"]["lastTransitionTime"] == T0


def test_invalid_package_status_lists_problems_and_keeps_node_counts() -> None:
    problems = [ValidationProblem("Package", "p", "spec.version", "'x' is not a valid version")]
    previous = render_package_status(
        RolloutProgress(phase=RolloutPhase.COMPLETE, total_nodes=2, counts={"complete": 2}, updated_at=T0), 1
    )
    status = render_invalid_package_status(problems, 2, T1, previous)
    assert status["phase"] == "Invalid" and status["message"] == "spec.version: 'x' is not a valid version"
    assert status["nodes"]["complete"] == 2 and status["observedGeneration"] == 2
    ready = conditions(status)["Ready"]
    assert (ready["status"], ready["reason"], ready["lastTransitionTime"]) == ("False", "Invalid", T1)
    assert conditions(status)["Degraded"]["status"] == "True"


def test_policy_status_valid_condition() -> None:
    valid = render_policy_status([], 3, T0)
    assert conditions(valid)["Valid"] == {
        "type": "Valid",
        "status": "True",
        "reason": "Valid",
        "message": "",
        "lastTransitionTime": T0,
        "observedGeneration": 3,
    }
    invalid = render_policy_status([ValidationProblem("DeploymentPolicy", "p", "spec", "bad")], 4, T1, valid)
    assert conditions(invalid)["Valid"]["status"] == "False" and invalid["message"] == "spec: bad"
    again = render_policy_status([], 5, "2026-02-01T00:00:00Z", valid)
    assert conditions(again)["Valid"]["lastTransitionTime"] == T0


def test_policy_status_shows_the_gpu_floors_and_why_nodes_wait() -> None:
    from planning.rollout.disruption import CapacityUse, WaitNote
    from planning.views.fleet_status import FleetProgress

    fleet = FleetProgress(policy="gpu", phase=RolloutPhase.WAITING, message="waiting: 8 of 16 GPUs would remain",
                          capacity=[CapacityUse("default", "nvidia.com/gpu", 16, 16, 24, ["n2 (NotReady)"], 1)],
                          waits=[WaitNote("default", "floor", 2, "8 of 16 GPUs would remain; down: n2 (NotReady)")])
    status = render_policy_status([], 1, T0, fleet=fleet)
    assert status["phase"] == "Waiting" and status["message"] == "waiting: 8 of 16 GPUs would remain"
    assert status["capacity"] == [{"compartment": "default", "resource": "nvidia.com/gpu", "available": 16,
                                   "floor": 16, "total": 24, "downNodes": ["n2 (NotReady)"]}]
    assert status["waiting"] == [{"compartment": "default", "rule": "floor", "nodes": 2,
                                  "reason": "8 of 16 GPUs would remain; down: n2 (NotReady)"}]
    plain = render_policy_status([], 1, T0, fleet=FleetProgress(policy="gpu"))
    assert "capacity" not in plain and "waiting" not in plain, "no GPU rules: no such fields"

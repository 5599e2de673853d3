"""Package status rendering (planning/status.py): conditions and counts."""

from __future__ import annotations

from typing import Any

import pytest

from api.enums import CanaryPhase, RolloutPhase
from api.problems import ValidationProblem
from api.status import PackageStatus
from planning.status import (
    RolloutProgress,
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

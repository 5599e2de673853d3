"""The GPU verify (`spec.verify`): the model, the rules of planning/node/verify.py, the pod's manifest, and
what a failed verify does to the node's label, reset and targeting."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from activities.stage_pod import StagePodSettings
from activities.verify_pod import is_verify, pod_manifest
from api.enums import NodeStatus, State
from api.node_state import NodeState, PackageNodeState, VerifyFailed, dump_node_state, parse_node_state
from api.package import PackageSpec
from api.policy import DeploymentPolicySpec
from api.verify import VerifyFailure, VerifySpec
from planning.node import verify as rules
from planning.node.node_reset import reset_state
from planning.node.targets import needs_work
from planning.node.window import node_status
from protocol.node_activities import StageJob
from tests.helpers.packages import example_image

IMAGE = "registry.example/gpu-verify:1.0.0"


def complete(version: str = "1.0.0") -> PackageNodeState:
    return PackageNodeState(version=version, image=example_image("a", version), state=State.COMPLETE)


def failed_state(*packages: str) -> NodeState:
    return NodeState(packages={p: complete() for p in packages},
                     verify_failed=VerifyFailed(packages=list(packages), message="GPU verify failed (exit code 1)"))


def window(recorded: NodeState, outcome: rules.VerifyOutcome | None, spec: VerifySpec | None = None,
           installed: tuple[str, ...] = ("a",), cordoned_before: bool = False) -> rules.VerifyWindow:
    return rules.VerifyWindow(recorded, installed, spec, outcome, cordoned_before, "run-1", "2026-01-01T00:00:00+00:00")


# --- the model ------------------------------------------------------------------------------------


def test_defaults_and_aliases() -> None:
    spec = DeploymentPolicySpec.model_validate({"default": {"budget": {"count": 1}}, "verify": {"image": IMAGE}})
    assert spec.verify == VerifySpec(image=IMAGE, timeout_seconds=600, on_failure=VerifyFailure.KEEP_CORDONED)
    assert spec.dump()["verify"] == {"image": IMAGE, "timeoutSeconds": 600, "onFailure": "KeepCordoned"}


def test_a_policy_without_verify_dumps_as_before() -> None:
    # Its revision must not change (a new field would start a new wave of every fleet).
    assert "verify" not in DeploymentPolicySpec.model_validate({"default": {"budget": {"count": 1}}}).dump()


@pytest.mark.parametrize(("verify", "message"), [
    pytest.param({}, "Field required", id="missing-image"),
    pytest.param({"image": "bad image"}, "is not an image reference", id="image-with-space"),
    pytest.param({"image": IMAGE, "timeoutSeconds": 0}, "greater than or equal to 1", id="timeout-zero"),
    pytest.param({"image": IMAGE, "timeoutSeconds": -5}, "greater than or equal to 1", id="timeout-negative"),
    pytest.param({"image": IMAGE, "onFailure": "Reboot"}, "'KeepCordoned' or 'Uncordon'", id="unknown-on-failure"),
    pytest.param({"image": IMAGE, "retries": 2}, "unknown field(s) retries", id="unknown-field"),
])
def test_bad_verify_is_refused_with_the_reason(verify: dict[str, Any], message: str) -> None:
    spec, problem = rules.parse_verify(verify)
    assert spec is None and problem.startswith("spec.verify") and message in problem, problem


def test_no_verify_parses_to_none_without_a_problem() -> None:
    assert rules.parse_verify(None) == (None, "")


# --- when a verify runs ---------------------------------------------------------------------------


@pytest.mark.parametrize(("asked", "interrupted", "healthy", "pending", "runs"), [
    pytest.param(True, True, True, False, True, id="after-the-interrupt"),
    pytest.param(True, False, True, False, False, id="no-interrupt-nothing-restarted"),
    pytest.param(True, True, False, False, False, id="a-package-failed"),
    pytest.param(False, True, True, False, False, id="not-asked"),
    pytest.param(True, False, True, True, True, id="a-failed-verify-pending"),
    pytest.param(False, False, True, True, False, id="pending-but-not-asked"),
])
def test_when_a_verify_runs(asked: bool, interrupted: bool, healthy: bool, pending: bool, runs: bool) -> None:
    assert rules.wanted(asked, interrupted, healthy, pending) is runs


def test_the_packages_of_a_failed_verify_run_again_only_when_a_verify_is_asked() -> None:
    recorded = failed_state("a", "b")
    assert rules.reruns(recorded, ["a", "c"], asked=True) == {"a": ""}
    assert rules.reruns(recorded, ["a", "c"], asked=False) == {}
    assert rules.reruns(NodeState(packages={"a": complete()}), ["a"], asked=True) == {}
    assert rules.pending(recorded, ["b"]) and not rules.pending(recorded, ["c"])


@pytest.mark.parametrize(("code", "tail", "passed", "message"), [
    pytest.param(0, "PASS", True, f"GPU verify {IMAGE} passed", id="exit-0"),
    pytest.param(3, "dcgmi: Fail", False, f"GPU verify {IMAGE} failed (exit code 3)", id="exit-3"),
    pytest.param(-1, "stage pod cannot start: ErrImagePull: not found\n", False,
                 f"GPU verify {IMAGE} failed: stage pod cannot start: ErrImagePull: not found", id="cannot-start"),
    pytest.param(-1, "", False, f"GPU verify {IMAGE} failed: no result", id="no-result"),
])
def test_outcome_of_the_pod(code: int, tail: str, passed: bool, message: str) -> None:
    outcome = rules.outcome_of(IMAGE, "nr-a-verify-1", code, tail)
    assert (outcome.passed, outcome.message, outcome.pod) == (passed, message, "nr-a-verify-1")


# --- what its end does ----------------------------------------------------------------------------

PASSED = rules.VerifyOutcome(True, "GPU verify x passed")
FAILED = rules.VerifyOutcome(False, "GPU verify x failed (exit code 1)", "GPU 0: Fail")


def test_a_window_without_verify_on_a_clean_node_changes_nothing() -> None:
    assert rules.close(window(NodeState(), None)) == rules.VerifyClose(None)


def test_a_pass_clears_the_record_and_lifts_the_cordon_it_left() -> None:
    end = rules.close(window(failed_state("a"), PASSED, VerifySpec(image=IMAGE), cordoned_before=True))
    assert end.record is None and end.take_cordon and not end.keep_cordon and end.failure is None
    assert end.event is not None and end.event[0] == rules.EVENT_VERIFIED and "is cleared" in end.event[1]


@pytest.mark.parametrize(("on_failure", "keep"), [(VerifyFailure.KEEP_CORDONED, True), (VerifyFailure.UNCORDON, False)])
def test_a_failure_records_the_packages_and_keeps_or_lifts_the_cordon(on_failure: VerifyFailure, keep: bool) -> None:
    spec = VerifySpec(image=IMAGE, on_failure=on_failure)
    end = rules.close(window(failed_state("b"), FAILED, spec, installed=("a",), cordoned_before=True))
    assert end.record is not None and end.record.packages == ["a", "b"] and end.record.image == IMAGE
    assert end.record.window == "run-1" and end.record.message == FAILED.message
    assert (end.keep_cordon, end.take_cordon) == (keep, not keep)
    assert end.failure == FAILED and end.event is not None and end.event[0] == rules.EVENT_VERIFY_FAILED


def test_a_record_stands_when_no_verify_ran_and_noderolls_cordon_stays() -> None:
    end = rules.close(window(failed_state("a"), None, None, cordoned_before=True))
    assert end.record == failed_state("a").verify_failed and end.keep_cordon and end.failure is None
    assert end.event is not None and end.event[0] == rules.EVENT_VERIFY_PENDING
    # A window of other Packages leaves it as it is, without an Event.
    other = rules.close(window(failed_state("b"), None, None, installed=("a",), cordoned_before=False))
    assert other.record is not None and not other.keep_cordon and other.event is None


@given(st.lists(st.sampled_from("abcde"), unique=True), st.lists(st.sampled_from("abcde"), unique=True),
       st.booleans(), st.booleans())
def test_a_failure_never_forgets_a_package_and_a_pass_forgets_all(before: list[str], installed: list[str],
                                                                   passed: bool, cordoned: bool) -> None:
    recorded = failed_state(*before) if before else NodeState()
    outcome = PASSED if passed else FAILED
    end = rules.close(window(recorded, outcome, VerifySpec(image=IMAGE), tuple(installed), cordoned))
    if passed:
        assert end.record is None and end.take_cordon is cordoned
    else:
        assert end.record is not None and set(end.record.packages) == {*before, *installed}
        assert end.record.packages == sorted(end.record.packages)


def test_the_failed_message_says_the_packages_completed() -> None:
    assert rules.failed_message(FAILED) == "complete on the host; GPU verify x failed (exit code 1)"


# --- the node's record, label, reset and targeting -----------------------------------------------


def test_the_record_round_trips_and_is_absent_otherwise() -> None:
    state = failed_state("a")
    assert parse_node_state(dump_node_state(state)) == (state, None)
    assert "verifyFailed" in dump_node_state(state) and "verify" not in dump_node_state(NodeState())


def test_the_label_says_verify_failed_below_erroring_and_a_window() -> None:
    state = failed_state("a")
    assert node_status(state, in_window=False) is NodeStatus.VERIFY_FAILED
    assert node_status(state, in_window=True) is NodeStatus.IN_PROGRESS
    erroring = state.model_copy(update={"packages": {"b": complete().model_copy(update={"state": State.ERRORING})}})
    assert node_status(erroring, in_window=False) is NodeStatus.ERRORING


def test_a_reset_forgets_the_record_with_the_packages() -> None:
    raw = dump_node_state(failed_state("a", "b"))
    assert parse_node_state(reset_state(raw, []).annotation)[0].verify_failed is None
    partial = reset_state(raw, ["a"])
    left = parse_node_state(partial.annotation)[0]
    assert left.verify_failed is not None and left.verify_failed.packages == ["b"]
    assert partial.status is NodeStatus.VERIFY_FAILED and partial.erroring
    assert parse_node_state(reset_state(raw, ["a", "b"]).annotation)[0].verify_failed is None


def test_a_package_of_a_failed_verify_has_work_until_it_passes() -> None:
    spec = PackageSpec(version="1.0.0", image=example_image("a"))
    assert needs_work("a", spec, failed_state("a"), uninstall=False)
    assert not needs_work("a", spec, NodeState(packages={"a": complete()}), uninstall=False)


# --- the pod --------------------------------------------------------------------------------------


def test_the_verify_pod_runs_the_image_privileged_on_the_node_with_the_host_root() -> None:
    job = StageJob(package="a", version="1.0.0", node="gpu-1", mode="verify", image=IMAGE, window="w",
                   tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}], timeout_seconds=300)
    assert is_verify(job)
    pod = pod_manifest(job, "nr-a-verify-1", StagePodSettings(image_pull_secrets=("regcred",),
                                                               priority_class_name="system-node-critical"))
    spec = pod["spec"]
    [container] = spec["containers"]
    assert (container["name"], container["image"], container["securityContext"]) == ("verify", IMAGE, {"privileged": True})
    assert "args" not in container and "command" not in container  # the image's own entry point
    assert {e["name"]: e["value"] for e in container["env"]} == {
        "NODEROLL_NODE": "gpu-1", "NODEROLL_MODE": "verify", "NODEROLL_ROOT": "/host"}
    assert spec["volumes"] == [{"name": "host", "hostPath": {"path": "/"}}]
    assert (spec["nodeName"], spec["hostPID"], spec["restartPolicy"], spec["activeDeadlineSeconds"]) == (
        "gpu-1", True, "Never", 300)
    assert spec["tolerations"] == job.tolerations and "initContainers" not in spec
    assert spec["imagePullSecrets"] == [{"name": "regcred"}] and spec["priorityClassName"] == "system-node-critical"
    assert pod["metadata"]["labels"] == {"noderoll.io/package": "a", "noderoll.io/node": "gpu-1",
                                         "noderoll.io/mode": "verify", "noderoll.io/component": "stage"}

"""planning.node.pod_steps: the containers of a pod of several stages, and how far a finished one got."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from api.enums import Stage
from planning.node.node_plan import StageStep
from planning.node.pod_steps import PodProgress, pod_modes, pod_progress

APPLY = StageStep(Stage.APPLY, "apply", "apply-check")
CONFIG = StageStep(Stage.CONFIG, "config", "config-check")
POST = StageStep(Stage.POST_INTERRUPT, "post-interrupt", None)
STEPS = (APPLY, CONFIG)


def test_pod_modes_run_each_stage_then_its_check_and_the_interrupt_last() -> None:
    assert pod_modes(STEPS) == ["apply", "apply-check", "config", "config-check"]
    assert pod_modes(STEPS, interrupt=True)[-1] == "interrupt"
    assert pod_modes((POST,)) == ["post-interrupt"]


@pytest.mark.parametrize(("completed", "failed_mode", "expected"), [
    pytest.param(["apply", "apply-check", "config", "config-check"], "config-check", PodProgress(2), id="all-done"),
    pytest.param(["apply", "apply-check", "config"], "config-check", PodProgress(1, CONFIG, "config-check"),
                 id="check-failed"),
    pytest.param(["apply", "apply-check"], "config", PodProgress(1, CONFIG, "config"), id="stage-failed"),
    pytest.param([], "", PodProgress(0, APPLY, "apply"), id="pod-never-ran"),
    pytest.param(["apply"], "", PodProgress(0, APPLY, "apply-check"), id="check-never-finished"),
    pytest.param(["apply", "apply-check"], "package", PodProgress(1, CONFIG, "config"), id="unknown-mode"),
])
def test_pod_progress(completed: list[str], failed_mode: str, expected: PodProgress) -> None:
    assert pod_progress(STEPS, completed, failed_mode) == expected


@given(st.integers(min_value=0, max_value=4))
def test_a_prefix_of_the_modes_is_progress_up_to_the_first_unfinished_step(count: int) -> None:
    modes = pod_modes(STEPS)
    progress = pod_progress(STEPS, modes[:count])
    assert progress.done == count // 2
    assert progress.failed == (None if count == 4 else STEPS[count // 2])


def test_a_phase_pod_is_read_package_by_package_up_to_the_first_that_failed() -> None:
    from planning.node.pod_steps import PhaseProgress, phase_progress

    steps = {"a": STEPS, "b": STEPS, "c": (APPLY,)}
    every = ["apply", "apply-check", "config", "config-check"]
    assert phase_progress(steps, {"a": every, "b": every, "c": ["apply", "apply-check"]}) == PhaseProgress(
        {"a": 2, "b": 2, "c": 1})
    # b's config check failed: a is done, b did its apply, c never ran (not in `done`).
    found = phase_progress(steps, {"a": every, "b": ["apply", "apply-check", "config"]}, ("b", "config-check"))
    assert found == PhaseProgress({"a": 2, "b": 1}, "b", PodProgress(1, CONFIG, "config-check"))
    # The activity failed (no result at all): the first Package's first stage failed.
    assert phase_progress(steps, {}) == PhaseProgress({"a": 0}, "a", PodProgress(0, APPLY, "apply"))
    # b's copy container failed (no mode of its own): its next stage is the one that failed.
    assert phase_progress(steps, {"a": every}, ("b", "package")).progress == PodProgress(0, APPLY, "apply")

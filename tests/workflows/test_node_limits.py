"""A Package's `limits` bound its node windows (issue #16 item 4), on the time-skipping server with
the fake activities: what the workflow hands each activity is the package's value, the largest of a
window's packages for window-wide waits, and the worker's default (NodeWorkflowInput) when unset."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from protocol.node import NodeWorkflowInput
from tests.workflows.node_harness import Harness, a_spec, harness, order

pytestmark = pytest.mark.workflows
PROTECTED = {"matchLabels": {"training": "true"}}
REBOOT = {"type": "reboot"}


def inputs(h: Harness, activity: str) -> list[Any]:
    return [arg for name, arg in h.node.calls if name == activity]


async def test_window_waits_as_long_as_its_most_patient_package(temporal_test_env: WorkflowEnvironment) -> None:
    async with harness(temporal_test_env) as h:
        await h.window(order("patient", interrupt=REBOOT, podNonInterruptLabels=PROTECTED, limits={
            "protectedPodsTimeoutSeconds": 7200, "stageTimeoutSeconds": 120, "interruptTimeoutSeconds": 60}),
                       order("plain", interrupt=REBOOT, podNonInterruptLabels=PROTECTED))
        assert sorted(r.state for r in await h.results(2)) == ["complete", "complete"]
        [wait] = inputs(h, "wait_protected_pods")
        assert wait.timeout_seconds == 7200  # max(7200, the default 3600)
        # Each Package of a phase pod: its stage bound per stage (the pod's deadline is their sum); the
        # interrupt's pod waits for the reboot as long as the largest of the window's: max(60, the default 900).
        pods = {(j.package, len([m for m in j.modes if not m.endswith("-check")]), j.timeout_seconds)
                for p in inputs(h, "run_stage_pod") for j in [p.job, *p.following]}
        assert pods == {("patient", 2, 240), ("patient", 1, 120), ("plain", 2, 2 * 1800), ("plain", 1, 1800)}
        assert [i.reboot_timeout_seconds for i in inputs(h, "run_interrupt")] == [900]


async def test_unset_limits_are_the_workers_defaults(temporal_test_env: WorkflowEnvironment) -> None:
    async with harness(temporal_test_env) as h:
        settings = NodeWorkflowInput(node=h.node.name, protected_pods_timeout_seconds=5, stage_timeout_seconds=70,
                                     reboot_timeout_seconds=80)
        await h.request("short", a_spec(interrupt=REBOOT, podNonInterruptLabels=PROTECTED), settings=settings)
        [result] = await h.results(1)
        assert result.state == "complete"
        assert [w.timeout_seconds for w in inputs(h, "wait_protected_pods")] == [5]
        pods = [(p.job.modes, p.job.timeout_seconds) for p in inputs(h, "run_stage_pod")]
        assert pods == [(["apply", "apply-check", "config", "config-check"], 2 * 70),
                        (["post-interrupt", "post-interrupt-check"], 70)]
        assert [i.reboot_timeout_seconds for i in inputs(h, "run_interrupt")] == [80]

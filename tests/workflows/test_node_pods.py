"""Stages in one pod (issue #14 item 4), on the time-skipping server with fake activities: a reboot
package's window runs two stage pods, a failed stage or check is retried from that stage in a new
pod (its attempts counted on their own), an interrupt that failed in the stage pod is retried in
pods of its own, and the window's stage Jobs are deleted once its outcome is written, but the latest
failed one of an erroring package."""

from __future__ import annotations

import uuid

import pytest
from temporalio.testing import WorkflowEnvironment

from api.node_state import parse_node_state
from tests.workflows.node_fakes import FakeNode
from tests.workflows.node_harness import a_spec, harness, order

pytestmark = pytest.mark.workflows
REBOOT = {"type": "reboot"}
BEFORE = ["apply", "apply-check", "config", "config-check"]
AFTER = ["post-interrupt", "post-interrupt-check"]


def node(**exits: list[int]) -> FakeNode:
    return FakeNode(name=f"node-{uuid.uuid4().hex[:8]}", exits={k.replace("_", "-"): v for k, v in exits.items()})


async def test_a_failed_check_is_retried_from_its_stage_in_a_new_pod(temporal_test_env: WorkflowEnvironment) -> None:
    async with harness(temporal_test_env, node(config_check=[4, 0])) as h:
        await h.request("kernel", a_spec(interrupt=REBOOT))
        [result] = await h.results(1)
        assert result.state == "complete"
        jobs = h.node.stage_jobs()
        # apply is not run again: the retry starts at config (its attempt 2) and still carries the reboot.
        assert [(j.modes, j.mode, j.attempt) for j in jobs] == [
            ([*BEFORE, "interrupt"], "apply", 1), (["config", "config-check", "interrupt"], "config", 2),
            (AFTER, "post-interrupt", 1)]
        assert h.node.modes() == [*BEFORE, "config", "config-check", "interrupt:reboot", *AFTER]
        assert len(set(h.node.jobs)) == 3
        assert h.node.cleanups == [(["kernel"], [])]  # every Job deleted: the package completed


async def test_a_stage_out_of_attempts_names_the_mode_and_keeps_its_last_job(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    async with harness(temporal_test_env, node(config_check=[4, 4, 4])) as h:
        await h.request("kernel", a_spec(interrupt=REBOOT))
        [result] = await h.results(1)
        assert (result.state, result.stage) == ("erroring", "config")
        assert result.message.startswith("config-check failed after 3 attempts (exit code 4)")
        assert [j.modes for j in h.node.stage_jobs()] == [[*BEFORE, "interrupt"]] + [
            ["config", "config-check", "interrupt"]] * 2
        assert not any(m.startswith("interrupt") for m in h.node.modes()), "the reboot never ran"
        state, _ = parse_node_state(h.node.state_annotation)
        entry = state.packages["kernel"]
        assert (entry.stage, entry.state, entry.attempts) == ("config", "erroring", 3)
        # The latest failed attempt stays for `noderoll logs`; the earlier ones go.
        assert h.node.cleanups == [(["kernel"], [h.node.jobs[-1]])]


async def test_an_interrupt_that_failed_in_the_stage_pod_is_retried_in_its_own_pod(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    async with harness(temporal_test_env, node(interrupt=[1, 0])) as h:
        await h.request("kernel", a_spec(interrupt=REBOOT))
        [result] = await h.results(1)
        assert result.state == "complete"
        names = [n for n in h.node.names() if n in ("run_stage_pod", "run_interrupt")]
        assert names == ["run_stage_pod", "run_interrupt", "run_stage_pod"]
        [retried] = [arg for name, arg in h.node.calls if name == "run_interrupt"]
        assert retried.job.attempt == 2 and retried.job.interrupt == {"type": "reboot", "services": []}
        state, _ = parse_node_state(h.node.state_annotation)
        assert (state.packages["kernel"].stage, state.packages["kernel"].state) == ("post-interrupt", "complete")


async def test_two_reboot_packages_two_pods_each_one_reboot(temporal_test_env: WorkflowEnvironment) -> None:
    async with harness(temporal_test_env) as h:
        await h.window(order("a", interrupt=REBOOT), order("b", interrupt=REBOOT, dependsOn={"a": "1.0.0"}))
        [result] = await h.windows(1)
        assert {p: o.state for p, o in result.outcomes.items()} == {"a": "complete", "b": "complete"}
        assert [(j.package, j.modes) for j in h.node.stage_jobs()] == [
            ("a", BEFORE), ("b", [*BEFORE, "interrupt"]), ("a", AFTER), ("b", AFTER)]
        assert h.node.modes().count("interrupt:reboot") == 1
        assert h.node.cleanups == [(["a", "b"], [])]

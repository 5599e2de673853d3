"""A fleet's window on the node workflow (time-skipping server, fake node activities).

One `WindowRequest` with several Packages is ONE window: one cordon, one drain, one merged interrupt,
dependents after their dependencies also when both reboot; a dependent whose dependency failed in the
window is not run (answered blocked); a queued request is withdrawn on `window_cancel` and answered;
a duplicate request id is dropped; an unreadable state holds the node.
"""

from __future__ import annotations

import uuid

from temporalio.testing import WorkflowEnvironment

from protocol.fleet import WindowCancel
from protocol.names import SIGNAL_WINDOW_CANCEL
from tests.workflows.node_fakes import FakeNode
from tests.workflows.node_harness import Harness, harness, order


async def test_three_packages_one_window_one_drain_one_merged_interrupt(temporal_test_env: WorkflowEnvironment) -> None:
    async with harness(temporal_test_env) as h:
        await h.window(order("kernel", interrupt={"type": "reboot"}),
                   order("driver", interrupt={"type": "reboot"}, dependsOn={"kernel": "1.0.0"}),
                   order("tuned", interrupt={"type": "service", "services": ["containerd"]}))
        [result] = await h.windows(1)
        assert {p: o.state for p, o in result.outcomes.items()} == dict.fromkeys(["driver", "kernel", "tuned"], "complete")
        assert (result.cordoned, result.drained, result.interrupt) == (True, True, "reboot")
        names = h.node.names()
        assert names.count("cordon_node") == 1 and names.count("drain_node") == 1
        assert len(h.node.interrupts()) == 1 and h.node.uncordons() == 1
        # One pod per phase (ADR 0016): every Package's stages before the interrupt in one pod, in
        # dependency order, the merged interrupt in its own pod, every post-interrupt stage in one pod.
        before, interrupt, after = h.node.pods()
        assert [j.package for j in before].index("kernel") < [j.package for j in before].index("driver")
        assert [j.modes for j in before if j.package == "kernel"] == [["apply", "apply-check", "config", "config-check"]]
        assert interrupt[0].mode == "interrupt" and interrupt[0].interrupt == {"type": "reboot", "services": []}
        assert {m for j in after for m in j.modes} == {"post-interrupt", "post-interrupt-check"}
        order_after = [j.package for j in after]
        assert sorted(order_after) == ["driver", "kernel", "tuned"]
        assert order_after.index("kernel") < order_after.index("driver")


async def test_a_dependent_of_a_failed_package_is_not_run(temporal_test_env: WorkflowEnvironment) -> None:
    node = FakeNode(name=f"node-{uuid.uuid4().hex[:8]}", exits={"apply": [7, 7, 7]})
    async with harness(temporal_test_env, node) as h:
        await h.window(order("base"), order("dep", dependsOn={"base": "1.0.0"}))
        [result] = await h.windows(1)
        assert result.outcomes["base"].state == "erroring"
        assert result.outcomes["dep"].state == "blocked" and "dependency base failed" in result.outcomes["dep"].message
        assert {job.package for job in h.node.stage_jobs()} == {"base"}


async def test_queued_request_is_withdrawn_and_a_duplicate_dropped(temporal_test_env: WorkflowEnvironment) -> None:
    async def queue_two(h: Harness) -> None:
        await h.window(order("a"), request_id="first")
        await h.window(order("a"), request_id="first")  # duplicate: dropped
        await h.client.get_workflow_handle(h.workflow_id).signal(
            SIGNAL_WINDOW_CANCEL, WindowCancel(fleet_workflow_id=h.collector.id, request_id="first"))

    async with harness(temporal_test_env, before=queue_two) as h:
        [result] = await h.windows(1)
        assert result.request_id == "first" and result.withdrawn
        assert h.node.stage_jobs() == []


async def test_unreadable_state_holds_the_node(temporal_test_env: WorkflowEnvironment) -> None:
    node = FakeNode(name=f"node-{uuid.uuid4().hex[:8]}", state_annotation="{not json")
    async with harness(temporal_test_env, node) as h:
        await h.window(order("a"), order("b"))
        [result] = await h.windows(1)
        assert {o.state for o in result.outcomes.values()} == {"blocked"}
        assert "unreadable" in result.outcomes["a"].message
        assert h.node.stage_jobs() == [] and "write_node_state" not in h.node.names()
        assert h.node.state_annotation == "{not json"

"""SKYHOOK_NODE_ORDER's source: the node's position in its fleet's order reaches every stage pod of the
window (the fleet numbers its nodes: tests/workflows/test_fleet.py::test_one_window_per_node_for_three_packages)."""

from __future__ import annotations

from temporalio.testing import WorkflowEnvironment

from tests.workflows.node_harness import a_spec, harness


async def test_stage_jobs_carry_the_order_agent_image_and_pull_secrets_of_the_request(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    spec = a_spec(agentImage="mirror.local/noderoll-agent:9.9.9", imagePullSecrets=[{"name": "corp"}],
                  interrupt={"type": "noop"})
    async with harness(temporal_test_env) as h:
        await h.request("tuning", spec, node_order=7)
        [result] = await h.results(1)
    assert result.state == "complete"
    stage_jobs = h.node.stage_jobs()
    assert stage_jobs and {(j.node_order, j.agent_image, tuple(j.image_pull_secrets)) for j in stage_jobs} == {
        (7, "mirror.local/noderoll-agent:9.9.9", ("corp",))}

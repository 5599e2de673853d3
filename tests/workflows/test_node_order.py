"""SKYHOOK_NODE_ORDER's source: each request carries the node's position in its rollout's request order."""

from __future__ import annotations

from temporalio.testing import WorkflowEnvironment

from tests.workflows.rollout_fakes import FakeFleet
from tests.workflows.test_node_workflow import a_spec, harness
from tests.workflows.test_rollout import SPEC, complete, policy, rollout, until
from workflows.messages import SIGNAL_SPEC_CHANGED, SpecChange


async def test_requests_number_nodes_in_order_across_batches_and_restart_for_a_new_version(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    fleet = FakeFleet.of(5)
    strategy = policy({"type": "linear", "initialBatch": 1, "delta": 1}, 5)
    async with rollout(temporal_test_env, fleet, strategy) as handle:
        await until(temporal_test_env, handle, complete(5))
        first = list(fleet.requests)
        await handle.signal(SIGNAL_SPEC_CHANGED, SpecChange(dict(SPEC, version="1.1.0"), 2, "p", strategy))
        await until(temporal_test_env, handle, lambda p: len(fleet.requests) == 10 and complete(5)(p))
    assert [len(call) for call in fleet.calls[:3]] == [1, 2, 2]  # three batches
    assert [r.node_order for _, r in first] == [0, 1, 2, 3, 4]
    assert [r.node_order for _, r in fleet.requests[5:]] == [0, 1, 2, 3, 4]


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

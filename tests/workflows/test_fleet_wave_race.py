"""A desired state that reaches the fleet while it lists the nodes of a new wave (found with `noderoll demo`).

The bridge hands a fleet its desired state per reconcile pass; two Packages applied one right after
the other often reach it as two `desired` signals some 40 ms apart (seen in 4 of 5 24-node demos:
"handed over (1 Package(s))" then "(2 Package(s))"). The second arrives while the fleet's first
wave lists its nodes. Expected: the Packages still share ONE window per node. Today the fleet sends
the first batch (the canary) with the first Package alone before it looked at its inbox again, then
started a second wave: the canary node got two windows (with two reboot Packages: two drains and
two reboots). Fixed in the fleet machine's `planning.fleet.acts.start_wave` (the inbox is applied after
the listing, and the nodes listed again for a new desired state).
"""

from __future__ import annotations

from typing import Any

from temporalio import activity
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from protocol import names
from protocol.activities import ListFleetNodesInput, ListFleetNodesResult
from protocol.activity_refs import LIST_FLEET_NODES
from protocol.fleet import FleetInput, FleetSpec
from tests.helpers import assert_eventually_async, new_task_queue, unique_name
from tests.workflows.fleet_fakes import FakeNodes
from tests.workflows.node_harness import register_search_attributes
from tests.workflows.skipping import end
from tests.workflows.test_fleet import EXPONENTIAL, package, policy, progress
from workflows.fleet import FleetWorkflow


async def test_a_package_arriving_during_the_first_listing_shares_the_window(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    env = temporal_test_env
    nodes = FakeNodes.of(4, reboot={"kernel", "driver"})
    name = unique_name("race")
    pol = policy(EXPONENTIAL, budget=2, canary={"count": 1})
    first = FleetSpec(name, pol, 1, [package("kernel")])
    both = FleetSpec(name, pol, 1, [package("kernel"), package("driver", spec={"dependsOn": {"kernel": "1.0.0"}})])
    fake_list, *others = nodes.activities()
    sent: list[bool] = []

    @activity.defn(name=LIST_FLEET_NODES.name)
    async def list_fleet_nodes(input: ListFleetNodesInput) -> ListFleetNodesResult:
        if not sent:
            # The bridge's second hand-over, while this (first) listing runs.
            sent.append(True)
            fleet = activity.client().get_workflow_handle(activity.info().workflow_id)
            await fleet.signal(names.SIGNAL_FLEET_SPEC, both)
        result: ListFleetNodesResult = await fake_list(input)  # type: ignore[operator]
        return result

    task_queue = new_task_queue()
    await register_search_attributes(env.client)
    async with Worker(env.client, task_queue=task_queue, workflows=[FleetWorkflow],
                      activities=[list_fleet_nodes, *others]):
        handle = await env.client.start_workflow(
            FleetWorkflow.run, FleetInput(policy_name=name), id=names.fleet_workflow_id(name),
            task_queue=task_queue, start_signal=names.SIGNAL_FLEET_SPEC, start_signal_args=[first],
        )
        try:
            async def complete() -> Any:
                report = await progress(handle)
                assert report.phase.value == "Complete" and set(report.packages) == {"kernel", "driver"}, report
                return report

            report = await assert_eventually_async(complete, timeout=60)
            assert {n: nodes.carried(n) for n in nodes.nodes} == {n: [["driver", "kernel"]] for n in nodes.nodes}
            assert all(p.drains == 1 and p.interrupts == 1 for p in report.nodes.values()), report.nodes
            assert report.wave == 1
        finally:
            await end(handle)

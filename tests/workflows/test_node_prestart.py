"""Each pod of a window created by the activity before it (ADR 0022), on the time-skipping server with
fake activities: the drain creates the first stage pod, a stage pod whose every stage succeeded the
interrupt's, the interrupt the first post-interrupt pod; each is handed to the activity that runs
it, and only when it is exactly the pod that activity runs (the fakes fail the window otherwise). A
pod that failed creates nothing ahead: its retry, and an interrupt after it, are created by their
own activities."""

from __future__ import annotations

import uuid

import pytest
from temporalio.testing import WorkflowEnvironment

from activities.pod_create import pod_name
from tests.workflows.node_fakes import FakeNode
from tests.workflows.node_harness import a_spec, harness, order

pytestmark = pytest.mark.workflows
REBOOT = {"type": "reboot"}


def node(**exits: list[int]) -> FakeNode:
    return FakeNode(name=f"node-{uuid.uuid4().hex[:8]}",
                    exits={k.replace("__", ":").replace("_", "-"): v for k, v in exits.items()})


def pod_names(fake: FakeNode) -> list[str]:
    """Every stage and interrupt pod the window ran, by name, in order."""
    return [pod_name(pod[0], pod[1:]) for pod in fake.pods()]


async def test_every_pod_of_a_reboot_window_is_created_ahead_and_adopted(temporal_test_env: WorkflowEnvironment) -> None:
    async with harness(temporal_test_env) as h:
        await h.window(order("a", interrupt=REBOOT), order("b", interrupt=REBOOT, dependsOn={"a": "1.0.0"}))
        [result] = await h.windows(1)
        assert {p: o.state for p, o in result.outcomes.items()} == {"a": "complete", "b": "complete"}
        pods = pod_names(h.node)
        assert len(pods) == 3
        # The drain created the stage pod, the stage pod the interrupt's, the interrupt the post-interrupt one.
        assert h.node.prestarted == h.node.adopted == pods
        [drain] = [arg for name, arg in h.node.calls if name == "drain_node"]
        assert drain.then is not None and [j.package for j in [drain.then.job, *drain.then.following]] == ["a", "b"]


@pytest.mark.parametrize(("exits", "after_failure"), [
    ({"config_check": [4, 0]}, 1),  # pods: stage (fails), its retry, interrupt, post-interrupt
    ({"interrupt": [1, 0]}, 2),     # pods: stage, interrupt (fails), its retry, post-interrupt
])
async def test_a_failed_pod_creates_nothing_ahead(
    temporal_test_env: WorkflowEnvironment, exits: dict[str, list[int]], after_failure: int,
) -> None:
    async with harness(temporal_test_env, node(**exits)) as h:
        await h.request("kernel", a_spec(interrupt=REBOOT))
        [result] = await h.results(1)
        assert result.state == "complete"
        pods = pod_names(h.node)
        assert len(pods) == 4
        # The pod after the failed one was created by its own activity; every other one ahead.
        assert h.node.prestarted == h.node.adopted == [p for i, p in enumerate(pods) if i != after_failure]


async def test_the_interrupt_created_ahead_is_for_the_packages_still_healthy(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    """a runs out of attempts: the pod that then succeeds runs c alone and creates the reboot for c
    alone (b, depending on a, is skipped), exactly the pod the window then asks for."""
    async with harness(temporal_test_env, node(a__apply=[2, 2, 2])) as h:
        await h.window(order("a", interrupt=REBOOT), order("b", interrupt=REBOOT, dependsOn={"a": "1.0.0"}),
                       order("c", interrupt=REBOOT))
        [result] = await h.windows(1)
        assert {p: o.state for p, o in result.outcomes.items()} == {"a": "erroring", "b": "blocked", "c": "complete"}
        pods = pod_names(h.node)
        assert [[j.package for j in pod] for pod in h.node.pods()] == [
            ["a", "c", "b"], ["a", "c", "b"], ["a", "c", "b"], ["c"], ["c"], ["c"]]
        assert h.node.prestarted == h.node.adopted == [pods[0], pods[4], pods[5]]


async def test_a_window_without_drain_creates_its_pod_in_its_own_activity(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    async with harness(temporal_test_env) as h:
        await h.request("tuning", a_spec())
        [result] = await h.results(1)
        assert result.state == "complete" and "drain_node" not in h.node.names()
        assert len(pod_names(h.node)) == 1 and h.node.prestarted == h.node.adopted == []

"""Two `noderoll bridge` replicas on one Lease: only the leader acts; the standby takes over."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes.client import ApiClient
from temporalio.client import Client

from localstack.state import StackInfo
from protocol import names
from tests.helpers import assert_eventually, unique_name
from tests.helpers.packages import package_spec
from tests.helpers.processes import NoderollProcesses, noderoll_processes
from tests.integration.bridge_support import (
    condition,
    create_package,
    delete_package,
    lease_holder,
    patch_package,
    read_package,
    reasons,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def pair(local_stack: StackInfo, tmp_path: Path) -> Iterator[NoderollProcesses]:
    """A worker and two bridges (`bridge-a` leads first)."""
    with noderoll_processes(local_stack, tmp_path, bridge=False) as run:
        run.wait_leading(run.start_bridge("bridge-a"))
        run.start_bridge("bridge-b")
        yield run


def ready_at(api: ApiClient, name: str, generation: int) -> bool:
    ready = condition(read_package(api, name), "Ready")
    assert ready["status"] == "True" and ready["observedGeneration"] == generation, ready
    return True


async def test_only_the_leader_acts_and_the_standby_takes_over(
    pair: NoderollProcesses, kube_api_client: ApiClient, temporal_client: Client
) -> None:
    name = unique_name("lead")
    # No node matches: the rollout completes at once (0/0), which is all leadership needs.
    spec = package_spec(labels={"no-such-node": pair.run_id})
    create_package(kube_api_client, pair.package(name, spec))
    try:
        assert_eventually(lambda: ready_at(kube_api_client, name, 1), timeout=60)
        assert lease_holder(kube_api_client, pair) == "bridge-a"
        assert "leading as" not in pair.log("bridge-b")

        pair.kill("bridge-a")
        pair.wait_leading("bridge-b")
        assert lease_holder(kube_api_client, pair) == "bridge-b"
        patch_package(kube_api_client, name, {"spec": {"env": [{"name": "X", "value": "1"}]}})
        assert_eventually(lambda: ready_at(kube_api_client, name, 2), timeout=60)
        seen = reasons(kube_api_client, name)
        assert seen.count("RolloutStarted") == 1, seen
        query = f"WorkflowId = '{names.fleet_workflow_id(None)}' AND TaskQueue = '{pair.task_queue}'"
        runs = [w async for w in temporal_client.list_workflows(query)]
        assert len(runs) == 1
    finally:
        delete_package(kube_api_client, name)

"""Two `noderoll bridge` replicas on one Lease: only the leader acts; the standby takes over.

And the Lease rounds themselves (`crd_bridge.leader`), against the real apiserver: a leader renews
with one request a round (from its own last write), and a leader whose Lease someone else wrote
finds out in the same round (409, then a read) and stands by.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from temporalio.client import Client

from crd_bridge.leader import LeaderElector, LeaseSettings
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


class CountingLeases:
    """The real CoordinationV1Api, counting the calls each method gets (what the Lease rounds cost)."""

    def __init__(self, api: ApiClient) -> None:
        self.api = client.CoordinationV1Api(api)
        self.calls: Counter[str] = Counter()

    def __getattr__(self, method: str) -> Any:
        call = getattr(self.api, method)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[method] += 1
            return call(*args, **kwargs)
        return counted


@pytest.fixture
def lease(kube_api_client: ApiClient) -> Iterator[tuple[str, CountingLeases]]:
    """A Lease of this test only (in `default`), and the counting API the electors use."""
    name = unique_name("lease")
    leases = CountingLeases(kube_api_client)
    yield name, leases
    try:
        leases.api.delete_namespaced_lease(name, "default")
    except ApiException as err:
        if err.status != 404:
            raise


def elector(identity: str, name: str, leases: CountingLeases) -> LeaderElector:
    candidate = LeaderElector(LeaseSettings(identity=identity, namespace="default", name=name))
    candidate._api = lambda: leases  # type: ignore[method-assign]
    return candidate


def test_a_leader_renews_with_one_request_a_round(lease: tuple[str, CountingLeases]) -> None:
    name, leases = lease
    leader = elector("bridge-a", name, leases)
    assert leader.try_acquire_or_renew()  # creates the Lease
    renewed = leases.api.read_namespaced_lease(name, "default").spec.renew_time
    leases.calls.clear()
    for _ in range(5):
        assert leader.try_acquire_or_renew()
    assert leases.calls == {"replace_namespaced_lease": 5}, leases.calls
    now = leases.api.read_namespaced_lease(name, "default").spec
    assert now.holder_identity == "bridge-a" and now.renew_time > renewed, now


def test_a_leader_whose_lease_was_taken_reads_it_and_stands_by(lease: tuple[str, CountingLeases]) -> None:
    name, leases = lease
    leader = elector("bridge-a", name, leases)
    assert leader.try_acquire_or_renew()
    # Someone else writes the Lease (a second replica that found it expired, say): a's resourceVersion is stale.
    taken = leases.api.read_namespaced_lease(name, "default")
    taken.spec.holder_identity = "bridge-b"
    taken.spec.renew_time = datetime.now(UTC)
    taken.spec.lease_duration_seconds = 1
    leases.api.replace_namespaced_lease(name, "default", taken)
    leases.calls.clear()
    assert not leader.try_acquire_or_renew()
    assert not leader.is_leader()
    # The renewal from a's own write got 409; the same round read the Lease and found it held.
    assert leases.calls == {"replace_namespaced_lease": 1, "read_namespaced_lease": 1}, leases.calls
    assert leases.api.read_namespaced_lease(name, "default").spec.holder_identity == "bridge-b"
    # b's Lease expires unrenewed: a takes it over (a read, then a write), then renews with one request a round.
    time.sleep(1.5)
    leases.calls.clear()
    assert leader.try_acquire_or_renew() and leader.try_acquire_or_renew()
    assert leases.calls == {"read_namespaced_lease": 1, "replace_namespaced_lease": 2}, leases.calls
    spec = leases.api.read_namespaced_lease(name, "default").spec
    assert spec.holder_identity == "bridge-a" and spec.lease_transitions == 1 and spec.lease_duration_seconds == 15, spec

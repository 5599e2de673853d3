"""GPU budgets on the real stack (issue 28): `noderoll worker` and `noderoll bridge` processes, fleetsim nodes
with GPUs and racks, and a Node watch that looks at every change of every node (`CapacityWatch`).

* A capacity floor over mixed 4- and 8-GPU nodes: one node cordoned by someone else first makes the
  fleet wait (phase `Waiting`, the reason on the DeploymentPolicy's status: `status.waiting`,
  `status.capacity`, the message); once it is uncordoned the rollout completes, and the GPUs up
  never went under the floor.
* A per-rack limit of 1: batches of 8 become one node per rack, and no two nodes of a rack are ever
  down at once.
* Drain-ahead with the taint: every node carries `noderoll.io/upcoming` (label and PreferNoSchedule
  taint) when its window starts, a protected pod created while nodes are marked is scheduled by the
  real kube-scheduler on an unmarked node, and no mark is left once the rollout is done.
  The fleet's history (drain-ahead's marks, a GPU floor) replays against the worker's workflows
  (recorded as tests/histories/fleet/fleet-drain-ahead-gpu-floor.json with
  `NODEROLL_RECORD_FLEET_HISTORIES=tests/histories`).
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient
from temporalio.client import Client

from api import keys
from fleetsim.context import RACK_LABEL
from fleetsim.workloads import PROTECTED_LABEL
from protocol import names
from tests.helpers import assert_eventually, unique_name
from tests.helpers.fleet import running_fleet
from tests.helpers.histories import completed_history, replay_and_record
from tests.helpers.nodewatch import watching_capacity
from tests.helpers.packages import SERVICE_IMAGE, WORKLOAD_IMAGE, package_spec
from tests.helpers.processes import NoderollProcesses, noderoll_fixture
from tests.integration.bridge_support import (
    create_package,
    create_policy,
    delete_package,
    delete_policy,
    read_package,
)

# Each test rolls a fleet out (one also waits for nodes down first): more than the default 300 s under load.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
ROLLOUT_TIMEOUT = 480.0
GPU = "nvidia.com/gpu"


# Worker and bridge processes for this module (the fleets are per test).
run = noderoll_fixture()


def policy_status(api: ApiClient, name: str) -> dict[str, Any]:
    obj = client.CustomObjectsApi(api).get_cluster_custom_object(keys.GROUP, keys.VERSION, keys.POLICY_PLURAL, name)
    return dict(obj.get("status") or {})


def service_package(run: NoderollProcesses, name: str, policy: str, label: str) -> dict[str, Any]:
    """A Package whose windows cordon and drain (a service restart), on the test's nodes."""
    return run.package(name, package_spec(SERVICE_IMAGE, policy=policy, labels={"gpu-budgets": label},
                                          interrupt={"type": "service", "services": ["containerd"]}))


def wait_complete(api: ApiClient, package: str) -> None:
    def complete() -> bool:
        status = read_package(api, package).get("status") or {}
        assert status.get("phase") == "Complete", status.get("message")
        return True

    assert_eventually(complete, timeout=ROLLOUT_TIMEOUT, interval=2)


def test_a_gpu_floor_over_mixed_nodes_holds_and_waits_for_nodes_down(
    run: NoderollProcesses, kube_api_client: ApiClient
) -> None:
    label, policy, package = unique_name("floor"), unique_name("pfl"), unique_name("drv")
    core = client.CoreV1Api(kube_api_client)
    # 8 nodes, 4 and 8 GPUs alternating: 48 GPUs; the floor keeps 32, so 16 may be out at once.
    with running_fleet(run.stack, nodes=8, labels={"gpu-budgets": label}, gpus=[4, 8]) as fleet, \
            watching_capacity(kube_api_client, f"gpu-budgets={label}", nodes=8) as watch:
        # Two 8-GPU nodes cordoned by someone else: 32 up, no node that is up may go.
        down = [fleet.node_names[1], fleet.node_names[3]]
        for node in down:
            core.patch_node(node, {"spec": {"unschedulable": True}})
        try:
            create_policy(kube_api_client, run, policy, {"default": {
                "budget": {"percent": 100, "minAvailable": {"resource": GPU, "count": 32}},
                "strategy": {"type": "fixed", "initialBatch": 8}}})
            create_package(kube_api_client, service_package(run, package, policy, label))

            def waiting() -> bool:
                status = policy_status(kube_api_client, policy)
                assert status.get("phase") == "Waiting", status.get("message")
                [held] = status["waiting"]
                assert (held["rule"], held["nodes"]) == ("floor", 6), status
                # The first node held names the reason: a 4-GPU node leaves 28, an 8-GPU one 24 (the order is the fleet's).
                assert held["reason"] in {f"{left} of 32 GPUs would remain; down: {down[0]} (cordoned), {down[1]} (cordoned)"
                                          for left in (28, 24)}, held
                assert status["capacity"] == [{"compartment": "default", "resource": GPU, "available": 32, "floor": 32,
                                               "total": 48, "downNodes": [f"{n} (cordoned)" for n in down]}], status
                assert status["message"] == f"waiting: {held['reason']}, 6 nodes held", status["message"]
                return True

            assert_eventually(waiting, timeout=ROLLOUT_TIMEOUT, interval=2)
            # The rollout waits rather than break the floor; only the nodes already down went (they take nothing).
            assert watch.windows.keys() <= set(down), watch.windows
            for node in down:
                core.patch_node(node, {"spec": {"unschedulable": False}})
            wait_complete(kube_api_client, package)
            status = read_package(kube_api_client, package)["status"]
        finally:
            delete_package(kube_api_client, package)
            delete_policy(kube_api_client, policy)
    assert watch.lowest is not None and watch.lowest >= 32, watch.lowest
    assert sorted(watch.windows) == sorted(fleet.node_names), watch.windows
    # The two nodes down, then at least two nodes a batch up to the floor (one at a time would take 7).
    assert status["currentBatch"]["number"] <= 4, status


def test_at_most_one_node_per_rack_down_at_once(run: NoderollProcesses, kube_api_client: ApiClient) -> None:
    label, policy, package = unique_name("rack"), unique_name("prk"), unique_name("drv")
    with running_fleet(run.stack, nodes=8, labels={"gpu-budgets": label}, racks=4) as fleet, \
            watching_capacity(kube_api_client, f"gpu-budgets={label}", nodes=8, rack_label=RACK_LABEL) as watch:
        try:
            create_policy(kube_api_client, run, policy, {"default": {
                "budget": {"count": 8, "maxUnavailablePerTopology": [{"key": RACK_LABEL, "max": 1}]},
                "strategy": {"type": "fixed", "initialBatch": 8}}})
            create_package(kube_api_client, service_package(run, package, policy, label))
            wait_complete(kube_api_client, package)
            status = read_package(kube_api_client, package)["status"]
        finally:
            delete_package(kube_api_client, package)
            delete_policy(kube_api_client, policy)
    assert watch.rack_peak == 1, watch.rack_peak
    assert sorted(watch.windows) == sorted(fleet.node_names)
    # 8 nodes in 4 racks of 2: batches of 8 became two batches of one node per rack.
    assert status["currentBatch"]["number"] == 2, status


async def test_drain_ahead_marks_before_each_window_keeps_new_pods_off_and_cleans_up(
    run: NoderollProcesses, kube_api_client: ApiClient, temporal_client: Client
) -> None:
    label, policy, package = unique_name("ahead"), unique_name("pda"), unique_name("drv")
    core = client.CoreV1Api(kube_api_client)
    namespace, pod = "default", unique_name("train")
    with running_fleet(run.stack, nodes=4, labels={"gpu-budgets": label}) as fleet, \
            watching_capacity(kube_api_client, f"gpu-budgets={label}", nodes=4, want_taint=True) as watch:
        try:
            # The floor (half of 4 x 8 GPUs) allows the batches of 2: it is here for the recorded history.
            create_policy(kube_api_client, run, policy, {
                "default": {"budget": {"count": 2, "minAvailable": {"resource": GPU, "percent": 50}},
                            "strategy": {"type": "fixed", "initialBatch": 2}},
                "drainAhead": {"seconds": 30, "taint": True}})
            create_package(kube_api_client, service_package(run, package, policy, label))

            def two_marked() -> list[str]:
                marked = watch.marked_now()
                assert len(marked) == 2 and not watch.windows, (marked, watch.windows)
                return marked

            marked = assert_eventually(two_marked, timeout=ROLLOUT_TIMEOUT, interval=0.5)
            free = sorted(set(fleet.node_names) - set(marked))[0]
            # A new protected pod allowed on a marked node and an unmarked one: the scheduler prefers the latter.
            core.create_namespaced_pod(namespace, {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod, "labels": {PROTECTED_LABEL: "true"}},
                "spec": {"containers": [{"name": "trainer", "image": WORKLOAD_IMAGE}],
                         "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                             "nodeSelectorTerms": [{"matchExpressions": [{
                                 "key": "kubernetes.io/hostname", "operator": "In", "values": [marked[0], free]}]}]}}}},
            })

            def scheduled() -> str:
                node = core.read_namespaced_pod(pod, namespace).spec.node_name
                assert node, "not scheduled yet"
                return str(node)

            assert assert_eventually(scheduled, timeout=60) == free
            assert not watch.windows, "the pod was placed while the marked nodes' windows had not started"
            core.delete_namespaced_pod(pod, namespace, grace_period_seconds=0)
            wait_complete(kube_api_client, package)
            assert_eventually(lambda: watch.marked_now() == [], timeout=120)
            for node in core.list_node(label_selector=f"gpu-budgets={label}").items:
                assert keys.UPCOMING_FOR_ANNOTATION not in (node.metadata.annotations or {}), node.metadata.name
        finally:
            try:
                core.delete_namespaced_pod(pod, namespace, grace_period_seconds=0)
            except client.exceptions.ApiException as err:
                if err.status != 404:
                    raise
            delete_package(kube_api_client, package)
            delete_policy(kube_api_client, policy)
    assert sorted(watch.windows) == sorted(fleet.node_names), watch.windows
    assert watch.windows_unmarked == [], "every window started on a node carrying the label and the taint"
    assert watch.marks_seen == set(fleet.node_names)

    # The fleet's history with drain-ahead's marks and a GPU floor replays (and is recorded from here).
    history = await completed_history(temporal_client, names.fleet_workflow_id(policy))
    await replay_and_record({"fleet/fleet-drain-ahead-gpu-floor": history}, "NODEROLL_RECORD_FLEET_HISTORIES")

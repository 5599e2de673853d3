"""Other maintenance respected by the fleet (`spec.respect`, issue 44 item 5), on the real stack: worker and
bridge processes, fleetsim nodes with GPUs, NVIDIA maintenance-operator's NodeMaintenance CRD installed from
tests/fixtures/nodemaintenance and an object created as that operator's users create them (no operator runs
here: nothing cordons or drains for it), and the cluster autoscaler's deletion-candidate taint on a second node.

4 nodes x 8 GPUs, a count budget of 3, a floor of 8 GPUs, batches of 3: the two held nodes are not started,
take two of the budget's three slots, and count as down for the floor; the fleet starts one node, says why the
others wait (the policy's `status.waiting`: the maintenance that holds each, and the count budget full), and
completes once the NodeMaintenance is deleted and the taint removed (at its next listing: 30 s at most). No
window started while a node was held, none left fewer than 8 GPUs up. The fleet's history (patch
`respect-other-maintenance`) replays and is recorded as tests/histories/fleet/fleet-respect-other-maintenance.json
(`NODEROLL_RECORD_FLEET_HISTORIES`).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient
from temporalio.client import Client

from api import keys
from localstack.state import StackInfo
from protocol import names
from tests.helpers import assert_eventually, unique_name
from tests.helpers.fleet import running_fleet
from tests.helpers.histories import completed_history, replay_and_record
from tests.helpers.nodewatch import watching_capacity
from tests.helpers.packages import SERVICE_IMAGE, package_spec
from tests.helpers.processes import NoderollProcesses, noderoll_fixture
from tests.integration.bridge_support import (
    create_package,
    create_policy,
    delete_package,
    delete_policy,
    read_package,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
CRD = Path(__file__).resolve().parents[1] / "fixtures/nodemaintenance/nodemaintenances.maintenance.nvidia.com.yaml"
GPU = "nvidia.com/gpu"
TAINT = {"key": "DeletionCandidateOfClusterAutoscaler", "value": "1733500000", "effect": "PreferNoSchedule"}
ROLLOUT_TIMEOUT = 300.0

run = noderoll_fixture()


def kubectl(stack: StackInfo, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kubectl", "--kubeconfig", str(stack.kubeconfig), *args], capture_output=True,
                          text=True, timeout=120)


def policy_status(api: ApiClient, name: str) -> dict[str, Any]:
    obj = client.CustomObjectsApi(api).get_cluster_custom_object(keys.GROUP, keys.VERSION, keys.POLICY_PLURAL, name)
    return dict(obj.get("status") or {})


async def test_held_nodes_wait_take_budget_slots_and_count_against_the_floor(
    run: NoderollProcesses, kube_api_client: ApiClient, temporal_client: Client, k8s_namespace: str
) -> None:
    applied = kubectl(run.stack, "apply", "-f", str(CRD))
    assert applied.returncode == 0, applied.stderr
    ready = kubectl(run.stack, "wait", "--for=condition=Established",
                    "crd/nodemaintenances.maintenance.nvidia.com", "--timeout=60s")
    assert ready.returncode == 0, ready.stderr
    label, policy, package = unique_name("resp"), unique_name("presp"), unique_name("svc")
    core, custom = client.CoreV1Api(kube_api_client), client.CustomObjectsApi(kube_api_client)
    with running_fleet(run.stack, nodes=4, labels={"respect-rollout": label}) as fleet, \
            watching_capacity(kube_api_client, f"respect-rollout={label}", nodes=4, floor=8) as watch:
        maintained, candidate = fleet.node_names[0], fleet.node_names[1]
        custom.create_namespaced_custom_object("maintenance.nvidia.com", "v1alpha1", k8s_namespace, "nodemaintenances", {
            "apiVersion": "maintenance.nvidia.com/v1alpha1", "kind": "NodeMaintenance",
            "metadata": {"name": "nic-firmware", "namespace": k8s_namespace},
            "spec": {"requestorID": "network.operator.com", "nodeName": maintained, "cordon": False}})
        core.patch_node(candidate, {"spec": {"taints": [TAINT]}})
        try:
            create_policy(kube_api_client, run, policy, {"default": {
                "budget": {"count": 3, "minAvailable": {"resource": GPU, "count": 8}},
                "strategy": {"type": "fixed", "initialBatch": 3}}})
            create_package(kube_api_client, run.package(package, package_spec(
                SERVICE_IMAGE, policy=policy, labels={"respect-rollout": label},
                interrupt={"type": "service", "services": ["containerd"]})))

            def waits_with_reasons() -> dict[str, Any]:
                status = policy_status(kube_api_client, policy)
                rules = {w["rule"]: w for w in status.get("waiting", [])}
                assert "maintenance" in rules and "count" in rules, status
                assert len(watch.windows) == 1 and not {maintained, candidate} & set(watch.windows), watch.windows
                return rules

            rules = assert_eventually(waits_with_reasons, timeout=ROLLOUT_TIMEOUT, interval=1)
            assert rules["maintenance"]["nodes"] == 2, rules
            assert rules["maintenance"]["reason"].startswith("held by other maintenance: "), rules
            assert "down for other reasons" in rules["count"]["reason"] and "fill its budget of 3" in rules["count"]["reason"]
            custom.delete_namespaced_custom_object("maintenance.nvidia.com", "v1alpha1", k8s_namespace,
                                                   "nodemaintenances", "nic-firmware")
            core.patch_node(candidate, {"spec": {"taints": []}})

            def complete() -> bool:
                status = read_package(kube_api_client, package).get("status") or {}
                assert status.get("phase") == "Complete", status.get("message")
                return True

            assert_eventually(complete, timeout=ROLLOUT_TIMEOUT, interval=2)
        finally:
            core.patch_node(candidate, {"spec": {"taints": []}})
            delete_package(kube_api_client, package)
            delete_policy(kube_api_client, policy)
            kubectl(run.stack, "delete", "crd", "nodemaintenances.maintenance.nvidia.com", "--ignore-not-found")
    assert watch.starts_below_floor == [], watch.starts_below_floor
    assert sorted(watch.windows) == sorted(fleet.node_names), watch.windows

    history = await completed_history(temporal_client, names.fleet_workflow_id(policy))
    await replay_and_record({"fleet/fleet-respect-other-maintenance": history}, "NODEROLL_RECORD_FLEET_HISTORIES")

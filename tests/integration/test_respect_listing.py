"""Other maintenance respected by the fleet's node listing (`spec.respect`, issue 44 item 5 groundwork),
on the real apiserver: NVIDIA maintenance-operator's NodeMaintenance CRD installed from
tests/fixtures/nodemaintenance (a minimal copy of its schema), NodeMaintenance objects created as that
operator's users create them (no operator runs here: nothing cordons or drains for them), and bare Node
objects carrying the taints other controllers set. The listing (`list_fleet_nodes`, run as the fleet
runs it) reports each held node down with the taint or the NodeMaintenance named; without the CRD the
NodeMaintenance read answers nothing, quietly, and is not asked again for 5 minutes.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient
from temporalio.testing import ActivityEnvironment

import kube
from activities.fleet import list_fleet_nodes
from kube import node_maintenance
from localstack.state import StackInfo
from planning.fleet.codec import selection_from_json
from protocol.activities import ListFleetNodesInput, ListFleetNodesResult
from protocol.fleet import PackageEntry
from tests.helpers import assert_eventually, unique_name
from tests.helpers.packages import SYSCTL_IMAGE, package_spec

pytestmark = pytest.mark.integration
CRD = Path(__file__).resolve().parents[1] / "fixtures/nodemaintenance/nodemaintenances.maintenance.nvidia.com.yaml"
CRD_NAME = "nodemaintenances.maintenance.nvidia.com"
# A time of this test's own (monotonic seconds): the absence it records never meets the listing's real clock.
LATER = 10.0**9


def kubectl(stack: StackInfo, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kubectl", "--kubeconfig", str(stack.kubeconfig), *args], capture_output=True,
                          text=True, timeout=120)


def crd_absent(stack: StackInfo) -> None:
    kubectl(stack, "delete", "crd", CRD_NAME, "--ignore-not-found", "--wait=true")


def install_crd(stack: StackInfo) -> None:
    applied = kubectl(stack, "apply", "-f", str(CRD))
    assert applied.returncode == 0, applied.stderr
    ready = kubectl(stack, "wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=60s")
    assert ready.returncode == 0, ready.stderr


def maintenance_object(namespace: str, name: str, node: str, requestor: str) -> dict[str, Any]:
    """A NodeMaintenance as the operator's users write it (e.g. the network operator in requestor mode)."""
    return {"apiVersion": "maintenance.nvidia.com/v1alpha1", "kind": "NodeMaintenance",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"requestorID": requestor, "nodeName": node, "cordon": True,
                     "waitForPodCompletion": {"podSelector": "app=training", "timeoutSeconds": 600},
                     "drainSpec": {"force": True, "timeoutSeconds": 300, "deleteEmptyDir": True}}}


@pytest.fixture
def nodes(local_stack: StackInfo, kube_api_client: ApiClient) -> Iterator[tuple[str, dict[str, str]]]:
    """Five Ready bare Nodes with a label of their own: held by a taint, by a NodeMaintenance, by a
    PreferNoSchedule taint, free (a NodeMaintenance of noderoll's own requestor), free (an unrelated taint)."""
    kube.configure(local_stack.kubeconfig)
    core = client.CoreV1Api(kube_api_client)
    group = unique_name("respect")
    taints = {"autoscaled": [{"key": "ToBeDeletedByClusterAutoscaler", "value": "1733500000", "effect": "NoSchedule"}],
              "maintained": [], "candidate": [{"key": "DeletionCandidateOfClusterAutoscaler", "value": "1733500000",
                                              "effect": "PreferNoSchedule"}],
              "ours": [], "free": [{"key": "example.com/dedicated", "value": "ml", "effect": "PreferNoSchedule"}]}
    names = {role: f"{group}-{role}" for role in taints}
    for role, name in names.items():
        core.create_node({"metadata": {"name": name, "labels": {"respect-test": group}},
                          "spec": {"taints": taints[role]}})
        core.patch_node_status(name, {"status": {"conditions": [{"type": "Ready", "status": "True",
                                                                 "reason": "KubeletReady"}]}})
    try:
        yield f"respect-test={group}", names
    finally:
        for name in names.values():
            core.delete_node(name)


def listing(selector: str, respect: dict[str, Any] | None) -> dict[str, str]:
    """Node -> why it is down, as the fleet's listing reports it (every targeted node listed)."""
    entry = PackageEntry("respect-pkg", package_spec(SYSCTL_IMAGE), 1)
    result: ListFleetNodesResult = ActivityEnvironment().run(
        list_fleet_nodes, ListFleetNodesInput(packages=[entry], label_selector=selector, respect=respect))
    return {name: targets.down for name, targets in selection_from_json(result.selection).nodes.items()}


def test_held_nodes_are_reported_down_with_what_holds_them(
    local_stack: StackInfo, kube_api_client: ApiClient, k8s_namespace: str, nodes: tuple[str, dict[str, str]],
) -> None:
    selector, names = nodes
    crd_absent(local_stack)
    # No CRD: nothing, quietly (a 404), and not asked again within 5 minutes of this process's clock.
    assert node_maintenance.held_nodes(clock=lambda: LATER) == {}
    install_crd(local_stack)
    custom = client.CustomObjectsApi(kube_api_client)
    try:
        for obj in (maintenance_object(k8s_namespace, "nic-firmware", names["maintained"], "network.operator.com"),
                    maintenance_object(k8s_namespace, "ours", names["ours"], node_maintenance.NODEROLL_REQUESTOR)):
            custom.create_namespaced_custom_object("maintenance.nvidia.com", "v1alpha1", k8s_namespace,
                                                   "nodemaintenances", obj)
        assert node_maintenance.held_nodes(clock=lambda: LATER + 10) == {}  # the absence remembered
        held = node_maintenance.held_nodes(clock=lambda: LATER + node_maintenance.ABSENT_RECHECK_SECONDS + 1)
        assert held[names["maintained"]] == f"{k8s_namespace}/nic-firmware (requestor network.operator.com)"
        assert names["ours"] not in held

        # The policy without `respect` ({}): the default taints and NodeMaintenance objects.
        down = assert_eventually(lambda: listing(selector, {}), timeout=30)
        assert down == {
            names["autoscaled"]: "held by other maintenance: taint ToBeDeletedByClusterAutoscaler (cluster-autoscaler)",
            names["maintained"]: (f"held by other maintenance: NodeMaintenance {k8s_namespace}/nic-firmware "
                                  "(requestor network.operator.com)"),
            names["candidate"]: ("held by other maintenance: taint DeletionCandidateOfClusterAutoscaler "
                                 "(cluster-autoscaler)"),
            names["ours"]: "", names["free"]: "",
        }
        # A policy's own list replaces the defaults; nodeMaintenance false reads none.
        own = listing(selector, {"taints": ["example.com/dedicated"], "nodeMaintenance": False})
        assert own == {names["free"]: "held by other maintenance: taint example.com/dedicated",
                       **{names[r]: "" for r in ("autoscaled", "maintained", "candidate", "ours")}}
        # A fleet that does not say (listings before `respect`): nothing reported, as before.
        assert set(listing(selector, None).values()) == {""}
    finally:
        crd_absent(local_stack)

"""Activities record their metrics while doing real work against the real kube-apiserver.

A drain of a node without pods records one `drained` drain; a drain whose only pod is protected by a
PodDisruptionBudget counts the refused evictions (HTTP 429) and records one `timeout` drain.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator

import pytest
from kubernetes import client
from prometheus_client import REGISTRY
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

import kube
from activities import drain
from localstack.state import StackInfo
from protocol.node_activities import DrainNodeInput
from tests.helpers import assert_eventually, unique_name
from tests.helpers.kube import FakeNode, create_ready_node, delete_node
from tests.helpers.packages import WORKLOAD_IMAGE

pytestmark = pytest.mark.integration


def sample(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.fixture
def node(local_stack: StackInfo, kube_api_client: client.ApiClient) -> Iterator[str]:
    kube.configure(local_stack.kubeconfig)
    core = client.CoreV1Api(kube_api_client)
    name = unique_name("metrics-node")
    create_ready_node(core, FakeNode(name))
    try:
        yield name
    finally:
        delete_node(core, name)


def running_pod(core: client.CoreV1Api, namespace: str, node: str) -> str:
    """A pod bound to `node` and reported Running and Ready, as a kubelet would."""
    name = unique_name("guarded")
    core.create_namespaced_pod(namespace, {
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": WORKLOAD_IMAGE}]},
    })
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    core.patch_namespaced_pod_status(name, namespace, {"status": {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
    }})
    return name


def test_drain_of_an_empty_node_is_recorded(node: str) -> None:
    before = sample("noderoll_drain_duration_seconds_count", {"outcome": "drained"})
    result = ActivityEnvironment().run(drain.drain_node, DrainNodeInput(node=node, timeout_seconds=30))
    assert result.evicted == []
    assert sample("noderoll_drain_duration_seconds_count", {"outcome": "drained"}) == before + 1


def test_pdb_refusals_and_drain_timeout_are_recorded(
    node: str, k8s_namespace: str, kube_api_client: client.ApiClient
) -> None:
    core = client.CoreV1Api(kube_api_client)
    pod = running_pod(core, k8s_namespace, node)
    # 1.20 serves PodDisruptionBudgets as policy/v1beta1 only; newer servers also as policy/v1.
    pdb = {"apiVersion": drain.policy_version(), "kind": "PodDisruptionBudget",
           "metadata": {"name": pod}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": pod}}}}
    group, version = drain.policy_version().split("/")
    client.CustomObjectsApi(kube_api_client).create_namespaced_custom_object(
        group, version, k8s_namespace, "poddisruptionbudgets", pdb)

    def pdb_observed() -> bool:
        obj = client.CustomObjectsApi(kube_api_client).get_namespaced_custom_object(
            group, version, k8s_namespace, "poddisruptionbudgets", pod)
        assert obj.get("status", {}).get("currentHealthy") == 1, obj.get("status")
        return True

    assert_eventually(pdb_observed, timeout=60)
    retries = sample("noderoll_eviction_retries_total", {"reason": "pdb"})
    timeouts = sample("noderoll_drain_duration_seconds_count", {"outcome": "timeout"})
    with pytest.raises(ApplicationError, match="timed out"):
        ActivityEnvironment().run(
            drain.drain_node, DrainNodeInput(node=node, timeout_seconds=2, poll_seconds=0.5))
    assert sample("noderoll_eviction_retries_total", {"reason": "pdb"}) > retries
    assert sample("noderoll_drain_duration_seconds_count", {"outcome": "timeout"}) == timeouts + 1

"""The local stack is a real control plane and a real Temporal server (issue 2's "Show" list).

Every object has a unique name and nodes carry a per-test pool label, so these tests share one
stack with every other integration test.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from temporalio.client import Client
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.worker import Worker

from protocol.names import SEARCH_ATTR_NODE, SEARCH_ATTR_PACKAGE, SEARCH_ATTR_PHASE
from tests.helpers import assert_eventually, assert_eventually_async, new_task_queue, unique_name
from tests.helpers.kube import FakeNode, create_ready_node, delete_node
from tests.helpers.packages import WORKLOAD_IMAGE
from tests.integration.roundtrip_workflow import GreetInput, RoundTripWorkflow, greet

pytestmark = pytest.mark.integration

# policy/v1beta1 is what Kubernetes 1.20 serves for PodDisruptionBudgets and Evictions.
POLICY_GROUP, POLICY_VERSION = "policy", "v1beta1"
SCHEDULE_TIMEOUT = 90.0


@pytest.fixture
def core(kube_api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(kube_api_client)


@pytest.fixture
def nodes(core: client.CoreV1Api) -> Iterator[list[str]]:
    """Names of the fake nodes a test creates; deleted afterwards."""
    created: list[str] = []
    yield created
    for name in created:
        delete_node(core, name)


def _ready_node(core: client.CoreV1Api, nodes: list[str], labels: dict[str, str] | None = None) -> str:
    name = unique_name("node")
    nodes.append(name)
    create_ready_node(core, FakeNode(name, labels=labels or {}))
    return name


def _pod(name: str, labels: dict[str, str], node_name: str | None = None) -> dict[str, object]:
    spec: dict[str, object] = {
        "containers": [{"name": "main", "image": WORKLOAD_IMAGE, "resources": {"requests": {"cpu": "100m"}}}],
        "terminationGracePeriodSeconds": 0,
    }
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": {"name": name, "labels": labels}, "spec": spec}


def _mark_running_and_ready(core: client.CoreV1Api, namespace: str, name: str) -> None:
    """Play kubelet for one pod: phase Running, condition Ready (what the disruption controller counts)."""
    status = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    core.patch_namespaced_pod_status(name, namespace, status)


def test_node_created_through_the_apiserver(core: client.CoreV1Api, nodes: list[str]) -> None:
    name = _ready_node(core, nodes, {"noderoll.io/test": "yes"})
    node = core.read_node(name)
    assert node.metadata.labels["noderoll.io/test"] == "yes"
    ready = [c for c in node.status.conditions if c.type == "Ready"]
    assert ready and ready[0].status == "True"
    assert node.status.allocatable["cpu"] == "8"


def test_job_controller_creates_the_pod_pinned_to_its_node(
    kube_api_client: client.ApiClient, core: client.CoreV1Api, nodes: list[str], k8s_namespace: str
) -> None:
    node = _ready_node(core, nodes)
    job_name = unique_name("job")
    template = _pod(job_name, {"app": job_name}, node_name=node)
    template["spec"]["restartPolicy"] = "Never"  # type: ignore[index]
    batch = client.BatchV1Api(kube_api_client)
    job = batch.create_namespaced_job(
        k8s_namespace,
        {"metadata": {"name": job_name}, "spec": {"backoffLimit": 0, "template": template}},
    )

    def job_pod() -> client.V1Pod:
        pods = core.list_namespaced_pod(k8s_namespace, label_selector=f"job-name={job_name}").items
        assert len(pods) == 1, f"job controller made {len(pods)} pods so far"
        return pods[0]

    pod = assert_eventually(job_pod, timeout=60)
    assert pod.spec.node_name == node
    owner = pod.metadata.owner_references[0]
    assert (owner.kind, owner.name, owner.uid) == ("Job", job_name, job.metadata.uid)


def test_disruption_controller_computes_pdb_status_and_eviction_is_refused_with_429(
    kube_api_client: client.ApiClient, core: client.CoreV1Api, nodes: list[str], k8s_namespace: str
) -> None:
    node = _ready_node(core, nodes)
    app = unique_name("app")
    pod_names = [f"{app}-{i}" for i in range(2)]
    for name in pod_names:
        core.create_namespaced_pod(k8s_namespace, _pod(name, {"app": app}, node_name=node))
        _mark_running_and_ready(core, k8s_namespace, name)
    custom = client.CustomObjectsApi(kube_api_client)
    pdb_name = unique_name("pdb")
    pdb = {
        "apiVersion": f"{POLICY_GROUP}/{POLICY_VERSION}",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": pdb_name},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": app}}},
    }
    custom.create_namespaced_custom_object(POLICY_GROUP, POLICY_VERSION, k8s_namespace, "poddisruptionbudgets", pdb)

    def computed_status() -> dict[str, object]:
        obj = custom.get_namespaced_custom_object(
            POLICY_GROUP, POLICY_VERSION, k8s_namespace, "poddisruptionbudgets", pdb_name
        )
        status = obj.get("status") or {}
        assert status.get("observedGeneration") == obj["metadata"]["generation"], status
        assert status.get("currentHealthy") == 2, status
        return status

    status = assert_eventually(computed_status, timeout=60)
    assert status["desiredHealthy"] == 2
    assert status["expectedPods"] == 2
    assert status.get("disruptionsAllowed", 0) == 0

    # The client models say policy/v1; the apiVersion inside the body is what 1.20 checks.
    eviction = client.V1Eviction(
        api_version=f"{POLICY_GROUP}/{POLICY_VERSION}",
        kind="Eviction",
        metadata=client.V1ObjectMeta(name=pod_names[0], namespace=k8s_namespace),
    )
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod_eviction(pod_names[0], k8s_namespace, eviction)
    assert refused.value.status == 429
    assert "disruption budget" in str(refused.value.body)
    assert core.read_namespaced_pod(pod_names[0], k8s_namespace).metadata.deletion_timestamp is None


def test_scheduler_skips_the_cordoned_node(
    core: client.CoreV1Api, nodes: list[str], k8s_namespace: str
) -> None:
    pool = {"noderoll.io/test-pool": unique_name("pool")}
    cordoned = _ready_node(core, nodes, pool)
    open_node = _ready_node(core, nodes, pool)
    core.patch_node(cordoned, {"spec": {"unschedulable": True}})
    # Several pods: without the cordon the scheduler would spread them over both nodes.
    names = [unique_name("sched") for _ in range(4)]
    for name in names:
        pod = _pod(name, {"app": "sched"})
        pod["spec"]["nodeSelector"] = pool  # type: ignore[index]
        core.create_namespaced_pod(k8s_namespace, pod)

    def all_scheduled() -> list[str]:
        placed = [core.read_namespaced_pod(n, k8s_namespace).spec.node_name for n in names]
        assert all(placed), f"not all scheduled yet: {placed}"
        return placed

    placed = assert_eventually(all_scheduled, timeout=SCHEDULE_TIMEOUT)
    assert set(placed) == {open_node}


async def test_workflow_and_activity_round_trip_on_the_dev_server(temporal_client: Client) -> None:
    task_queue = new_task_queue()
    attributes = TypedSearchAttributes(
        [
            SearchAttributePair(SearchAttributeKey.for_keyword_list(SEARCH_ATTR_PACKAGE), ["pkg-roundtrip"]),
            SearchAttributePair(SearchAttributeKey.for_keyword(SEARCH_ATTR_NODE), task_queue),
            SearchAttributePair(SearchAttributeKey.for_keyword(SEARCH_ATTR_PHASE), "test"),
        ]
    )
    async with Worker(temporal_client, task_queue=task_queue, workflows=[RoundTripWorkflow], activities=[greet]):
        result = await temporal_client.execute_workflow(
            RoundTripWorkflow.run,
            GreetInput(name="noderoll"),
            id=f"roundtrip-{task_queue}",
            task_queue=task_queue,
            search_attributes=attributes,
        )
    assert result == "hello noderoll from activity test_greet"

    async def listed() -> bool:
        found = [w async for w in temporal_client.list_workflows(f"{SEARCH_ATTR_NODE} = '{task_queue}'")]
        assert [w.id for w in found] == [f"roundtrip-{task_queue}"]
        return True

    # Visibility is eventually consistent; the custom search attribute must be registered for this query.
    await assert_eventually_async(listed, timeout=20)

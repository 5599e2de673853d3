"""Node window activities one by one (ActivityEnvironment) against the real apiserver and fleetsim.

Bounded waits end in non-retryable errors naming what blocks them; waiting activities heartbeat;
a stage Job is adopted, not re-created; cordon ownership is respected.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities import errors, kube
from activities.drain import drain_node, policy_version, wait_protected_pods
from activities.interrupts import run_interrupt
from activities.io import (
    DrainNodeInput,
    NodeInput,
    RunInterruptInput,
    StageJob,
    WaitProtectedPodsInput,
    WriteNodeStateInput,
)
from activities.jobs import job_name
from activities.nodes import cordon_node, patch_node_with_retry, read_node, uncordon_node, write_node_state
from activities.stage_wait import run_stage_job
from api.keys import CORDONED_BY_ANNOTATION, NODE_STATE_ANNOTATION, NODE_STATUS_LABEL, PACKAGE_POD_NAMESPACE
from fleetsim.faults import Fault
from localstack.state import StackInfo
from tests.helpers import assert_eventually, unique_name
from tests.helpers.fleet import running_fleet
from tests.integration.node_window_support import SYSCTL_IMAGE, cordon, wait_pods_running

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


@pytest.fixture
def node(local_stack: StackInfo) -> Iterator[str]:
    kube.configure(local_stack.kubeconfig)
    with running_fleet(local_stack, nodes=1) as fleet:
        yield fleet.node_names[0]


class Beats:
    """An ActivityEnvironment that records heartbeats."""

    def __init__(self) -> None:
        self.details: list[Any] = []
        self.env = ActivityEnvironment()
        self.env.on_heartbeat = lambda *details: self.details.append(details)


def run_pod(core: client.CoreV1Api, namespace: str, node: str, name: str, **spec: Any) -> None:
    labels = spec.pop("labels", {"app": name})
    core.create_namespaced_pod(namespace, {
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "c", "image": "w:1"}], **spec},
    })
    wait_pods_running(core, namespace, f"app={labels['app']}", 1, node)


def test_eviction_speaks_policy_v1beta1_on_kubernetes_1_20(node: str) -> None:
    assert policy_version() == "policy/v1beta1"


def test_drain_timeout_names_blocking_pods_and_pdbs(
    node: str, kube_api_client: ApiClient, k8s_namespace: str,
) -> None:
    core = client.CoreV1Api(kube_api_client)
    run_pod(core, k8s_namespace, node, "solo")
    kube.request_json("POST", f"/apis/policy/v1beta1/namespaces/{k8s_namespace}/poddisruptionbudgets", {
        "apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget", "metadata": {"name": "solo-pdb"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "solo"}}},
    })
    beats = Beats()
    with pytest.raises(ApplicationError) as failure:
        beats.env.run(drain_node, DrainNodeInput(node, timeout_seconds=3, poll_seconds=0.5))
    assert failure.value.type == errors.DRAIN_TIMEOUT and failure.value.non_retryable
    assert f"{k8s_namespace}/solo" in failure.value.message
    assert f"{k8s_namespace}/solo-pdb" in failure.value.message
    assert beats.details, "drain_node did not heartbeat while waiting"
    assert core.read_namespaced_pod("solo", k8s_namespace).metadata.deletion_timestamp is None


def test_drain_skips_daemonset_pods_and_respects_empty_dir_setting(
    node: str, kube_api_client: ApiClient, k8s_namespace: str,
) -> None:
    core = client.CoreV1Api(kube_api_client)
    client.AppsV1Api(kube_api_client).create_namespaced_daemon_set(k8s_namespace, {
        "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": {
            "metadata": {"labels": {"app": "agent"}},
            "spec": {"containers": [{"name": "c", "image": "agent:1"}],
                     "tolerations": [{"operator": "Exists"}]},
        }},
    })
    wait_pods_running(core, k8s_namespace, "app=agent", 1, node)
    run_pod(core, k8s_namespace, node, "scratch", volumes=[{"name": "tmp", "emptyDir": {}}])
    with pytest.raises(ApplicationError) as failure:
        ActivityEnvironment().run(drain_node, DrainNodeInput(node, timeout_seconds=10))
    assert failure.value.type == errors.DRAIN_BLOCKED and f"{k8s_namespace}/scratch" in failure.value.message

    result = ActivityEnvironment().run(drain_node, DrainNodeInput(node, timeout_seconds=20, delete_empty_dir_data=True))
    assert f"{k8s_namespace}/scratch" in result.evicted
    assert not any("agent" in name for name in result.evicted)
    agent_pods = core.list_namespaced_pod(k8s_namespace, label_selector="app=agent").items
    assert len(agent_pods) == 1 and agent_pods[0].metadata.deletion_timestamp is None


def test_protected_pods_wait_is_bounded_and_reported(
    node: str, kube_api_client: ApiClient, k8s_namespace: str,
) -> None:
    core = client.CoreV1Api(kube_api_client)
    run_pod(core, k8s_namespace, node, "train", labels={"app": "train", "workload": "training"})
    beats = Beats()
    selector = {"matchLabels": {"workload": "training"}}
    with pytest.raises(ApplicationError) as failure:
        beats.env.run(wait_protected_pods, WaitProtectedPodsInput(node, [selector], timeout_seconds=2, poll_seconds=0.5))
    assert failure.value.type == errors.PROTECTED_PODS_TIMEOUT
    assert f"{k8s_namespace}/train" in failure.value.message
    assert beats.details and beats.details[0][0]["waiting_for"] == [f"{k8s_namespace}/train"]
    # Other selectors (or none) do not wait at all.
    result = ActivityEnvironment().run(
        wait_protected_pods, WaitProtectedPodsInput(node, [{"matchLabels": {"workload": "other"}}], 2))
    assert result.waited_for == []


def test_cordon_is_owned_and_idempotent(node: str, kube_api_client: ApiClient) -> None:
    core = client.CoreV1Api(kube_api_client)
    env = ActivityEnvironment()
    first = env.run(cordon_node, NodeInput(node))
    again = env.run(cordon_node, NodeInput(node))
    assert first.cordoned_by_noderoll and again.cordoned_by_noderoll and again.was_unschedulable
    assert (core.read_node(node).metadata.annotations or {})[CORDONED_BY_ANNOTATION] == "noderoll"
    assert env.run(uncordon_node, NodeInput(node)).uncordoned
    assert not env.run(uncordon_node, NodeInput(node)).uncordoned
    cordon(core, node, True)  # an operator's cordon
    assert not env.run(cordon_node, NodeInput(node)).cordoned_by_noderoll
    assert not env.run(uncordon_node, NodeInput(node)).uncordoned
    assert core.read_node(node).spec.unschedulable
    cordon(core, node, False)


def test_write_node_state_keeps_other_keys_and_sets_conditions(node: str, kube_api_client: ApiClient) -> None:
    core = client.CoreV1Api(kube_api_client)
    core.patch_node(node, {"metadata": {"labels": {"team": "ml"}, "annotations": {"owner": "ops"}}})
    ActivityEnvironment().run(write_node_state, WriteNodeStateInput(
        node=node, state_annotation='{"packages":{}}', status="in-progress", updating=True, erroring=False))
    got = core.read_node(node)
    assert got.metadata.labels["team"] == "ml" and got.metadata.annotations["owner"] == "ops"
    assert got.metadata.labels[NODE_STATUS_LABEL] == "in-progress"
    assert got.metadata.annotations[NODE_STATE_ANNOTATION] == '{"packages":{}}'
    conditions = {c.type: c.status for c in got.status.conditions}
    assert conditions["noderoll.io/Updating"] == "True" and conditions["Ready"] == "True"
    snapshot = ActivityEnvironment().run(read_node, NodeInput(node))
    assert snapshot.ready and snapshot.boot_id and snapshot.state_annotation == '{"packages":{}}'


def test_missing_node_is_non_retryable(node: str) -> None:
    with pytest.raises(ApplicationError) as failure:
        ActivityEnvironment().run(read_node, NodeInput(unique_name("gone")))
    assert failure.value.type == errors.NODE_NOT_FOUND and failure.value.non_retryable


def test_stage_job_is_adopted_when_the_activity_runs_again(node: str, kube_api_client: ApiClient) -> None:
    job = StageJob(package="sysctl-tuning", version="1.0.0", node=node, mode="apply-check", image=SYSCTL_IMAGE,
                   window=unique_name("w"), tolerations=[{"operator": "Exists"}], timeout_seconds=60)
    beats = Beats()
    first = beats.env.run(run_stage_job, job)
    second = ActivityEnvironment().run(run_stage_job, job)
    assert (first.adopted, second.adopted) == (False, True)
    assert first.job_name == second.job_name and first.exit_code == second.exit_code
    pods = client.CoreV1Api(kube_api_client).list_namespaced_pod(
        PACKAGE_POD_NAMESPACE, label_selector=f"job-name={first.job_name}").items
    assert len(pods) == 1


def test_metadata_patch_retries_a_resource_version_conflict(node: str, kube_api_client: ApiClient) -> None:
    core = client.CoreV1Api(kube_api_client)
    calls: list[str] = []

    def build(current: client.V1Node) -> dict[str, Any]:
        calls.append(current.metadata.resource_version)
        if len(calls) == 1:
            # Someone else writes the node between our read and our patch: ours must get a 409.
            core.patch_node(node, {"metadata": {"labels": {"other-writer": "was-here"}}})
        return {"metadata": {"labels": {NODE_STATUS_LABEL: "waiting"}}}

    patch_node_with_retry(node, build)
    assert len(calls) == 2 and calls[0] != calls[1]
    labels = core.read_node(node).metadata.labels
    assert labels["other-writer"] == "was-here" and labels[NODE_STATUS_LABEL] == "waiting"


def test_reboot_is_confirmed_by_a_new_boot_id_and_never_repeated(node: str, kube_api_client: ApiClient) -> None:
    boot_before = ActivityEnvironment().run(read_node, NodeInput(node)).boot_id
    job = StageJob(package="script-config", version="1.0.0", node=node, mode="interrupt",
                   image="example.local/script-config:1.0.0", window=unique_name("w"),
                   tolerations=[{"operator": "Exists"}], interrupt={"type": "reboot", "services": []},
                   timeout_seconds=60)
    beats = Beats()
    result = beats.env.run(run_interrupt, RunInterruptInput(job, boot_before, reboot_timeout_seconds=30))
    assert result.exit_code == 0 and result.boot_id_after and result.boot_id_after != boot_before
    assert beats.details, "run_interrupt did not heartbeat while the node rebooted"
    # A later attempt (new Job name) for the same window sees the reboot happened: no second reboot.
    again = dataclasses.replace(job, attempt=2)
    second = ActivityEnvironment().run(run_interrupt, RunInterruptInput(again, boot_before, 30))
    assert second.exit_code == 0 and second.boot_id_after == result.boot_id_after
    with pytest.raises(ApiException) as missing:
        client.BatchV1Api(kube_api_client).read_namespaced_job(job_name(again), PACKAGE_POD_NAMESPACE)
    assert missing.value.status == 404


def _stage_and_check(node: str) -> StageJob:
    return StageJob(package="sysctl-tuning", version="1.0.0", node=node, mode="apply", check="apply-check",
                    image=SYSCTL_IMAGE, window=unique_name("w"), tolerations=[{"operator": "Exists"}],
                    timeout_seconds=60)


def test_a_failing_check_in_the_stage_pod_is_reported_as_the_check(
        local_stack: StackInfo, kube_api_client: ApiClient) -> None:
    kube.configure(local_stack.kubeconfig)
    with running_fleet(local_stack, nodes=1) as fleet:
        node = fleet.node_names[0]
        fleet.options.faults.add(Fault("fail-stage", nodes=node, mode="apply-check", exit_code=4))
        result = ActivityEnvironment().run(run_stage_job, _stage_and_check(node))
    assert (result.exit_code, result.mode) == (4, "apply-check") and "injected fault" in result.log_tail
    [pod] = client.CoreV1Api(kube_api_client).list_namespaced_pod(
        PACKAGE_POD_NAMESPACE, label_selector=f"job-name={result.job_name}").items
    [copy, stage] = pod.status.init_container_statuses
    assert copy.name == "package" and copy.state.terminated.exit_code == 0
    assert stage.name == "apply" and stage.state.terminated.exit_code == 0


def test_a_stage_pod_deleted_before_it_finished_fails_the_attempt_and_ends_its_job(
        local_stack: StackInfo, kube_api_client: ApiClient) -> None:
    kube.configure(local_stack.kubeconfig)
    core, batch = client.CoreV1Api(kube_api_client), client.BatchV1Api(kube_api_client)
    with running_fleet(local_stack, nodes=1) as fleet:
        node = fleet.node_names[0]
        fleet.options.faults.add(Fault("hang", nodes=node, mode="apply"))
        job = _stage_and_check(node)
        name = job_name(job)

        def running_pod() -> str:
            pods = core.list_namespaced_pod(PACKAGE_POD_NAMESPACE, label_selector=f"job-name={name}").items
            assert pods and pods[0].status.phase == "Running"
            return str(pods[0].metadata.name)

        with ThreadPoolExecutor(1) as pool:
            deleting = pool.submit(lambda: core.delete_namespaced_pod(
                assert_eventually(running_pod, timeout=30), PACKAGE_POD_NAMESPACE))
            result = ActivityEnvironment().run(run_stage_job, job)
            deleting.result()
    assert result.exit_code == -1 and "deleted before it finished" in result.log_tail

    def job_failed() -> None:
        conditions = batch.read_namespaced_job(name, PACKAGE_POD_NAMESPACE).status.conditions or []
        assert any(c.type == "Failed" and c.status == "True" for c in conditions), conditions

    # The Job stays (the record of the failed attempt) but runs nothing more.
    assert_eventually(job_failed, timeout=30)

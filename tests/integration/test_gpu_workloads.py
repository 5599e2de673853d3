"""GPU workloads on the real stack (issue 44 items 1-3): Temporal dev server, kube-apiserver with its
controllers, fleetsim kubelets (GPU nodes), the policy's `spec.workloads`.

* One node window (the node workflow driven with a fleet's request, as test_node_window.py does) with
  a notice and every rule action against pods with and without GPUs, two of them under
  PodDisruptionBudgets: each pod it evicts or deletes carries `noderoll.io/eviction-at`, and the node
  `noderoll.io/MaintenanceScheduled`, at least `noticeSeconds` before it goes (and not before the time
  the annotation says); `Leave` keeps the agent, `WaitForCompletion` lets a trainer finish and evicts
  the one that does not once its timeout passed (the Draining condition names its rule), `Delete`
  removes a pod whose PDB allows 0, `Evict` goes through the PDB (refused once); the notice is gone
  afterwards. Its history is recorded (tests/histories/node/window-workloads-notice-rules.json).
* A fleet (`noderoll worker` and `noderoll bridge` processes) whose policy skips undrainable nodes: a
  node whose only pod has a PDB that allows 0 is skipped (uncordoned, labelled, not asked again) while
  the rest completes (the batch does not fail: batchThreshold 100, failureThreshold 1); the Package
  lists it in `skippedNodes`, `noderoll status` names it; `noderoll retry --nodes` takes it again once the
  PDB is gone, and the node completes without its label.
The example pod manifest (deploy/examples/workloads/) is accepted by the apiserver (server dry run).
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient
from temporalio.client import Client

import kube
from api import keys
from fleetsim.context import RUN_SECONDS_ANNOTATION
from localstack.state import StackInfo
from planning.node.drain_rules import SKIPPED_DRAIN_TIMEOUT, parse_time
from protocol import names
from protocol.fleet import PackageOrder
from protocol.node_activities import DrainNodeResult
from tests.helpers import assert_eventually, assert_eventually_async, unique_name
from tests.helpers.fleet import running_fleet
from tests.helpers.packages import SERVICE_IMAGE, SYSCTL_IMAGE, WORKLOAD_IMAGE, package_spec
from tests.helpers.podwatch import NoticeWatch
from tests.helpers.processes import NoderollProcesses, noderoll_fixture
from tests.integration.bridge_support import (
    condition,
    create_package,
    create_policy,
    delete_package,
    delete_policy,
    fleet_progress,
    read_package,
)
from tests.integration.node_window_support import (
    Window,
    activity_results,
    close_workflows,
    cordon,
    in_process_worker,
    record_history,
    wait_pods_running,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
ROOT = Path(__file__).resolve().parents[2]
SERVICE_INTERRUPT = {"type": "service", "services": ["systemd-sysctl"]}
GPU = "nvidia.com/gpu"
NOTICE, WAIT = 3, 8
RULES = [
    {"podSelector": {"matchLabels": {"role": "agent"}}, "action": "Leave"},
    {"gpuPods": True, "podSelector": {"matchLabels": {"role": "train"}}, "action": "WaitForCompletion",
     "timeoutSeconds": WAIT},
    {"gpuPods": False, "podSelector": {"matchLabels": {"role": "batch"}}, "action": "Delete"},
    {"gpuPods": True, "action": "Evict"},
]
TIMEOUT = 180.0

run = noderoll_fixture(retry_backoff_seconds=1)


def a_pod(name: str, node: str, role: str = "", gpus: int = 0, run_seconds: int = 0) -> dict[str, Any]:
    """A bare pod pinned to `node` (fleetsim runs it): with GPUs, a role label, ending after `run_seconds`."""
    container: dict[str, Any] = {"name": "c", "image": WORKLOAD_IMAGE}
    if gpus:
        container["resources"] = {"limits": {GPU: str(gpus)}}
    return {"metadata": {"name": name, "labels": {"role": role} if role else {},
                         "annotations": {RUN_SECONDS_ANNOTATION: str(run_seconds)} if run_seconds else {}},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                     "restartPolicy": "Never" if run_seconds or role == "train" else "Always",
                     "containers": [container]}}


def a_pdb(namespace: str, name: str, labels: dict[str, str]) -> dict[str, Any]:
    """A PodDisruptionBudget minAvailable 1 (Kubernetes 1.20 serves policy/v1beta1 only)."""
    return kube.request_json("POST", f"/apis/policy/v1beta1/namespaces/{namespace}/poddisruptionbudgets", {
        "apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}}})


def wait_pdb(namespace: str, name: str, allowed: int, expected: int) -> None:
    def computed() -> bool:
        status = kube.request_json("GET", f"/apis/policy/v1beta1/namespaces/{namespace}/poddisruptionbudgets/{name}")
        status = status.get("status") or {}
        assert (status.get("disruptionsAllowed"), status.get("expectedPods")) == (allowed, expected), status
        return True

    assert_eventually(computed, timeout=30)


def gpu_deployment(api: ApiClient, namespace: str, node: str, other: str) -> None:
    """Two GPU inference replicas on `node` (the other node cordoned meanwhile) under a PDB minAvailable 1."""
    core = client.CoreV1Api(api)
    labels = {"role": "infer"}
    cordon(core, other, True)
    client.AppsV1Api(api).create_namespaced_deployment(namespace, {
        "metadata": {"name": "infer"},
        "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels}, "spec": {
                     "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": WORKLOAD_IMAGE, "resources": {"limits": {GPU: "1"}}}]}}},
    })
    wait_pods_running(core, namespace, "role=infer", 2, node)
    cordon(core, other, False)
    a_pdb(namespace, "infer", labels)
    wait_pdb(namespace, "infer", 1, 2)


@pytest.fixture
def fleet(local_stack: StackInfo) -> Any:
    with running_fleet(local_stack, nodes=2) as running:
        yield running


@pytest.fixture
async def window(temporal_client: Client, kube_api_client: ApiClient, fleet: Any) -> AsyncIterator[Window]:
    w = Window(temporal_client, kube_api_client, fleet.node_names[0])
    await w.start_collector()
    yield w
    w.close()
    assert w.collector is not None
    await close_workflows(temporal_client, [f"node/{w.node}", w.collector.id])


def going_after_notice(watch: NoticeWatch, pod: str) -> float:
    """Seconds between the pod's notice and its eviction or deletion (it went not before the time announced)."""
    seen = watch.pods[pod]
    assert seen.notice_at is not None and seen.going_at is not None, (pod, seen)
    announced = parse_time(seen.notice)
    assert announced is not None and seen.going_at >= announced, (pod, seen)
    return (seen.going_at - seen.notice_at).total_seconds()


async def test_a_window_gives_notice_then_drains_each_pod_by_its_rule(
    window: Window, kube_api_client: ApiClient, local_stack: StackInfo, fleet: Any, k8s_namespace: str,
) -> None:
    kube.configure(local_stack.kubeconfig)
    node, ns, core = window.node, k8s_namespace, window.core
    gpu_deployment(kube_api_client, ns, node, fleet.node_names[1])
    for pod in (a_pod("agent", node, "agent"), a_pod("batch", node, "batch"), a_pod("web", node),
                a_pod("train-long", node, "train", gpus=2)):
        core.create_namespaced_pod(ns, pod)
    a_pdb(ns, "batch", {"role": "batch"})  # allows 0: only a Delete gets the pod off the node
    wait_pdb(ns, "batch", 0, 1)
    # Ends on its own during the WaitForCompletion wait (the window needs several seconds to get there).
    core.create_namespaced_pod(ns, a_pod("train-short", node, "train", gpus=1, run_seconds=NOTICE + 6))
    wait_pods_running(core, ns, "role=train", 2, node)
    async with in_process_worker(window.temporal, local_stack.kubeconfig, window.task_queue):
        with NoticeWatch(kube_api_client, ns, node).running() as watch:
            await window.window(PackageOrder("sysctl-tuning", package_spec(SYSCTL_IMAGE, interrupt=SERVICE_INTERRUPT), 1),
                                workloads={"noticeSeconds": NOTICE, "rules": RULES})

            async def answered() -> Any:
                got = await window.results()
                assert got, "no answer yet"
                return got

            [result] = await assert_eventually_async(answered, timeout=TIMEOUT)
            # The close took the notice back: the node's condition first (it is the watch's last word).
            assert_eventually(lambda: watch.scheduled and watch.scheduled[-1][1] == "absent", timeout=30)
    assert (result.state, result.disrupted) == ("complete", True), result
    [drain] = await activity_results(window.temporal, node, "drain_node", DrainNodeResult)
    infer = sorted(p for p in watch.pods if p.startswith("infer-") and watch.pods[p].node == node)
    margins = {p: going_after_notice(watch, p) for p in ["batch", "web", "train-long", *infer]}
    print(f"seconds between each pod's notice and its eviction (noticeSeconds {NOTICE}): {margins}; drain: {drain}")
    assert all(m >= NOTICE for m in margins.values()), margins
    scheduled = watch.scheduled_at()
    assert scheduled is not None and all((watch.pods[p].going_at - scheduled).total_seconds() >= NOTICE  # type: ignore[operator]
                                         for p in margins)
    assert any(status == "True" and f"node window of {window.collector.id}" in message  # type: ignore[union-attr]
               for _, status, _, message in watch.scheduled)
    # Leave: never told, never evicted, still running there after the window.
    agent = core.read_namespaced_pod("agent", ns)
    assert watch.pods["agent"].notice_at is None and agent.status.phase == "Running" and not agent.metadata.deletion_timestamp
    # WaitForCompletion: the short trainer finished on its own (told, never evicted); the long one was
    # evicted once its timeout passed, with the Draining condition naming the rule meanwhile.
    short = core.read_namespaced_pod("train-short", ns)
    assert short.status.phase == "Succeeded" and watch.pods["train-short"].going_at is None
    assert keys.EVICTION_AT_ANNOTATION not in (short.metadata.annotations or {})  # taken back by the close
    long_at, web_at = parse_time(watch.pods["train-long"].notice), parse_time(watch.pods["web"].notice)
    assert long_at is not None and web_at is not None and (long_at - web_at).total_seconds() == WAIT
    assert any(reason == "WaitingForCompletion" and f"{ns}/train-long (rule 2 (WaitForCompletion, {WAIT}s))" in message
               for _, _, reason, message in watch.draining), watch.draining
    # Delete: through its PDB that allows 0; Evict: through the Eviction API, refused at least once by the PDB.
    assert drain.deleted == [f"{ns}/batch"] and f"{ns}/batch" not in drain.evicted
    assert sorted(drain.evicted) == sorted([f"{ns}/train-long", f"{ns}/web", *(f"{ns}/{p}" for p in infer)])
    assert drain.refused >= 1 and len(infer) == 2
    assert keys.CONDITION_MAINTENANCE_SCHEDULED not in [c.type for c in window.node_object().status.conditions]
    await record_history(window.temporal, node, "window-workloads-notice-rules")


def journal(fleet: Any, node: str, package: str) -> list[Path]:
    """The agent's step journals of `package` on `node`'s sandbox host (one per version that ran a step)."""
    return sorted((fleet.sandbox(node) / "var" / "lib" / "noderoll" / package).glob("*/history.jsonl"))


async def listings(temporal: Client, policy: str) -> tuple[int, bool, bool]:
    """The fleet's `list_fleet_nodes` completed so far; whether a workflow task took the last one's result;
    whether that task (or a later one) asked any node for a window (`request_windows`)."""
    history = await temporal.get_workflow_handle(names.fleet_workflow_id(policy)).fetch_history()
    kinds: dict[int, str] = {}
    count, last = 0, -1
    for index, event in enumerate(history.events):
        if event.HasField("activity_task_scheduled_event_attributes"):
            kinds[event.event_id] = event.activity_task_scheduled_event_attributes.activity_type.name
        elif event.HasField("activity_task_completed_event_attributes"):
            if kinds.get(event.activity_task_completed_event_attributes.scheduled_event_id) == "list_fleet_nodes":
                count, last = count + 1, index
    later = history.events[last + 1:] if last >= 0 else []
    settled = any(e.HasField("workflow_task_completed_event_attributes") for e in later)
    asked = any(e.HasField("activity_task_scheduled_event_attributes")
                and e.activity_task_scheduled_event_attributes.activity_type.name == "request_windows" for e in later)
    return count, settled, asked


async def test_an_undrainable_node_is_skipped_while_the_rest_completes_and_retry_takes_it_again(
    run: NoderollProcesses, local_stack: StackInfo, kube_api_client: ApiClient, temporal_client: Client,
    k8s_namespace: str,
) -> None:
    kube.configure(local_stack.kubeconfig)
    label, policy, package = unique_name("skip"), unique_name("pskip"), unique_name("svc")
    core = client.CoreV1Api(kube_api_client)
    with running_fleet(local_stack, nodes=3, labels={"gpu-workloads": label}) as fleet:
        stuck = fleet.node_names[0]
        core.create_namespaced_pod(k8s_namespace, a_pod("stuck", stuck, "stuck"))
        a_pdb(k8s_namespace, "stuck", {"role": "stuck"})
        wait_pdb(k8s_namespace, "stuck", 0, 1)
        try:
            create_policy(kube_api_client, run, policy, {
                "default": {"budget": {"count": 3}, "strategy": {
                    "type": "fixed", "initialBatch": 3, "batchThreshold": 100, "failureThreshold": 1,
                    "safetyLimit": 100}},
                "workloads": {"noticeSeconds": 2, "onDrainTimeout": "Skip"}})
            create_package(kube_api_client, run.package(package, package_spec(
                SERVICE_IMAGE, policy=policy, labels={"gpu-workloads": label}, drain={"timeoutSeconds": 3},
                interrupt={"type": "service", "services": ["containerd"]})))

            def skipped() -> dict[str, Any]:
                status = read_package(kube_api_client, package).get("status") or {}
                assert status.get("phase") == "Blocked", status.get("message")
                return status

            status = assert_eventually(skipped, timeout=TIMEOUT, interval=1)
            assert [n["node"] for n in status["skippedNodes"]] == [stuck] and status["skippedNodeCount"] == 1
            assert "drain timed out, node skipped" in status["skippedNodes"][0]["reason"]
            assert (status["nodes"]["complete"], status["nodes"]["blocked"], status["nodes"]["erroring"]) == (2, 1, 0)
            report = await fleet_progress(temporal_client, policy)
            # Neither success nor failure: the batch passed, the fleet did not halt; asked once only.
            assert report.phase.value == "Complete" and report.nodes[stuck].windows == 1, report
            node = core.read_node(stuck)
            assert node.metadata.labels[keys.SKIPPED_LABEL] == SKIPPED_DRAIN_TIMEOUT
            assert node.metadata.labels[keys.NODE_STATUS_LABEL] == "blocked"
            assert not node.spec.unschedulable and keys.CORDONED_BY_ANNOTATION not in (node.metadata.annotations or {})
            assert journal(fleet, stuck, package) == [] and journal(fleet, fleet.node_names[1], package)  # ran nothing
            pod = core.read_namespaced_pod("stuck", k8s_namespace)
            assert pod.status.phase == "Running" and keys.EVICTION_AT_ANNOTATION not in (pod.metadata.annotations or {})
            events = core.list_namespaced_event("default", field_selector=f"involvedObject.name={stuck}").items
            assert any(e.reason == "DrainSkipped" and e.type == "Warning" for e in events)
            assert f"skipped: 1 node(s) whose drain timed out: {stuck}" in run.cli("status").stdout
            # A change of another node makes the fleet list its nodes again (the skipped node looks changed
            # to it: its own window wrote its labels and state): it still does not ask the node again.
            listed = (await listings(temporal_client, policy))[0]
            core.patch_node(fleet.node_names[1], {"metadata": {"labels": {"poke": "1"}}})

            async def listed_again() -> tuple[int, bool]:
                count, settled, asked = await listings(temporal_client, policy)
                assert count > listed and settled, (count, settled)
                return count, asked

            _, asked = await assert_eventually_async(listed_again, timeout=60)
            assert not asked and (await fleet_progress(temporal_client, policy)).nodes[stuck].windows == 1

            kube.request_json("DELETE", f"/apis/policy/v1beta1/namespaces/{k8s_namespace}/poddisruptionbudgets/stuck")
            run.cli("retry", "--fleet", policy, "--nodes", stuck)  # the spelling (alias of --node)

            def ready() -> dict[str, Any]:
                obj = read_package(kube_api_client, package)
                assert condition(obj, "Ready")["status"] == "True", obj.get("status")
                return dict(obj["status"])

            status = assert_eventually(ready, timeout=TIMEOUT, interval=1)
            assert "skippedNodes" not in status and status["nodes"]["complete"] == 3
            node = core.read_node(stuck)
            assert keys.SKIPPED_LABEL not in node.metadata.labels and node.metadata.labels[keys.NODE_STATUS_LABEL] == "complete"
            assert (await fleet_progress(temporal_client, policy)).nodes[stuck].windows == 2 and journal(fleet, stuck, package)
        finally:
            delete_package(kube_api_client, package)
            delete_policy(kube_api_client, policy)


def test_the_example_pod_is_accepted_by_the_apiserver(local_stack: StackInfo, k8s_namespace: str) -> None:
    example = ROOT / "deploy" / "examples" / "workloads" / "checkpoint-on-notice.yaml"
    result = subprocess.run(["kubectl", "--kubeconfig", str(local_stack.kubeconfig), "apply", "-n", k8s_namespace,
                             "--dry-run=server", "-f", str(example)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "(server dry run)" in result.stdout, result.stderr

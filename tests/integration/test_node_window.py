"""Node windows on the real stack: Temporal dev server, kube-apiserver + controllers, fleetsim kubelets.

The node workflow is driven directly (signal-with-start `window`, as a fleet drives it); a collector
workflow stands in for the fleet and gathers the `window_result` answers.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient
from temporalio.client import Client

import kube
from activities.pod_create import pods_per_window
from api.keys import (
    CONDITION_ERRORING,
    CONDITION_UPDATING,
    CORDONED_BY_ANNOTATION,
    NODE_STATE_ANNOTATION,
    NODE_STATUS_LABEL,
)
from fleetsim.context import RUN_SECONDS_ANNOTATION
from fleetsim.faults import Fault
from protocol.fleet import PackageOrder
from protocol.node_activities import DrainNodeResult
from tests.helpers import assert_eventually, assert_eventually_async
from tests.helpers.fleet import running_fleet
from tests.helpers.packages import KMOD_IMAGE, SCRIPT_IMAGE, SYSCTL_IMAGE, WORKLOAD_IMAGE, package_spec
from tests.integration.node_window_support import (
    HealthyPodsWatch,
    Window,
    activity_attempts,
    activity_results,
    close_workflows,
    cordon,
    fast_settings,
    history_events,
    in_process_worker,
    record_history,
    wait_pods_running,
)
from tests.workflows.node_harness import Answer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
SERVICE_INTERRUPT = {"type": "service", "services": ["systemd-sysctl"]}


@pytest.fixture
def fleet(local_stack: Any) -> Any:
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


async def wait_results(w: Window, count: int, timeout: float = 60) -> list[Answer]:
    async def enough() -> list[Answer]:
        got = await w.results()
        assert len(got) >= count, got
        return got

    return await assert_eventually_async(enough, timeout=timeout)


def create_workload(api: ApiClient, namespace: str, node: str, other: str) -> str:
    """Two replicas on `node` (the other node cordoned meanwhile) and a PDB minAvailable 1; returns the selector."""
    core = client.CoreV1Api(api)
    labels = {"app": "trainer"}
    cordon(core, other, True)
    client.AppsV1Api(api).create_namespaced_deployment(namespace, {
        "metadata": {"name": "trainer"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "c", "image": WORKLOAD_IMAGE}],
            }},
        },
    })
    wait_pods_running(core, namespace, "app=trainer", 2, node)
    cordon(core, other, False)
    # Kubernetes 1.20 serves PDBs as policy/v1beta1 only (kubectl 1.32 cannot create them).
    kube.request_json("POST", f"/apis/policy/v1beta1/namespaces/{namespace}/poddisruptionbudgets", {
        "apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget", "metadata": {"name": "trainer"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}},
    })
    return "app=trainer"


async def test_sysctl_window_drains_through_a_pdb_without_violating_it(
    window: Window, kube_api_client: ApiClient, local_stack: Any, fleet: Any, k8s_namespace: str,
) -> None:
    kube.configure(local_stack.kubeconfig)
    selector = create_workload(kube_api_client, k8s_namespace, window.node, fleet.node_names[1])

    async def pdb_ready() -> bool:
        pdb = kube.request_json("GET", f"/apis/policy/v1beta1/namespaces/{k8s_namespace}/poddisruptionbudgets/trainer")
        assert (pdb.get("status") or {}).get("disruptionsAllowed") == 1, pdb.get("status")
        return True

    await assert_eventually_async(pdb_ready, timeout=30)
    async with in_process_worker(window.temporal, local_stack.kubeconfig, window.task_queue):
        with HealthyPodsWatch(kube_api_client, k8s_namespace, selector) as watch:
            await window.request("sysctl-tuning", package_spec(SYSCTL_IMAGE, interrupt=SERVICE_INTERRUPT))
            [result] = await wait_results(window, 1)
        assert (result.state, result.disrupted) == ("complete", True), result
        # The PDB held throughout: never fewer healthy trainer pods than minAvailable.
        assert watch.samples > 10 and watch.minimum is not None and watch.minimum >= 1
        pods = window.core.list_namespaced_pod(k8s_namespace, label_selector=selector).items
        assert all(p.spec.node_name != window.node for p in pods if p.metadata.deletion_timestamp is None)
        node = window.node_object()
        assert not node.spec.unschedulable and CORDONED_BY_ANNOTATION not in (node.metadata.annotations or {})
        assert node.metadata.labels[NODE_STATUS_LABEL] == "complete"
        assert window.condition(CONDITION_UPDATING) == "False" and window.condition(CONDITION_ERRORING) == "False"
        entry = window.state().packages["sysctl-tuning"]
        assert (entry.version, entry.state, entry.stage) == ("1.0.0", "complete", "post-interrupt")
        assert window.modes_run() == sorted(["apply", "apply-check", "config", "config-check", "interrupt",
                                             "post-interrupt", "post-interrupt-check"])
        # Both trainer pods were evicted, and the apiserver refused at least one eviction (HTTP 429)
        # until the first replacement was Ready elsewhere: the PDB was enforced, not bypassed.
        [drain] = await activity_results(window.temporal, window.node, "drain_node", DrainNodeResult)
        assert len([p for p in drain.evicted if p.startswith(f"{k8s_namespace}/trainer-")]) == 2, drain
        assert drain.refused >= 1, drain
        print(f"drain: {drain}")
        await record_history(window.temporal, window.node, "window-drain-service-interrupt-short-calls-local")
        print(f"history events of a sysctl window with drain and service interrupt: "
              f"{await history_events(window.temporal, window.node)}")


async def test_protected_pods_delay_the_drain_until_they_finish(
    window: Window, local_stack: Any, k8s_namespace: str,
) -> None:
    window.core.create_namespaced_pod(k8s_namespace, {
        "metadata": {"name": "training-step", "labels": {"workload": "training"},
                     "annotations": {RUN_SECONDS_ANNOTATION: "6"}},
        "spec": {"nodeName": window.node, "restartPolicy": "Never",
                 "containers": [{"name": "c", "image": WORKLOAD_IMAGE}]},
    })
    wait_pods_running(window.core, k8s_namespace, "workload=training", 1, window.node)
    spec = package_spec(SYSCTL_IMAGE, interrupt=SERVICE_INTERRUPT,
                        podNonInterruptLabels={"matchLabels": {"workload": "training"}})
    async with in_process_worker(window.temporal, local_stack.kubeconfig, window.task_queue):
        await window.request("sysctl-tuning", spec)

        async def cordoned_and_waiting() -> bool:
            assert window.node_object().spec.unschedulable
            pod = window.core.read_namespaced_pod("training-step", k8s_namespace)
            assert pod.status.phase == "Running"
            assert window.stage_pods() == []
            return True

        await assert_eventually_async(cordoned_and_waiting, timeout=20)
        [result] = await wait_results(window, 1)
    assert result.state == "complete"
    finished = window.core.read_namespaced_pod("training-step", k8s_namespace)
    # It finished on its own (Succeeded), was never evicted, and every stage started after it ended.
    assert finished.status.phase == "Succeeded"
    ended = finished.status.container_statuses[0].state.terminated.finished_at
    first_job = min(j.metadata.creation_timestamp for j in window.stage_pods())
    assert first_job >= ended.replace(microsecond=0)
    events = window.core.list_namespaced_event("default", field_selector=f"involvedObject.name={window.node}")
    assert any(e.reason == "WaitingForProtectedPods" for e in events.items)


async def test_failing_stage_is_retried_then_erroring_then_the_next_request_completes(
    window: Window, local_stack: Any, fleet: Any,
) -> None:
    # Fails every apply of this node twice (both attempts), then the fault is spent.
    fleet.options.faults.add(Fault("fail-stage", nodes=window.node, mode="apply", exit_code=7, times=2))
    async with in_process_worker(window.temporal, local_stack.kubeconfig, window.task_queue):
        await window.request("sysctl-tuning", package_spec(SYSCTL_IMAGE))
        [result] = await wait_results(window, 1)
        assert (result.state, result.stage) == ("erroring", "apply"), result
        assert "injected fault" in result.log_tail
        entry = window.state().packages["sysctl-tuning"]
        assert (entry.state, entry.stage, entry.attempts) == ("erroring", "apply", 2)
        assert "exit code 7" in (entry.last_error or "") and "injected fault" in (entry.last_error or "")
        node = window.node_object()
        assert node.metadata.labels[NODE_STATUS_LABEL] == "erroring"
        assert window.condition(CONDITION_ERRORING) == "True"
        # No interrupt: never cordoned, so nothing to leave cordoned.
        assert not node.spec.unschedulable
        assert window.pod_modes() == ["apply", "apply"]  # one pod per attempt (its check never ran)
        # The fleet's `retry` asks again: a new request, a new window that resumes at the failed stage.
        await window.request("sysctl-tuning", package_spec(SYSCTL_IMAGE))
        results = await wait_results(window, 2)
    assert results[1].state == "complete"
    assert window.state().packages["sysctl-tuning"].state == "complete"
    assert window.condition(CONDITION_ERRORING) == "False"
    await record_history(window.temporal, window.node, "window-resumes-at-the-failed-stage-short-calls-local")


async def test_reboot_package_reboots_checks_and_uncordons(
    window: Window, local_stack: Any, fleet: Any,
) -> None:
    boot_before = window.node_object().status.node_info.boot_id
    not_ready_seen: list[bool] = []
    async with in_process_worker(window.temporal, local_stack.kubeconfig, window.task_queue):
        await window.request("script-config", package_spec(SCRIPT_IMAGE, interrupt={"type": "reboot"}))

        async def went_down() -> bool:
            ready = window.condition("Ready")
            if ready == "False":
                not_ready_seen.append(True)
            assert not_ready_seen or (await window.results())
            return True

        await assert_eventually_async(went_down, timeout=60, interval=0.1)
        [result] = await wait_results(window, 1)
    assert result.state == "complete", result
    assert not_ready_seen, "the node never went NotReady"
    node = window.node_object()
    assert node.status.node_info.boot_id != boot_before
    assert node.status.node_info.boot_id == fleet.boot_id(window.node)
    assert not node.spec.unschedulable
    assert window.modes_run() == sorted(["apply", "apply-check", "config", "config-check", "interrupt",
                                         "post-interrupt", "post-interrupt-check"])
    assert len(window.stage_pods()) == pods_per_window(interrupt=True)  # ADR 0016: stages, interrupt, post
    # Each pod's activity ended on its first attempt (a retry would adopt the pod and hide a failure).
    assert await activity_attempts(window.temporal, window.node, "run_stage_pod") == [1, 1]
    # Once the outcome was written, the window deleted its stage pods.
    assert_eventually(lambda: window.live_pods() == [], timeout=30)
    entry = window.state().packages["script-config"]
    assert (entry.stage, entry.state) == ("post-interrupt", "complete")
    await record_history(window.temporal, window.node, "window-reboot-short-calls-local")


async def test_two_pending_packages_share_one_merged_interrupt(
    window: Window, local_stack: Any,
) -> None:
    await window.window(PackageOrder("sysctl-tuning", package_spec(SYSCTL_IMAGE, interrupt=SERVICE_INTERRUPT), 1),
                        PackageOrder("kmod-blocklist", package_spec(
                            KMOD_IMAGE, interrupt={"type": "service", "services": ["kmod"]}), 1))
    async with in_process_worker(window.temporal, local_stack.kubeconfig, window.task_queue):
        results = await wait_results(window, 2)
    assert sorted((r.package, r.state) for r in results) == [("kmod-blocklist", "complete"),
                                                            ("sysctl-tuning", "complete")]
    # One pod per phase (ADR 0016): both Packages' stages in one pod (each its copy container and its
    # agent containers, named by index), the merged interrupt in a pod of its own, then the checks after it.
    before, interrupt, after = window.stage_pods()
    packages = json.loads(before.metadata.annotations["noderoll.io/packages"])
    assert sorted(packages) == ["kmod-blocklist", "sysctl-tuning"]
    names = [c.name for c in [*before.spec.init_containers, *before.spec.containers]]
    assert names[0] == "p0-package" and "p1-package" in names and names[-1].startswith("p1-")
    [container] = interrupt.spec.containers
    assert container.name == "interrupt" and not interrupt.spec.init_containers
    env = {e.name: e.value for e in container.env}
    assert json.loads(env["NODEROLL_INTERRUPT"]) == {"type": "service", "services": ["kmod", "systemd-sysctl"]}
    assert json.loads(after.metadata.annotations["noderoll.io/packages"]) == packages
    await record_history(window.temporal, window.node, "window-two-packages-short-calls-local")


async def test_node_cordoned_by_someone_else_stays_cordoned(window: Window, local_stack: Any) -> None:
    cordon(window.core, window.node, True)
    async with in_process_worker(window.temporal, local_stack.kubeconfig, window.task_queue):
        await window.request("sysctl-tuning", package_spec(SYSCTL_IMAGE, interrupt=SERVICE_INTERRUPT))
        [result] = await wait_results(window, 1)
    assert result.state == "complete"
    node = window.node_object()
    assert node.spec.unschedulable
    assert CORDONED_BY_ANNOTATION not in (node.metadata.annotations or {})
    cordon(window.core, window.node, False)


async def test_one_package_without_interrupt_needs_no_cordon_and_few_events(
    window: Window, local_stack: Any,
) -> None:
    async with in_process_worker(window.temporal, local_stack.kubeconfig, window.task_queue):
        await window.request("sysctl-tuning", package_spec(SYSCTL_IMAGE), fast_settings(window.node))
        [result] = await wait_results(window, 1)
    assert (result.state, result.disrupted) == ("complete", False)
    assert window.modes_run() == sorted(["apply", "apply-check", "config", "config-check"])
    assert len(window.stage_pods()) == pods_per_window(interrupt=False)
    events = await history_events(window.temporal, window.node)
    print(f"history events of one package without interrupt: {events}")
    assert events < 100


async def test_reboot_that_never_returns_ends_erroring_and_keeps_the_node_cordoned(
    window: Window, local_stack: Any, fleet: Any,
) -> None:
    fleet.options.faults.add(Fault("reboot-never-returns", nodes=window.node))
    settings = fast_settings(window.node, stage_attempts=1, reboot_timeout_seconds=5)
    async with in_process_worker(window.temporal, local_stack.kubeconfig, window.task_queue):
        await window.request("script-config", package_spec(SCRIPT_IMAGE, interrupt={"type": "reboot"}), settings)
        [result] = await wait_results(window, 1)
    assert (result.state, result.stage) == ("erroring", "interrupt"), result
    assert "InterruptTimeout" in result.log_tail
    entry = window.state().packages["script-config"]
    assert (entry.stage, entry.state) == ("interrupt", "erroring")
    # Drained and interrupted: the host may be half-changed, so noderoll keeps its cordon.
    node = window.node_object()
    assert node.spec.unschedulable and node.metadata.annotations[CORDONED_BY_ANNOTATION] == "noderoll"
    events = window.core.list_namespaced_event("default", field_selector=f"involvedObject.name={window.node}")
    assert any(e.reason == "LeftCordoned" for e in events.items)


async def test_unreadable_state_holds_the_request_and_runs_nothing(window: Window, local_stack: Any) -> None:
    """A state annotation that cannot be read at the window's start: the request is answered `blocked`
    with the reason, no stage runs, the annotation is left as it was."""
    window.core.patch_node(window.node, {"metadata": {"annotations": {NODE_STATE_ANNOTATION: "{garbage"}}})
    try:
        async with in_process_worker(window.temporal, local_stack.kubeconfig, window.task_queue):
            await window.request("sysctl-tuning", package_spec(SYSCTL_IMAGE))
            [result] = await wait_results(window, 1)
        assert result.state == "blocked" and "noderoll.io/state unreadable" in result.message, result
        assert window.stage_pods() == []
        assert (window.node_object().metadata.annotations or {})[NODE_STATE_ANNOTATION] == "{garbage"
        await record_history(window.temporal, window.node, "window-unreadable-state-held-short-calls-local")
    finally:
        window.core.patch_node(window.node, {"metadata": {"annotations": {NODE_STATE_ANNOTATION: None}}})

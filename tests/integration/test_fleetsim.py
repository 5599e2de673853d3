"""fleetsim on the real control plane: pods run, deletions honour grace, stage pods run the agent, reboots."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.rest import ApiException

from api.keys import PACKAGE_POD_NAMESPACE
from fleetsim.faults import Fault
from tests.helpers import assert_eventually, unique_name
from tests.helpers.fleet import running_fleet
from tests.helpers.packages import SERVICE_IMAGE, SYSCTL_IMAGE, WORKLOAD_IMAGE, example_image

pytestmark = pytest.mark.integration
# Stage pods (and their ConfigMaps) created by the running test, deleted after it.
_created: list[str] = []


@pytest.fixture(autouse=True)
def _delete_stage_pods(kube_api_client: ApiClient) -> Iterator[None]:
    yield
    core = client.CoreV1Api(kube_api_client)
    while _created:
        name = _created.pop()
        for delete in (core.delete_namespaced_pod, core.delete_namespaced_config_map):
            try:
                delete(name, PACKAGE_POD_NAMESPACE)
            except ApiException as err:
                if err.status != 404:
                    raise


def stage_pod(name: str, node: str, image: str, mode: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """A stage pod exactly as "The stage pod contract" (docs/architecture.md) describes it."""
    package, version = image.rsplit("/", 1)[-1].split(":")
    labels = {"noderoll.io/package": package, "noderoll.io/node": node, "noderoll.io/mode": mode,
              "noderoll.io/component": "stage"}
    contract_env = {"NODEROLL_PACKAGE": package, "NODEROLL_VERSION": version, "NODEROLL_NODE": node,
                    "NODEROLL_MODE": mode, "NODEROLL_ROOT": "/host", "NODEROLL_CONFIG_DIR": "/noderoll-config",
                    **(env or {})}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": PACKAGE_POD_NAMESPACE, "labels": labels,
                     "annotations": {"noderoll.io/package-version": version}},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "tolerations": [{"operator": "Exists"}],
            "containers": [{
                "name": "agent", "image": image, "args": [mode],
                "terminationMessagePolicy": "FallbackToLogsOnError",
                "env": [{"name": k, "value": v} for k, v in contract_env.items()],
                "volumeMounts": [{"name": "host", "mountPath": "/host"},
                                 {"name": "config", "mountPath": "/noderoll-config"}],
            }],
            "volumes": [{"name": "host", "hostPath": {"path": "/"}},
                        {"name": "config", "configMap": {"name": name}}],
        },
    }


def run_stage(api: ApiClient, pod: dict[str, Any], config: dict[str, str] | None = None) -> client.V1Pod:
    """Create the ConfigMap and the stage pod, wait for the pod to finish, return it."""
    core = client.CoreV1Api(api)
    name = pod["metadata"]["name"]
    _created.append(name)
    core.create_namespaced_config_map(PACKAGE_POD_NAMESPACE, {"metadata": {"name": name}, "data": config or {}})
    core.create_namespaced_pod(PACKAGE_POD_NAMESPACE, pod)

    def finished() -> client.V1Pod:
        found = core.read_namespaced_pod(name, PACKAGE_POD_NAMESPACE)
        assert found.status.phase in ("Succeeded", "Failed"), found.status.phase
        return found

    return assert_eventually(finished, timeout=60)


def terminated(pod: client.V1Pod) -> client.V1ContainerStateTerminated:
    return pod.status.container_statuses[0].state.terminated


def ready_condition(api: ApiClient, node: str) -> client.V1NodeCondition:
    conditions = client.CoreV1Api(api).read_node_status(node).status.conditions
    return next(c for c in conditions if c.type == "Ready")


def test_pod_bound_to_simulated_node_runs(local_stack: Any, kube_api_client: ApiClient, k8s_namespace: str) -> None:
    core = client.CoreV1Api(kube_api_client)
    with running_fleet(local_stack, nodes=2) as fleet:
        node = fleet.node_names[1]
        assert ready_condition(kube_api_client, node).status == "True"
        pod = {"metadata": {"name": "web"},
               "spec": {"nodeName": node, "containers": [{"name": "c", "image": WORKLOAD_IMAGE}]}}
        core.create_namespaced_pod(k8s_namespace, pod)

        def running() -> client.V1Pod:
            got = core.read_namespaced_pod("web", k8s_namespace)
            assert got.status.phase == "Running" and got.status.container_statuses[0].ready
            return got

        got = assert_eventually(running)
        assert got.status.host_ip and got.status.pod_ip


def test_deletion_honours_grace_period(local_stack: Any, kube_api_client: ApiClient, k8s_namespace: str) -> None:
    core = client.CoreV1Api(kube_api_client)
    with running_fleet(local_stack, nodes=1) as fleet:
        spec = {"nodeName": fleet.node_names[0], "terminationGracePeriodSeconds": 2,
                "containers": [{"name": "c", "image": WORKLOAD_IMAGE}]}
        core.create_namespaced_pod(k8s_namespace, {"metadata": {"name": "graceful"}, "spec": spec})
        assert_eventually(lambda: core.read_namespaced_pod("graceful", k8s_namespace).status.phase == "Running")
        deleted_at = time.monotonic()
        core.delete_namespaced_pod("graceful", k8s_namespace)
        assert core.read_namespaced_pod("graceful", k8s_namespace).metadata.deletion_timestamp is not None

        def gone() -> float:
            with pytest.raises(ApiException) as err:
                core.read_namespaced_pod("graceful", k8s_namespace)
            assert err.value.status == 404
            return time.monotonic() - deleted_at

        elapsed = assert_eventually(gone, retry_on=(AssertionError, pytest.fail.Exception))
        assert 1.8 <= elapsed < 5.0


def test_stage_pod_runs_sysctl_apply_and_check(local_stack: Any, kube_api_client: ApiClient) -> None:
    config = {"sysctl.conf": "vm.max_map_count = 524288\n"}
    with running_fleet(local_stack, nodes=1) as fleet:
        node = fleet.node_names[0]
        applied = run_stage(kube_api_client, stage_pod(unique_name("apply"), node, SYSCTL_IMAGE, "apply"), config)
        assert applied.status.phase == "Succeeded", terminated(applied).message
        assert (fleet.sandbox(node) / "etc/sysctl.d/90-noderoll.conf").read_text() == config["sysctl.conf"]
        checked = run_stage(kube_api_client, stage_pod(unique_name("check"), node, SYSCTL_IMAGE, "apply-check"), config)
        assert checked.status.phase == "Succeeded"
        assert terminated(checked).exit_code == 0
        assert "checked" in terminated(checked).message
        assert (fleet.sandbox(node) / f"var/log/noderoll/pods/{checked.metadata.name}.log").is_file()
        # The agent keeps its flags on the host: the same version's apply is not run again.
        again = run_stage(kube_api_client, stage_pod(unique_name("apply"), node, SYSCTL_IMAGE, "apply"), config)
        assert again.status.phase == "Succeeded"
        assert "skipping step apply" in terminated(again).message


def test_injected_failure_gives_failed_pod_with_exit_code(local_stack: Any, kube_api_client: ApiClient) -> None:
    with running_fleet(local_stack, nodes=2) as fleet:
        node = fleet.node_names[1]
        fleet.options.faults.add(Fault("fail-stage", nodes=node, mode="apply", exit_code=7, times=1))
        pod = run_stage(kube_api_client, stage_pod(unique_name("apply"), node, SYSCTL_IMAGE, "apply"))
        assert pod.status.phase == "Failed"
        assert terminated(pod).exit_code == 7
        assert "injected fault" in terminated(pod).message


def test_failing_step_exit_code_reaches_the_pod(local_stack: Any, kube_api_client: ApiClient, tmp_path: Path) -> None:
    package = tmp_path / "broken"
    package.mkdir()
    step = {"name": "boom", "path": "boom.sh", "arguments": [], "returncodes": [0], "on_host": True,
            "idempotence": False, "upgrade_step": False}
    modes = {"apply": [step], "apply-check": [{**step, "name": "boom-check"}]}
    (package / "config.json").write_text(json.dumps(
        {"schema_version": "v1", "package_name": "broken", "package_version": "0.1.0",
         "expected_config_files": [], "modes": modes}))
    (package / "boom.sh").write_text("#!/bin/sh\necho about to fail\nexit 3\n")
    (package / "boom.sh").chmod(0o755)
    with running_fleet(local_stack, nodes=1, image_stores=[tmp_path]) as fleet:
        job = stage_pod(unique_name("apply"), fleet.node_names[0], example_image("broken", "0.1.0"), "apply")
        pod = run_stage(kube_api_client, job)
        assert pod.status.phase == "Failed"
        assert terminated(pod).exit_code == 3
        assert "about to fail" in terminated(pod).message
        assert "FAILED: step boom exited 3" in terminated(pod).message


def test_reboot_changes_boot_id_and_passes_through_not_ready(local_stack: Any, kube_api_client: ApiClient, k8s_namespace: str) -> None:
    core = client.CoreV1Api(kube_api_client)
    with running_fleet(local_stack, nodes=1, reboot_seconds=2.0) as fleet:
        node = fleet.node_names[0]
        before = core.read_node(node).status.node_info.boot_id
        spec = {"nodeName": node, "containers": [{"name": "c", "image": WORKLOAD_IMAGE}]}
        core.create_namespaced_pod(k8s_namespace, {"metadata": {"name": "survivor"}, "spec": spec})
        assert_eventually(lambda: core.read_namespaced_pod("survivor", k8s_namespace).status.phase == "Running")
        interrupt = json.dumps({"type": "reboot", "services": []})
        job = stage_pod(unique_name("reboot"), node, SYSCTL_IMAGE, "interrupt", {"NODEROLL_INTERRUPT": interrupt})
        pod = run_stage(kube_api_client, job)
        assert pod.status.phase == "Succeeded"
        # The node is already down when the interrupt pod is seen to succeed.
        assert ready_condition(kube_api_client, node).status == "False"
        assert_eventually(lambda: ready_condition(kube_api_client, node).status == "True", timeout=20)
        assert core.read_node(node).status.node_info.boot_id != before
        restarted = core.read_namespaced_pod("survivor", k8s_namespace).status.container_statuses[0]
        assert restarted.restart_count == 1
        record = json.loads((fleet.sandbox(node) / "var/lib/noderoll/interrupts.log").read_text().splitlines()[-1])
        assert record["type"] == "reboot" and record["simulated"] is True


def test_service_interrupt_records_restarted_services(local_stack: Any, kube_api_client: ApiClient) -> None:
    with running_fleet(local_stack, nodes=1) as fleet:
        node = fleet.node_names[0]
        boot_id = fleet.boot_id(node)
        interrupt = json.dumps({"type": "service", "services": ["containerd", "kubelet"]})
        job = stage_pod(unique_name("svc"), node, SERVICE_IMAGE, "interrupt",
                        {"NODEROLL_INTERRUPT": interrupt})
        assert run_stage(kube_api_client, job).status.phase == "Succeeded"
        log = fleet.sandbox(node) / "var/lib/noderoll/restarted-services.log"
        assert log.read_text().split() == ["containerd", "kubelet"]
        assert fleet.boot_id(node) == boot_id


def test_workloads_spread_with_pdbs_and_training_pods_finish(local_stack: Any, kube_api_client: ApiClient) -> None:
    from fleetsim.workloads import PROTECTED_LABEL, WorkloadSpec, create_workloads

    core = client.CoreV1Api(kube_api_client)
    # The 1.20 test bed serves PDBs as policy/v1beta1 only, which this client has no typed API for.
    objects = client.CustomObjectsApi(kube_api_client)
    namespace = unique_name("wl")
    with running_fleet(local_stack, nodes=4) as fleet:
        spec = WorkloadSpec(namespace=namespace, prefix=fleet.options.name_prefix, nodes=fleet.node_names,
                            training_pods=2, training_seconds=1.0, deployments=1, replicas=3)
        try:
            assert create_workloads(fleet.ctx.kube, spec) == {"trainingPods": 2, "deployments": 1, "pdbs": 1}
            protected = core.list_namespaced_pod(namespace, label_selector=f"{PROTECTED_LABEL}=true").items
            assert [p.spec.node_name for p in protected] == [fleet.node_names[0]]

            def settled() -> bool:
                pods = core.list_namespaced_pod(namespace).items
                phases = sorted((p.metadata.labels.get("app", "").rsplit("-", 1)[-1], p.status.phase) for p in pods)
                assert phases == [("0", "Running")] * 3 + [("training", "Succeeded")] * 2, phases
                assert {p.spec.node_name for p in pods} <= set(fleet.node_names)
                pdb = objects.get_namespaced_custom_object("policy", "v1beta1", namespace, "poddisruptionbudgets", f"{spec.prefix}-web-0")
                assert pdb["status"]["disruptionsAllowed"] == 1
                return True

            assert_eventually(settled, timeout=60)
        finally:
            core.delete_namespace(namespace)


def test_hanging_stage_pod_runs_until_deleted(local_stack: Any, kube_api_client: ApiClient) -> None:
    core = client.CoreV1Api(kube_api_client)
    with running_fleet(local_stack, nodes=1) as fleet:
        node = fleet.node_names[0]
        fleet.options.faults.add(Fault("hang", nodes=node, mode="apply"))
        manifest = stage_pod(unique_name("hang"), node, SYSCTL_IMAGE, "apply")
        name = manifest["metadata"]["name"]
        _created.append(name)
        core.create_namespaced_config_map(PACKAGE_POD_NAMESPACE, {"metadata": {"name": name}})
        core.create_namespaced_pod(PACKAGE_POD_NAMESPACE, manifest)

        def running() -> client.V1Pod:
            found = core.read_namespaced_pod(name, PACKAGE_POD_NAMESPACE)
            assert found.status.phase == "Running"
            return found

        pod = assert_eventually(running)
        assert not (fleet.sandbox(node) / "etc/sysctl.d/90-noderoll.conf").exists()
        core.delete_namespaced_pod(pod.metadata.name, PACKAGE_POD_NAMESPACE)
        assert_eventually(lambda: not core.list_namespaced_pod(PACKAGE_POD_NAMESPACE, field_selector=f"metadata.name={pod.metadata.name}").items)


def _pod_conditions(pod: client.V1Pod) -> dict[str, str]:
    return {c.type: c.status for c in pod.status.conditions or []}


def mark_not_ready(core: client.CoreV1Api, pod: client.V1Pod) -> None:
    """Set the pod's Ready condition False, as the node lifecycle controller does (only if it has one)."""
    conditions = [{"type": c.type, "status": "False" if c.type == "Ready" else c.status,
                   "lastTransitionTime": c.last_transition_time.isoformat() if c.last_transition_time else None}
                  for c in pod.status.conditions or []]
    if any(c["type"] == "Ready" for c in conditions):
        core.patch_namespaced_pod_status(pod.metadata.name, pod.metadata.namespace, {"status": {"conditions": conditions}})


def test_pods_follow_their_node_through_a_reboot(local_stack: Any, kube_api_client: ApiClient, k8s_namespace: str) -> None:
    """Issue 12 item 8: a pod bound to a node during its reboot, and a pod running across it, are Ready
    once the node is back, whatever the node lifecycle controller wrote while the node was down."""
    core = client.CoreV1Api(kube_api_client)

    def pod(name: str, restart_policy: str = "Always", annotations: dict[str, str] | None = None) -> dict[str, Any]:
        spec = {"nodeName": node, "restartPolicy": restart_policy, "terminationGracePeriodSeconds": 60,
                "containers": [{"name": "c", "image": WORKLOAD_IMAGE}]}
        return {"metadata": {"name": name, "annotations": annotations or {}}, "spec": spec}

    def read(name: str) -> client.V1Pod:
        return core.read_namespaced_pod(name, k8s_namespace)

    # Grace periods honoured up to 60 s, so a removal without one is told apart from one after it.
    with running_fleet(local_stack, nodes=1, reboot_seconds=10.0, max_grace_seconds=60.0) as fleet:
        node = fleet.node_names[0]
        core.create_namespaced_pod(k8s_namespace, pod("web"))
        core.create_namespaced_pod(k8s_namespace, pod("batch", "Never", {"fleetsim.noderoll.io/run-seconds": "600"}))
        core.create_namespaced_pod(k8s_namespace, pod("doomed"))
        assert_eventually(lambda: all(read(n).status.phase == "Running" for n in ("web", "batch", "doomed")))
        web_ip = read("web").status.pod_ip
        interrupt = json.dumps({"type": "reboot", "services": []})
        job = stage_pod(unique_name("reboot"), node, SYSCTL_IMAGE, "interrupt", {"NODEROLL_INTERRUPT": interrupt})
        assert run_stage(kube_api_client, job).status.phase == "Succeeded"
        core.create_namespaced_pod(k8s_namespace, pod("newcomer"))
        core.delete_namespaced_pod("doomed", k8s_namespace)
        # The node lifecycle controller marks pods not Ready when their node stops heartbeating (a real
        # reboot outlasts the grace period) and every pod bound to a node it last saw NotReady (its
        # `processPod`, racing the kubelet). Its write, without the race:
        for name in ("web", "newcomer"):
            mark_not_ready(core, read(name))
        # The node's kubelet is down: nothing happens to its pods until it is back.
        during = {"node": ready_condition(kube_api_client, node).status, "newcomer": read("newcomer").status.phase,
                  "doomed": read("doomed").status.phase}
        assert_eventually(lambda: ready_condition(kube_api_client, node).status == "True", timeout=60)

        def ready(name: str) -> client.V1Pod:
            got = read(name)
            assert got.status.phase == "Running", got.status
            assert _pod_conditions(got) | {"PodScheduled": "True"} == dict.fromkeys(
                ("Initialized", "Ready", "ContainersReady", "PodScheduled"), "True"), got.status.conditions
            return got

        web, newcomer = assert_eventually(lambda: (ready("web"), ready("newcomer")), timeout=20)
        assert during == {"node": "False", "newcomer": "Pending", "doomed": "Running"}
        # Containers restart after a reboot, in a new pod sandbox (new IP).
        assert web.status.container_statuses[0].restart_count == 1
        assert web.status.container_statuses[0].last_state.terminated.exit_code == 255
        assert web.status.pod_ip != web_ip
        assert newcomer.status.container_statuses[0].restart_count == 0
        # A restartPolicy Never pod does not run again: it failed with the reboot.
        batch = assert_eventually(lambda: read("batch") if read("batch").status.phase == "Failed" else False)
        assert batch.status.container_statuses[0].state.terminated.exit_code == 255
        # A pod deleted while the node was down goes once the kubelet is back, without waiting for its
        # 60 s grace period: its containers died with the reboot.
        assert_eventually(lambda: not core.list_namespaced_pod(k8s_namespace, field_selector="metadata.name=doomed").items,
                          timeout=20)
        # Someone else (the controller with a stale view of the node) marks a running pod not Ready: the
        # kubelet owns that condition and writes it back, as its status manager does.
        mark_not_ready(core, web)
        assert _pod_conditions(read("web"))["Ready"] == "False"
        assert_eventually(lambda: ready("web"), timeout=20)

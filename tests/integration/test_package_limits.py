"""A Package's `limits` on the real stack (issue #16 item 4): with the worker's protected-pods wait
shortened to 5 s (`NODEROLL_NODE_PROTECTED_PODS_TIMEOUT_SECONDS`, as a multi-day training job would
outlast today's 1 h), a protected pod running 25 s:
* under a Package that raises `limits.protectedPodsTimeoutSeconds` to 300, the window waits it out
  and the rollout completes (its stages start only after the pod finished);
* under the same Package without limits, the node ends erroring with the protected-pods timeout.
Worker and bridge run as processes on a fresh task queue; fleetsim plays kubelet (it ends a pod
after its `fleetsim.noderoll.io/run-seconds`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from kubernetes import client

from fleetsim.context import RUN_SECONDS_ANNOTATION
from protocol.node_settings import PROTECTED_PODS_TIMEOUT_ENV
from tests.helpers import assert_eventually, unique_name
from tests.helpers.fleet import running_fleet
from tests.helpers.packages import WORKLOAD_IMAGE, package_spec
from tests.helpers.processes import NoderollProcesses, noderoll_fixture
from tests.helpers.stagepods import StagePodRecorder
from tests.integration.bridge_support import create_package, delete_package, read_package

pytestmark = pytest.mark.integration
SHORT_DEFAULT = 5
POD_SECONDS = 25
RAISED = 300


run = noderoll_fixture(stage_attempts=1, worker_env={PROTECTED_PODS_TIMEOUT_ENV: str(SHORT_DEFAULT)})


def protected_pod(core: client.CoreV1Api, namespace: str, node: str, label: str, seconds: int) -> str:
    name = unique_name("training")
    core.create_namespaced_pod(namespace, {
        "metadata": {"name": name, "labels": {"limits-test": label},
                     "annotations": {RUN_SECONDS_ANNOTATION: str(seconds)}},
        "spec": {"nodeName": node, "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "train", "image": WORKLOAD_IMAGE}]}})
    return name


def stamp(value: Any) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def test_a_raised_limit_outlasts_a_protected_pod_the_default_would_not(
    run: NoderollProcesses, kube_api_client: client.ApiClient, k8s_namespace: str,
) -> None:
    core = client.CoreV1Api(kube_api_client)
    label = unique_name("protect")
    with running_fleet(run.stack, nodes=2, labels={"limits-fleet": run.run_id}) as fleet:
        raised_node, default_node = fleet.node_names
        # The window deletes its stage pods once its outcome is on the node (issue #14): record them.
        recorder = StagePodRecorder(kube_api_client, node=raised_node).start()
        pods = {node: protected_pod(core, k8s_namespace, node, label, seconds)
                for node, seconds in ((raised_node, POD_SECONDS), (default_node, 10 * POD_SECONDS))}
        names = {raised_node: unique_name("raised"), default_node: unique_name("default")}
        try:
            for node, name in names.items():
                spec = package_spec(labels={"kubernetes.io/hostname": node}, interrupt={"type": "reboot"},
                                    podNonInterruptLabels={"matchLabels": {"limits-test": label}})
                if node == raised_node:
                    spec["limits"] = {"protectedPodsTimeoutSeconds": RAISED}
                create_package(kube_api_client, run.package(name, spec))

            def phase(name: str, wanted: str) -> dict[str, Any]:
                status = read_package(kube_api_client, name).get("status") or {}
                assert status.get("phase") == wanted, status
                return status

            def erroring_reason() -> str:
                status = read_package(kube_api_client, names[default_node]).get("status") or {}
                found = [e.get("reason", "") for e in status.get("erroringNodes") or [] if e.get("node") == default_node]
                assert found, status
                return str(found[0])

            reason = assert_eventually(erroring_reason, timeout=180, interval=1.0)
            assert "protected pods still running" in reason and f"after {SHORT_DEFAULT}s" in reason, reason

            assert_eventually(lambda: phase(names[raised_node], "Complete"), timeout=240, interval=1.0)
            pod = core.read_namespaced_pod(pods[raised_node], k8s_namespace)
            assert pod.status.phase == "Succeeded"
            finished = pod.status.container_statuses[0].state.terminated.finished_at
            created = stamp(read_package(kube_api_client, names[raised_node])["metadata"]["creationTimestamp"])
            # The pod outlived the shortened default after the Package existed ...
            assert (stamp(finished) - created).total_seconds() > SHORT_DEFAULT
            # ... and the window's stages ran only after it finished.
            jobs = [j for j in recorder.pods() if j.metadata.labels["noderoll.io/package"] == names[raised_node]]
            assert jobs and min(stamp(j.metadata.creation_timestamp) for j in jobs) >= stamp(finished)
        finally:
            recorder.stop()
            for name in names.values():
                delete_package(kube_api_client, name)

"""A package in NodeWright's image layout rolled out on a real node (issue 15, item 5; issue 12, items 5-6).

The package image (busybox plus /skyhook-package, built here from deploy/examples/packages/
nodewright-tuning) runs unchanged through the real stage pod: the init container copies the package,
noderoll's agent image runs the steps chrooted into this machine's root. The steps write only below
a scratch folder (the package's `root` config key); the interrupts are `noop` and `service`, never a
reboot.

One window also runs its GPU verify (`spec.verify`, issue 44 item 4) through the real kubelet. The
machine has no GPU, so the window's verify image is a busybox running one honest check of what a
GPU-less node has (the pod runs on the node, privileged, with its root at /host: it reads the host's
/etc/os-release); the example verify image (deploy/examples/verify/gpu-health on busybox, built here)
is run in a verify pod of its own and must fail there, saying that no GPU tool exists.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from activities.stage_pod import StagePodSettings
from activities.verify_pod import pod_manifest
from api.keys import (
    API_VERSION,
    GROUP,
    NODE_STATE_ANNOTATION,
    NODE_STATUS_LABEL,
    PACKAGE_POD_NAMESPACE,
    POLICY_KIND,
    POLICY_PLURAL,
    VERSION,
)
from api.node_state import parse_node_state
from localstack import node_images
from protocol.node_activities import StageJob
from tests.helpers import assert_eventually, unique_name
from tests.helpers.packages import NODEWRIGHT_IMAGE
from tests.helpers.stagepods import StagePodRecorder
from tests.realnode.support import REPO, RealCluster

pytestmark = pytest.mark.timeout(900)
SYSCTL = "vm.max_map_count = 262144\nkernel.numa_balancing = 0\n"
HOST_CHECK_IMAGE = "noderoll.local/verify-host-check:1"
GPU_VERIFY_IMAGE = "noderoll.local/gpu-verify:1"
EXAMPLE_VERIFY = REPO / "deploy/examples/verify/gpu-health/gpu-verify.sh"
# The real node's verify: what a node without GPUs can honestly check (module docstring).
HOST_CHECK = ["/bin/sh", "-c", 'test -r "$NODEROLL_ROOT/etc/os-release" && echo "verify: $NODEROLL_NODE: host root '
              'at $NODEROLL_ROOT: $(head -n 1 "$NODEROLL_ROOT/etc/os-release")"']


@pytest.fixture
def scratch() -> Iterator[Path]:
    """The only folder the package's steps may write to."""
    folder = Path(tempfile.mkdtemp(prefix="noderoll-realnode-", dir="/var/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_nodewright_package_rolls_out_on_the_real_node(real_cluster: RealCluster, scratch: Path) -> None:
    name, node = unique_name("nwt"), real_cluster.node.name
    boot_before = real_cluster.core.read_node(node).status.node_info.boot_id
    # The window deletes its stage pods (and pods) once its outcome is on the node (issue #14): record them.
    recorder = StagePodRecorder(real_cluster.api, node=node).start()
    real_cluster.package(name, config={"sysctl.conf": SYSCTL, "root": str(scratch)})
    try:
        status = real_cluster.wait_status(name, lambda s: s.get("phase") == "Complete")
        assert (status.get("nodes") or {}).get("complete") == 1, status
        drop_in = scratch / f"etc/sysctl.d/999-{name}-tuning.conf"
        assert drop_in.read_text() == SYSCTL
        assert not (Path("/etc/sysctl.d") / drop_in.name).exists()
        labels = json.loads((scratch / f"etc/nodewright-tuning/{name}.labels.json").read_text())
        assert labels["kubernetes.io/hostname"] == node and labels["noderoll.io/realnode"] == "true"
        assert (scratch / f"etc/nodewright-tuning/{name}.order").read_text() == "0\n"
        state, problem = parse_node_state(
            (real_cluster.core.read_node(node).metadata.annotations or {}).get(NODE_STATE_ANNOTATION))
        assert problem is None and state.packages[name].state == "complete"
        pods = [p for p in recorder.pods() if p.metadata.labels["noderoll.io/package"] == name]
        stages = [p for p in pods if p.spec.init_containers]
        assert stages and all(p.status.phase == "Succeeded" for p in pods), [(p.metadata.name, p.status.phase) for p in pods]
        for pod in stages:
            copy, *agents = [*pod.spec.init_containers, *pod.spec.containers]
            assert (copy.name, copy.image) == ("package", NODEWRIGHT_IMAGE)
            assert {c.image for c in agents} == {real_cluster.agent_image}
        # The window's one interrupt: the last container of the pod of the stages before it (issue #14).
        interrupts = [c for p in pods for c in p.spec.containers if c.name == "interrupt"]
        assert len(interrupts) == 1 and interrupts[0].image == real_cluster.agent_image
        node_object = real_cluster.core.read_node(node)
        assert not node_object.spec.unschedulable
        assert node_object.status.node_info.boot_id == boot_before  # a noop interrupt: never a reboot
    finally:
        recorder.stop()
        real_cluster.delete(name)


def test_a_failing_service_interrupt_fails_with_its_exit_code_and_output(real_cluster: RealCluster, scratch: Path) -> None:
    # `systemctl daemon-reload` then `restart` of a unit that does not exist, in the chroot of this
    # machine: without systemd as PID 1 the first fails ("System has not been booted with systemd"),
    # with it the second ("Unit ... not found"). Either way the interrupt must fail with the command,
    # its code and its output, from the agent's last line (never a traceback, never a success).
    name, node = unique_name("nwt-svc"), real_cluster.node.name
    unit = f"{name}-missing"
    real_cluster.package(name, config={"sysctl.conf": SYSCTL, "root": str(scratch)},
                         interrupt={"type": "service", "services": [unit]})
    try:
        status = real_cluster.wait_status(name, lambda s: (s.get("nodes") or {}).get("erroring") == 1)
        state, _ = parse_node_state(
            (real_cluster.core.read_node(node).metadata.annotations or {}).get(NODE_STATE_ANNOTATION))
        entry = state.packages[name]
        assert entry.state == "erroring" and entry.stage == "interrupt", entry
        error = entry.last_error or ""
        assert "noderoll-agent: FAILED: systemctl " in error and " exited " in error, error
        assert "Traceback" not in error
        assert ("System has not been booted with systemd" in error) or (unit in error), error
        assert status.get("phase") in ("Failed", "Complete", "Progressing"), status
    finally:
        real_cluster.delete(name)
        real_cluster.core.patch_node(node, {"spec": {"unschedulable": False}})


def test_a_window_runs_its_verify_pod_on_the_real_node(real_cluster: RealCluster, scratch: Path,
                                                       tmp_path: Path) -> None:
    name, policy, node = unique_name("nwt-verify"), unique_name("verify"), real_cluster.node.name
    for archive in (node_images.command_image(tmp_path, HOST_CHECK_IMAGE, HOST_CHECK),
                    node_images.verify_image(tmp_path, GPU_VERIFY_IMAGE, EXAMPLE_VERIFY)):
        real_cluster.node.import_image(archive)
    real_cluster.custom.create_cluster_custom_object(GROUP, VERSION, POLICY_PLURAL, {
        "apiVersion": API_VERSION, "kind": POLICY_KIND, "metadata": {"name": policy},
        "spec": {"default": {"budget": {"count": 1}}, "verify": {"image": HOST_CHECK_IMAGE, "timeoutSeconds": 120}}})
    recorder = StagePodRecorder(real_cluster.api, node=node).start()
    example = f"gpu-verify-example-{unique_name('x')[-8:]}"
    real_cluster.package(name, config={"sysctl.conf": SYSCTL, "root": str(scratch)}, deploymentPolicy=policy)
    try:
        real_cluster.wait_status(name, lambda s: s.get("phase") == "Complete")
        [verify] = [p for p in recorder.pods() if p.metadata.labels["noderoll.io/mode"] == "verify"
                    and p.metadata.labels["noderoll.io/package"] == name]
        [container] = verify.spec.containers
        assert (container.name, container.image, container.security_context.privileged) == (
            "verify", HOST_CHECK_IMAGE, True)
        assert verify.spec.node_name == node and verify.status.phase == "Succeeded", verify.status
        assert verify.status.container_statuses[0].state.terminated.exit_code == 0
        node_object = real_cluster.core.read_node(node)
        state, problem = parse_node_state((node_object.metadata.annotations or {}).get(NODE_STATE_ANNOTATION))
        assert problem is None and state.packages[name].state == "complete" and state.verify_failed is None
        # The status label sums up every Package on the node, and an earlier test of this module leaves one
        # erroring there (the tier shares one real node): the verify's part is that it is not verify-failed.
        assert node_object.metadata.labels[NODE_STATUS_LABEL] != "verify-failed" and not node_object.spec.unschedulable

        # The example verify image on this GPU-less machine: a verify pod of its own fails, saying why.
        job = StageJob(package=name, version="1.0.0", node=node, mode="verify", image=GPU_VERIFY_IMAGE,
                       window="example", timeout_seconds=60)
        real_cluster.core.create_namespaced_pod(PACKAGE_POD_NAMESPACE, pod_manifest(job, example, StagePodSettings()))

        def ended() -> client.V1ContainerStateTerminated:
            pod = real_cluster.core.read_namespaced_pod(example, PACKAGE_POD_NAMESPACE)
            assert pod.status.phase == "Failed", pod.status.phase
            return pod.status.container_statuses[0].state.terminated

        terminated = assert_eventually(ended, timeout=120, interval=1.0)
        assert terminated.exit_code == 2, terminated
        assert "gpu-verify: FAILED: neither dcgmi nor nvidia-smi found" in terminated.message, terminated.message
    finally:
        recorder.stop()
        try:
            real_cluster.core.delete_namespaced_pod(example, PACKAGE_POD_NAMESPACE, grace_period_seconds=0)
        except client.exceptions.ApiException as err:
            if err.status != 404:
                raise
        real_cluster.delete(name)
        real_cluster.custom.delete_cluster_custom_object(GROUP, VERSION, POLICY_PLURAL, policy)

"""A package in NodeWright's image layout rolled out on a real node (issue 15, item 5; issue 12, items 5-6).

The package image (busybox plus /skyhook-package, built here from deploy/examples/packages/
nodewright-tuning) runs unchanged through the real stage pod: the init container copies the package,
noderoll's agent image runs the steps chrooted into this machine's root. The steps write only below
a scratch folder (the package's `root` config key); the interrupts are `noop` and `service`, never a
reboot.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from api.keys import NODE_STATE_ANNOTATION
from api.node_state import parse_node_state
from tests.helpers import unique_name
from tests.helpers.packages import NODEWRIGHT_IMAGE
from tests.helpers.stagepods import StagePodRecorder
from tests.realnode.support import RealCluster

pytestmark = pytest.mark.timeout(900)
SYSCTL = "vm.max_map_count = 262144\nkernel.numa_balancing = 0\n"


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

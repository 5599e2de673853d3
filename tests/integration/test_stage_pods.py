"""The real stage pod (activities.stage_pod) on the real apiserver, played by fleetsim (issue 15).

The `run_stage_pod` activity creates the stage pod exactly as the worker does: the package image's folder
copied by the `package` init container, noderoll's agent image running the stage and its check
(`run_interrupt`: the agent alone).
The package is written in NodeWright's image layout (deploy/examples/packages/nodewright-tuning).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient
from temporalio.testing import ActivityEnvironment

import kube
from activities.interrupts import run_interrupt
from activities.stage_run import run_stage_pod
from api.keys import GROUP, PACKAGE_PLURAL, PACKAGE_POD_NAMESPACE, VERSION
from localstack.state import StackInfo
from protocol.node_activities import RunInterruptInput, RunStagePodInput, StageJob
from tests.helpers import unique_name
from tests.helpers.fleet import running_fleet
from tests.helpers.packages import NODEWRIGHT_IMAGE, example_image

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
EXAMPLE = Path(__file__).resolve().parents[2] / "deploy/examples/package-nodewright-tuning.yaml"


@pytest.fixture
def fleet(local_stack: StackInfo, tmp_path: Path) -> Iterator[Any]:
    kube.configure(local_stack.kubeconfig)
    with running_fleet(local_stack, nodes=1, image_stores=[tmp_path / "images"]) as running:
        yield running


@pytest.fixture
def package(kube_api_client: ApiClient) -> Iterator[dict[str, Any]]:
    """A Package object like the example (its uid and generation go into SKYHOOK_RESOURCE_ID)."""
    import yaml

    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"]["name"] = unique_name("nwt")
    api = client.CustomObjectsApi(kube_api_client)
    created = api.create_cluster_custom_object(GROUP, VERSION, PACKAGE_PLURAL, doc)
    yield created
    api.delete_cluster_custom_object(GROUP, VERSION, PACKAGE_PLURAL, doc["metadata"]["name"])


def a_job(node: str, package: str, image: str, **fields: Any) -> StageJob:
    values: dict[str, Any] = dict(package=package, version="1.0.0", node=node, mode="apply", modes=["apply", "apply-check"],
                                  image=image, window=unique_name("w"), tolerations=[{"operator": "Exists"}],
                                  timeout_seconds=60)
    values.update(fields)
    return StageJob(**values)


def test_a_nodewright_image_runs_unchanged(fleet: Any, package: dict[str, Any], kube_api_client: ApiClient) -> None:
    node, name = fleet.node_names[0], package["metadata"]["name"]
    core = client.CoreV1Api(kube_api_client)
    core.patch_node(node, {"metadata": {"labels": {"example.com/rack": "r7"}}})
    config = dict(package["spec"]["config"])
    result = ActivityEnvironment().run(run_stage_pod, RunStagePodInput(
        a_job(node, name, NODEWRIGHT_IMAGE, config=config, node_order=3)))
    assert (result.exit_code, result.mode) == (0, "apply-check"), result.log_tail
    sandbox = fleet.sandbox(node)
    # NodeWright's tuning names its drop-in after field 2 of SKYHOOK_RESOURCE_ID: the Package's name.
    drop_in = sandbox / f"etc/sysctl.d/999-{name}-tuning.conf"
    assert drop_in.read_text() == config["sysctl.conf"]
    assert not (Path("/etc/sysctl.d") / drop_in.name).exists()
    labels = json.loads((sandbox / f"etc/nodewright-tuning/{name}.labels.json").read_text())
    assert labels["example.com/rack"] == "r7" and labels["kubernetes.io/hostname"] == node
    assert (sandbox / f"etc/nodewright-tuning/{name}.order").read_text() == "3\n"
    pod = core.read_namespaced_pod(result.job_name, PACKAGE_POD_NAMESPACE)
    copy = pod.spec.init_containers[0]
    assert (copy.name, copy.image) == ("package", NODEWRIGHT_IMAGE)
    assert {c.image for c in [*pod.spec.init_containers[1:], *pod.spec.containers]} == {"ghcr.io/noderoll/agent:0.1.0"}
    env = {e.name: e.value for e in pod.spec.containers[0].env}
    assert env["SKYHOOK_RESOURCE_ID"] == f"{name}-{package['metadata']['uid']}-1_{name}_1.0.0"


def test_steps_of_a_simulated_node_never_touch_the_machine(fleet: Any, tmp_path: Path) -> None:
    node, marker = fleet.node_names[0], unique_name("sandbox")
    folder = tmp_path / "images" / "escape" / "1.0.0"
    folder.mkdir(parents=True)
    step = {"arguments": [], "returncodes": [0], "on_host": True, "idempotence": False, "upgrade_step": False}
    (folder / "config.json").write_text(json.dumps({
        "schema_version": "v1", "package_name": "escape", "package_version": "1.0.0", "expected_config_files": [],
        "modes": {"apply": [{"name": "write", "path": "write.sh", **step}],
                  "apply-check": [{"name": "check", "path": "check.sh", **step}]}}))
    (folder / "write.sh").write_text(f"#!/bin/sh\nset -e\necho sandboxed > /etc/{marker}\necho here > /var/tmp/{marker}\n")
    (folder / "check.sh").write_text(f"#!/bin/sh\ntest -f /etc/{marker}\n")
    machine = [Path("/etc") / marker, Path("/var/tmp") / marker]
    job = a_job(node, "escape", example_image("escape"))
    result = ActivityEnvironment().run(run_stage_pod, RunStagePodInput(job))
    assert result.exit_code == 0, result.log_tail
    assert (fleet.sandbox(node) / "etc" / marker).read_text() == "sandboxed\n"
    assert (fleet.sandbox(node) / "var/tmp" / marker).read_text() == "here\n"
    assert not any(path.exists() for path in machine)


def test_interrupt_pod_runs_the_agent_image_alone(fleet: Any) -> None:
    node = fleet.node_names[0]
    job = a_job(node, "svc", NODEWRIGHT_IMAGE, mode="interrupt", modes=[],
                interrupt={"type": "service", "services": ["containerd"]})
    result = ActivityEnvironment().run(run_interrupt, RunInterruptInput(job))
    assert result.exit_code == 0, result.log_tail
    assert (fleet.sandbox(node) / "var/lib/noderoll/restarted-services.log").read_text().split() == ["containerd"]


def _image(root: Path, name: str, check_exit: int) -> str:
    """A package image in the fleet's image store whose apply writes /etc/<name>.conf from its own
    config and whose apply-check exits `check_exit`."""
    folder = root / "images" / name / "1.0.0"
    folder.mkdir(parents=True)
    step = {"arguments": [], "returncodes": [0], "on_host": True, "idempotence": False, "upgrade_step": False}
    (folder / "config.json").write_text(json.dumps({
        "schema_version": "v1", "package_name": name, "package_version": "1.0.0", "expected_config_files": [],
        "modes": {"apply": [{"name": "write", "path": "write.sh", **step}],
                  "apply-check": [{"name": "check", "path": "check.sh", **step}]}}))
    (folder / "write.sh").write_text(
        f'#!/bin/sh\nset -e\n{{ cat "$NODEROLL_CONFIG_DIR/{name}.conf"; echo "$NODEROLL_PACKAGE $SKYHOOK_RESOURCE_ID"; }}'
        f" > /etc/{name}.conf\n")
    (folder / "check.sh").write_text(f"#!/bin/sh\necho checking {name}\nexit {check_exit}\n")
    return example_image(name)


def test_a_pod_of_two_packages_runs_each_with_its_own_files_and_names_the_one_that_failed(
    fleet: Any, tmp_path: Path, kube_api_client: ApiClient,
) -> None:
    node, first, second = fleet.node_names[0], unique_name("one"), unique_name("two")
    jobs = [a_job(node, first, _image(tmp_path, first, 0), config={f"{first}.conf": "first=1\n"}),
            a_job(node, second, _image(tmp_path, second, 3), config={f"{second}.conf": "second=2\n"},
                  env=[{"name": "ONLY_SECOND", "value": "yes"}], package_uid="uid-of-2", generation=7)]
    result = ActivityEnvironment().run(run_stage_pod, RunStagePodInput(jobs[0], following=jobs[1:]))
    # The second Package's check failed: attributed to it, from its container's name; the first is done.
    assert (result.package, result.mode, result.exit_code) == (second, "apply-check", 3), result
    assert result.completed_by_package == {first: ["apply", "apply-check"], second: ["apply"]}
    assert "checking " + second in result.log_tail
    sandbox = fleet.sandbox(node)
    # Each Package saw its own package copy, config projection and environment.
    assert (sandbox / f"etc/{first}.conf").read_text().startswith(f"first=1\n{first} {first}--0_{first}_1.0.0")
    # The second's uid and generation came with its order (no such Package exists to read them from).
    assert (sandbox / f"etc/{second}.conf").read_text().startswith(f"second=2\n{second} {second}-uid-of-2-7_{second}_1.0.0")
    pod = client.CoreV1Api(kube_api_client).read_namespaced_pod(result.job_name, PACKAGE_POD_NAMESPACE)
    assert json.loads(pod.metadata.annotations["noderoll.io/packages"]) == [first, second]
    statuses = {s.name: s.state.terminated.exit_code for s in pod.status.init_container_statuses + pod.status.container_statuses
                if s.state.terminated}
    assert statuses == {"p0-package": 0, "p0-apply": 0, "p0-apply-check": 0, "p1-package": 0, "p1-apply": 0,
                        "p1-apply-check": 3}

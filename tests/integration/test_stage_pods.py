"""The real stage pod (activities.stage_pod) on the real apiserver, played by fleetsim (issue 15).

The `run_stage_pod` activity creates the Job exactly as the worker does: the package image's folder
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
    pod = core.list_namespaced_pod(PACKAGE_POD_NAMESPACE, label_selector=f"job-name={result.job_name}").items[0]
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

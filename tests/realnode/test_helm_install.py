"""The Helm chart installed for real on the real node (issue 15, item 6).

noderoll's own image and its agent image are built locally (no registry), `helm install` runs
against the private stack's apiserver, the worker and the bridge run as pods on this machine
against the stack's Temporal, and one rollout completes through them. The stack has no kube-proxy
and its apiserver and Temporal listen on 127.0.0.1, so both pods use the chart's `hostNetwork`
option and reach the apiserver through `KUBERNETES_SERVICE_HOST`/`PORT` (extraEnv), which the
in-cluster configuration reads. The package has no interrupt: a drain of the only node would evict
the worker that runs it.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from localstack import node_images
from localstack.processes import pick_port
from tests.helpers import assert_eventually, unique_name
from tests.helpers.helm import CHART, INSTALL_HINT, find_binary
from tests.helpers.stagepods import StagePodRecorder
from tests.realnode.support import REPO, RealCluster, start_real_cluster

HELM = find_binary("helm")
pytestmark = [pytest.mark.timeout(900),
              pytest.mark.skipif(HELM is None, reason=f"helm is not installed: {INSTALL_HINT}")]
RELEASE, NAMESPACE = "nr", "noderoll"
IMAGE = "noderoll.local/noderoll"
SYSCTL = "vm.max_map_count = 262144\n"


@pytest.fixture(scope="module")
def helm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    """The real node without worker and bridge processes: the chart brings them."""
    with start_real_cluster(tmp_path_factory.mktemp("realnode-helm"), processes=False) as cluster:
        yield cluster


def _values(cluster: RealCluster, tag: str) -> dict[str, object]:
    server = urlparse(yaml.safe_load(Path(cluster.stack.info.kubeconfig).read_text())["clusters"][0]["cluster"]["server"])
    apiserver = [{"name": "KUBERNETES_SERVICE_HOST", "value": server.hostname},
                 {"name": "KUBERNETES_SERVICE_PORT", "value": str(server.port)}]
    worker_port = pick_port([None], set())
    agent_repository, agent_tag = cluster.agent_image.rsplit(":", 1)
    return {
        "image": {"repository": IMAGE, "tag": tag, "pullPolicy": "Never"},
        "temporal": {"address": cluster.stack.info.temporal_address},
        # dev up installed the CRDs and noderoll-system: the release must not own them.
        "crds": {"install": False},
        "packageNamespace": {"create": False},
        "stagePods": {"agentImage": {"repository": agent_repository, "tag": agent_tag}},
        "worker": {"replicas": 1, "hostNetwork": True, "metricsPort": worker_port, "extraEnv": apiserver,
                   "podDisruptionBudget": {"enabled": False}},
        "bridge": {"replicas": 1, "hostNetwork": True, "metricsPort": pick_port([None], {worker_port}),
                   "extraEnv": apiserver},
        # The local stack runs no kube-proxy: the apiserver cannot reach the webhook Service's cluster IP.
        # The pods must run; admission is the stack's own webhook's (docs/operations.md says so).
        "webhook": {"failurePolicy": "Ignore"},
    }


def _helm(cluster: RealCluster, *args: str) -> subprocess.CompletedProcess[str]:
    assert HELM is not None
    return subprocess.run([HELM, *args, "--kubeconfig", cluster.stack.info.kubeconfig], capture_output=True,
                          text=True, timeout=300, check=False)


def test_the_chart_installed_for_real_rolls_out_a_package(helm_cluster: RealCluster) -> None:
    cluster = helm_cluster
    tag = cluster.agent_image.rsplit(":", 1)[1]
    workdir = Path(tempfile.mkdtemp(prefix="noderoll-image-", dir=cluster.node.state_dir))
    cluster.node.import_image(node_images.noderoll_image(workdir, f"{IMAGE}:{tag}", REPO))
    values = workdir / "values.yaml"
    values.write_text(json.dumps(_values(cluster, tag)))
    installed = _helm(cluster, "install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--create-namespace",
                      "--values", str(values), "--wait", "--timeout", "4m")
    try:
        assert installed.returncode == 0, installed.stdout + installed.stderr
        pods = cluster.core.list_namespaced_pod(NAMESPACE).items
        # The chart's admission webhook runs two replicas (issue #16).
        components = sorted(p.metadata.labels["app.kubernetes.io/component"] for p in pods)
        assert components == ["bridge", "webhook", "webhook", "worker"], components
        assert all(p.status.phase == "Running" and p.spec.node_name == cluster.node.name for p in pods)
        name = unique_name("nwt-helm")
        scratch = Path(tempfile.mkdtemp(prefix="noderoll-realnode-", dir="/var/tmp"))
        # The window deletes its stage pods once its outcome is on the node (issue #14): record them.
        recorder = StagePodRecorder(cluster.api, node=cluster.node.name).start()
        try:
            # No interrupt: draining the only node would evict the worker that runs the rollout.
            cluster.package(name, config={"sysctl.conf": SYSCTL, "root": str(scratch)}, interrupt=None)
            cluster.wait_status(name, lambda s: s.get("phase") == "Complete" and (s.get("nodes") or {}).get("complete") == 1)
            assert (scratch / f"etc/sysctl.d/999-{name}-tuning.conf").read_text() == SYSCTL
            stage_pods = [p for p in recorder.pods() if p.metadata.labels["noderoll.io/package"] == name]
            assert stage_pods and {c.image for p in stage_pods for c in p.spec.containers} == {cluster.agent_image}
        finally:
            recorder.stop()
            cluster.delete(name)
            subprocess.run(["rm", "-rf", str(scratch)], check=False)
    finally:
        uninstalled = _helm(cluster, "uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout", "2m")
        assert uninstalled.returncode == 0, uninstalled.stderr

    def gone() -> bool:
        assert cluster.core.list_namespaced_pod(NAMESPACE).items == []
        return True

    assert_eventually(gone, timeout=120, interval=1.0)

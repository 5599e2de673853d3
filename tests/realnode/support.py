"""The real-node tier's system: a private stack, this machine as node (localstack.realnode), locally
built images, and `noderoll worker` + `noderoll bridge` as processes. No sleeps: waits go through
`tests.helpers.assert_eventually`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from api.keys import API_VERSION, GROUP, PACKAGE_KIND, PACKAGE_PLURAL, VERSION
from localstack import node_images, realnode
from localstack.realnode import PAUSE_IMAGE, RealNode, RealNodeError
from protocol.node_settings import RETRY_BACKOFF_ENV, STAGE_ATTEMPTS_ENV
from tests.helpers import assert_eventually
from tests.helpers.chaos import ChaosStack
from tests.helpers.packages import NODEWRIGHT_IMAGE
from tests.helpers.processes import NoderollProcesses

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "deploy/examples/package-nodewright-tuning.yaml"
EXAMPLE_FOLDER = REPO / "deploy/examples/packages/nodewright-tuning/skyhook-package"
READY_SECONDS = 180.0
ROLLOUT_SECONDS = 300.0


def agent_image_reference() -> str:
    """The agent image of this tree: its tag is a hash of agent/ (a changed agent is a new image)."""
    digest = hashlib.sha256()
    for path in sorted((REPO / "agent").glob("*.py")):
        digest.update(path.name.encode() + path.read_bytes())
    return f"noderoll.local/agent:{digest.hexdigest()[:12]}"


@dataclass
class RealCluster:
    """The private stack, the real node, the noderoll processes and an API client."""

    stack: ChaosStack
    node: RealNode
    procs: NoderollProcesses
    api: client.ApiClient
    agent_image: str

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def package(self, name: str, **changes: Any) -> dict[str, Any]:
        """Apply the NodeWright-layout example Package under `name`, on this node, with `changes`
        (a change to None removes that field)."""
        doc = yaml.safe_load(EXAMPLE.read_text())
        doc["metadata"] = {"name": name}
        doc["spec"]["nodeSelector"] = {"matchLabels": {"kubernetes.io/hostname": self.node.name}}
        doc["spec"].update(changes)
        doc["spec"] = {k: v for k, v in doc["spec"].items() if v is not None}  # None: leave the field out
        return self.custom.create_cluster_custom_object(GROUP, VERSION, PACKAGE_PLURAL,
                                                        {**doc, "apiVersion": API_VERSION, "kind": PACKAGE_KIND})

    def status(self, name: str) -> dict[str, Any]:
        return self.custom.get_cluster_custom_object(GROUP, VERSION, PACKAGE_PLURAL, name).get("status") or {}

    def wait_status(self, name: str, check: Any, timeout: float = ROLLOUT_SECONDS) -> dict[str, Any]:
        def probe() -> dict[str, Any]:
            status = self.status(name)
            assert check(status), status
            return status

        return assert_eventually(probe, timeout=timeout, interval=1.0)

    def delete(self, name: str) -> None:
        self.custom.delete_cluster_custom_object(GROUP, VERSION, PACKAGE_PLURAL, name)


def _ready(api: client.ApiClient, node: RealNode) -> bool:
    kubelet = node.components.get("kubelet")
    if kubelet is None or not kubelet.is_alive():
        pytest.skip(f"real node: the kubelet exited on this machine; its last log lines:\n{node.log_tail('kubelet')}")
    try:
        conditions = client.CoreV1Api(api).read_node(node.name).status.conditions or []
    except client.exceptions.ApiException:
        return False
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def _images(node: RealNode, workdir: Path, agent: str) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    for archive in (node_images.pause_image(workdir, PAUSE_IMAGE),
                    node_images.package_image(workdir, NODEWRIGHT_IMAGE, EXAMPLE_FOLDER),
                    node_images.agent_image(workdir, agent, REPO)):
        node.import_image(archive)


@contextmanager
def start_real_cluster(workdir: Path, processes: bool = True) -> Iterator[RealCluster]:
    """Start everything (skipping with the reason where a kubelet cannot run); stop and clean after.
    `processes=False`: no worker and bridge processes (the Helm test runs them as pods)."""
    reason = realnode.unsupported_reason()
    if reason:
        pytest.skip(f"real node: {reason}")
    try:
        kubelet = realnode.provision()
    except RealNodeError as err:
        pytest.skip(f"real node: {err}")
    stack = ChaosStack.start(workdir / "stack")
    node = RealNode(workdir / "node", Path(stack.info.kubeconfig))
    procs: NoderollProcesses | None = None
    api = config.new_client_from_config(config_file=stack.info.kubeconfig)
    try:
        agent = agent_image_reference()
        try:
            node.start_containerd()
            _images(node, workdir / "images", agent)
        except RealNodeError as err:  # e.g. no overlayfs inside a container: containerd cannot unpack
            pytest.skip(f"real node: {err}")
        node.start_kubelet(kubelet)
        try:
            assert_eventually(lambda: _ready(api, node), timeout=READY_SECONDS, interval=1.0)
        except AssertionError:
            pytest.skip(f"real node: {node.name} not Ready within {READY_SECONDS:.0f}s; kubelet log:\n"
                        f"{node.log_tail('kubelet')}")
        env = {"NODEROLL_AGENT_IMAGE": agent, STAGE_ATTEMPTS_ENV: "1", RETRY_BACKOFF_ENV: "1"}
        procs = NoderollProcesses(stack.info, workdir / "procs", env=env, private_stack=True)
        if processes:
            procs.start_worker()
            procs.wait_leading(procs.start_bridge())
        yield RealCluster(stack, node, procs, api, agent)
    finally:
        if procs is not None:
            procs.stop_all()
        cleaned = node.stop()
        print(f"real node {node.name} stopped; removed from the machine: {cleaned}")
        api.close()
        stack.stop()

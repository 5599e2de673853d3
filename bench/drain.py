"""Drain of one node with 10 pods: noderoll's `cordon_node` + `drain_node` activities vs `kubectl drain`.

One simulated node (fleetsim, in this process) runs a 10-replica Deployment pinned to it by node
selector; each round drains it with noderoll's activities (run in an `ActivityEnvironment`, real API
calls), uncordons, waits for the 10 replacement pods to run, then drains it with the machine's
`kubectl drain`, and so on. Pods honour a 1 s termination grace period, as in both tools' waits.
kubectl 1.32 evicts through `policy/v1` only, which a 1.20 apiserver does not serve; when its
eviction fails the round falls back to `kubectl drain --disable-eviction` (plain deletes) and says so.
Does I/O (API, subprocesses).
"""

from __future__ import annotations

import statistics
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from temporalio.testing import ActivityEnvironment

import kube as activity_kube
from activities.drain import drain_node
from activities.nodes import cordon_node
from fleetsim.context import FleetOptions
from fleetsim.fleet import Fleet
from protocol.node_activities import DrainNodeInput, NodeInput

PODS = 10
KUBECTL_TIMEOUT = "120s"


@dataclass
class DrainComparison:
    """Seconds per round for each tool, and how kubectl evicted."""

    noderoll_s: list[float] = field(default_factory=list)
    kubectl_s: list[float] = field(default_factory=list)
    kubectl_mode: str = "eviction"
    kubectl_note: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (medians and the ratio)."""
        nr = statistics.median(self.noderoll_s) if self.noderoll_s else None
        kc = statistics.median(self.kubectl_s) if self.kubectl_s else None
        return {
            "pods": PODS, "rounds": len(self.noderoll_s),
            "noderoll_drain_s": round(nr, 2) if nr is not None else None,
            "kubectl_drain_s": round(kc, 2) if kc is not None else None,
            "ratio": round(nr / kc, 3) if nr and kc else None,
            "kubectl_mode": self.kubectl_mode, "kubectl_note": self.kubectl_note,
            "noderoll_rounds_s": [round(s, 2) for s in self.noderoll_s],
            "kubectl_rounds_s": [round(s, 2) for s in self.kubectl_s],
        }


def _deployment(name: str, node: str) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {
            "replicas": PODS, "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "app", "image": "registry.local/sleep:1"}],
                },
            },
        },
    }


class _Setup:
    def __init__(self, kubeconfig: str) -> None:
        self.kubeconfig = kubeconfig
        self.api = config.new_client_from_config(config_file=kubeconfig)
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)

    def wait(self, what: str, check: Any, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise TimeoutError(f"drain benchmark: {what} not reached in {timeout:.0f}s")
            time.sleep(0.2)

    def running_on(self, node: str) -> int:
        pods = self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
        return sum(1 for p in pods if p.status.phase == "Running" and p.metadata.deletion_timestamp is None)

    def uncordon(self, node: str) -> None:
        self.core.patch_node(node, {"spec": {"unschedulable": None},
                                    "metadata": {"annotations": {"noderoll.io/cordoned-by": None}}})

    def namespace(self, name: str) -> None:
        self.core.create_namespace({"metadata": {"name": name}})
        self.wait("service account token", lambda: self._has_token(name))

    def _has_token(self, namespace: str) -> bool:
        # The controller manager creates the namespace's `default` ServiceAccount, then its token,
        # a moment after the namespace: on a fresh stack a 404 here means "not yet".
        try:
            return bool(self.core.read_namespaced_service_account("default", namespace).secrets)
        except ApiException as err:
            if err.status == 404:
                return False
            raise


def _noderoll_drain(node: str) -> float:
    env = ActivityEnvironment()
    started = time.monotonic()
    env.run(cordon_node, NodeInput(node))
    env.run(drain_node, DrainNodeInput(node, timeout_seconds=120, delete_empty_dir_data=True))
    return time.monotonic() - started


def _kubectl_drain(kubeconfig: str, node: str, disable_eviction: bool) -> tuple[float, subprocess.CompletedProcess[str]]:
    argv = ["kubectl", "--kubeconfig", kubeconfig, "drain", node, "--ignore-daemonsets",
            "--delete-emptydir-data", f"--timeout={KUBECTL_TIMEOUT}"]
    if disable_eviction:
        argv.append("--disable-eviction")
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False)
    return time.monotonic() - started, done


def compare_drains(kubeconfig: str, rounds: int = 3) -> DrainComparison:
    """Run `rounds` alternating drains of the same node and return the timings."""
    activity_kube.configure(kubeconfig)
    setup = _Setup(kubeconfig)
    run = f"drain-{uuid.uuid4().hex[:6]}"
    result = DrainComparison()
    with tempfile.TemporaryDirectory(prefix="bench-drain-") as sandbox:
        fleet = Fleet(FleetOptions(nodes=1, kubeconfig=kubeconfig, name_prefix=run, sandbox_dir=Path(sandbox),
                                   max_grace_seconds=1.0, delete_nodes_on_stop=True, workers=12)).start()
        try:
            node = fleet.node_names[0]
            setup.namespace(run)
            setup.apps.create_namespaced_deployment(run, _deployment(run, node))
            for _ in range(rounds):
                setup.wait("10 pods Running", lambda: setup.running_on(node) == PODS)
                result.noderoll_s.append(_noderoll_drain(node))
                setup.uncordon(node)
                setup.wait("10 pods Running", lambda: setup.running_on(node) == PODS)
                seconds, done = _kubectl_drain(kubeconfig, node, result.kubectl_mode == "delete")
                if done.returncode != 0 and result.kubectl_mode == "eviction":
                    result.kubectl_mode = "delete"
                    result.kubectl_note = ("kubectl drain with eviction failed: "
                                           + (done.stderr.strip().splitlines() or ["?"])[-1][:300]
                                           + "; measured with --disable-eviction (DELETE, no PDB check)")
                    setup.uncordon(node)
                    setup.wait("10 pods Running", lambda: setup.running_on(node) == PODS)
                    seconds, done = _kubectl_drain(kubeconfig, node, True)
                if done.returncode != 0:
                    raise RuntimeError(f"kubectl drain failed: {done.stderr.strip()[-500:]}")
                result.kubectl_s.append(seconds)
                setup.uncordon(node)
        finally:
            try:
                setup.core.delete_namespace(run)
            finally:
                fleet.stop()
                setup.api.close()
    return result

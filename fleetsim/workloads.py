"""Workloads for a simulated fleet: training-job-like pods and Deployments with PDBs. Does API I/O.

Training pods are pinned to nodes, run for `training_seconds` (fleetsim completes them) and every
`protected_every`-th one carries `workload.noderoll.io/protected=true`, the label a Package's
`podNonInterruptLabels` can name. Deployments are spread over the fleet's nodes (node selector on the
fleet prefix label, topology spread on hostname), each with a PodDisruptionBudget (`policy/v1`, or
`policy/v1beta1` on clusters older than 1.21).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from fleetsim.context import PREFIX_LABEL, RUN_SECONDS_ANNOTATION
from fleetsim.kube import Kube, KubeError, quoted

PROTECTED_LABEL = "workload.noderoll.io/protected"
KIND_LABEL = "workload.noderoll.io/kind"
SERVICE_ACCOUNT_WAIT_SECONDS = 30.0


@dataclass
class WorkloadSpec:
    """What to create, and where."""

    namespace: str
    prefix: str
    nodes: list[str] = field(default_factory=list)
    training_pods: int | None = None  # default: one per 4 nodes
    protected_every: int = 2
    training_seconds: float = 600.0
    deployments: int = 2
    replicas: int | None = None  # default: min(len(nodes), 4)
    max_unavailable: int = 1
    # GPUs a training pod asks for on each node (absent: 8, the default fleet's; 0: none).
    gpus: dict[str, int] = field(default_factory=dict)


def _create(kube: Kube, path: str, body: dict[str, Any]) -> None:
    # A fresh namespace has no default ServiceAccount (token) for a moment: pods are refused until then.
    deadline = time.monotonic() + SERVICE_ACCOUNT_WAIT_SECONDS
    while True:
        try:
            kube.request("POST", path, body)
            return
        except KubeError as err:
            if err.status == 409:  # already there from an earlier run: keep it
                return
            if "service account" not in str(err) or time.monotonic() > deadline:
                raise
        time.sleep(0.5)


def _gpu_limits(gpus: int) -> dict[str, Any]:
    # The whole node's GPUs, as a training job takes them (a real kubelet refuses more than the node has).
    return {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}


def training_pod(spec: WorkloadSpec, index: int, node: str) -> dict[str, Any]:
    """A training-job-like pod pinned to a node. Pure."""
    labels = {"app": f"{spec.prefix}-training", KIND_LABEL: "training"}
    if spec.protected_every and index % spec.protected_every == 0:
        labels[PROTECTED_LABEL] = "true"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{spec.prefix}-train-{index}", "namespace": spec.namespace, "labels": labels,
                     "annotations": {RUN_SECONDS_ANNOTATION: str(spec.training_seconds)}},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 30,
            "containers": [{"name": "trainer", "image": "example.local/trainer:1", "command": ["train"],
                            "resources": _gpu_limits(spec.gpus.get(node, 8))}],
        },
    }


def deployment(spec: WorkloadSpec, index: int) -> dict[str, Any]:
    """A Deployment spread over the fleet's nodes. Pure."""
    app = f"{spec.prefix}-web-{index}"
    replicas = spec.replicas if spec.replicas is not None else min(len(spec.nodes), 4)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": app, "namespace": spec.namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app, KIND_LABEL: "service"}},
                "spec": {
                    "nodeSelector": {PREFIX_LABEL: spec.prefix},
                    "terminationGracePeriodSeconds": 10,
                    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                                   "whenUnsatisfiable": "ScheduleAnyway",
                                                   "labelSelector": {"matchLabels": {"app": app}}}],
                    "containers": [{"name": "web", "image": "example.local/web:1"}],
                },
            },
        },
    }


def create_pdb(kube: Kube, namespace: str, name: str, spec: dict[str, Any]) -> str:
    """Create a PDB with policy/v1, falling back to policy/v1beta1 (1.20). Returns the version used."""
    for version in ("policy/v1", "policy/v1beta1"):
        body = {"apiVersion": version, "kind": "PodDisruptionBudget",
                "metadata": {"name": name, "namespace": namespace}, "spec": spec}
        try:
            _create(kube, f"/apis/{version}/namespaces/{quoted(namespace)}/poddisruptionbudgets", body)
            return version
        except KubeError as err:
            if err.status != 404:
                raise
    raise KubeError(404, "POST", "poddisruptionbudgets", "neither policy/v1 nor policy/v1beta1 is served")


def create_workloads(kube: Kube, spec: WorkloadSpec) -> dict[str, int]:
    """Create the namespace, training pods, Deployments and PDBs; returns counts."""
    _create(kube, "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": spec.namespace}})
    count = spec.training_pods if spec.training_pods is not None else max(1, len(spec.nodes) // 4)
    ns = quoted(spec.namespace)
    for index in range(min(count, len(spec.nodes))):
        node = spec.nodes[index * len(spec.nodes) // max(count, 1)]
        _create(kube, f"/api/v1/namespaces/{ns}/pods", training_pod(spec, index, node))
    for index in range(spec.deployments):
        body = deployment(spec, index)
        _create(kube, f"/apis/apps/v1/namespaces/{ns}/deployments", body)
        selector = {"matchLabels": {"app": body["metadata"]["name"]}}
        create_pdb(kube, spec.namespace, body["metadata"]["name"], {"maxUnavailable": spec.max_unavailable, "selector": selector})
    return {"trainingPods": min(count, len(spec.nodes)), "deployments": spec.deployments, "pdbs": spec.deployments}

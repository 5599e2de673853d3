"""Simulated Node objects: registration, Lease heartbeats, Ready/NotReady and reboots. Does API I/O.

Nodes stay Ready through Lease renewals in `kube-node-lease` (the controller manager's
node-monitor-grace-period is 300 s, so one renewal per `heartbeat_seconds`, spread over the fleet,
is plenty); the Ready condition itself is written only when it changes. Status writes use a strategic
merge patch so the conditions other writers add (noderoll's `noderoll.io/Updating`) survive.
"""

from __future__ import annotations

import logging
import random
import uuid
from datetime import UTC, datetime
from typing import Any

from fleetsim.context import (
    DOMAIN_LABEL,
    PREFIX_LABEL,
    RACK_LABEL,
    SIM_LABEL,
    FleetOptions,
    SimContext,
    SimNode,
)
from fleetsim.kube import KUBELET_RETRY_SECONDS, MERGE_PATCH, STRATEGIC_PATCH, KubeError, quoted, until_landed

log = logging.getLogger(__name__)

LEASE_NAMESPACE = "kube-node-lease"
GPU_PRODUCTS = ("NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "NVIDIA-L40S")
ZONES = ("zone-a", "zone-b", "zone-c")
TIER_LABEL = "fleetsim.noderoll.io/tier"
GPU_RESOURCE = "nvidia.com/gpu"
CAPACITY = {"cpu": "96", "memory": "1056Gi", "pods": "110", GPU_RESOURCE: "8", "ephemeral-storage": "3500Gi"}
ALLOCATABLE = {"cpu": "95", "memory": "1050Gi", "pods": "110", GPU_RESOURCE: "8", "ephemeral-storage": "3400Gi"}


def gpus_of(options: FleetOptions, index: int) -> int:
    """GPUs of node `index`: `options.gpus` cycled over the indexes. Pure."""
    return options.gpus[index % len(options.gpus)] if options.gpus else 0


def block(index: int, total: int, blocks: int) -> int:
    """The contiguous block (rack, domain) of node `index` among `blocks` over `total` nodes. Pure."""
    return index * blocks // max(total, 1)


def resources(table: dict[str, str], gpus: int) -> dict[str, str]:
    """A capacity or allocatable table with `gpus` GPUs (none: no GPU resource at all). Pure."""
    out = {k: v for k, v in table.items() if k != GPU_RESOURCE}
    if gpus:
        out[GPU_RESOURCE] = str(gpus)
    return out


def now_rfc3339() -> str:
    """Current time as the API's Time format."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    """Current time as the API's MicroTime format (Lease renewTime)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_name(prefix: str, index: int, total: int) -> str:
    """`<prefix>-<index>`, zero-padded to the fleet size (at least 3 digits). Pure."""
    return f"{prefix}-{index:0{max(3, len(str(total - 1)))}d}"


def node_ip(index: int) -> str:
    """A stable fake InternalIP per node index. Pure."""
    return f"10.{64 + index // 65536 % 64}.{index // 256 % 256}.{index % 256}"


def node_labels(ctx: SimContext, node: SimNode) -> dict[str, str]:
    """Labels of a simulated node: GPU product and count, zone over 3 zones, tier, hostname, rack and
    NVLink domain (with --racks, --domains); plus --labels. Pure."""
    options = ctx.options
    gpus = gpus_of(options, node.index)
    labels = {
        "kubernetes.io/hostname": node.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": f"sim.gpu{gpus}" if gpus else "sim.cpu",
        "topology.kubernetes.io/zone": ZONES[node.index % len(ZONES)],
        # Every tenth node is a staging node: a natural canary/compartment selector.
        TIER_LABEL: "staging" if node.index % 10 == 0 else "production",
        SIM_LABEL: "true",
        PREFIX_LABEL: options.name_prefix,
    }
    if gpus:
        labels["nvidia.com/gpu.product"] = GPU_PRODUCTS[node.index % len(GPU_PRODUCTS) if node.index % 5 else 0]
        labels["nvidia.com/gpu.count"] = str(gpus)
    if options.racks:
        labels[options.rack_label or RACK_LABEL] = f"r{block(node.index, options.nodes, options.racks)}"
    if options.domains:
        labels[DOMAIN_LABEL] = f"d{block(node.index, options.nodes, options.domains)}"
    labels.update(options.labels)
    return labels


def ready_condition(ready: bool, message: str) -> dict[str, str]:
    """The Ready node condition. Pure (apart from the clock)."""
    now = now_rfc3339()
    return {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": "KubeletReady" if ready else "KubeletNotReady",
        "message": message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }


def node_status(node: SimNode, gpus: int = 8) -> dict[str, Any]:
    """The full status fleetsim posts at registration, with `gpus` GPUs. Pure (apart from the clock)."""
    now = now_rfc3339()
    pressure = [
        {"type": kind, "status": "False", "reason": f"KubeletHas{reason}", "message": "fleetsim",
         "lastHeartbeatTime": now, "lastTransitionTime": now}
        for kind, reason in (("MemoryPressure", "SufficientMemory"), ("DiskPressure", "NoDiskPressure"),
                             ("PIDPressure", "SufficientPID"))
    ]
    return {
        "capacity": resources(CAPACITY, gpus),
        "allocatable": resources(ALLOCATABLE, gpus),
        "conditions": [*pressure, ready_condition(True, "fleetsim is posting ready status")],
        "addresses": [{"type": "InternalIP", "address": node_ip(node.index)}, {"type": "Hostname", "address": node.name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "machineID": uuid.uuid5(uuid.NAMESPACE_DNS, node.name).hex,
            "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_URL, node.name)),
            "bootID": node.boot_id,
            "kernelVersion": "5.15.0-fleetsim",
            "osImage": "Ubuntu 22.04.4 LTS (fleetsim)",
            "containerRuntimeVersion": "containerd://1.7.13",
            "kubeletVersion": "v1.20.2",
            "kubeProxyVersion": "v1.20.2",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    }


def register_node(ctx: SimContext, node: SimNode) -> None:
    """Create (or adopt) the Node, post its status, and create its Lease."""
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Node",
                            "metadata": {"name": node.name, "labels": node_labels(ctx, node)}}
    if ctx.options.register_taints:
        # In the create request, as kubelet's --register-with-taints: no moment without them.
        body["spec"] = {"taints": [dict(t) for t in ctx.options.register_taints]}
    try:
        created = ctx.kube.request("POST", "/api/v1/nodes", body)
    except KubeError as err:
        if err.status != 409:
            raise
        # Adopt a node left by an earlier run with the same prefix: refresh labels, keep the rest.
        created = ctx.kube.request("PATCH", f"/api/v1/nodes/{quoted(node.name)}", {"metadata": body["metadata"]}, content_type=MERGE_PATCH)
    node.uid = created["metadata"]["uid"]
    status = node_status(node, gpus_of(ctx.options, node.index))
    ctx.kube.request("PATCH", f"/api/v1/nodes/{quoted(node.name)}/status", {"status": status}, content_type=STRATEGIC_PATCH)
    try:
        ctx.kube.request("POST", f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases", _lease_body(node))
    except KubeError as err:
        if err.status != 409:
            raise
        renew_lease(ctx, node)  # an adopted node's Lease


def _lease_body(node: SimNode) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": node.name,
            "namespace": LEASE_NAMESPACE,
            # Like the kubelet: the Node owns its Lease, so deleting the Node collects the Lease.
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node.name, "uid": node.uid}],
        },
        "spec": {"holderIdentity": node.name, "leaseDurationSeconds": 300, "renewTime": now_micro()},
    }


def renew_lease(ctx: SimContext, node: SimNode) -> bool:
    """Renew the node's Lease (create it when missing); False when the Node itself is gone."""
    path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{quoted(node.name)}"
    try:
        ctx.kube.request("PATCH", path, {"spec": {"renewTime": now_micro(), "holderIdentity": node.name}}, content_type=MERGE_PATCH)
        return True
    except KubeError as err:
        if err.status != 404:
            raise
    try:
        ctx.kube.request("GET", f"/api/v1/nodes/{quoted(node.name)}")
    except KubeError as err:
        if err.status == 404:
            return False
        raise
    ctx.kube.request("POST", f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases", _lease_body(node))
    return True


def schedule_heartbeats(ctx: SimContext, node: SimNode, first_delay: float) -> None:
    """Renew the node's Lease every heartbeat_seconds (with jitter), until it is deleted or we stop."""

    def beat() -> None:
        if ctx.stopping.is_set() or node.name not in ctx.nodes:
            return
        try:
            alive = renew_lease(ctx, node)
        except (KubeError, OSError) as err:
            log.warning("lease renewal of %s failed: %s", node.name, err)
            alive = True
        if not alive:
            log.info("node %s was deleted; no longer simulated", node.name)
            ctx.nodes.pop(node.name, None)
            return
        period = ctx.options.heartbeat_seconds
        ctx.scheduler.call_later(period * random.uniform(0.9, 1.1), beat)

    ctx.scheduler.call_later(first_delay, beat)


def set_ready(ctx: SimContext, node: SimNode, ready: bool, message: str) -> None:
    """Write the Ready condition (and the boot id) of a node, retried while the apiserver is away (a
    deleted node is fine).

    A reboot's NotReady and its Ready with the new boot id must land: written once, a try that met an
    apiserver restart failed the simulated reboot, whose interrupt pod then never finished and whose
    window waited for good (chaos test (c), 40 s down, 2026-12-02).
    """
    node.ready = ready
    status = {"conditions": [ready_condition(ready, message)], "nodeInfo": {"bootID": node.boot_id}}
    until_landed(lambda: ctx.kube.request("PATCH", f"/api/v1/nodes/{quoted(node.name)}/status", {"status": status},
                                          content_type=STRATEGIC_PATCH), seconds=KUBELET_RETRY_SECONDS, stopping=ctx.stopping)


def delete_node(ctx: SimContext, name: str) -> None:
    """Delete a Node (its Lease follows by owner reference); missing is fine."""
    try:
        ctx.kube.request("DELETE", f"/api/v1/nodes/{quoted(name)}")
    except KubeError as err:
        if err.status != 404:
            raise

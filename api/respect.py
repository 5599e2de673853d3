"""`spec.respect` of a DeploymentPolicy: maintenance by other controllers that a fleet keeps out of. Pure.

    respect:
      taints: [ToBeDeletedByClusterAutoscaler, karpenter.sh/disrupted, example.com/rma]
      nodeMaintenance: true

A node carrying a taint whose key is in `taints` (any value, any effect), or named by a
`NodeMaintenance` (`maintenance.nvidia.com/v1alpha1`, NVIDIA's maintenance-operator; its
`spec.nodeName`) whose requestor is not noderoll, is held by another maintenance: the fleet's node
listing reports it down with the reason (the taint, or the NodeMaintenance's namespace/name and
requestor), as it reports a node in a window, cordoned or NotReady. NodeMaintenance objects are read
only when `nodeMaintenance` is true and the CRD is installed (a cluster without it answers 404:
looked at again every 5 minutes, nothing logged). Every NodeMaintenance counts, whatever its phase
(pending, draining, ready) and also while it is being deleted (its operator still holds the node).

Defaults: without `respect`, and for the built-in `default` fleet, both apply: the taints below and
`nodeMaintenance: true`. `taints` given replaces the list (copy the keys you want to keep; `[]`
respects none); `nodeMaintenance: false` reads no NodeMaintenance.

The default taints (`DEFAULT_TAINTS`), each with the project that sets it:

| key | set by | meaning |
| --- | --- | --- |
| `ToBeDeletedByClusterAutoscaler` | Kubernetes cluster-autoscaler (`cluster-autoscaler/utils/taints/taints.go`) | the node is being scaled down (NoSchedule) |
| `DeletionCandidateOfClusterAutoscaler` | cluster-autoscaler (same file) | the node is unneeded, a scale-down candidate (PreferNoSchedule) |
| `karpenter.sh/disrupted` | Karpenter v1 (`pkg/apis/v1/taints.go`) | the node is being disrupted: drained, then terminated (NoSchedule) |
| `karpenter.sh/disruption` | Karpenter before v1 (`karpenter.sh/disruption=disrupting`, v1beta1) | the same, older key |
| `medik8s.io/drain` | medik8s Node Maintenance Operator (`controllers/taint.go`) | a `nodemaintenance.medik8s.io` NodeMaintenance drains the node (NoSchedule) |
| `medik8s.io/remediation` | medik8s remediators (Self Node Remediation, Fence Agents Remediation) | the node is being fenced and remediated (NoExecute) |
| `node.kubernetes.io/out-of-service` | an operator, Kubernetes' non-graceful node shutdown | the node is shut down (NoExecute) |
| `nvidia.com/gpu-xid-error`, `nvidia.com/gpu-nvlink-error`, `nvidia.com/syslog-xid-error`, `nvidia.com/gpu-error` | NVIDIA NVSentinel fault quarantine (`docs/INTEGRATIONS.md`) | GPU faults; NVSentinel taints only where its rule sets ask for a taint (its default only cordons) |

NVIDIA's maintenance-operator cordons and drains without a taint of its own: its NodeMaintenance
objects are what `nodeMaintenance` reads. A plain cordon by someone else is no taint either
(`node.kubernetes.io/unschedulable` is not in the list: noderoll's own cordon carries it too).

Checked here: each key is a valid taint key, at most once, and not noderoll's own
(`noderoll.io/...`). The rules are `planning/rollout/respect.py` (`held_by`, `may_start`); the listing and
the read before each hand-out read the NodeMaintenance objects (`kube/node_maintenance.py`). The fleet
does not start a held node (it keeps its place and mark) and counts it as unavailable by every budget
kind: a slot of its compartment's count budget, its capacity down for a floor, out for a topology
limit; a node cordoned by someone else takes a count-budget slot too. The policy's `status.waiting`
says why (rule `maintenance`, naming the taint or the NodeMaintenance; rule `count` when the count
budget is full of such nodes). `noderoll plan` reads the same objects and plans a held node as held.
"""

from __future__ import annotations

from pydantic import field_validator

from api import keys
from api.base import SpecModel
from api.selectors import check_label_key

# Key -> who sets it (the table above; shown in the reason of a held node).
TAINT_OWNERS: dict[str, str] = {
    "ToBeDeletedByClusterAutoscaler": "cluster-autoscaler",
    "DeletionCandidateOfClusterAutoscaler": "cluster-autoscaler",
    "karpenter.sh/disrupted": "Karpenter",
    "karpenter.sh/disruption": "Karpenter",
    "medik8s.io/drain": "medik8s node maintenance",
    "medik8s.io/remediation": "medik8s remediation",
    "node.kubernetes.io/out-of-service": "non-graceful node shutdown",
    "nvidia.com/gpu-xid-error": "NVSentinel",
    "nvidia.com/gpu-nvlink-error": "NVSentinel",
    "nvidia.com/syslog-xid-error": "NVSentinel",
    "nvidia.com/gpu-error": "NVSentinel",
}
DEFAULT_TAINTS: tuple[str, ...] = tuple(TAINT_OWNERS)


class RespectSpec(SpecModel):
    """`spec.respect`: taint keys and NodeMaintenance objects that hold a node for another maintenance."""

    # None: the default list (`DEFAULT_TAINTS`); a list replaces it.
    taints: list[str] | None = None
    node_maintenance: bool = True

    @field_validator("taints")
    @classmethod
    def _keys_valid(cls, value: list[str] | None) -> list[str] | None:
        seen: set[str] = set()
        for index, key in enumerate(value or []):
            try:
                check_label_key(key)
            except ValueError as err:
                raise ValueError(f"taints[{index}]: {str(err).replace('label key', 'taint key')}") from err
            if key.startswith(keys.PREFIX):
                raise ValueError(f"taints[{index}]: {key!r} is one of noderoll's own taints (a fleet never waits "
                                 "for its own marks); name another controller's taint")
            if key in seen:
                raise ValueError(f"taints[{index}]: {key!r} is listed twice; list each key once")
            seen.add(key)
        return value

    @property
    def taint_keys(self) -> tuple[str, ...]:
        """The keys in force: the given list, else the defaults."""
        return DEFAULT_TAINTS if self.taints is None else tuple(self.taints)

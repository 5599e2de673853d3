"""The per-node rules of targeting: is a node a candidate of a Package, does the Package have work there,
which taints block it. Pure (no I/O).

* a node is a candidate when the Package's `nodeSelector` matches its labels (no selector: every
  node); a node labelled `noderoll.io/ignore=true` is left out entirely (`is_candidate`);
* the Package has work there when the per-node plan has stages to run for it, or when the node's last
  GPU verify failed in a window of it (`needs_work`: `retry` runs that window again, api/verify.py);
* a `NoSchedule`/`NoExecute` taint the Package does not tolerate blocks it (`untolerated_taints`).
  Tolerated are: the Package's `additionalTolerations`, the cordon taint
  `node.kubernetes.io/unschedulable` (noderoll cordons itself) and, for `runtimeRequired`
  Packages, `noderoll.io/runtime-required`.

The fleet's selection applies them to every node and Package (`planning.rollout.fleet_targets`); which
nodes carry the runtime-required taint is `planning.node.runtime_taint`'s decision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from api import keys
from api.node_state import NodeState
from api.package import PackageSpec, Toleration
from planning.node.node_plan import plan_package

UNSCHEDULABLE_TAINT_KEY = "node.kubernetes.io/unschedulable"
_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass(frozen=True)
class NodeView:
    """One Node as the pure core sees it (built from `kube.node_snapshot.NodeFacts`)."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    # Each taint as {"key", "value", "effect"}.
    taints: Sequence[Mapping[str, str]] = ()
    state_annotation: str = ""
    # The `noderoll.io/status` label ("" when absent) and whether the condition
    # `noderoll.io/StateMalformed` is True: what the node shows now (planning/node/node_marks.py).
    status_label: str = ""
    state_malformed: bool = False
    # What capacity floors and topology limits read (planning/rollout/disruption.py): Ready (a node without the
    # condition is not), cordoned, and `status.allocatable` (resource -> quantity as the API writes it).
    ready: bool = False
    unschedulable: bool = False
    allocatable: Mapping[str, str] = field(default_factory=dict)
    # A NodeMaintenance of another requestor naming the node ("" = none, or not read): `<namespace>/<name>
    # (requestor <id>)`, filled by the fleet's listing when its policy respects them (planning/rollout/respect.py).
    maintenance: str = ""


def tolerates(toleration: Toleration, taint: Mapping[str, str]) -> bool:
    """Kubernetes toleration semantics: key (empty + Exists: any), operator, value, effect."""
    if toleration.effect and toleration.effect != taint.get("effect"):
        return False
    if not toleration.key:
        return toleration.operator == "Exists"
    if toleration.key != taint.get("key"):
        return False
    return toleration.operator == "Exists" or (toleration.value or "") == (taint.get("value") or "")


_TOLERATES_CORDON = Toleration(key=UNSCHEDULABLE_TAINT_KEY, operator="Exists")
_TOLERATES_RUNTIME_REQUIRED = Toleration(key=keys.RUNTIME_REQUIRED_TAINT_KEY, operator="Exists")


def untolerated_taints(spec: PackageSpec, taints: Sequence[Mapping[str, str]]) -> list[str]:
    """The node's blocking taints the package does not tolerate, as `key=value:effect` strings."""
    if not taints:
        return []  # most nodes: no tolerations built (a listing asks per node and Package)
    implicit = [_TOLERATES_CORDON]
    if spec.runtime_required:
        implicit.append(_TOLERATES_RUNTIME_REQUIRED)
    tolerations = [*spec.additional_tolerations, *implicit]
    bad = []
    for taint in taints:
        if taint.get("effect") not in _BLOCKING_EFFECTS:
            continue
        if not any(tolerates(t, taint) for t in tolerations):
            value = f"={taint.get('value')}" if taint.get("value") else ""
            bad.append(f"{taint.get('key')}{value}:{taint.get('effect')}")
    return bad


def is_candidate(spec: PackageSpec, labels: Mapping[str, str]) -> bool:
    """The package's nodeSelector matches and the node is not ignored."""
    if labels.get(keys.NODE_IGNORE_LABEL) == "true":
        return False
    return spec.node_selector is None or spec.node_selector.matches(labels)


def needs_work(package: str, spec: PackageSpec, recorded: NodeState, uninstall: bool) -> bool:
    """True when the per-node plan has stages to run for `package` on a node with `recorded`, or the
    node's failed GPU verify names it (its window runs again, then the verify)."""
    removing = uninstall or spec.uninstall_requested()
    if not removing and recorded.verify_failed is not None and package in recorded.verify_failed.packages:
        return True
    plan = plan_package(package, spec, recorded.packages.get(package), removing)
    return plan.has_work

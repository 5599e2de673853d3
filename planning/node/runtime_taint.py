"""The runtime-required taint: which nodes carry `noderoll.io/runtime-required`, and when it goes. Pure.

The taint `noderoll.io/runtime-required=true:NoSchedule` keeps workloads off a node until the
`runtimeRequired` Packages it needs are installed there (stage pods of runtimeRequired Packages
tolerate it). `decide_runtime_taint(RuntimeTaintInput) -> RuntimeTaintResult` decides for one
Node from what is stored in the cluster (the Node object, its `noderoll.io/state` annotation and
the Package objects), never from the bridge's memory, so a restarted or newly elected bridge
gives the same answer.

A runtimeRequired Package *gates* a node when its `nodeSelector` matches the node's labels (a node
labelled `noderoll.io/ignore=true` is gated by none) and its uninstall is not requested (a Package
being deleted gates nothing). It is *complete* on the node when the node's `noderoll.io/state`
records it complete at the desired version, image and config (nothing left to run there).

Removal: the taint, whoever added it (a provisioner's `--register-with-taints`, an operator,
noderoll), is removed only from a node that at least one runtimeRequired Package gates, and only
once every Package gating it is complete there (per node: other nodes do not matter). A node no
runtimeRequired Package gates keeps the taint, because noderoll cannot tell what it waits for: a
node tainted at provisioning before its Packages exist, or one whose only runtimeRequired Package
was deleted (remove the taint by hand then: `kubectl taint node NODE noderoll.io/runtime-required-`).

Addition (NodeWright's rule: nodes are gated when they join, not on every update). The taint is
added to a node gated by a Package that is not complete there when either
* the node *joined* while that Package existed: the Node's `creationTimestamp` is not older than
  the Package's (the same second counts as joined), and the Package has not been installed there
  yet: the node's state has no record of it, or only an install under way (action `install`, not
  complete; so a node whose first window started before the bridge saw it is still gated); or
* the node is labelled `noderoll.io/runtime-required-gate=true` (the opt-in): such a node is
  gated whenever a runtimeRequired Package gating it is not complete there, version and config
  changes included.
So a version or config change never taints a node that is already provisioned (its record is an
upgrade, a downgrade, a config change or a finished install), and a new runtimeRequired Package
does not taint the nodes that existed before it (they already run workloads; label them, or taint
them by hand, to gate them). A taint removed by hand from a provisioned node is not put back
(without the opt-in label). One update does count as an install: a re-install of the same version
from a rebuilt image, while it runs, on a node that joined after the Package.
NodeWright adds the taint only with `autoTaintNewNodes`, to nodes no NodeWright has touched;
noderoll always does it for joining nodes, and tainting at provisioning stays the race-free way.

An unreadable `noderoll.io/state` annotation leaves the taint as it is (neither added nor removed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from api import keys
from api.enums import PlanAction
from api.node_state import NodeState, parse_node_state
from api.package import PackageSpec
from planning.node.targets import NodeView, is_candidate, needs_work


@dataclass(frozen=True)
class RuntimePackage:
    """A Package as the taint rule sees it."""

    name: str
    spec: PackageSpec
    # The Package's metadata.creationTimestamp; None when unknown (no node counts as joined after it).
    created: datetime | None = None


@dataclass(frozen=True)
class RuntimeTaintInput:
    """One Node (with its creationTimestamp) and every valid Package that is not being deleted."""

    node: NodeView
    node_created: datetime | None
    packages: Sequence[RuntimePackage]


class TaintChange(StrEnum):
    """What to do with the node's runtime-required taint."""

    ADD = "add"
    REMOVE = "remove"


@dataclass(frozen=True)
class RuntimeTaintResult:
    """The change (None: leave the node as it is) and why, with the gating and pending Packages."""

    change: TaintChange | None
    reason: str
    gating: tuple[str, ...] = ()
    pending: tuple[str, ...] = ()


def has_runtime_required_taint(node: NodeView) -> bool:
    """True when the node carries `noderoll.io/runtime-required` (any value or effect)."""
    return any(t.get("key") == keys.RUNTIME_REQUIRED_TAINT_KEY for t in node.taints)


def gates(package: RuntimePackage, labels: dict[str, str]) -> bool:
    """True when `package` gates a node with these labels (module rules)."""
    spec = package.spec
    return spec.runtime_required and not spec.uninstall_requested() and is_candidate(spec, labels)


def is_complete(package: RuntimePackage, recorded: NodeState) -> bool:
    """Recorded complete on the node at the desired version, image and config."""
    entry = recorded.packages.get(package.name)
    if entry is None or not entry.is_complete():
        return False
    return not needs_work(package.name, package.spec, recorded, uninstall=False)


def not_installed(package: RuntimePackage, recorded: NodeState) -> bool:
    """No record of `package` on the node, or only an install under way (not yet provisioned there)."""
    entry = recorded.packages.get(package.name)
    if entry is None:
        return True
    # Records written before `action` existed carry None: an unfinished one is taken as an install.
    return entry.action in (PlanAction.INSTALL, None) and not entry.is_complete()


def joined_while(package: RuntimePackage, node_created: datetime | None) -> bool:
    """The node was created while `package` existed (same second included; unknown times: no)."""
    if package.created is None or node_created is None:
        return False
    return node_created >= package.created


def decide_runtime_taint(input: RuntimeTaintInput) -> RuntimeTaintResult:
    """Add, remove or leave the node's runtime-required taint (module rules)."""
    node = input.node
    labels = dict(node.labels)
    gating = sorted((p for p in input.packages if gates(p, labels)), key=lambda p: p.name)
    names = tuple(p.name for p in gating)
    if not gating:
        return RuntimeTaintResult(None, "no runtimeRequired Package targets the node")
    recorded, problem = parse_node_state(node.state_annotation)
    if problem is not None:
        return RuntimeTaintResult(None, f"noderoll.io/state unreadable, taint left as it is: {problem}", names)
    pending = [p for p in gating if not is_complete(p, recorded)]
    waiting = tuple(p.name for p in pending)
    if has_runtime_required_taint(node):
        if pending:
            return RuntimeTaintResult(None, f"not complete yet: {', '.join(waiting)}", names, waiting)
        return RuntimeTaintResult(
            TaintChange.REMOVE, f"every runtimeRequired Package targeting it is complete: {', '.join(names)}", names
        )
    if not pending:
        return RuntimeTaintResult(None, "complete", names)
    if labels.get(keys.RUNTIME_REQUIRED_GATE_LABEL) == "true":
        reason = f"labelled {keys.RUNTIME_REQUIRED_GATE_LABEL}=true; not complete: {', '.join(waiting)}"
        return RuntimeTaintResult(TaintChange.ADD, reason, names, waiting)
    joined = [p.name for p in pending if not_installed(p, recorded) and joined_while(p, input.node_created)]
    if joined:
        reason = f"joined while {', '.join(joined)} existed, not installed there yet"
        return RuntimeTaintResult(TaintChange.ADD, reason, names, waiting)
    return RuntimeTaintResult(None, f"already provisioned or older than the Package: {', '.join(waiting)}", names, waiting)

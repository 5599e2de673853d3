"""Target selection of a fleet: per node, which of the fleet's Packages its next window carries. Pure.

`select_fleet(FleetQuery)` classifies every (node, Package) pair of a snapshot of the Nodes. Per
Package the rules of `planning.node.targets` hold:
* candidate: the Package's `nodeSelector` matches (no selector: every node) and the node is not
  labelled `noderoll.io/ignore=true`; for an uninstall: the Package is recorded on the node;
* `done`: the per-node plan has no work for it (recorded at the desired version and config),
  decided before taints, so a node rebooted by another window is not "blocked";
* a Package carried by the node's window in flight is the fleet's own whatever the node's taints
  (its own reboot makes the node NotReady);
* `blocked`: an untolerated `NoSchedule`/`NoExecute` taint (reason: the taints), or a
  `noderoll.io/state` annotation that cannot be read (the node is held for an operator:
  nothing is re-run over state noderoll cannot read);
* `paused`: work to do, but the Package is paused (kept out of new windows);
* `waiting`: work to do, but a `dependsOn` Package is neither recorded complete on the node at the
  required version nor `pending` there at that version in this fleet (a dependency in the same
  fleet travels in the same window, before its dependent); a dependency that is paused, blocked or
  waiting itself makes its dependents wait (a fixpoint);
* `pending`: everything else with work: it goes into the node's next window.
A node with at least one Package pending or done is `eligible` (the batch planner's nodes; budgets
are percentages of them); a node whose Packages are all blocked, waiting or paused is not.
For a policy with capacity floors or topology limits (`FleetQuery.supply`), each node also carries
its allocatable units of the floors' resources (`capacity`) and why it is down (`down`: in a window,
cordoned, NotReady; `planning/rollout/disruption.py`); with other maintenance respected (`FleetQuery.respect`,
`spec.respect`) every node says why it is down, a node held by a respected taint or a NodeMaintenance
of another requestor with that reason (`planning/rollout/respect.py`). The fingerprint leaves out drain-ahead's
`noderoll.io/upcoming` label and taint and a skipped window's `noderoll.io/skipped` label: a fleet's own
mark is no change of the node.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from api import keys
from api.enums import NodeStatus
from api.node_state import NodeState, held_reason, parse_node_state
from api.package import PackageSpec
from api.quantity import parse_quantity
from api.versions import same_version
from planning.node.node_plan import complete_version
from planning.node.targets import NodeView, is_candidate, needs_work, untolerated_taints
from planning.rollout.compartments import NodeInfo
from planning.rollout.disruption import DOWN_CORDONED, DOWN_NOT_READY, DOWN_WINDOW
from planning.rollout.respect import Respect, maintenance_reason


@dataclass(frozen=True)
class FleetPackage:
    """One Package of the fleet as target selection needs it."""

    spec: PackageSpec
    uninstall: bool = False
    paused: bool = False


@dataclass(frozen=True)
class FleetQuery:
    """A snapshot of the Nodes and the fleet's Packages."""

    packages: Mapping[str, FleetPackage]
    nodes: Sequence[NodeView]
    # node -> Packages its window in flight carries.
    in_flight: Mapping[str, Collection[str]] = field(default_factory=dict)
    # Label keys the policy's compartment selectors and topology limits read (the only labels kept).
    label_keys: Collection[str] = ()
    # Capacity floors and topology limits: report each node's units of `resources` and why it is down.
    supply: bool = False
    resources: Collection[str] = ()
    # Other maintenance respected (`spec.respect`, planning/rollout/respect.py): report why each node is down,
    # a node another maintenance holds with that reason. None: not asked (listings before it).
    respect: Respect | None = None


@dataclass
class NodeTargets:
    """What each Package targeting one node needs there."""

    pending: list[str] = field(default_factory=list)
    done: list[str] = field(default_factory=list)
    paused: list[str] = field(default_factory=list)
    # Package -> reason.
    blocked: dict[str, str] = field(default_factory=dict)
    waiting: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    # Digest of the node's labels, taints and state annotation: changes when the node does.
    fingerprint: str = ""
    # With `FleetQuery.supply`: allocatable units of the floors' resources, and why the node is down.
    capacity: dict[str, int] = field(default_factory=dict)
    down: str = ""

    @property
    def eligible(self) -> bool:
        """The node belongs to the batch planner: some Package is pending or done there."""
        return bool(self.pending or self.done)

    def packages(self) -> list[str]:
        """Every Package of the fleet that targets this node."""
        return sorted({*self.pending, *self.done, *self.paused, *self.blocked, *self.waiting})


@dataclass
class FleetSelection:
    """Node name -> its targets, for every node at least one Package of the fleet targets."""

    nodes: dict[str, NodeTargets] = field(default_factory=dict)

    def eligible(self) -> list[NodeInfo]:
        """The planner's nodes (sorted by name) with the labels its compartments read."""
        return [NodeInfo(name, t.labels) for name, t in sorted(self.nodes.items()) if t.eligible]


def fingerprint(node: NodeView) -> str:
    """A short digest of what target selection reads of `node` (drain-ahead's mark and the skipped label left out)."""
    taints = sorted(f"{t.get('key')}={t.get('value')}:{t.get('effect')}" for t in node.taints
                    if t.get("key") != keys.UPCOMING_KEY)
    labels = sorted((k, v) for k, v in node.labels.items() if k not in (keys.UPCOMING_KEY, keys.SKIPPED_LABEL))
    text = "\n".join([*(f"{k}={v}" for k, v in labels), *taints, node.state_annotation])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def down_reason(node: NodeView, respect: Respect | None = None) -> str:
    """Why the node's capacity does not count now ("" = it counts): in a window, held by another
    maintenance that `respect` respects (the taint or NodeMaintenance named), cordoned, NotReady."""
    if node.status_label == NodeStatus.IN_PROGRESS.value:
        return DOWN_WINDOW
    held = maintenance_reason(node, respect)
    if held:
        return held
    if node.unschedulable:
        return DOWN_CORDONED
    return "" if node.ready else DOWN_NOT_READY


def selected_when_down(node: NodeView) -> bool:
    """A `down_only` read of the nodes (`read_node_supply`, issue 45) selects `node` by itself: it is cordoned
    or in a node window (what the apiserver selects with `spec.unschedulable=true` and the label
    `noderoll.io/status=in-progress`)."""
    return node.unschedulable or node.status_label == NodeStatus.IN_PROGRESS.value


def supply_read(nodes: Collection[NodeView], named: Collection[str], down_only: bool) -> list[NodeView]:
    """What a read of the nodes returns: the named ones and, `down_only`, every one `selected_when_down`."""
    wanted = set(named)
    return [n for n in nodes if n.name in wanted or (down_only and selected_when_down(n))]


def units(node: NodeView, resources: Collection[str]) -> dict[str, int]:
    """The node's allocatable units of each of `resources` it has (a quantity that does not parse: none)."""
    out = {}
    for resource in resources:
        raw = node.allocatable.get(resource)
        if raw is None:
            continue
        try:
            out[resource] = int(parse_quantity(raw))
        except ValueError:
            continue
    return out


def _supply(node: NodeView, query: FleetQuery, targets: NodeTargets) -> None:
    """The node's units of the floors' resources (floors asked) and why it is down (floors or respect asked)."""
    if query.supply:
        targets.capacity = units(node, query.resources)
    if query.supply or query.respect is not None:
        targets.down = down_reason(node, query.respect)


def _targets(name: str, package: FleetPackage, labels: Mapping[str, str], recorded: NodeState) -> bool:
    if package.uninstall:
        return name in recorded.packages
    return is_candidate(package.spec, labels)


def _dependency_reason(
    spec: PackageSpec, targets: NodeTargets, packages: Mapping[str, FleetPackage], recorded: NodeState
) -> str | None:
    for dep, version in sorted(spec.depends_on.items()):
        if dep in targets.pending:
            if same_version(packages[dep].spec.version, version):
                continue
            return f"waits for dependency {dep} {version} ({packages[dep].spec.version} is being rolled out)"
        if dep in targets.paused:
            return f"waits for dependency {dep} {version} (paused)"
        if dep in targets.blocked or dep in targets.waiting:
            return f"waits for dependency {dep} {version} (not updatable on this node)"
        installed = complete_version(recorded, dep)
        if installed is None:
            return f"waits for dependency {dep} {version} (not complete on this node)"
        if not same_version(installed, version):
            return f"waits for dependency {dep} {version} ({installed} is installed)"
    return None


def classify_node(node: NodeView, query: FleetQuery) -> NodeTargets | None:
    """One node's targets for the query's Packages (None: it has none); `select_fleet` for every node."""
    recorded, problem = parse_node_state(node.state_annotation)
    ours = set(query.in_flight.get(node.name, ()))
    targets = NodeTargets(
        labels={k: v for k, v in node.labels.items() if k in query.label_keys},
        fingerprint=fingerprint(node),
    )
    _supply(node, query, targets)
    ignored = node.labels.get(keys.NODE_IGNORE_LABEL) == "true"
    for name, package in sorted(query.packages.items()):
        if ignored and not package.uninstall:
            continue
        if problem is not None:
            # Garbage in the annotation: nothing can be known about this node, so nothing runs there.
            if name in ours:
                targets.pending.append(name)  # its window in flight writes the node's state next
            elif is_candidate(package.spec, node.labels):
                targets.blocked[name] = held_reason(problem)
            continue
        if not _targets(name, package, node.labels, recorded):
            continue
        if not needs_work(name, package.spec, recorded, package.uninstall):
            targets.done.append(name)
            continue
        bad = [] if name in ours else untolerated_taints(package.spec, node.taints)
        if bad:
            targets.blocked[name] = f"taints not tolerated: {', '.join(bad)}"
        elif package.paused and name not in ours:
            targets.paused.append(name)
        else:
            targets.pending.append(name)
    # Dependencies: a fixpoint, because a dependent of a waiting dependency waits too.
    changed = True
    while changed:
        changed = False
        for name in list(targets.pending):
            package = query.packages[name]
            if package.uninstall or name in ours:
                continue
            reason = _dependency_reason(package.spec, targets, query.packages, recorded)
            if reason:
                targets.pending.remove(name)
                targets.waiting[name] = reason
                changed = True
    return targets if targets.packages() else None


def select_fleet(query: FleetQuery) -> FleetSelection:
    """Classify every (node, Package) pair of the snapshot (module rules)."""
    selection = FleetSelection()
    for node in sorted(query.nodes, key=lambda n: n.name):
        targets = classify_node(node, query)
        if targets is not None:
            selection.nodes[node.name] = targets
    return selection


def dependency_packages(packages: Mapping[str, FleetPackage]) -> list[str]:
    """Packages whose records a listing must keep: the fleet's and every `dependsOn` target."""
    names = set(packages)
    for package in packages.values():
        names |= set(package.spec.depends_on)
    return sorted(names)

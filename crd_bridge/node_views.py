"""The bridge's per-Node view, kept up to date from the Node watch. Pure data (no I/O).

The status poller needs, every round and for every Package, each Node as the planners see it
(`planning.node.targets.NodeView`: labels, taints, the state annotation) and the Nodes whose drain is
blocked (`noderoll.io/Draining`). Building them from the cached objects on every poll converted
every Node once per Package per round: a third of the bridge's CPU at 1,000 nodes (issue #26,
docs/benchmarks.md). Here each Node is converted once per watch event that changes it (ADDED,
MODIFIED, or a SYNC's listing), and the poller reads the views as they are.

The poller also publishes, per Package, its target nodes per (state, stage) of their state annotations
(`metrics.set_package_nodes`). Computed afresh that parsed every Node's annotation for every Package every
round: at 10,000 nodes a tenth of a core (issue 45). `package_counts` keeps, per Package asked for, its target
nodes' keys and the sums, moved by each Node event; a Package whose spec changed is counted afresh.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from api.node_state import NodeState, parse_node_state
from api.package import PackageSpec
from crd_bridge.node_changes import node_view
from crd_bridge.progress_metrics import count_key
from metrics import NodeCount
from planning.node.drain import read_drain_condition
from planning.node.targets import NodeView, is_candidate

NODE_KIND = "Node"  # crd_bridge.watcher's (not imported: the cache stays free of the client)


def _blocked(obj: Mapping[str, Any]) -> bool:
    condition = read_drain_condition((obj.get("status") or {}).get("conditions") or [])
    return condition is not None and condition.blocked


@dataclass
class PackageCounts:
    """One Package's target nodes: each one's (state, stage) key, and how many nodes have each key."""

    spec: PackageSpec
    keys: dict[str, tuple[str, str]] = field(default_factory=dict)
    totals: dict[tuple[str, str], int] = field(default_factory=dict)

    def place(self, package: str, name: str, view: NodeView | None, state: tuple[NodeState, str] | None) -> None:
        """The node's key now (none when it is gone or no longer a target)."""
        old = self.keys.pop(name, None)
        if old is not None:
            self.totals[old] -= 1
            if not self.totals[old]:
                del self.totals[old]
        if view is None or state is None or not is_candidate(self.spec, view.labels):
            return
        key = count_key(package, *state)
        self.keys[name] = key
        self.totals[key] = self.totals.get(key, 0) + 1


@dataclass
class NodeViews:
    """Per Node name: its `NodeView`, and the Node objects whose drain is blocked."""

    views: dict[str, NodeView] = field(default_factory=dict)
    draining: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    # Conversions made (one per Node event): what a test counts.
    conversions: int = 0
    # Per Node its state annotation parsed (and why it cannot be read); per Package asked for, its counts.
    states: dict[str, tuple[NodeState, str]] = field(default_factory=dict)
    counts: dict[str, PackageCounts] = field(default_factory=dict)

    def put(self, obj: Mapping[str, Any]) -> None:
        """A Node added or changed."""
        name = str((obj.get("metadata") or {}).get("name", ""))
        view = node_view(obj)
        self.views[name] = view
        self.conversions += 1
        if _blocked(obj):
            self.draining[name] = obj
        else:
            self.draining.pop(name, None)
        self.states[name] = parse_node_state(view.state_annotation or None)
        for package, counted in self.counts.items():
            counted.place(package, name, view, self.states[name])

    def remove(self, name: str) -> None:
        """A Node deleted."""
        self.views.pop(name, None)
        self.draining.pop(name, None)
        self.states.pop(name, None)
        for package, counted in self.counts.items():
            counted.place(package, name, None, None)

    def replace(self, objects: Iterable[Mapping[str, Any]]) -> None:
        """A new listing (the watch's SYNC): every Node afresh."""
        self.views.clear()
        self.draining.clear()
        self.states.clear()
        self.counts.clear()
        for obj in objects:
            self.put(obj)

    def package_counts(self, package: str, spec: PackageSpec) -> list[NodeCount]:
        """`package`'s target nodes per (state, stage) (`crd_bridge.progress_metrics.node_counts`), kept up to date
        from then on; counted afresh when its spec changed."""
        counted = self.counts.get(package)
        if counted is None or counted.spec != spec:
            counted = PackageCounts(spec)
            for name, view in self.views.items():
                counted.place(package, name, view, self.states.get(name))
            self.counts[package] = counted
        return [NodeCount(state, stage, count) for (state, stage), count in sorted(counted.totals.items())]

    def forget_package(self, package: str) -> None:
        """Stop counting `package` (it is gone)."""
        self.counts.pop(package, None)


def is_node(kind: str) -> bool:
    """True for the Node kind (the only kind with views)."""
    return kind == NODE_KIND

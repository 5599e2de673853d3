"""The bridge's per-Node view, kept up to date from the Node watch. Pure data (no I/O).

The status poller needs, every round and for every Package, each Node as the planners see it
(`planning.node.targets.NodeView`: labels, taints, the state annotation) and the Nodes whose drain is
blocked (`noderoll.io/Draining`). Building them from the cached objects on every poll converted
every Node once per Package per round: a third of the bridge's CPU at 1,000 nodes (issue #26,
docs/benchmarks.md). Here each Node is converted once per watch event that changes it (ADDED,
MODIFIED, or a SYNC's listing), and the poller reads the views as they are.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from crd_bridge.node_changes import node_view
from planning.node.drain import read_drain_condition
from planning.node.targets import NodeView

NODE_KIND = "Node"  # crd_bridge.watcher's (not imported: the cache stays free of the client)


def _blocked(obj: Mapping[str, Any]) -> bool:
    condition = read_drain_condition((obj.get("status") or {}).get("conditions") or [])
    return condition is not None and condition.blocked


@dataclass
class NodeViews:
    """Per Node name: its `NodeView`, and the Node objects whose drain is blocked."""

    views: dict[str, NodeView] = field(default_factory=dict)
    draining: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    # Conversions made (one per Node event): what a test counts.
    conversions: int = 0

    def put(self, obj: Mapping[str, Any]) -> None:
        """A Node added or changed."""
        name = str((obj.get("metadata") or {}).get("name", ""))
        self.views[name] = node_view(obj)
        self.conversions += 1
        if _blocked(obj):
            self.draining[name] = obj
        else:
            self.draining.pop(name, None)

    def remove(self, name: str) -> None:
        """A Node deleted."""
        self.views.pop(name, None)
        self.draining.pop(name, None)

    def replace(self, objects: Iterable[Mapping[str, Any]]) -> None:
        """A new listing (the watch's SYNC): every Node afresh."""
        self.views.clear()
        self.draining.clear()
        for obj in objects:
            self.put(obj)


def is_node(kind: str) -> bool:
    """True for the Node kind (the only kind with views)."""
    return kind == NODE_KIND

"""The bridge's view of the cluster: every Package, DeploymentPolicy and Node by name. Pure data (no I/O).

Nodes also as the planners see them (`nodes`, crd_bridge/node_views.py), kept up to date by the same events.

Filled by the watchers' events on the event loop only (so no locks): a SYNC replaces a kind's
objects wholesale, ADDED/MODIFIED store, DELETED removes. `apply` returns the object before the
event, which the Node handling compares with the new one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from crd_bridge.node_views import NodeViews, is_node
from crd_bridge.watcher import SYNC, WatchEvent


@dataclass
class ObjectCache:
    """Objects by kind and name, and which kinds have been listed at least once."""

    objects: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    synced: set[str] = field(default_factory=set)
    # Each Node as the planners see it, converted once per event (crd_bridge/node_views.py).
    nodes: NodeViews = field(default_factory=NodeViews)

    def of(self, kind: str) -> dict[str, dict[str, Any]]:
        """Every cached object of `kind`, by name (the live dict: do not modify)."""
        return self.objects.setdefault(kind, {})

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        """One object, or None."""
        return self.of(kind).get(name)

    def apply(self, event: WatchEvent) -> dict[str, Any] | None:
        """Apply a watch event; returns the previous object (for SYNC: None)."""
        store = self.of(event.kind)
        node = is_node(event.kind)
        if event.type == SYNC:
            self.objects[event.kind] = {_name(o): o for o in event.objects}
            self.synced.add(event.kind)
            if node:
                self.nodes.replace(event.objects)
            return None
        name = _name(event.obj)
        if event.type == "DELETED":
            if node:
                self.nodes.remove(name)
            return store.pop(name, None)
        previous = store.get(name)
        store[name] = event.obj
        if node:
            self.nodes.put(event.obj)
        return previous


def _name(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))

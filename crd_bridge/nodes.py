"""Node events -> `nodes_changed` and `availability_changed` to the fleets concerned, and the
runtime-required taint. Does I/O.

Decisions are pure (`crd_bridge.node_changes`); this module applies them. `nodes_changed` is
debounced: the fleets of the Packages concerned are collected and signalled once per flush (many
nodes joining at once cost one signal per fleet, not one per node). `availability_changed` (a node
cordoned, uncordoned or turned NotReady/Ready by someone else) is coalesced over a short interval
(`crd_bridge.availability`): one signal per fleet carrying every node noted since. The
runtime-required taint is decided per Node by `planning.node.runtime_taint` on the cached object and written with
`kube.taints.set_runtime_required_taint`, guarded by that object's resourceVersion: a Node
that changed since is left alone, and its newer version (the watch event marks the taints dirty)
is decided again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from api.package import PackageSpec
from crd_bridge.availability import COALESCE_SECONDS, AvailabilityNotes
from crd_bridge.node_changes import (
    availability_change,
    fleets_targeting,
    fleets_uninstalling_on,
    packages_to_notify,
    reset_from_annotation,
    runtime_package,
    runtime_taint_input,
)
from crd_bridge.reconciler import Reconciler
from kube.node_snapshot import node_facts
from kube.node_snapshot import node_view as as_view
from kube.taints import SetTaintInput, set_runtime_required_taint
from planning.node.runtime_taint import RuntimePackage, TaintChange, decide_runtime_taint
from protocol.fleet import NodeReset
from protocol.names import SIGNAL_AVAILABILITY_CHANGED, SIGNAL_NODES_CHANGED, fleet_name

log = logging.getLogger("noderoll.bridge.nodes")


class NodeHandler:
    """What the leader does when Nodes change."""

    def __init__(self, reconciler: Reconciler, coalesce_seconds: float = COALESCE_SECONDS) -> None:
        self.reconciler = reconciler
        self.to_notify: set[str] = set()
        self.availability = AvailabilityNotes(coalesce_seconds)
        # `noderoll.io/reset` annotations to hand to node workflows, and the (node, id) pairs handed over.
        self.resets: dict[str, NodeReset] = {}
        self._resets_sent: set[tuple[str, str]] = set()

    def specs(self) -> dict[str, PackageSpec]:
        """Specs of the valid Packages that are not being deleted."""
        return {n: c.package.spec for n, c in self.reconciler.valid.items() if c.package is not None}

    def note_change(self, previous: Mapping[str, Any] | None, current: Mapping[str, Any]) -> None:
        """Remember which fleets must hear about this Node change (DELETED: `current` is the old object)."""
        before = node_facts(previous) if previous is not None else None
        after = node_facts(current)
        old = as_view(before) if before is not None else None
        specs = self.specs()
        view = as_view(after)
        for package in packages_to_notify(old, view, specs):
            self.to_notify.add(fleet_name(specs[package].deployment_policy))
        self.to_notify.update(fleets_uninstalling_on(old, view, self.reconciler.sent))
        if availability_change(before, after):
            views = (view,) if old is None else (old, view)
            self.availability.note(fleets_targeting(views, specs, self.reconciler.sent), after.name, time.monotonic())
        self.note_reset(current)

    def note_reset(self, obj: Mapping[str, Any]) -> None:
        """Queue the reset a Node's `noderoll.io/reset` annotation asks for (once per node and id)."""
        request = reset_from_annotation(obj)
        name = str((obj.get("metadata") or {}).get("name", ""))
        if request is not None and (name, request.id) not in self._resets_sent:
            self.resets[name] = request

    async def flush(self) -> float | None:
        """Signal `nodes_changed` to each noted fleet whose workflow runs, and `availability_changed`
        once its notes are due; returns the seconds until the next notes are due (None: none pending)."""
        resets, self.resets = dict(self.resets), {}
        for node, request in sorted(resets.items()):
            try:
                await self.reconciler.fleets.reset_node(node, request)
                self._resets_sent.add((node, request.id))
                log.info("node %s: reset %s handed to node/%s", node, request.id, node)
            except Exception as err:  # noqa: BLE001 - retried at the next resync (the annotation stays)
                log.warning("node %s: reset %s not handed over: %s", node, request.id, err)
        fleets, self.to_notify = sorted(self.to_notify), set()
        for fleet in fleets:
            if fleet not in self.reconciler.active:
                continue
            try:
                await self.reconciler.fleets.signal(fleet, SIGNAL_NODES_CHANGED)
            except Exception as err:  # noqa: BLE001 - the fleet re-lists on its own timer anyway
                log.info("nodes_changed to fleet %s not delivered: %s", fleet, err)
        for fleet, message in self.availability.take(time.monotonic()).items():
            if fleet not in self.reconciler.active:
                continue
            try:
                await self.reconciler.fleets.signal(fleet, SIGNAL_AVAILABILITY_CHANGED, message)
            except Exception as err:  # noqa: BLE001 - the fleet reads the nodes afresh when a window starts
                log.info("availability_changed (%s) to fleet %s not delivered: %s",
                         ", ".join(message.nodes), fleet, err)
        return self.availability.due_in(time.monotonic())

    def runtime_packages(self) -> list[RuntimePackage]:
        """The valid, not-deleting runtimeRequired Packages (the only ones the taint rule looks at)."""
        return [
            runtime_package(c.package) for c in self.reconciler.valid.values()
            if c.package is not None and c.package.spec.runtime_required
        ]

    async def sync_taints(self, nodes: Iterable[Mapping[str, Any]]) -> int:
        """Add or remove the runtime-required taint where the rule says so; returns how many Nodes changed."""
        packages = self.runtime_packages()
        if not packages:
            return 0  # no runtimeRequired Package gates any node: nothing is added or removed
        changed = 0
        for obj in nodes:
            result = decide_runtime_taint(runtime_taint_input(obj, packages))
            if result.change is None:
                continue
            meta = obj.get("metadata") or {}
            name, version = str(meta.get("name", "")), str(meta.get("resourceVersion") or "")
            request = SetTaintInput(name, result.change is TaintChange.ADD, resource_version=version or None)
            if await asyncio.to_thread(set_runtime_required_taint, request):
                verb = "added" if request.present else "removed"
                log.info("node %s: runtime-required taint %s (%s)", name, verb, result.reason)
                changed += 1
        return changed

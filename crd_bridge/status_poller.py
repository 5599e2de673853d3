"""Status of running fleets: query `progress`, render each Package's and the policy's status, publish metrics. Does I/O.

Every `status_seconds` the leader asks each active fleet for its `progress` and, for every Package
object the fleet carries, writes the status rendered by `planning.views.status.render_package_status`
from `progress.packages[name]` (only when it changed: the writer compares). `observedGeneration`
is the generation the fleet rolls out for that Package, so `kubectl wait --for=condition=Ready`
means "this generation rolled out". A Package being deleted whose fleet reports it uninstalled is
reconciled at once (its finalizer goes). The DeploymentPolicy gets its fleet's phase, wave, batch
and nodes. The target nodes whose drain waits come from the cached Nodes' `noderoll.io/Draining`
condition (`planning.node.drain.drain_blocks`: the fleet does not know about a drain until its node
answers). A fleet that ended (its last Package went) leaves the active list. Nodes are read from
the views the Node watch keeps (`ObjectCache.nodes`), not converted again on every poll.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from temporalio.service import RPCError, RPCStatusCode

import metrics
from api import keys
from api.enums import ConditionType
from crd_bridge.decisions import RolloutState
from crd_bridge.fleets import raw_fleet
from crd_bridge.progress_metrics import publish_fleet, publish_progress
from crd_bridge.protection import with_condition
from crd_bridge.reconciler import Reconciler
from crd_bridge.status_writer import StatusWrite, without_empty_strings, write_status
from metrics import set_package_nodes
from planning.node.drain import drain_blocks
from planning.views.status import package_view, render_package_status
from protocol.names import DEFAULT_FLEET

log = logging.getLogger("noderoll.bridge.status")
IN_USE = ConditionType.IN_USE.value


class StatusPoller:
    """Refreshes the status of every Package of the active fleets; `reconcile_soon(name)` re-reconciles a Package."""

    def __init__(self, reconciler: Reconciler, reconcile_soon: Callable[[str], None]) -> None:
        self.reconciler = reconciler
        self.reconcile_soon = reconcile_soon

    async def poll_once(self) -> None:
        """One round over the active fleets."""
        for fleet in sorted(self.reconciler.active):
            try:
                await self.refresh(fleet)
            except Exception as err:  # noqa: BLE001 - one fleet's failure must not stop the others
                log.warning("status of fleet %s not refreshed: %s", fleet, err)

    async def refresh(self, fleet: str) -> None:
        """Write the status of every Package of `fleet`, and of its DeploymentPolicy."""
        rec = self.reconciler
        try:
            progress = await rec.fleets.progress(fleet)
        except RPCError as err:
            if err.status is RPCStatusCode.NOT_FOUND or await rec.fleets.state(fleet) is not RolloutState.RUNNING:
                self._ended(fleet)
                return
            raise
        rec.progress[fleet] = progress
        publish_fleet(fleet, progress)
        found = rec.usage()
        for name, report in sorted(progress.packages.items()):
            obj = rec.cache.get(keys.PACKAGE_KIND, name)
            # The phase gauge shows what the Package shows (`Blocked` for a Complete rollout with blocked nodes).
            publish_progress(name, package_view(report))
            if obj is None or raw_fleet(obj) != fleet and not obj["metadata"].get("deletionTimestamp"):
                continue
            if obj["metadata"].get("deletionTimestamp"):
                if report.uninstalled:
                    self.reconcile_soon(name)
                continue
            if rec.valid.get(name) is None:
                continue  # invalid: its status says so (the reconciler writes it)
            previous = obj.get("status") or {}
            # Drains that wait on someone else's pods, from the cached Nodes' `noderoll.io/Draining`.
            blocked = drain_blocks(name, rec.cache.nodes.draining.values())
            status = render_package_status(report, report.generation, previous, blocked, progress.global_rollout)
            # Deletion protection's condition (the reconciler writes it too: both render the same).
            status = with_condition(status, rec.in_use_condition(keys.PACKAGE_KIND, obj, found), IN_USE)
            if await asyncio.to_thread(write_status, StatusWrite(keys.PACKAGE_KIND, name, status, previous)):
                # Keep the cache's copy current: the next round compares with what we just wrote.
                obj["status"] = without_empty_strings(status)
            self._publish_nodes(name)
        if fleet != DEFAULT_FLEET:
            await rec.write_policy_status(fleet)

    def _ended(self, fleet: str) -> None:
        rec = self.reconciler
        rec.active.discard(fleet)
        rec.progress.pop(fleet, None)
        metrics.set_fleet_eta(fleet, None, None)
        spec = rec.forget_fleet(fleet)
        # Its Packages (if any object is left) are reconciled: a fleet that closed while Packages
        # name it (terminated by hand) is started again by its next fleet reconcile.
        for entry in spec.packages if spec else []:
            self.reconcile_soon(entry.name)

    def _publish_nodes(self, name: str) -> None:
        check = self.reconciler.valid.get(name)
        if check is None or check.package is None:
            return
        # Kept by the Node watch (crd_bridge/node_views.py): nothing parsed or counted per poll (issue 45).
        set_package_nodes(name, self.reconciler.cache.nodes.package_counts(name, check.package.spec))

"""Status of running rollouts: query `progress`, render, hand to the status writer, publish metrics. Does I/O.

Every `status_seconds` the leader asks each running rollout for its `progress` and writes the
Package status rendered by `planning.status.render_package_status` (only when it changed: the writer
compares), with the target nodes whose drain waits (`planning.drain.drain_blocks` over the cached
Nodes' `noderoll.io/Draining` condition: the rollout does not know about a drain until its node
answers). `observedGeneration` is the generation the rollout was last given (the last-handled
record), so `kubectl wait --for=condition=Ready` means "this generation rolled out". A Package being
deleted is checked for its rollout's end instead, so its finalizer goes as soon as the uninstall is
done. Rollout gauges (`publish_progress`, node counts from the cached Nodes' state annotations) and
budget gauges (`publish_budget` from each budget workflow's query) are set here too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from temporalio.service import RPCError, RPCStatusCode

from api import keys
from api.policy import DEFAULT_COMPARTMENT
from crd_bridge.decisions import RolloutState
from crd_bridge.node_changes import node_view
from crd_bridge.reconciler import Reconciler
from crd_bridge.status_writer import StatusWrite, without_empty_strings, write_status
from planning.drain import drain_blocks
from planning.status import package_view, render_package_status
from planning.targets import is_candidate
from worker.metrics import node_counts, publish_budget, publish_progress, set_package_nodes
from workflows.messages import QUERY_BUDGET_STATUS, BudgetStatus

log = logging.getLogger("noderoll.bridge.status")


class StatusPoller:
    """Refreshes the status of every active Package; `reconcile_soon(name)` is called on rollout end."""

    def __init__(self, reconciler: Reconciler, reconcile_soon: Callable[[str], None]) -> None:
        self.reconciler = reconciler
        self.reconcile_soon = reconcile_soon

    async def poll_once(self) -> None:
        """One round over the active Packages and the budgets of the known policies."""
        for name in sorted(self.reconciler.active):
            try:
                await self.refresh(name)
            except Exception as err:  # noqa: BLE001 - one Package's failure must not stop the others
                log.warning("status of Package %s not refreshed: %s", name, err)
        await self._publish_budgets()

    async def refresh(self, name: str) -> None:
        """Write one Package's status from its rollout's progress."""
        rec = self.reconciler
        obj = rec.cache.get(keys.PACKAGE_KIND, name)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            # Deleting (or gone): what matters is when the rollout ends (uninstall done).
            if await rec.rollouts.state(name) is not RolloutState.RUNNING:
                rec.active.discard(name)
                self.reconcile_soon(name)
                return
        try:
            progress = await rec.rollouts.progress(name)
        except RPCError as err:
            if err.status is RPCStatusCode.NOT_FOUND:
                rec.active.discard(name)
                self.reconcile_soon(name)
                return
            raise
        # The phase gauge shows what the Package shows (`Blocked` for a Complete rollout with blocked nodes).
        publish_progress(name, package_view(progress))
        if obj is None:
            return
        record = rec.last_handled(name, obj)
        generation = record.generation if record is not None else int(obj["metadata"].get("generation") or 0)
        previous = obj.get("status") or {}
        # Drains that wait on someone else's pods, from the cached Nodes' `noderoll.io/Draining`.
        blocked = drain_blocks(name, rec.cache.of("Node").values())
        status = render_package_status(progress, generation, previous, blocked)
        if await asyncio.to_thread(write_status, StatusWrite(keys.PACKAGE_KIND, name, status, previous)):
            # Keep the cache's copy current: the next round compares with what we just wrote.
            obj["status"] = without_empty_strings(status)
        self._publish_nodes(name)

    def _publish_nodes(self, name: str) -> None:
        check = self.reconciler.valid.get(name)
        if check is None or check.package is None:
            return
        spec = check.package.spec
        views = [node_view(n) for n in self.reconciler.cache.of("Node").values()]
        annotations = [v.state_annotation or None for v in views if is_candidate(spec, v.labels)]
        set_package_nodes(name, node_counts(name, annotations))

    async def _publish_budgets(self) -> None:
        """Budget gauges of every compartment of the valid policies in use (absent budgets skipped)."""
        compartments: set[tuple[str, str]] = set()
        for check in self.reconciler.valid.values():
            if check.policy is None:
                continue
            names = [c.name for c in check.policy.spec.compartments] + [DEFAULT_COMPARTMENT]
            compartments |= {(check.policy.name, c) for c in names}
        client = self.reconciler.rollouts.client
        for policy, compartment in sorted(compartments):
            handle = client.get_workflow_handle(keys.budget_workflow_id(policy, compartment))
            try:
                status = await handle.query(QUERY_BUDGET_STATUS, result_type=BudgetStatus)
            except RPCError:
                continue  # no lease was ever asked in this compartment: no budget workflow yet
            except Exception as err:  # noqa: BLE001 - a closed budget without a worker to replay it
                log.debug("budget %s/%s not queried: %s", policy, compartment, err)
                continue
            publish_budget(policy, compartment, status)

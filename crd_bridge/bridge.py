"""The bridge process: watches feed a cache, the leader reconciles from it. Does I/O.

Concurrency model: one asyncio loop owns every piece of state (cache, dirty sets, reconciler);
the three watchers (DeploymentPolicy, Package, Node) run the sync `kubernetes` client in threads
and post events to the loop; blocking writes run via `asyncio.to_thread`. Tasks on the loop, each a
`crd_bridge.loops.run_forever` loop (any exception, e.g. from an apiserver restart, is logged and
retried with backoff: a task must never end while the bridge runs):
* `_lead_once`: leader election every `retry_seconds` (or always leader with election off); on gaining
  the Lease everything is marked dirty, on losing it the reconciler forgets its memory;
* `_work_once`: reconciles dirty policies, then dirty Packages, then dirty fleets (each hands its
  fleet the desired state when it changed, once the fleet's objects were quiet `settle_seconds`, so
  objects applied together reach the fleet as one change set), one at a time, then, after a full pass, syncs the
  runtime-required taints and flushes `nodes_changed` and, once due, `availability_changed` (a
  wake-up is set for notes not due yet); a failed reconcile is counted
  (`noderoll_bridge_reconcile_errors_total`) and retried after `RETRY_SECONDS`;
* `_poll_once`: the status poller every `status_seconds`;
* `_resync_once`: every `resync_seconds` marks everything dirty (level-triggered: lost events, Temporal
  outages and closed fleets all heal) and hands an empty desired state to running fleets of this task
  queue that no Package names any more (they end).
Replicas that do not lead keep their caches warm and do nothing else.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from dataclasses import dataclass, field

from api import keys
from crd_bridge.availability import COALESCE_SECONDS
from crd_bridge.cache import ObjectCache
from crd_bridge.fleet_client import Fleets
from crd_bridge.fleets import raw_fleet
from crd_bridge.leader import LeaderElector, LeaseSettings
from crd_bridge.loops import Loop, run_forever
from crd_bridge.nodes import NodeHandler
from crd_bridge.protection import package_ref
from crd_bridge.reconciler import Reconciler
from crd_bridge.status_poller import StatusPoller
from crd_bridge.watcher import NODE_KIND, SYNC, Watcher, WatchEvent, read_as_watched
from metrics import record_reconcile_error
from protocol.names import DEFAULT_FLEET

log = logging.getLogger("noderoll.bridge")
KINDS = (keys.POLICY_KIND, keys.PACKAGE_KIND, NODE_KIND)
# Reconcile-error metric label of fleet reconciles.
FLEET = "Fleet"
RETRY_SECONDS = 5.0


@dataclass(frozen=True)
class BridgeOptions:
    """Timings and leader election of one bridge process."""

    resync_seconds: float = 30.0
    status_seconds: float = 3.0
    # None: no leader election (a single replica).
    lease: LeaseSettings | None = None
    # Only Packages and DeploymentPolicies with these labels (a shard; tests sharing one cluster).
    label_selector: str = ""
    # A fleet is handed its desired state only once its Packages and policy were quiet this long, so
    # objects applied together (`kubectl apply -f dir/`, a GitOps sync) reach it as one change set:
    # one wave, one window per node, instead of a wave per object.
    settle_seconds: float = 2.0
    # Nodes cordoned, uncordoned or turned NotReady/Ready by someone else within this long of the
    # first reach each fleet in one `availability_changed` (crd_bridge/availability.py).
    availability_seconds: float = COALESCE_SECONDS
    # The fleets it starts re-list on `nodes_changed` at most this often (`FleetInput.relist_min_seconds`).
    fleet_relist_min_seconds: int = 30
    # While windows are out, the fleets it starts check this often that their node workflows still run.
    fleet_watchdog_seconds: int = 60


@dataclass
class Dirty:
    """Objects waiting for a reconcile, by kind."""

    packages: set[str] = field(default_factory=set)
    policies: set[str] = field(default_factory=set)
    fleets: set[str] = field(default_factory=set)
    taints: bool = False


class Bridge:
    """Runs until `stop` is set (see the module docstring)."""

    def __init__(self, fleets: Fleets, options: BridgeOptions) -> None:
        self.options = options
        self.cache = ObjectCache()
        live = functools.partial(read_as_watched, label_selector=options.label_selector)
        self.reconciler = Reconciler(self.cache, fleets, live)
        self.nodes = NodeHandler(self.reconciler, options.availability_seconds)
        self.poller = StatusPoller(self.reconciler, self._mark_package)
        self.elector = LeaderElector(options.lease) if options.lease is not None else None
        self.dirty = Dirty()
        self._wake = asyncio.Event()
        self._passes = 0
        # Fleet -> monotonic time of the last change of one of its Packages or its policy.
        self._changed_at: dict[str, float] = {}
        # Whether the last leader-election round found us leading (transitions are logged and acted on).
        self._leading = False

    def is_leader(self) -> bool:
        """True when this replica may act (always, without leader election)."""
        return self.elector is None or self.elector.is_leader()

    # --- events --------------------------------------------------------------------------------

    def _mark_package(self, name: str) -> None:
        self.dirty.packages.add(name)
        self._wake.set()

    def _mark_all(self) -> None:
        self.dirty.packages |= set(self.cache.of(keys.PACKAGE_KIND))
        self.dirty.policies |= set(self.cache.of(keys.POLICY_KIND))
        self.dirty.fleets |= {raw_fleet(o) for o in self.cache.of(keys.PACKAGE_KIND).values()}
        self.dirty.fleets |= set(self.reconciler.sent)
        self.dirty.taints = True
        self._wake.set()

    def on_event(self, event: WatchEvent) -> None:
        """A watcher's event (called on the loop): update the cache, mark what needs a reconcile."""
        previous = self.cache.apply(event)
        if event.type == SYNC:
            # Whichever kind is listed last completes the sync: reconcile everything then.
            self._mark_all()
            return
        name = str(event.obj.get("metadata", {}).get("name", ""))
        if event.kind == keys.PACKAGE_KIND:
            self._changed_at[raw_fleet(event.obj)] = time.monotonic()
            self.dirty.packages.add(name)
            # Another Package's dependsOn may name this one: reconcile its dependents too.
            self.dirty.packages |= {
                n for n, o in self.cache.of(keys.PACKAGE_KIND).items()
                if name in ((o.get("spec") or {}).get("dependsOn") or {})
            }
            self.dirty.taints = True
            # Deletion protection: what this Package uses, before and after the event, is reconciled too.
            for obj in (previous, event.obj):
                if obj is not None:
                    self.dirty.packages |= set(package_ref(obj).depends_on) & set(self.cache.of(keys.PACKAGE_KIND))
                    if raw_fleet(obj) != DEFAULT_FLEET:
                        self.dirty.policies.add(raw_fleet(obj))
        elif event.kind == keys.POLICY_KIND:
            self._changed_at[name] = time.monotonic()
            self.dirty.policies.add(name)
        elif self.is_leader():
            self.nodes.note_change(previous, event.obj)
            if event.type != "DELETED":
                self.dirty.taints = True
        self._wake.set()

    # --- tasks ---------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Start the watchers and tasks; return after `stop` is set and everything has ended."""
        loop = asyncio.get_running_loop()
        watchers = [Watcher(kind, loop, self.on_event, self.options.label_selector) for kind in KINDS]
        for watcher in watchers:
            watcher.start()
        loops = [
            Loop("work", self._work_once, 0.0, sleep_first=False),
            Loop("status", self._poll_once, self.options.status_seconds),
            Loop("resync", self._resync_once, self.options.resync_seconds),
        ]
        if self.elector is not None:
            loops.append(Loop("leader", self._lead_once, self.elector.settings.retry_seconds, sleep_first=False))
        tasks = [asyncio.create_task(run_forever(loop)) for loop in loops]
        try:
            await stop.wait()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for watcher in watchers:
                watcher.stop()
            if self.elector is not None:
                await asyncio.to_thread(self.elector.release)

    async def _lead_once(self) -> None:
        """One round of leader election; gaining the Lease marks everything dirty, losing it forgets."""
        assert self.elector is not None
        try:
            now_leading = await asyncio.to_thread(self.elector.try_acquire_or_renew)
        except Exception:
            # Not renewed this round: still leading only while the last renew is young enough.
            self._note_leadership(self.elector.is_leader())
            raise
        self._note_leadership(now_leading)

    def _note_leadership(self, now_leading: bool) -> None:
        if now_leading and not self._leading:
            log.info("leading as %s", self.elector.settings.identity if self.elector else "the only replica")
            self._mark_all()
        elif self._leading and not now_leading:
            log.warning("lost the Lease; standing by")
            self.reconciler.forget_memory()
        self._leading = now_leading

    def _synced(self) -> bool:
        return all(kind in self.cache.synced for kind in KINDS)

    async def _work_once(self) -> None:
        """Wait for something dirty, then one pass (run by `run_forever`: an error backs off and retries)."""
        if self.dirty.policies or self.dirty.packages or self.dirty.taints or self.dirty.fleets - self._settling():
            self._wake.set()  # left over from a pass that failed (settling fleets have their own wake-up)
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._synced() or not self.is_leader():
                continue
            while self.dirty.policies and self.is_leader():
                name = self.dirty.policies.pop()
                try:
                    self.dirty.packages.update(await self.reconciler.reconcile_policy(name))
                except Exception:  # noqa: BLE001 - counted, logged, retried
                    self._failed(keys.POLICY_KIND, name)
            while self.dirty.packages and self.is_leader():
                name = self.dirty.packages.pop()
                try:
                    self.dirty.fleets.update(await self.reconciler.reconcile_package(name))
                except Exception:  # noqa: BLE001 - counted, logged, retried
                    self._failed(keys.PACKAGE_KIND, name)
            settling = self._settling()
            while self.dirty.fleets - settling and self.is_leader():
                fleet = min(self.dirty.fleets - settling)
                self.dirty.fleets.discard(fleet)
                try:
                    await self.reconciler.reconcile_fleet(fleet)
                except Exception:  # noqa: BLE001 - counted, logged, retried
                    self._failed(FLEET, fleet)
            if not self.is_leader():
                continue
            self._passes += 1
            # Taints before `nodes_changed`: a joining node is tainted before its rollout hears of it.
            if self.dirty.taints:
                self.dirty.taints = False
                await self._sync_taints()
            due = await self.nodes.flush()
            if due is not None:
                asyncio.get_running_loop().call_later(max(due, 0.05), self._wake.set)
            return

    def _settling(self) -> set[str]:
        """Dirty fleets whose objects changed less than `settle_seconds` ago; a wake-up is set for each."""
        now, settle = time.monotonic(), self.options.settle_seconds
        waiting = {f for f in self.dirty.fleets if now - self._changed_at.get(f, 0.0) < settle}
        if waiting:
            due = min(self._changed_at[f] + settle for f in waiting) - now
            asyncio.get_running_loop().call_later(max(due, 0.05), self._wake.set)
        return waiting

    async def _sync_taints(self) -> None:
        try:
            await self.nodes.sync_taints(list(self.cache.of(NODE_KIND).values()))
        except Exception:  # noqa: BLE001 - counted, logged, retried
            log.exception("runtime-required taints not synced")
            record_reconcile_error(NODE_KIND)
            asyncio.get_running_loop().call_later(RETRY_SECONDS, self._retry_taints)

    def _retry_taints(self) -> None:
        self.dirty.taints = True
        self._wake.set()

    def _failed(self, kind: str, name: str) -> None:
        log.exception("reconcile of %s/%s failed; retrying in %.0fs", kind, name, RETRY_SECONDS)
        record_reconcile_error(kind)
        target = {keys.POLICY_KIND: self.dirty.policies, FLEET: self.dirty.fleets}.get(kind, self.dirty.packages)

        def retry() -> None:
            target.add(name)
            self._wake.set()

        asyncio.get_running_loop().call_later(RETRY_SECONDS, retry)

    async def _poll_once(self) -> None:
        if self.is_leader() and self._synced():
            await self.poller.poll_once()

    async def _resync_once(self) -> None:
        if not (self.is_leader() and self._synced()):
            return
        self._mark_all()
        for node in self.cache.of(NODE_KIND).values():
            # A `noderoll.io/reset` set while no bridge led (or not handed over yet): handed over now.
            self.nodes.note_reset(node)
        try:
            await self._end_orphans()
        except Exception as err:  # noqa: BLE001 - visibility may be briefly unavailable
            log.warning("orphaned fleets not checked: %s", err)

    async def _end_orphans(self) -> None:
        """Running fleets of this task queue that no Package names (any more) are reconciled: they end."""
        named = {raw_fleet(o) for o in self.cache.of(keys.PACKAGE_KIND).values()}
        for fleet in await self.reconciler.fleets.running():
            if fleet not in named:
                self.reconciler.active.add(fleet)
                self.dirty.fleets.add(fleet)
        self._wake.set()


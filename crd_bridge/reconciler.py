"""Level-triggered reconciles: a Package object, a fleet, a DeploymentPolicy. Does I/O (Kubernetes, Temporal).

* `reconcile_package(name)`: validates the Package against the cached Packages and policies, edits
  its finalizer, writes an invalid status (`decisions.decide_package`), and returns the fleets whose
  desired state may have changed. An invalid verdict that read a cached policy or dependency older
  than the apiserver's (its watch event not delivered yet) waits for that event instead;
* `reconcile_fleet(name)`: assembles the fleet's desired state (`fleets.desired_fleet`) and hands it
  over (signal-with-start `desired`) when it differs from what was last handed over, with an Event
  on each Package whose entry changed. What was handed over is remembered; after a restart it is
  read back from the running fleet (query), so nothing is resent blind;
* `reconcile_policy(name)`: writes the policy's status (validity, and the fleet's progress when the
  status poller has it) and returns the Packages naming it (their validity depends on it); a new
  analysis gate failure in that progress (`status.gateFailure` with a time the status did not show
  yet) gets one Warning Event `GateFailed` on the policy, and a finished canary rollback (a phase
  other than `RollingBack` the status did not show yet for that wave) one Warning Event `CanaryRolledBack`,
  and a halt of the promotion across clusters (`status.globalRollout.halted`, new) one `GlobalHalted`.
* deletion protection of both kinds (`protect`, rules in `crd_bridge.protection`): the finalizer
  `noderoll.io/in-use` while other Packages use the object, the condition `InUse`, and a Warning
  Event `DeletionBlocked` while its deletion waits for them.
Blocking Kubernetes calls run in threads; the reconciler itself runs on the event loop only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from temporalio.service import RPCError

from api import keys
from api.enums import ConditionType
from crd_bridge import events
from crd_bridge.cache import ObjectCache
from crd_bridge.decisions import Action, PackageFacts, RolloutState, decide_package
from crd_bridge.fleet_client import Fleets
from crd_bridge.fleets import Change, FleetFacts, desired_fleet, package_changes, raw_fleet, spec_digest
from crd_bridge.fleets import PackageFacts as FleetPackageFacts
from crd_bridge.package_meta import set_finalizer
from crd_bridge.progress_metrics import set_rollout_phase
from crd_bridge.protection import (
    FinalizerAction,
    InUse,
    Usage,
    decide_finalizer,
    in_use_condition,
    package_ref,
    usage,
    users_text,
    with_condition,
)
from crd_bridge.status_writer import StatusWrite, without_empty_strings, write_status
from crd_bridge.validation import PackageCheck, check_package, parse_policy, references
from metrics import forget_package
from planning.rollout.fleet_rollback import rollback_event
from planning.rollout.gates import failure_text
from planning.views.fleet_status import FleetProgress
from planning.views.status import global_halt_event, render_invalid_package_status, render_policy_status
from protocol.fleet import FleetSpec
from protocol.names import DEFAULT_FLEET, global_workflow_id

log = logging.getLogger("noderoll.bridge.reconcile")

# (kind, name) -> the object as this bridge's watch delivers it, read from the apiserver now; or None.
LiveRead = Callable[[str, str], dict[str, Any] | None]

_CHANGE_EVENTS = {
    Change.ADDED: (events.ROLLOUT_STARTED, "handed to {fleet} (generation {generation})"),
    Change.SPEC: (events.SPEC_CHANGED, "generation {generation} handed to {fleet}"),
    Change.PAUSED: (events.PAUSED, "kept out of new windows of {fleet} (spec.paused or noderoll.io/pause)"),
    Change.RESUMED: (events.RESUMED, "back in the windows of {fleet}"),
    Change.UNINSTALL: (events.DELETING, "Package deleted: {fleet} uninstalls it first"),
}


def _resource_version(obj: dict[str, Any] | None) -> str | None:
    return None if obj is None else str((obj.get("metadata") or {}).get("resourceVersion"))


def now_rfc3339() -> str:
    """The current time as metav1.Time (seconds precision, `Z`)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Reconciler:
    """Reconciles Packages, fleets and DeploymentPolicies from the cache (see the module docstring)."""

    def __init__(self, cache: ObjectCache, fleets: Fleets, live: LiveRead) -> None:
        self.cache = cache
        self.fleets = fleets
        # Reads one object from the apiserver as this bridge's watch delivers it, with its label
        # selector (`crd_bridge.watcher.read_as_watched`; `_cache_behind`).
        self.live = live
        # Desired state last handed to each fleet, and its digest.
        self.sent: dict[str, FleetSpec] = {}
        self._sent_digest: dict[str, str] = {}
        # Fleets whose workflow runs (the status poller's list).
        self.active: set[str] = set()
        # Valid, not-deleting Package checks by name (Node handling and taints read their specs).
        self.valid: dict[str, PackageCheck] = {}
        # The latest progress of each fleet (the status poller fills it; the policy status shows it).
        self.progress: dict[str, FleetProgress] = {}
        # Fleets found running on another task queue (warned once).
        self._warned_queue: set[str] = set()
        # (policy, reason) -> the message of the last announcement Event emitted (`_announce_once`).
        self._announced: dict[tuple[str, str], str] = {}
        # (kind, name) -> the users last named in a `DeletionBlocked` Event.
        self._blocked_shown: dict[tuple[str, str], list[str]] = {}

    def forget_memory(self) -> None:
        """Drop what this process remembers (leadership lost: another bridge may have acted since)."""
        self.sent.clear()
        self._sent_digest.clear()

    def forget_fleet(self, fleet: str) -> FleetSpec | None:
        """A fleet that ended: forget what it was handed (its next reconcile starts it again if needed)."""
        self._sent_digest.pop(fleet, None)
        return self.sent.pop(fleet, None)

    def fleets_carrying(self, package: str) -> set[str]:
        """Fleets whose last handed-over desired state carries `package`."""
        return {f for f, spec in self.sent.items() if any(e.name == package for e in spec.packages)}

    # --- Packages --------------------------------------------------------------------------------

    async def reconcile_package(self, name: str) -> set[str]:
        """Bring the Package object in line (finalizer, invalid status); return the fleets to reconcile."""
        obj = self.cache.get(keys.PACKAGE_KIND, name)
        if obj is None:
            self.valid.pop(name, None)
            forget_package(name)
            return self.fleets_carrying(name)
        meta = obj["metadata"]
        check = check_package(obj, self.cache.of(keys.PACKAGE_KIND), self.cache.of(keys.POLICY_KIND))
        deleting = bool(meta.get("deletionTimestamp"))
        if check.package is None and not deleting and (behind := await self._cache_behind(obj)):
            # Not Invalid: the watch has yet to deliver what the verdict read, and delivering it marks
            # this Package for another reconcile (Bridge.on_event, reconcile_policy).
            log.info("Package %s: judged once the watch delivers the current %s", name, ", ".join(behind))
            return set()
        found = self.usage()
        if check.package is not None and not deleting:
            self.valid[name] = check
        else:
            self.valid.pop(name, None)
        fleet = raw_fleet(obj)
        spec = check.package.spec if check.package is not None else None
        carried = False
        if deleting:
            wanted = desired_fleet(fleet, self._fleet_facts(fleet, found), await self._previous(fleet))
            report = self.progress.get(fleet)
            uninstalled = report is not None and report.packages.get(name) is not None and \
                report.packages[name].uninstalled
            # Carried until its fleet reports it uninstalled everywhere (or never handed over at all).
            carried = any(e.name == name for e in wanted.packages) and not uninstalled
        facts = PackageFacts(
            name=name, valid=check.package is not None, deleting=deleting,
            has_finalizer=keys.FINALIZER in (meta.get("finalizers") or []),
            uninstall_enabled=bool(spec and spec.uninstall.enabled), carried=carried,
        )
        for action in decide_package(facts):
            await self._act(action, obj, check, facts)
        await self.protect(keys.PACKAGE_KIND, obj, found)
        return {fleet} | self.fleets_carrying(name)

    async def _cache_behind(self, obj: dict[str, Any]) -> list[str]:
        """The objects Package `obj`'s verdict read whose cached copy is not the apiserver's current one.

        A policy applied just before its Packages can reach the cache after them (one watch per
        kind): the Package would be reported Invalid ("no DeploymentPolicy") for the moment in
        between. Only the invalid verdict is checked, so a valid Package costs no read.
        """
        behind = []
        for kind, name in references(obj):
            live = await asyncio.to_thread(self.live, kind, name)
            if _resource_version(live) != _resource_version(self.cache.get(kind, name)):
                behind.append(f"{kind} {name}")
        return behind

    async def _act(self, action: Action, obj: dict[str, Any], check: PackageCheck, facts: PackageFacts) -> None:
        name = facts.name
        # The invalid status is re-rendered on every resync (written only when changed): not worth a line.
        (log.debug if action is Action.WRITE_INVALID_STATUS else log.info)("Package %s: %s", name, action.value)
        if action is Action.ADD_FINALIZER:
            await asyncio.to_thread(set_finalizer, name, True)
        elif action is Action.REMOVE_FINALIZER:
            if await asyncio.to_thread(set_finalizer, name, False) and facts.deleting:
                self._event(obj, events.NORMAL, events.FINALIZER_REMOVED, "uninstalled; finalizer removed")
            if facts.deleting:
                forget_package(name)
        elif action is Action.WRITE_INVALID_STATUS:
            await self._write_invalid(obj, check, int(obj["metadata"].get("generation") or 0))

    async def _write_invalid(self, obj: dict[str, Any], check: PackageCheck, generation: int) -> None:
        name = obj["metadata"]["name"]
        previous = obj.get("status") or {}
        status = render_invalid_package_status(check.problems, generation, now_rfc3339(), previous)
        status = with_condition(status, self.in_use_condition(keys.PACKAGE_KIND, obj), ConditionType.IN_USE.value)
        write = StatusWrite(keys.PACKAGE_KIND, name, status, previous)
        if await asyncio.to_thread(write_status, write):
            # Only when the status changed: a resync does not repeat the Event.
            message = "; ".join(f"{p.field}: {p.message}" for p in check.problems)
            self._event(obj, events.WARNING, events.INVALID_SPEC, message)
            set_rollout_phase(name, str(status.get("phase", "Invalid")))

    def _event(self, obj: dict[str, Any], type_: str, reason: str, message: str, kind: str = keys.PACKAGE_KIND) -> None:
        note = events.EventNote(kind, obj, type_, reason, message)
        # Fire and forget in a thread: Events are advisory and must not slow the reconcile.
        asyncio.get_running_loop().run_in_executor(None, events.emit, note)

    # --- fleets -------------------------------------------------------------------------------------

    def _fleet_facts(self, fleet: str, found: Usage | None = None) -> FleetFacts:
        found = found if found is not None else self.usage()
        carried = {e.name for e in (self.sent[fleet].packages if fleet in self.sent else [])}
        facts = FleetFacts()
        for name, obj in sorted(self.cache.of(keys.PACKAGE_KIND).items()):
            named = raw_fleet(obj)
            if named != fleet and name not in carried:
                continue
            meta = obj.get("metadata") or {}
            check = self.valid.get(name)
            deleting = bool(meta.get("deletionTimestamp"))
            package = check.package if check is not None else None
            if deleting and package is None:
                package = check_package(obj, self.cache.of(keys.PACKAGE_KIND), self.cache.of(keys.POLICY_KIND)).package
            facts.packages.append(FleetPackageFacts(
                name=name, fleet=named, package=package, deleting=deleting,
                has_finalizer=keys.FINALIZER in (meta.get("finalizers") or []), held=name in found.held,
            ))
        if fleet != DEFAULT_FLEET:
            raw = self.cache.get(keys.POLICY_KIND, fleet)
            if raw is not None:
                facts.policy, _problems = parse_policy(raw)
        return facts

    async def _previous(self, fleet: str) -> FleetSpec | None:
        """What was last handed to `fleet`: remembered, else read back from the running fleet."""
        if fleet in self.sent:
            return self.sent[fleet]
        if await self.fleets.state(fleet) is not RolloutState.RUNNING:
            return None
        try:
            spec = await self.fleets.desired(fleet)
        except RPCError as err:
            log.info("fleet %s did not answer its desired state (%s); assembling it from the cluster", fleet, err)
            return None
        if spec is not None:
            self.sent[fleet] = spec
            self._sent_digest[fleet] = spec_digest(spec)
            self.active.add(fleet)
        return spec

    async def reconcile_fleet(self, fleet: str) -> None:
        """Hand `fleet/<fleet>` its desired state when it changed since it was last handed over."""
        previous = await self._previous(fleet)
        spec = desired_fleet(fleet, self._fleet_facts(fleet), previous)
        digest = spec_digest(spec)
        if digest == self._sent_digest.get(fleet):
            return
        if not spec.packages and (previous is None or not previous.packages):
            # Nothing to roll out and nothing handed over: no fleet to start.
            return
        if fleet not in self._warned_queue and (queue := await self.fleets.foreign_queue(fleet)):
            # Workers poll this bridge's queue: a fleet on another one would never act on what it is given.
            self._warned_queue.add(fleet)
            log.warning("%s runs on task queue %r, this bridge serves %r: its desired state reaches it, but only "
                        "workers polling %r act on it (terminate it to start it on %r)",
                        self.fleets.workflow_id(fleet), queue, self.fleets.task_queue, queue, self.fleets.task_queue)
        await self.fleets.send(spec)
        log.info("%s: desired state handed over (%d Package(s))", self.fleets.workflow_id(fleet), len(spec.packages))
        self.sent[fleet], self._sent_digest[fleet] = spec, digest
        self.active.add(fleet)
        for name, changes in package_changes(previous, spec).items():
            obj = self.cache.get(keys.PACKAGE_KIND, name)
            entry = next((e for e in spec.packages if e.name == name), None)
            if obj is None or entry is None:
                continue
            for change in changes:
                reason, text = _CHANGE_EVENTS[change]
                self._event(obj, events.NORMAL, reason,
                            text.format(fleet=self.fleets.workflow_id(fleet), generation=entry.generation))

    # --- DeploymentPolicies ----------------------------------------------------------------------

    async def reconcile_policy(self, name: str) -> list[str]:
        """Write the policy's status; return the Packages naming it (their validity depends on it)."""
        obj = self.cache.get(keys.POLICY_KIND, name)
        if obj is not None:
            await self.write_policy_status(name)
            await self.protect(keys.POLICY_KIND, obj, self.usage())
        return sorted(p for p, o in self.cache.of(keys.PACKAGE_KIND).items() if raw_fleet(o) == name)

    async def write_policy_status(self, name: str) -> None:
        """The DeploymentPolicy's status: `Valid`, and its fleet's phase, wave, batch and nodes."""
        obj = self.cache.get(keys.POLICY_KIND, name)
        if obj is None:
            return
        _policy, problems = parse_policy(obj)
        previous = obj.get("status") or {}
        generation = int(obj["metadata"].get("generation") or 0)
        status = render_policy_status(problems, generation, now_rfc3339(), previous, self.progress.get(name))
        if "fleet" in status:
            status["fleet"] = self.fleets.workflow_id(name)  # fleet/<cluster>/<policy> in a named cluster
        status = with_condition(status, self.in_use_condition(keys.POLICY_KIND, obj), ConditionType.IN_USE.value)
        changed = await asyncio.to_thread(write_status, StatusWrite(keys.POLICY_KIND, name, status, previous))
        if changed and problems:
            self._event(obj, events.WARNING, events.INVALID_SPEC,
                        "; ".join(f"{p.field}: {p.message}" for p in problems), kind=keys.POLICY_KIND)
        report = self.progress.get(name)
        if changed and report is not None and report.gate_failure is not None and \
                (previous.get("gateFailure") or {}).get("time") != report.gate_failure.at:
            self._announce_once(obj, events.GATE_FAILED,
                                f"{self.fleets.workflow_id(name)} halted: {failure_text(report.gate_failure)}")
        rolled_back = rollback_event(previous.get("rollback"), report.rollback if report is not None else None)
        if changed and rolled_back:
            self._announce_once(obj, events.CANARY_ROLLED_BACK, f"{self.fleets.workflow_id(name)}: {rolled_back}")
        halted = global_halt_event(previous.get("globalRollout"), report.global_rollout if report is not None else None)
        if changed and halted:
            self._announce_once(obj, events.GLOBAL_HALTED, f"{global_workflow_id(name)} halted every cluster: {halted}")
        if changed:
            obj["status"] = status

    def _announce_once(self, policy: dict[str, Any], reason: str, message: str) -> None:
        """A Warning Event on the policy, unless this bridge already emitted the same message for it.

        The callers compare with the status the cache holds (so a restarted bridge does not repeat an
        announcement its predecessor wrote); but the watch can briefly put back an older status after
        a write, and the next status write would then announce the same gate failure or rollback again
        (seen: two `CanaryRolledBack` Events for one rollback). The messages name the failure's time or
        the wave, so a new failure or rollback still gets its own Event."""
        key = (policy["metadata"]["name"], reason)
        if self._announced.get(key) == message:
            return
        self._announced[key] = message
        self._event(policy, events.WARNING, reason, message, kind=keys.POLICY_KIND)

    # --- deletion protection (crd_bridge.protection) ----------------------------------------------

    def usage(self) -> Usage:
        """Who uses which Package and policy, from the cached Packages."""
        return usage(package_ref(o) for o in self.cache.of(keys.PACKAGE_KIND).values())

    def users(self, kind: str, name: str, found: Usage | None = None) -> list[str]:
        """The active Packages using Package or DeploymentPolicy `name`."""
        found = found if found is not None else self.usage()
        return (found.policy_users if kind == keys.POLICY_KIND else found.package_users).get(name, [])

    def in_use_condition(self, kind: str, obj: dict[str, Any], found: Usage | None = None) -> dict[str, Any] | None:
        """The object's `InUse` condition now (None: it never had users)."""
        meta = obj["metadata"]
        subject = InUse(kind, self.users(kind, meta["name"], found), bool(meta.get("deletionTimestamp")),
                        int(meta.get("generation") or 0))
        return in_use_condition(subject, now_rfc3339(), (obj.get("status") or {}).get("conditions") or [])

    async def protect(self, kind: str, obj: dict[str, Any], found: Usage) -> None:
        """The in-use finalizer, the `InUse` condition and the `DeletionBlocked` Event of one object."""
        meta = obj["metadata"]
        name, deleting = meta["name"], bool(meta.get("deletionTimestamp"))
        users = self.users(kind, name, found)
        plural = keys.POLICY_PLURAL if kind == keys.POLICY_KIND else keys.PACKAGE_PLURAL
        action = decide_finalizer(users, meta.get("finalizers") or [], deleting)
        if action is not None:
            log.info("%s %s: %s (%s)", kind, name, action.value, users_text(kind, users) if users else "unused")
            await asyncio.to_thread(set_finalizer, name, action is FinalizerAction.ADD, keys.IN_USE_FINALIZER, plural)
        previous = obj.get("status") or {}
        status = with_condition(previous, self.in_use_condition(kind, obj, found), ConditionType.IN_USE.value)
        if await asyncio.to_thread(write_status, StatusWrite(kind, name, status, previous)):
            obj["status"] = without_empty_strings(status)
        key = (kind, name)
        if deleting and users and self._blocked_shown.get(key) != users:
            self._blocked_shown[key] = list(users)
            self._event(obj, events.WARNING, events.DELETION_BLOCKED,
                        f"deletion waits: {users_text(kind, users)}", kind=kind)
        elif not users:
            self._blocked_shown.pop(key, None)

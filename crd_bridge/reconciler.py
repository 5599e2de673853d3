"""One level-triggered reconcile of a Package or a DeploymentPolicy. Does I/O (Kubernetes, Temporal).

`reconcile_package(name)` observes (the cached object, its check against the cached Packages and
policies, the rollout's state, the last-handled record), asks `decisions.decide_package` what to do,
and does it: finalizer edits, start or signals, the invalid status and its Warning Event, then
stores the new record. `reconcile_policy(name)` writes the policy's `Valid` condition and returns
the Packages that use the policy (their reconcile sends the new policy as `spec_changed`).
Blocking Kubernetes calls run in threads (`asyncio.to_thread`); the reconciler itself only runs on
the event loop, one object at a time.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

from api import keys
from crd_bridge import events
from crd_bridge.cache import ObjectCache
from crd_bridge.decisions import Action, PackageFacts, RolloutState, decide_package
from crd_bridge.handled import LAST_HANDLED_ANNOTATION, LastHandled, parse_last_handled
from crd_bridge.package_meta import record_handled, set_finalizer
from crd_bridge.rollouts import Rollouts
from crd_bridge.status_writer import StatusWrite, write_status
from crd_bridge.validation import PackageCheck, check_package, parse_policy
from planning.status import render_invalid_package_status, render_policy_status
from worker.metrics import forget_package, set_rollout_phase
from workflows.messages import SIGNAL_PACKAGE_DELETED, SIGNAL_SPEC_CHANGED, RolloutInput, SpecChange

log = logging.getLogger("noderoll.bridge.reconcile")


def now_rfc3339() -> str:
    """The current time as metav1.Time (seconds precision, `Z`)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Reconciler:
    """Reconciles Packages and DeploymentPolicies from the cache (see the module docstring)."""

    def __init__(self, cache: ObjectCache, rollouts: Rollouts) -> None:
        self.cache = cache
        self.rollouts = rollouts
        # Records written by this process (newer than the cached annotation until the watch catches up).
        self.handled: dict[str, LastHandled] = {}
        # Packages whose rollout runs (the status poller's list).
        self.active: set[str] = set()
        # Valid, not-deleting Package checks by name (Node handling and taints read their specs).
        self.valid: dict[str, PackageCheck] = {}
        self._deleting_noted: set[str] = set()

    def forget_memory(self) -> None:
        """Drop what this process remembers (leadership lost: another bridge may have acted since)."""
        self.handled.clear()

    def last_handled(self, name: str, obj: dict[str, Any]) -> LastHandled | None:
        """The newest record for the Package's current uid: ours from memory, else the annotation."""
        uid = str(obj["metadata"].get("uid", ""))
        mine = self.handled.get(name)
        if mine is not None and mine.uid == uid:
            return mine
        return parse_last_handled((obj["metadata"].get("annotations") or {}).get(LAST_HANDLED_ANNOTATION))

    # --- Packages --------------------------------------------------------------------------------

    async def reconcile_package(self, name: str) -> None:
        """Bring `package/<name>` in line with the Package object (or its absence)."""
        obj = self.cache.get(keys.PACKAGE_KIND, name)
        if obj is None:
            await self._package_gone(name)
            return
        meta = obj["metadata"]
        check = check_package(obj, self.cache.of(keys.PACKAGE_KIND), self.cache.of(keys.POLICY_KIND))
        deleting = bool(meta.get("deletionTimestamp"))
        if check.package is not None and not deleting:
            self.valid[name] = check
        else:
            self.valid.pop(name, None)
        spec = check.package.spec if check.package is not None else None
        facts = PackageFacts(
            name=name,
            uid=str(meta.get("uid", "")),
            generation=int(meta.get("generation") or 0),
            valid=check.package is not None,
            deleting=deleting,
            has_finalizer=keys.FINALIZER in (meta.get("finalizers") or []),
            uninstall_enabled=bool(spec and spec.uninstall.enabled),
            paused=bool(check.package and check.package.paused),
            policy=check.policy_revision,
        )
        state = await self.rollouts.state(name)
        decision = decide_package(facts, state, self.last_handled(name, obj))
        for action in decision.actions:
            await self._act(action, obj, check, facts)
        if decision.record is not None and await asyncio.to_thread(record_handled, name, decision.record):
            self.handled[name] = decision.record
        if state is RolloutState.RUNNING or Action.START in decision.actions:
            self.active.add(name)
        elif deleting or not facts.valid:
            self.active.discard(name)

    async def _package_gone(self, name: str) -> None:
        """The Package object is gone (deleted without finalizer): end a rollout still running."""
        self.valid.pop(name, None)
        self.handled.pop(name, None)
        if await self.rollouts.state(name) is RolloutState.RUNNING:
            log.info("Package %s is gone; signalling %s", name, SIGNAL_PACKAGE_DELETED)
            await self.rollouts.signal(name, SIGNAL_PACKAGE_DELETED)
        self.active.discard(name)
        forget_package(name)

    async def _act(self, action: Action, obj: dict[str, Any], check: PackageCheck, facts: PackageFacts) -> None:
        name = facts.name
        # The invalid status is re-rendered on every resync (written only when changed): not worth a line.
        (log.debug if action is Action.WRITE_INVALID_STATUS else log.info)("Package %s: %s", name, action.value)
        if action is Action.ADD_FINALIZER:
            await asyncio.to_thread(set_finalizer, name, True)
        elif action is Action.REMOVE_FINALIZER:
            if await asyncio.to_thread(set_finalizer, name, False) and facts.deleting:
                self._event(obj, events.NORMAL, events.FINALIZER_REMOVED, "rollout ended; finalizer removed")
            if facts.deleting:
                forget_package(name)
        elif action is Action.WRITE_INVALID_STATUS:
            await self._write_invalid(obj, check, facts.generation)
        elif action is Action.START:
            await self.rollouts.start(self._rollout_input(check, facts))
            self._event(obj, events.NORMAL, events.ROLLOUT_STARTED,
                        f"started {keys.rollout_workflow_id(name)} for generation {facts.generation}")
        elif action is Action.SIGNAL_SPEC:
            change = self._rollout_input(check, facts)
            await self.rollouts.signal(name, SIGNAL_SPEC_CHANGED,
                                       SpecChange(change.spec, change.generation, change.policy_name, change.policy))
            self._event(obj, events.NORMAL, events.SPEC_CHANGED,
                        f"sent generation {facts.generation} (policy {facts.policy or 'default'}) to the rollout")
        elif action is Action.SIGNAL_PAUSE:
            await self.rollouts.signal(name, keys.SIGNAL_PAUSE)
            self._event(obj, events.NORMAL, events.PAUSED, "rollout paused (spec.paused or noderoll.io/pause)")
        elif action is Action.SIGNAL_RESUME:
            await self.rollouts.signal(name, keys.SIGNAL_RESUME)
            self._event(obj, events.NORMAL, events.RESUMED, "rollout resumed")
        elif action is Action.SIGNAL_DELETED:
            await self.rollouts.signal(name, SIGNAL_PACKAGE_DELETED)
            if name not in self._deleting_noted:
                self._deleting_noted.add(name)
                how = "uninstalling first" if facts.has_finalizer else "ending the rollout"
                self._event(obj, events.NORMAL, events.DELETING, f"Package deleted: {how}")

    def _rollout_input(self, check: PackageCheck, facts: PackageFacts) -> RolloutInput:
        assert check.package is not None
        return RolloutInput(
            package=facts.name,
            spec=check.package.spec.dump(),
            generation=facts.generation,
            policy_name=check.policy.name if check.policy else None,
            policy=check.policy.spec.dump() if check.policy else None,
            paused=facts.paused,
        )

    async def _write_invalid(self, obj: dict[str, Any], check: PackageCheck, generation: int) -> None:
        name = obj["metadata"]["name"]
        previous = obj.get("status") or {}
        status = render_invalid_package_status(check.problems, generation, now_rfc3339(), previous)
        write = StatusWrite(keys.PACKAGE_KIND, name, status, previous)
        if await asyncio.to_thread(write_status, write):
            # Only when the status changed: a resync does not repeat the Event.
            message = "; ".join(f"{p.field}: {p.message}" for p in check.problems)
            self._event(obj, events.WARNING, events.INVALID_SPEC, message)
            set_rollout_phase(name, str(status.get("phase", "Invalid")))

    def _event(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        note = events.EventNote(keys.PACKAGE_KIND, obj, type_, reason, message)
        # Fire and forget in a thread: Events are advisory and must not slow the reconcile.
        asyncio.get_running_loop().run_in_executor(None, events.emit, note)

    # --- DeploymentPolicies ------------------------------------------------------------------------

    async def reconcile_policy(self, name: str) -> list[str]:
        """Write the policy's status; return the Packages naming this policy (to reconcile next)."""
        users = sorted(
            pkg for pkg, obj in self.cache.of(keys.PACKAGE_KIND).items()
            if (obj.get("spec") or {}).get("deploymentPolicy") == name
        )
        obj = self.cache.get(keys.POLICY_KIND, name)
        if obj is None:
            return users
        _policy, problems = parse_policy(obj)
        previous = obj.get("status") or {}
        generation = int(obj["metadata"].get("generation") or 0)
        status = render_policy_status(problems, generation, now_rfc3339(), previous)
        changed = await asyncio.to_thread(write_status, StatusWrite(keys.POLICY_KIND, name, status, previous))
        if changed and problems:
            note = events.EventNote(keys.POLICY_KIND, obj, events.WARNING, events.INVALID_SPEC,
                                    "; ".join(f"{p.field}: {p.message}" for p in problems))
            asyncio.get_running_loop().run_in_executor(None, events.emit, note)
        return users

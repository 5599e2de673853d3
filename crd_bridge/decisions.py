"""What the bridge does for one Package, decided from what it observes. Pure (no I/O).

`decide_package(PackageFacts, RolloutState, LastHandled | None)` returns the actions of one
level-triggered reconcile, in order. The rules:

* deleting (deletionTimestamp set): a running rollout gets `deleted` (it uninstalls first when
  `uninstall.enabled`, then ends); once no rollout runs, the finalizer is removed;
* invalid: the status says so (phase Invalid, `Ready=False`, Warning Event); no workflow is started
  or signalled (a rollout of an earlier valid generation keeps its last spec);
* valid: the finalizer is added when `uninstall.enabled` (removed when not); with no rollout
  running, `package/<name>` is started (idempotently: USE_EXISTING); with one running, what changed
  since the last handled record is signalled: generation or policy revision -> `spec_changed`,
  pause wanted -> `pause`, pause no longer wanted -> `resume`. With no record for this uid (a
  bridge that lost it), the spec is resent (a re-plan keeps work done) and `pause` sent if wanted;
  `resume` is never sent blind, because it also promotes a waiting canary and clears a halt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from crd_bridge.handled import LastHandled


class RolloutState(StrEnum):
    """Whether `package/<name>` has a run, and whether it is still running."""

    ABSENT = "absent"
    RUNNING = "running"
    CLOSED = "closed"


class Action(StrEnum):
    """One step of a reconcile."""

    ADD_FINALIZER = "add-finalizer"
    REMOVE_FINALIZER = "remove-finalizer"
    START = "start"
    SIGNAL_SPEC = "signal-spec-changed"
    SIGNAL_PAUSE = "signal-pause"
    SIGNAL_RESUME = "signal-resume"
    SIGNAL_DELETED = "signal-deleted"
    WRITE_INVALID_STATUS = "write-invalid-status"


@dataclass(frozen=True)
class PackageFacts:
    """What the bridge observed of one Package object (and its policy) right now."""

    name: str
    uid: str
    generation: int
    valid: bool
    deleting: bool = False
    has_finalizer: bool = False
    uninstall_enabled: bool = False
    paused: bool = False
    # `<policy>@<generation>` of the DeploymentPolicy the Package names ("" for none).
    policy: str = ""

    def handled(self) -> LastHandled:
        """The record to keep once the rollout has been given this state."""
        return LastHandled(uid=self.uid, generation=self.generation, policy=self.policy, paused=self.paused)


@dataclass
class PackageDecision:
    """The actions of one reconcile, and the record to store afterwards (None: unchanged)."""

    actions: list[Action] = field(default_factory=list)
    record: LastHandled | None = None


def decide_package(facts: PackageFacts, rollout: RolloutState, last: LastHandled | None) -> PackageDecision:
    """The reconcile for `facts` given the rollout's state and the last handled record (module rules)."""
    if facts.deleting:
        if rollout is RolloutState.RUNNING:
            return PackageDecision([Action.SIGNAL_DELETED])
        return PackageDecision([Action.REMOVE_FINALIZER] if facts.has_finalizer else [])
    if not facts.valid:
        return PackageDecision([Action.WRITE_INVALID_STATUS])
    decision = PackageDecision()
    if facts.uninstall_enabled and not facts.has_finalizer:
        decision.actions.append(Action.ADD_FINALIZER)
    elif not facts.uninstall_enabled and facts.has_finalizer:
        decision.actions.append(Action.REMOVE_FINALIZER)
    current = facts.handled()
    if rollout is not RolloutState.RUNNING:
        decision.actions.append(Action.START)
        decision.record = current
        return decision
    known = last if last is not None and last.uid == facts.uid else None
    if known is None:
        decision.actions.append(Action.SIGNAL_SPEC)
        if facts.paused:
            decision.actions.append(Action.SIGNAL_PAUSE)
    else:
        if (known.generation, known.policy) != (facts.generation, facts.policy):
            decision.actions.append(Action.SIGNAL_SPEC)
        if facts.paused and not known.paused:
            decision.actions.append(Action.SIGNAL_PAUSE)
        elif known.paused and not facts.paused:
            decision.actions.append(Action.SIGNAL_RESUME)
    if current != known:
        decision.record = current
    return decision

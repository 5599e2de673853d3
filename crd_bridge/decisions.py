"""What the bridge does for one Package object, decided from what it observes. Pure (no I/O).

The rollout itself is the fleet's (`crd_bridge.fleets` assembles each fleet's desired state);
per Package object only its metadata and an invalid status are decided here:
* deleting (deletionTimestamp set): the uninstall finalizer is removed once the Package's fleet no
  longer carries it (uninstalled everywhere: the status poller says so; or never handed over:
  nothing to uninstall);
* invalid: the status says so (phase Invalid, `Ready=False`, Warning Event); its fleet keeps the
  entry it last had (a rollout of an earlier valid generation keeps its spec);
* valid: the finalizer is added when `uninstall.enabled`, removed when not.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class RolloutState(StrEnum):
    """Whether a workflow id has a run, and whether it is still running."""

    ABSENT = "absent"
    RUNNING = "running"
    CLOSED = "closed"


class Action(StrEnum):
    """One step of a Package reconcile."""

    ADD_FINALIZER = "add-finalizer"
    REMOVE_FINALIZER = "remove-finalizer"
    WRITE_INVALID_STATUS = "write-invalid-status"


@dataclass(frozen=True)
class PackageFacts:
    """What the bridge observed of one Package object right now."""

    name: str
    valid: bool
    deleting: bool = False
    has_finalizer: bool = False
    uninstall_enabled: bool = False
    # Its fleet's desired state (as the bridge hands it over) still carries the Package.
    carried: bool = False


def decide_package(facts: PackageFacts) -> list[Action]:
    """The actions of one reconcile of a Package object (module rules)."""
    if facts.deleting:
        return [Action.REMOVE_FINALIZER] if facts.has_finalizer and not facts.carried else []
    if not facts.valid:
        return [Action.WRITE_INVALID_STATUS]
    if facts.uninstall_enabled and not facts.has_finalizer:
        return [Action.ADD_FINALIZER]
    if not facts.uninstall_enabled and facts.has_finalizer:
        return [Action.REMOVE_FINALIZER]
    return []

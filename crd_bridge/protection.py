"""Deletion protection of Packages and DeploymentPolicies (finalizer `noderoll.io/in-use`). Pure (no I/O).

The Kubernetes way, like the `kubernetes.io/pvc-protection` finalizer of a PersistentVolumeClaim a
pod uses: an object that others use is not removed while they do.

* Users of a DeploymentPolicy P: the *active* Packages whose `spec.deploymentPolicy` is P. Users of a
  Package A: the active Packages (other than A) whose `spec.dependsOn` names A.
* Active: a Package that still takes part in rollouts: not being deleted; or being deleted while its
  uninstall runs (it holds the uninstall finalizer) or while an active Package uses it (its own
  deletion is held). The least fixpoint, so Packages deleted together (a GitOps prune) release each
  other in dependency order and a dependency cycle of deleted Packages releases itself.
* The finalizer is added while an object has users and is not being deleted (the API refuses new
  finalizers on an object being deleted), and removed once it has none.
* A Package being deleted that has users keeps its place in its fleet as it is (no uninstall yet):
  its dependents keep what they need. Its uninstall starts once no user *holds* it; a user being
  uninstalled by the same fleet does not hold it, because the node window uninstalls dependents
  before their dependencies (`planning.node.node_plan`), so a prune of both costs one window per node.
  A user in another fleet holds it until that user is gone: dependents are uninstalled first.
* While an object has users its status carries the condition `InUse` (True; reason `InUse`, or
  `DeletionBlocked` while its deletion waits; the message names the users); once they are gone it
  turns False (reason `NotInUse`) and stays so. An object being deleted that waits gets a Warning
  Event `DeletionBlocked` naming its users (the reconciler emits it when they change).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from api import keys
from api.enums import ConditionType
from crd_bridge.fleets import raw_fleet

# Users named in a condition or Event message (then a count).
USERS_SHOWN = 10
REASON_IN_USE = "InUse"
REASON_DELETION_BLOCKED = "DeletionBlocked"
REASON_NOT_IN_USE = "NotInUse"


@dataclass(frozen=True)
class PackageRef:
    """One cached Package object as deletion protection reads it (valid or not: its raw spec)."""

    name: str
    fleet: str
    depends_on: tuple[str, ...] = ()
    deleting: bool = False
    # Holds the uninstall finalizer (`noderoll.io/uninstall`): its uninstall has not finished.
    uninstalling: bool = False


def package_ref(obj: Mapping[str, Any]) -> PackageRef:
    """A PackageRef from a Package object (API JSON)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec")
    depends = spec.get("dependsOn") if isinstance(spec, Mapping) else None
    return PackageRef(
        name=str(meta.get("name", "")),
        fleet=raw_fleet(obj),
        depends_on=tuple(sorted(str(d) for d in depends)) if isinstance(depends, Mapping) else (),
        deleting=bool(meta.get("deletionTimestamp")),
        uninstalling=keys.FINALIZER in (meta.get("finalizers") or []),
    )


@dataclass
class Usage:
    """Who uses what, for every cached Package and DeploymentPolicy (see `usage`)."""

    active: set[str] = field(default_factory=set)
    # Package -> the active Packages depending on it; policy -> the active Packages naming it.
    package_users: dict[str, list[str]] = field(default_factory=dict)
    policy_users: dict[str, list[str]] = field(default_factory=dict)
    # Packages being deleted whose place in their fleet is kept as it is (no uninstall yet).
    held: set[str] = field(default_factory=set)


def usage(refs: Iterable[PackageRef]) -> Usage:
    """Users of every Package and policy, and which deleted Packages are held (module rules)."""
    by_name = {r.name: r for r in refs}
    active = {n for n, r in by_name.items() if not r.deleting or r.uninstalling}
    grown = True
    while grown:
        grown = False
        for name in list(active):
            for dep in by_name[name].depends_on:
                if dep in by_name and dep not in active:
                    active.add(dep)
                    grown = True
    found = Usage(active=active)
    for name in sorted(active):
        ref = by_name[name]
        found.policy_users.setdefault(ref.fleet, []).append(name)
        for dep in ref.depends_on:
            if dep in by_name and dep != name:
                found.package_users.setdefault(dep, []).append(name)
    for name, users in found.package_users.items():
        ref = by_name[name]
        if ref.deleting and any(_holds(by_name[u], ref) for u in users):
            found.held.add(name)
    return found


def _holds(user: PackageRef, used: PackageRef) -> bool:
    """`user` keeps `used` installed: it is not being uninstalled by the same fleet alongside it."""
    return not (user.deleting and user.uninstalling and user.fleet == used.fleet)


class FinalizerAction(StrEnum):
    """What to do with the `noderoll.io/in-use` finalizer of one object."""

    ADD = "add-in-use-finalizer"
    REMOVE = "remove-in-use-finalizer"


def decide_finalizer(users: Sequence[str], finalizers: Sequence[str], deleting: bool) -> FinalizerAction | None:
    """Add the finalizer while used (not when being deleted), remove it once unused (module rules)."""
    present = keys.IN_USE_FINALIZER in finalizers
    if users and not present and not deleting:
        return FinalizerAction.ADD
    if not users and present:
        return FinalizerAction.REMOVE
    return None


def users_text(kind: str, users: Sequence[str]) -> str:
    """`Packages a, b (and 3 more)` (the first USERS_SHOWN names)."""
    shown = ", ".join(users[:USERS_SHOWN])
    more = f" and {len(users) - USERS_SHOWN} more" if len(users) > USERS_SHOWN else ""
    what = "naming it" if kind == keys.POLICY_KIND else "depending on it"
    return f"used by Package(s) {shown}{more} ({what})"


@dataclass(frozen=True)
class InUse:
    """One object's usage as its `InUse` condition shows it."""

    kind: str
    users: Sequence[str]
    deleting: bool
    generation: int


def in_use_condition(
    subject: InUse, now: str, previous: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any] | None:
    """The `InUse` condition (API JSON) of `subject`; None when it never had one (module rules).

    `previous`: the object's current conditions (a kept `lastTransitionTime`, and whether it had one).
    """
    kind, users, deleting = subject.kind, subject.users, subject.deleting
    before = next((c for c in previous if c.get("type") == ConditionType.IN_USE.value), None)
    if users:
        status = "True"
        reason = REASON_DELETION_BLOCKED if deleting else REASON_IN_USE
        message = users_text(kind, users) + ("; deletion waits until they are gone" if deleting else "")
    elif before is not None:
        status, reason, message = "False", REASON_NOT_IN_USE, "no Package uses it"
    else:
        return None
    kept = before is not None and before.get("status") == status and before.get("lastTransitionTime")
    return {
        "type": ConditionType.IN_USE.value, "status": status, "reason": reason, "message": message,
        "lastTransitionTime": before["lastTransitionTime"] if kept and before is not None else now,
        "observedGeneration": subject.generation,
    }


def with_condition(status: Mapping[str, Any], condition: Mapping[str, Any] | None, kind: str) -> dict[str, Any]:
    """`status` with its condition of type `kind` replaced by `condition` (removed when None)."""
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != kind]
    if condition is not None:
        conditions.append(dict(condition))
    out = dict(status)
    if conditions:
        out["conditions"] = conditions
    else:
        out.pop("conditions", None)
    return out

"""The desired state of each fleet, assembled from the cached objects. Pure (no I/O).

`desired_fleet(name, facts, previous)` builds the `FleetSpec` the bridge hands `fleet/<name>`:
* the policy: the DeploymentPolicy object's validated spec and generation (`default`: the built-in
  one-node-at-a-time policy, no object); an invalid or missing policy keeps the one last handed over;
* every Package naming the policy (or none, for `default`): a valid one as it is now (spec,
  generation, uid, paused by `spec.paused` or the `noderoll.io/pause` annotation, a rerun asked by the
  `noderoll.io/rerun` annotation); an invalid one
  keeps the entry last handed over, so a rollout of an earlier valid generation keeps its spec
  (its status says Invalid); a Package being deleted with the uninstall finalizer stays, marked
  `uninstall`, until its fleet reports it uninstalled (the finalizer then goes); one being deleted
  without it is gone; one being deleted that other Packages still use (`held`, deletion protection)
  keeps its entry as if it were not deleted, so its dependents keep what they need.
`spec_digest` makes "changed since last sent" a string comparison; `package_changes` names what
changed per Package (for the Events on the Packages).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import StrEnum

from api import keys
from api.package import Package
from api.policy import DeploymentPolicy
from protocol.fleet import FleetSpec, PackageEntry
from protocol.names import DEFAULT_FLEET, fleet_name


@dataclass(frozen=True)
class PackageFacts:
    """One cached Package object as fleet assembly needs it."""

    name: str
    # The fleet its spec names now (also for an invalid Package, from the raw spec).
    fleet: str
    # The validated Package; None when invalid.
    package: Package | None = None
    deleting: bool = False
    has_finalizer: bool = False
    # Being deleted while Packages use it (`crd_bridge.protection`): it keeps its place as it is.
    held: bool = False


@dataclass
class FleetFacts:
    """Everything the bridge knows that decides one fleet's desired state."""

    packages: list[PackageFacts] = field(default_factory=list)
    # The fleet's valid DeploymentPolicy (None: absent, invalid, or the built-in `default`).
    policy: DeploymentPolicy | None = None


def raw_fleet(obj: Mapping[str, object]) -> str:
    """The fleet a Package object names, read from its raw spec (valid or not)."""
    spec = obj.get("spec")
    policy = spec.get("deploymentPolicy") if isinstance(spec, Mapping) else None
    return fleet_name(policy if isinstance(policy, str) and policy else None)


def _entry(package: Package, uninstall: bool = False) -> PackageEntry:
    return PackageEntry(
        name=package.name, spec=package.spec.dump(), generation=package.metadata.generation,
        uid=package.metadata.uid, paused=package.paused, uninstall=uninstall,
        rerun=package.metadata.annotations.get(keys.RERUN_ANNOTATION, "").strip(),
    )


def desired_fleet(name: str, facts: FleetFacts, previous: FleetSpec | None) -> FleetSpec:
    """The FleetSpec of fleet `name` (module rules); `previous` is the one last handed over, if known."""
    before = {e.name: e for e in (previous.packages if previous else [])}
    entries: list[PackageEntry] = []
    for fact in sorted(facts.packages, key=lambda f: f.name):
        if fact.fleet != name:
            continue
        if fact.deleting and not fact.held:
            if not fact.has_finalizer:
                continue
            if fact.package is not None and fact.package.spec.uninstall.enabled:
                entries.append(_entry(fact.package, uninstall=True))
            elif fact.name in before:
                entries.append(PackageEntry(**{**asdict(before[fact.name]), "uninstall": True}))
        elif fact.package is not None:
            entries.append(_entry(fact.package))
        elif fact.name in before:
            entries.append(before[fact.name])
    if name == DEFAULT_FLEET:
        return FleetSpec(name, None, 0, entries)
    if facts.policy is not None:
        return FleetSpec(name, facts.policy.spec.dump(), facts.policy.metadata.generation, entries)
    if previous is not None:
        return FleetSpec(name, previous.policy, previous.policy_generation, entries)
    # No valid policy ever: its Packages are invalid too (they name a policy that is not usable).
    return FleetSpec(name, None, 0, entries)


def spec_digest(spec: FleetSpec) -> str:
    """A digest of everything in `spec`: equal digests mean nothing to send."""
    return hashlib.sha256(json.dumps(asdict(spec), sort_keys=True).encode()).hexdigest()


class Change(StrEnum):
    """What changed for one Package between two FleetSpecs."""

    ADDED = "added"
    SPEC = "spec"
    PAUSED = "paused"
    RESUMED = "resumed"
    UNINSTALL = "uninstall"
    REMOVED = "removed"


def package_changes(before: FleetSpec | None, after: FleetSpec) -> dict[str, list[Change]]:
    """Per Package, what changed from `before` to `after` (only Packages with a change)."""
    old = {e.name: e for e in (before.packages if before else [])}
    new = {e.name: e for e in after.packages}
    changes: dict[str, list[Change]] = {}
    for name in sorted(set(old) | set(new)):
        was, now = old.get(name), new.get(name)
        found: list[Change] = []
        if now is None:
            found.append(Change.REMOVED)
        elif was is None:
            found.append(Change.ADDED)
        else:
            if now.uninstall and not was.uninstall:
                found.append(Change.UNINSTALL)
            elif (now.spec, now.generation) != (was.spec, was.generation):
                found.append(Change.SPEC)
            if now.paused != was.paused:
                found.append(Change.PAUSED if now.paused else Change.RESUMED)
        if found:
            changes[name] = found
    return changes

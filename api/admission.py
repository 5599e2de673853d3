"""Admission of one Package or DeploymentPolicy against the objects that exist. Pure (no I/O).

What the validating webhook (`noderoll webhook`, `webhook/`) decides for a CREATE or UPDATE, with
the checks and messages of `noderoll validate` (`api.validation`):
* everything an object gets wrong on its own (`check_document`: names, versions, interrupts,
  budgets, strategies, services, config keys, a config over 1 MiB, reserved names, ...) is refused;
* for a Package, every conflict with the Packages that exist: a `dependsOn` entry naming an
  existing Package at another version, and a dependency cycle this Package closes (the cycle's
  message names the path, as `noderoll validate` does). So when a dependency and its dependent
  change version together, the dependency goes first: a dependent naming the new version is
  refused while the old one is stored (a second `kubectl apply`, or the GitOps tool's retry,
  admits it); changing the dependency's version is never refused for its dependents' sake (the
  bridge reports them until they follow);
* a reference to an object that does not exist yet (a dependency, the DeploymentPolicy) is
  admitted: it may be applied a moment later (`kubectl apply -f dir/` applies in file order, a
  GitOps sync in its own); the bridge reports it on the Package's status while it is missing;
* an UPDATE that leaves `spec` as it was (finalizers, annotations, labels: the bridge's record,
  `noderoll pause`), and any UPDATE of an object being deleted, is admitted: an object stored
  before the webhook existed, or made invalid later by another object's change, never blocks its
  own metadata (its finalizer could not be removed otherwise);
* when the existing Packages could not be read, the object's own checks still decide and the
  conflict checks are skipped with a warning (the bridge checks them again).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from api import keys
from api.package import Package, PackageSpec
from api.problems import InvalidDocumentError, ValidationProblem
from api.validation import check_cycles, check_document, check_references

CREATE, UPDATE = "CREATE", "UPDATE"
UNREAD_WARNING = (
    "noderoll webhook could not read the existing Packages ({reason}); dependsOn versions and cycles "
    "were not checked against them (the bridge checks them and reports problems on the status)"
)


@dataclass(frozen=True)
class AdmissionInput:
    """One admission request: the operation, the object (and the stored one for an UPDATE), and the
    Packages that exist by name (None when they could not be read: `unread_reason` says why)."""

    operation: str
    obj: Any
    old: Any = None
    packages: Mapping[str, Mapping[str, Any]] | None = None
    unread_reason: str = ""


@dataclass
class AdmissionDecision:
    """Allowed or not; the problems that refuse it; warnings shown to the client either way."""

    allowed: bool
    problems: list[ValidationProblem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def message(self) -> str:
        """The refusal as `noderoll validate` words each problem (`kind/name: field: message`), one per line."""
        return "\n".join(str(p) for p in self.problems)


def _spec_of(obj: Any) -> Any:
    return obj.get("spec") if isinstance(obj, Mapping) else None


def _deleting(obj: Any) -> bool:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    return isinstance(meta, Mapping) and bool(meta.get("deletionTimestamp"))


def metadata_only(request: AdmissionInput) -> bool:
    """True for an UPDATE that does not change `spec`, or of an object being deleted."""
    if request.operation != UPDATE or request.old is None:
        return False
    return _deleting(request.old) or _deleting(request.obj) or _spec_of(request.obj) == _spec_of(request.old)


def _existing_specs(packages: Mapping[str, Mapping[str, Any]], skip: str) -> dict[str, PackageSpec]:
    # Invalid stored Packages are left out: a dependency on one counts as not there yet (the
    # bridge reports the dependency's own problems on it).
    specs: dict[str, PackageSpec] = {}
    for name, obj in packages.items():
        if name == skip:
            continue
        try:
            specs[name] = Package.from_k8s(dict(obj)).spec
        except InvalidDocumentError:
            continue
    return specs


def conflicts(package: Package, packages: Mapping[str, Mapping[str, Any]]) -> list[ValidationProblem]:
    """`package` against the existing Packages: dependencies at another version, a cycle it closes."""
    specs = _existing_specs(packages, package.name)
    specs[package.name] = package.spec
    problems = check_references(package, specs, None, missing_ok=True)
    problems += [p for p in check_cycles(specs) if p.name == package.name]
    return problems


def decide(request: AdmissionInput) -> AdmissionDecision:
    """The admission decision for one request (module rules)."""
    if metadata_only(request):
        return AdmissionDecision(True)
    check = check_document(request.obj)
    if check.skipped:
        return AdmissionDecision(True)
    if check.problems:
        return AdmissionDecision(False, check.problems)
    if check.kind != keys.PACKAGE_KIND or not isinstance(check.model, Package):
        return AdmissionDecision(True)
    if request.packages is None:
        return AdmissionDecision(True, warnings=[UNREAD_WARNING.format(reason=request.unread_reason or "unknown")])
    problems = conflicts(check.model, request.packages)
    return AdmissionDecision(not problems, problems)

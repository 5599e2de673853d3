"""Validating a Package or DeploymentPolicy against the objects currently in the cluster. Pure (no I/O).

Single-document checks are the models' (`Package.from_k8s`, `DeploymentPolicy.from_k8s`); here
the cross-document checks of `api.validation` run against the bridge's cache: `dependsOn` names an
existing Package at that version, no dependency cycle, and `deploymentPolicy` names a DeploymentPolicy
that exists and is itself valid. `references` names the objects such a verdict read, so the bridge
can tell a cache that lags the apiserver from an object that is really missing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from api import keys
from api.package import Package, PackageSpec
from api.policy import DeploymentPolicy
from api.problems import InvalidDocumentError, ValidationProblem
from api.validation import check_cycles, check_references


@dataclass
class PackageCheck:
    """A Package checked in context: the model (None when invalid), its problems and its policy."""

    package: Package | None
    problems: list[ValidationProblem] = field(default_factory=list)
    policy: DeploymentPolicy | None = None

    @property
    def policy_revision(self) -> str:
        """`<policy>@<generation>`: changes whenever the policy's spec changes ("" without a policy)."""
        if self.policy is None:
            return ""
        return f"{self.policy.name}@{self.policy.metadata.generation}"


def parse_package(obj: Mapping[str, Any]) -> tuple[Package | None, list[ValidationProblem]]:
    """The Package model of `obj`, or None and its single-document problems."""
    try:
        return Package.from_k8s(dict(obj)), []
    except InvalidDocumentError as err:
        return None, err.problems


def parse_policy(obj: Mapping[str, Any]) -> tuple[DeploymentPolicy | None, list[ValidationProblem]]:
    """The DeploymentPolicy model of `obj`, or None and its problems."""
    try:
        return DeploymentPolicy.from_k8s(dict(obj)), []
    except InvalidDocumentError as err:
        return None, err.problems


def check_package(
    obj: Mapping[str, Any], packages: Mapping[str, Mapping[str, Any]], policies: Mapping[str, Mapping[str, Any]]
) -> PackageCheck:
    """Validate `obj` alone, then against every Package and DeploymentPolicy object (by name)."""
    package, problems = parse_package(obj)
    if package is None:
        return PackageCheck(None, problems)
    specs: dict[str, PackageSpec] = {}
    for name, other in packages.items():
        parsed = package if name == package.name else parse_package(other)[0]
        if parsed is not None:
            specs[name] = parsed.spec
    specs[package.name] = package.spec
    valid_policies = {}
    for name, raw in policies.items():
        policy, policy_problems = parse_policy(raw)
        if policy is not None:
            valid_policies[name] = policy
        elif name == package.spec.deployment_policy:
            message = f"DeploymentPolicy {name!r} is invalid: " + "; ".join(str(p) for p in policy_problems)
            problems.append(ValidationProblem(keys.PACKAGE_KIND, package.name, "spec.deploymentPolicy", message))
    if not problems:
        problems.extend(check_references(package, specs, set(valid_policies)))
    problems.extend(p for p in check_cycles(specs) if p.name == package.name)
    if problems:
        return PackageCheck(None, problems)
    policy = valid_policies.get(package.spec.deployment_policy or "")
    return PackageCheck(package, [], policy)


def references(obj: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(kind, name) of the objects the cross-document verdict on Package `obj` reads, sorted.

    Its DeploymentPolicy and the Packages it depends on; none when `obj` fails its own checks (that
    verdict reads nothing else).
    """
    package, _problems = parse_package(obj)
    if package is None:
        return []
    named = [(keys.PACKAGE_KIND, name) for name in package.spec.depends_on]
    if package.spec.deployment_policy:
        named.append((keys.POLICY_KIND, package.spec.deployment_policy))
    return sorted(named)

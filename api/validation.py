"""Validation across documents: references between Packages and to DeploymentPolicies. Pure.

Single-document checks live in the models (`Package.from_k8s`, `DeploymentPolicy.from_k8s`).
Here, over a set of documents (the files given to `noderoll validate`, or the objects the bridge
sees in the cluster):
* every `dependsOn` entry names an existing Package at exactly that version;
* dependencies form no cycle (the message names the path, e.g. `a -> b -> a`);
* `deploymentPolicy` names an existing DeploymentPolicy (when the set of policies is known);
* a name is used by one document of a kind only.
Documents of other API groups are skipped (a GitOps folder holds many kinds); a noderoll.io
document of an unknown kind or version is a problem.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from api import keys
from api.package import Package, PackageSpec
from api.policy import DeploymentPolicy
from api.problems import InvalidDocumentError, ValidationProblem
from api.versions import VersionError, compare_versions

# The cycle search is shared with the per-node planner; planning.dependencies imports nothing from api.
from planning.dependencies import find_cycle

NODEROLL_KINDS = (keys.PACKAGE_KIND, keys.POLICY_KIND)


@dataclass
class DocumentSet:
    """The valid objects of a set of documents, and every problem found."""

    packages: dict[str, Package] = field(default_factory=dict)
    policies: dict[str, DeploymentPolicy] = field(default_factory=dict)
    problems: list[ValidationProblem] = field(default_factory=list)


def is_noderoll_document(obj: Mapping[str, Any]) -> bool:
    """True when the document belongs to the noderoll.io API group."""
    return str(obj.get("apiVersion", "")).split("/")[0] == keys.GROUP


def parse_document(
    obj: Mapping[str, Any],
) -> tuple[Package | DeploymentPolicy | None, list[ValidationProblem]]:
    """Validate one noderoll document on its own: the object, or None and its problems."""
    kind = str(obj.get("kind", ""))
    name = str((obj.get("metadata") or {}).get("name") or "")
    if obj.get("apiVersion") != keys.API_VERSION or kind not in NODEROLL_KINDS:
        message = (
            f"apiVersion {obj.get('apiVersion')!r} kind {kind!r} is not served; "
            f"use apiVersion {keys.API_VERSION} with kind {' or '.join(NODEROLL_KINDS)}"
        )
        return None, [ValidationProblem(kind or "<no kind>", name, "apiVersion", message)]
    model = Package if kind == keys.PACKAGE_KIND else DeploymentPolicy
    try:
        return model.from_k8s(dict(obj)), []
    except InvalidDocumentError as err:
        return None, err.problems


def check_references(
    package: Package, packages: Mapping[str, PackageSpec], policies: Collection[str] | None
) -> list[ValidationProblem]:
    """Problems of `package`'s references: dependsOn targets and versions, its policy."""
    problems = []
    for dep, version in sorted(package.spec.depends_on.items()):
        where = f"spec.dependsOn.{dep}"
        target = packages.get(dep)
        if target is None:
            known = ", ".join(sorted(n for n in packages if n != package.name)) or "none"
            problems.append(
                ValidationProblem(
                    keys.PACKAGE_KIND, package.name, where, f"no Package {dep!r}; known packages: {known}"
                )
            )
            continue
        try:
            same = compare_versions(target.version, version) == 0
        except VersionError:
            same = False
        if not same:
            message = f"needs {dep} {version}, but Package {dep} has version {target.version}; depend on {target.version}"
            problems.append(ValidationProblem(keys.PACKAGE_KIND, package.name, where, message))
    policy = package.spec.deployment_policy
    if policies is not None and policy is not None and policy not in policies:
        known = ", ".join(sorted(policies)) or "none"
        problems.append(
            ValidationProblem(
                keys.PACKAGE_KIND,
                package.name,
                "spec.deploymentPolicy",
                f"no DeploymentPolicy {policy!r}; known policies: {known}",
            )
        )
    return problems


def check_cycles(packages: Mapping[str, PackageSpec]) -> list[ValidationProblem]:
    """One problem per dependency cycle, reported on every package in the cycle."""
    graph = {name: list(spec.depends_on) for name, spec in packages.items()}
    problems: list[ValidationProblem] = []
    seen: set[str] = set()
    while True:
        cycle = find_cycle({n: d for n, d in graph.items() if n not in seen})
        if cycle is None:
            return problems
        path = " -> ".join(cycle)
        for name in sorted(set(cycle)):
            message = f"dependency cycle {path}; remove one of these dependsOn entries"
            problems.append(ValidationProblem(keys.PACKAGE_KIND, name, "spec.dependsOn", message))
        seen.update(cycle)


def validate_documents(docs: Iterable[Mapping[str, Any]], policies_known: bool = True) -> DocumentSet:
    """Validate documents together (references resolve among them); other API groups are skipped.

    With `policies_known=False` a `deploymentPolicy` naming no policy in `docs` is not a problem
    (for example when only Packages are linted).
    """
    result = DocumentSet()
    for obj in docs:
        if not isinstance(obj, Mapping) or not is_noderoll_document(obj):
            continue
        parsed, problems = parse_document(obj)
        result.problems.extend(problems)
        if isinstance(parsed, Package):
            _add_unique(result.packages, parsed, keys.PACKAGE_KIND, result.problems)
        elif isinstance(parsed, DeploymentPolicy):
            _add_unique(result.policies, parsed, keys.POLICY_KIND, result.problems)
    specs = {name: p.spec for name, p in result.packages.items()}
    policy_names = set(result.policies) if policies_known else None
    for package in result.packages.values():
        result.problems.extend(check_references(package, specs, policy_names))
    result.problems.extend(check_cycles(specs))
    return result


def _add_unique(
    into: dict[str, Any], obj: Package | DeploymentPolicy, kind: str, problems: list[ValidationProblem]
) -> None:
    if obj.name in into:
        problems.append(
            ValidationProblem(
                kind, obj.name, "metadata.name", "defined twice; each object needs a unique name"
            )
        )
        return
    into[obj.name] = obj

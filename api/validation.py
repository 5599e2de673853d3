"""Validation of noderoll documents: each on its own, then across documents. Pure (no I/O).

`check_document(obj)` checks one document and returns its problems (field + message); it is what
`noderoll validate` runs per document and what the admission webhook runs per object
(`api/admission.py`):
* the API group: `noderoll.io` documents are checked; a near miss of it (`noderol.io`,
  `noderoll.com`, `NodeRoll.io`: difflib similarity, or the same letters in another case) is an
  error; documents of other groups are skipped (a GitOps folder holds many kinds); a noderoll.io
  document of an unknown kind or version is an error; so is a document that is not a mapping;
* the models (`Package.from_k8s`, `DeploymentPolicy.from_k8s`);
* version fields (`spec.version`, `spec.dependsOn` values) that are numbers, not strings: YAML
  reads an unquoted `1.10` as 1.1 (`source`, the YAML text of such scalars by field path, lets
  the hint quote what was written);
* a `config` larger than a ConfigMap can hold (the stage pods get it as one ConfigMap).
Across documents (`validate_documents`, the files given to `noderoll validate`, or the objects the
bridge sees in the cluster):
* every `dependsOn` entry names an existing Package at exactly that version;
* dependencies form no cycle (the message names the path, e.g. `a -> b -> a`);
* `deploymentPolicy` names an existing DeploymentPolicy (when the set of policies is known);
* a name is used by one document of a kind only.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from api import keys

# The cycle search is shared with the per-node planner; planning.node.dependencies imports nothing from api.
from api.graph import find_cycle
from api.package import Package, PackageSpec
from api.policy import DeploymentPolicy
from api.problems import InvalidDocumentError, ValidationProblem
from api.versions import VersionError, compare_versions

NODEROLL_KINDS = (keys.PACKAGE_KIND, keys.POLICY_KIND)
# Kubernetes documents "The data stored in a ConfigMap cannot exceed 1 MiB": the apiserver sums the
# bytes of every value (ValidateConfigMap, MaxSecretSize). A Package's config is one such ConfigMap.
CONFIGMAP_DATA_LIMIT_BYTES = 1024 * 1024
# difflib ratio from which another API group is taken for a typo of noderoll.io (noderol.io: 0.95,
# noderoll.com: 0.87; node.k8s.io: 0.64, nodewright.io: 0.75).
NEAR_MISS_RATIO = 0.8


@dataclass
class DocumentCheck:
    """One document checked: its kind and name, whether it was skipped, its model and problems."""

    kind: str
    name: str
    skipped: bool = False
    model: Package | DeploymentPolicy | None = None
    problems: list[ValidationProblem] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        """True for a checked document without problems."""
        return not self.skipped and not self.problems


@dataclass
class DocumentSet:
    """The valid objects of a set of documents, each document's check, and every problem found."""

    packages: dict[str, Package] = field(default_factory=dict)
    policies: dict[str, DeploymentPolicy] = field(default_factory=dict)
    problems: list[ValidationProblem] = field(default_factory=list)
    # One per document, in order; cross-document problems are added to the document they concern.
    checks: list[DocumentCheck] = field(default_factory=list)


def is_noderoll_document(obj: Mapping[str, Any]) -> bool:
    """True when the document belongs to the noderoll.io API group."""
    return str(obj.get("apiVersion", "")).split("/")[0] == keys.GROUP


def near_miss_group(api_version: str) -> bool:
    """True when the API group of `api_version` looks like a typo of noderoll.io (but is not it)."""
    group = api_version.split("/")[0]
    if group == keys.GROUP or not group:
        return False
    first_label = group.split(".")[0].lower()
    return (
        group.lower() == keys.GROUP
        or difflib.SequenceMatcher(None, group.lower(), keys.GROUP).ratio() >= NEAR_MISS_RATIO
        or difflib.SequenceMatcher(None, first_label, keys.GROUP.split(".")[0]).ratio() >= NEAR_MISS_RATIO
    )


def parse_document(
    obj: Mapping[str, Any],
) -> tuple[Package | DeploymentPolicy | None, list[ValidationProblem]]:
    """Validate one noderoll document's kind, version and model: the object, or None and its problems."""
    kind = str(obj.get("kind", ""))
    name = _name_of(obj)
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


def _name_of(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    return str(meta.get("name") or "") if isinstance(meta, Mapping) else ""


def check_document(obj: object, source: Mapping[str, str] | None = None) -> DocumentCheck:
    """Check one document on its own (module rules); `source` maps field paths to the YAML text of
    non-string scalars (absent for JSON objects)."""
    if not isinstance(obj, Mapping):
        shape = "a list" if isinstance(obj, list) else f"a {type(obj).__name__} ({str(obj)[:40]!r})"
        return DocumentCheck("", "", problems=[ValidationProblem(
            "", "", "", f"is {shape}, not a Kubernetes object (a mapping with apiVersion, kind and metadata)")])
    kind, name = str(obj.get("kind") or ""), _name_of(obj)
    api_version = obj.get("apiVersion")
    if not isinstance(api_version, str) or not api_version:
        if kind in NODEROLL_KINDS:
            message = f"missing; use apiVersion: {keys.API_VERSION}"
            return DocumentCheck(kind, name, problems=[ValidationProblem(kind, name, "apiVersion", message)])
        return DocumentCheck(kind, name, skipped=True)
    if near_miss_group(api_version):
        why = ("API groups are case-sensitive" if api_version.split("/")[0].lower() == keys.GROUP
               else "a typo of noderoll's API group?")
        message = f"{api_version!r} is not noderoll.io ({why}); use apiVersion: {keys.API_VERSION}"
        return DocumentCheck(kind, name, problems=[ValidationProblem(kind, name, "apiVersion", message)])
    if not is_noderoll_document(obj):
        return DocumentCheck(kind, name, skipped=True)
    model, problems = parse_document(obj)
    extra = _version_type_problems(obj, kind, name, source or {}) + _config_size_problems(obj, kind, name)
    # A version that is a number also fails the model ("should be a valid string"): keep the hint only.
    hinted = {p.field for p in extra}
    problems = [p for p in problems if p.field not in hinted] + extra
    return DocumentCheck(kind, name, model=None if problems else model, problems=problems)


def _version_type_problems(
    obj: Mapping[str, Any], kind: str, name: str, source: Mapping[str, str]
) -> list[ValidationProblem]:
    spec = obj.get("spec")
    if kind != keys.PACKAGE_KIND or not isinstance(spec, Mapping):
        return []
    fields: list[tuple[str, str, object]] = [("spec.version", "version", spec.get("version"))]
    depends_on = spec.get("dependsOn")
    if isinstance(depends_on, Mapping):
        fields += [(f"spec.dependsOn.{dep}", str(dep), value) for dep, value in depends_on.items()]
    problems = []
    for path, key, value in fields:
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        written = source.get(path, str(value))
        read = "" if written == str(value) else f" (YAML reads the unquoted {written} as {value})"
        message = f"is the number {value}, not a string{read}; quote it: {key}: \"{written}\""
        problems.append(ValidationProblem(kind, name, path, message))
    return problems


def _config_size_problems(obj: Mapping[str, Any], kind: str, name: str) -> list[ValidationProblem]:
    spec = obj.get("spec")
    config = spec.get("config") if kind == keys.PACKAGE_KIND and isinstance(spec, Mapping) else None
    if not isinstance(config, Mapping):
        return []
    sizes = {str(k): len(v.encode("utf-8", "surrogatepass")) for k, v in config.items() if isinstance(v, str)}
    total = sum(sizes.values())
    if total <= CONFIGMAP_DATA_LIMIT_BYTES:
        return []
    largest = max(sizes, key=lambda k: sizes[k])
    message = (
        f"totals {total} bytes ({total / 2**20:.1f} MiB), more than the {CONFIGMAP_DATA_LIMIT_BYTES} bytes "
        f"(1 MiB) a ConfigMap can hold (the stage pods get the config as one ConfigMap); the largest "
        f"key is {largest} ({sizes[largest]} bytes): ship large files in the package image instead"
    )
    return [ValidationProblem(kind, name, "spec.config", message)]


def check_references(
    package: Package,
    packages: Mapping[str, PackageSpec],
    policies: Collection[str] | None,
    missing_ok: bool = False,
) -> list[ValidationProblem]:
    """Problems of `package`'s references: dependsOn targets and versions, its policy.

    `missing_ok`: a dependency that does not exist is no problem (admission: it may be applied a
    moment later; the bridge reports it on the status while it is missing). A dependency that
    exists at another version still is.
    """
    problems = []
    for dep, version in sorted(package.spec.depends_on.items()):
        where = f"spec.dependsOn.{dep}"
        target = packages.get(dep)
        if target is None and missing_ok:
            continue
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
        # Start the path at its smallest name: the same cycle reads the same whatever other
        # packages exist (noderoll validate on files, the webhook against the cluster).
        ring = cycle[:-1]
        start = ring.index(min(ring))
        path = " -> ".join(ring[start:] + ring[:start] + [ring[start]])
        for name in sorted(set(cycle)):
            message = f"dependency cycle {path}; remove one of these dependsOn entries"
            problems.append(ValidationProblem(keys.PACKAGE_KIND, name, "spec.dependsOn", message))
        seen.update(cycle)


def validate_documents(docs: Iterable[object], policies_known: bool = True) -> DocumentSet:
    """Check documents one by one, then together (references resolve among them); other API
    groups are skipped. `result.checks` has one entry per document, in order.

    With `policies_known=False` a `deploymentPolicy` naming no policy in `docs` is not a problem
    (for example when only Packages are linted).
    """
    return cross_check([check_document(obj) for obj in docs], policies_known)


def cross_check(checks: list[DocumentCheck], policies_known: bool = True) -> DocumentSet:
    """The cross-document checks over documents already checked one by one (`check_document`)."""
    result = DocumentSet(checks=checks)
    defined: dict[tuple[str, str], DocumentCheck] = {}
    for check in checks:
        if isinstance(check.model, Package):
            _add_unique(result.packages, check, defined)
        elif isinstance(check.model, DeploymentPolicy):
            _add_unique(result.policies, check, defined)
    specs = {name: p.spec for name, p in result.packages.items()}
    policy_names = set(result.policies) if policies_known else None
    for package in result.packages.values():
        defined[(keys.PACKAGE_KIND, package.name)].problems.extend(check_references(package, specs, policy_names))
    for problem in check_cycles(specs):
        defined[(keys.PACKAGE_KIND, problem.name)].problems.append(problem)
    result.problems = [p for check in result.checks for p in check.problems]
    return result


def _add_unique(into: dict[str, Any], check: DocumentCheck, defined: dict[tuple[str, str], DocumentCheck]) -> None:
    assert check.model is not None
    if (check.kind, check.name) in defined:
        message = "defined twice; each object needs a unique name"
        check.problems.append(ValidationProblem(check.kind, check.name, "metadata.name", message))
        return
    defined[(check.kind, check.name)] = check
    into[check.name] = check.model

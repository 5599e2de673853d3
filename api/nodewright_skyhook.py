"""A NodeWright Skyhook (or NodeWright) as noderoll Packages, for `noderoll import`. Pure (no I/O).

`convert_skyhook(source, names)` writes one Package per `spec.packages` entry, with the
Skyhook-wide fields every package gets (`nodeSelectors` as `nodeSelector`, `podNonInterruptLabels`,
`additionalTolerations`, `runtimeRequired`, `drainConfig` as `drain`, the pause annotation or
`spec.pause` as `paused`, `deploymentPolicy` or the policy made from `interruptionBudget`), and
notes for the Skyhook-wide fields noderoll has no field for (`priority`, `sequencing: all`,
`autoTaintNewNodes: false`, `deploymentPolicyOptions`, the disable annotation, labels). Names are
decided beforehand for the whole input (`Names`, by `api/nodewright_import.py`). Package fields:
`api/nodewright_fields.py`, `api/nodewright_interrupts.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from api import keys
from api.nodewright_fields import (
    Notes,
    Severity,
    Unmappable,
    as_mapping,
    env,
    image_reference,
    resources,
    selector,
    tolerations,
    unknown_fields,
)
from api.nodewright_interrupts import config, config_interrupts, drain, interrupt
from api.nodewright_policy import budget_policy, wants_budget_policy
from api.versions import VersionError, parse_version

NODEWRIGHT_GROUP = "nodewright.nvidia.com"
SKYHOOK_GROUP = "skyhook.nvidia.com"
NODEWRIGHT_VERSION = "v1alpha1"
SKYHOOK_KINDS = ("NodeWright", "Skyhook")
POLICY_KIND = "DeploymentPolicy"
_PREFIXES = (f"{NODEWRIGHT_GROUP}/", f"{SKYHOOK_GROUP}/")
# Written by the operator or kubectl, not by the user: nothing to carry.
_IGNORED_ANNOTATIONS = {"kubectl.kubernetes.io/last-applied-configuration"} | {f"{p}version" for p in _PREFIXES}
SKYHOOK_FIELDS = {
    "serial", "pause", "podNonInterruptLabels", "nodeSelectors", "deploymentPolicy", "deploymentPolicyOptions",
    "interruptionBudget", "drainConfig", "packages", "additionalTolerations", "runtimeRequired",
    "autoTaintNewNodes", "priority", "sequencing",
}
PACKAGE_FIELDS = {
    "name", "version", "image", "containerSHA", "agentImageOverride", "interrupt", "dependsOn",
    "configInterrupts", "configMap", "env", "resources", "gracefulShutdown", "uninstall",
}


class NameStyle(StrEnum):
    """How a Skyhook's package is named as a Package."""

    PACKAGE = "package"  # `a`
    SKYHOOK_PACKAGE = "skyhook-package"  # `foo-a`


@dataclass(frozen=True)
class ImportOptions:
    """Choices of the user: name style, policy renames, and whether to write Packages paused."""

    names: NameStyle = NameStyle.PACKAGE
    policy_names: Mapping[str, str] = field(default_factory=dict)  # NodeWright name -> noderoll name
    policy_name: str | None = None  # the name of the one policy made from an interruptionBudget
    paused: bool = False


@dataclass(frozen=True)
class Imported:
    """A noderoll document and where it came from: input document, NodeWright object, its field."""

    source: int
    kind: str
    name: str
    at: str
    document: dict[str, Any]

    @property
    def what(self) -> str:
        """What it is, for a note: `package a` of a Skyhook, or `DeploymentPolicy/x`."""
        if self.at.startswith("spec.packages."):
            return f"package {self.at.removeprefix('spec.packages.')}"
        return f"{self.document['kind']}/{self.document['metadata']['name']}"


@dataclass
class Source:
    """One NodeWright object of the input."""

    notes: Notes
    data: Mapping[str, Any]
    skyhook: bool  # else a DeploymentPolicy
    group: str

    @property
    def name(self) -> str:
        return self.notes.name


@dataclass
class Names:
    """Names decided for the whole input before any object is converted."""

    options: ImportOptions
    policies: dict[str, str] = field(default_factory=dict)  # NodeWright policy name -> noderoll name
    budget_policies: dict[str, str] = field(default_factory=dict)  # Skyhook name -> its policy's name
    packages: dict[tuple[str, str], str] = field(default_factory=dict)  # (Skyhook, package) -> Package name
    problems: dict[tuple[str, str], str] = field(default_factory=dict)  # same key -> why it is not imported
    bad_policy_names: dict[str, str] = field(default_factory=dict)  # noderoll policy name -> why not

    def policy_name(self, original: str) -> str:
        """The noderoll name of the NodeWright policy `original` (renamed, or as it is)."""
        return self.options.policy_names.get(original, original)


def document(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A noderoll object (Package or DeploymentPolicy) with `spec`."""
    return {"apiVersion": keys.API_VERSION, "kind": kind, "metadata": {"name": name}, "spec": spec}


def _metadata_notes(obj: Source) -> bool:
    """Notes on the Skyhook's labels and annotations; True when it asks to be paused or disabled."""
    meta = obj.data.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), Mapping) else {}
    paused = False
    for key, value in sorted(annotations.items(), key=lambda kv: str(kv[0])):
        where = f"metadata.annotations.{key}"
        if key in (f"{p}pause" for p in _PREFIXES):
            paused = paused or value == "true"
        elif key in (f"{p}disable" for p in _PREFIXES):
            if value == "true":
                paused = True
                obj.notes.not_carried(where, "noderoll has no disabled state; the Packages are written paused "
                                      "(spec.paused: true): nothing rolls out until you unpause them")
        elif key not in _IGNORED_ANNOTATIONS:
            obj.notes.not_carried(where, "annotations of the Skyhook are not copied to the Packages")
    if isinstance(meta.get("labels"), Mapping) and meta["labels"]:
        obj.notes.not_carried("metadata.labels", "labels of the Skyhook are not copied to the Packages")
    return paused


def _skyhook_notes(obj: Source, spec: Mapping[str, Any]) -> None:
    """Notes on the Skyhook-wide fields noderoll has no field for."""
    notes = obj.notes
    unknown_fields(spec, SKYHOOK_FIELDS, "spec", notes, "not a NodeWright Skyhook field")
    if spec.get("priority") is not None:
        notes.not_carried("spec.priority", "order across Skyhooks is not carried: write it as dependsOn from the "
                          "Packages that must wait to the ones that go first (ordered per node)")
    if spec.get("sequencing") not in (None, "node"):
        notes.not_carried("spec.sequencing", f"{spec.get('sequencing')!r} is not carried (noderoll orders per node, "
                          "as sequencing: node); wait for `kubectl wait --for=condition=Ready package/<name>` first")
    if spec.get("runtimeRequired") is True and spec.get("autoTaintNewNodes") is not True:
        notes.not_carried("spec.autoTaintNewNodes", "noderoll always taints nodes that join while a runtimeRequired "
                          "Package exists (as autoTaintNewNodes: true)")
    options = spec.get("deploymentPolicyOptions")
    if options is not None and not isinstance(options, Mapping):
        notes.not_carried("spec.deploymentPolicyOptions", "is not {resetBatchStateOnCompletion}")
    options = options if isinstance(options, Mapping) else {}
    unknown_fields(options, {"resetBatchStateOnCompletion"}, "spec.deploymentPolicyOptions", notes,
                   "not a deploymentPolicyOptions field")
    if options.get("resetBatchStateOnCompletion") is False:
        notes.not_carried("spec.deploymentPolicyOptions.resetBatchStateOnCompletion", "false cannot be carried: "
                          "each noderoll wave starts from its first batch, as with true")


def _shared_fields(obj: Source, spec: Mapping[str, Any], ctx: Names) -> dict[str, Any]:
    """The Package spec fields every package of the Skyhook gets."""
    asks_pause = _metadata_notes(obj)  # first: its notes are printed whatever --paused says
    shared: dict[str, Any] = {
        "nodeSelector": selector(spec.get("nodeSelectors"), "spec.nodeSelectors"),
        "podNonInterruptLabels": selector(spec.get("podNonInterruptLabels"), "spec.podNonInterruptLabels"),
        "additionalTolerations": tolerations(spec.get("additionalTolerations"), "spec.additionalTolerations",
                                             obj.notes),
        "runtimeRequired": spec.get("runtimeRequired") is True,
        "paused": ctx.options.paused or spec.get("pause") is True or asks_pause,
    }
    reference = spec.get("deploymentPolicy")
    if reference is not None and not isinstance(reference, str):
        raise Unmappable("spec.deploymentPolicy", "is not a DeploymentPolicy name")
    if reference:
        shared["deploymentPolicy"] = ctx.policies[reference]
        if shared["deploymentPolicy"] in ctx.bad_policy_names:
            raise Unmappable("spec.deploymentPolicy", ctx.bad_policy_names[shared["deploymentPolicy"]])
        if isinstance(spec.get("interruptionBudget"), Mapping) and wants_budget_policy({**spec, "deploymentPolicy": ""}):
            obj.notes.not_carried("spec.interruptionBudget", "NodeWright refuses it together with deploymentPolicy; "
                                  "the policy is carried")
    elif obj.name in ctx.budget_policies:
        shared["deploymentPolicy"] = ctx.budget_policies[obj.name]
        if shared["deploymentPolicy"] in ctx.bad_policy_names:
            raise Unmappable("spec.interruptionBudget", ctx.bad_policy_names[shared["deploymentPolicy"]])
    else:
        as_mapping(spec.get("interruptionBudget"), "spec.interruptionBudget", "an interruptionBudget")
        obj.notes.note("spec.interruptionBudget", "unset: NodeWright updated every matching node at once; the "
                       "Packages join noderoll's built-in one-node-at-a-time fleet (write a DeploymentPolicy, or "
                       "an interruptionBudget, to go faster)")
    return shared


def convert_skyhook(obj: Source, ctx: Names) -> list[Imported]:
    """The Packages of a Skyhook (and the policy of its interruptionBudget); Unmappable when the
    Skyhook as a whole cannot be imported (a package that cannot is left out with a note)."""
    spec = as_mapping(obj.data.get("spec"), "spec", "a Skyhook spec")
    unknown_fields(obj.data, {"apiVersion", "kind", "metadata", "spec", "status"}, "", obj.notes,
                   "not a field of a Kubernetes object")
    _skyhook_notes(obj, spec)
    shared = _shared_fields(obj, spec, ctx)
    packages = as_mapping(spec.get("packages"), "spec.packages", "a map of packages")
    if not packages:
        obj.notes.note("spec.packages", "no packages: nothing to import")
        return []
    out = []
    if obj.name in ctx.budget_policies and not spec.get("deploymentPolicy"):
        legacy = budget_policy(spec.get("interruptionBudget"), "spec.interruptionBudget", obj.notes)
        assert legacy is not None
        out.append(Imported(obj.notes.source, obj.notes.kind, obj.name, "spec.interruptionBudget",
                            document(keys.POLICY_KIND, shared["deploymentPolicy"], legacy)))
    drain_config = spec.get("drainConfig")
    drains = drain(drain_config, "spec.drainConfig", obj.notes)
    for key, package in packages.items():
        at = f"spec.packages.{key}"
        try:
            spec_out = _package_spec(obj, str(key), package, shared, ctx)
        except Unmappable as err:
            obj.notes.add(err.field, Severity.NOT_IMPORTED, f"package {key} not imported: {err.message}")
            continue
        if drain_config is not None or _disrupts(spec_out):
            spec_out["drain"] = dict(drains)
        name = ctx.packages[(obj.name, str(key))]
        out.append(Imported(obj.notes.source, obj.notes.kind, obj.name, at, document(keys.PACKAGE_KIND, name, spec_out)))
    # A policy made for this Skyhook alone is written only with at least one of its Packages.
    return out if any(item.document["kind"] == keys.PACKAGE_KIND for item in out) else []


def _disrupts(spec: Mapping[str, Any]) -> bool:
    interrupts = [spec.get("interrupt"), *spec.get("configInterrupts", {}).values()]
    return any(i is not None and i["type"] != "noop" for i in interrupts)


def _package_spec(obj: Source, key: str, package: Any, shared: Mapping[str, Any], ctx: Names) -> dict[str, Any]:
    at = f"spec.packages.{key}"
    if (obj.name, key) in ctx.problems:
        raise Unmappable(at, ctx.problems[(obj.name, key)])
    data = as_mapping(package, at, "a package")
    notes = obj.notes
    unknown_fields(data, PACKAGE_FIELDS, at, notes, "not a NodeWright package field")
    if data.get("name") not in (None, "", key):
        notes.not_carried(f"{at}.name", f"{data.get('name')!r} differs from the map key; NodeWright refuses that, "
                          f"the key {key!r} is used")
    version = data.get("version")
    if not isinstance(version, str):
        raise Unmappable(f"{at}.version", f"is {type(version).__name__}, not a version string (quote it)")
    try:
        parse_version(version)
    except VersionError as err:
        raise Unmappable(f"{at}.version", str(err)) from err
    spec: dict[str, Any] = {"version": version, "image": image_reference(data, version, at, notes)}
    if shared["nodeSelector"]:
        spec["nodeSelector"] = shared["nodeSelector"]
    spec["dependsOn"] = _depends_on(obj, data.get("dependsOn"), f"{at}.dependsOn", ctx)
    spec["interrupt"] = interrupt(data.get("interrupt"), f"{at}.interrupt", notes)
    spec["config"] = config(data.get("configMap"), f"{at}.configMap")
    spec["configInterrupts"] = config_interrupts(data.get("configInterrupts"), spec["config"],
                                                 f"{at}.configInterrupts", notes)
    spec["env"] = env(data.get("env"), f"{at}.env", notes)
    spec["resources"] = resources(data.get("resources"), f"{at}.resources", notes)
    for name in ("podNonInterruptLabels", "additionalTolerations", "runtimeRequired", "deploymentPolicy", "paused"):
        spec[name] = shared.get(name)
    spec["uninstall"] = _uninstall(data.get("uninstall"), f"{at}.uninstall", notes)
    agent = data.get("agentImageOverride")
    if agent is not None and not isinstance(agent, str):
        raise Unmappable(f"{at}.agentImageOverride", "is not an image reference")
    spec["agentImage"] = agent or None
    if data.get("gracefulShutdown") is not None:
        notes.not_carried(f"{at}.gracefulShutdown", "noderoll's stage pods keep Kubernetes' default termination "
                          "grace period; noderoll does not stop a stage mid-step (a drain's grace for workload "
                          "pods is drain.gracePeriodSeconds)")
    return {k: v for k, v in spec.items() if v not in (None, False, {}, [])}


def _depends_on(obj: Source, value: Any, at: str, ctx: Names) -> dict[str, str]:
    out = {}
    for dep, version in as_mapping(value, at, "a map of package -> version").items():
        if (obj.name, str(dep)) not in ctx.packages:
            raise Unmappable(f"{at}.{dep}", f"no package {dep!r} in this Skyhook (NodeWright refuses it too)")
        if not isinstance(version, str) or not version:
            raise Unmappable(f"{at}.{dep}", "needs the exact version of the dependency (a string)")
        out[ctx.packages[(obj.name, str(dep))]] = version
    return out


def _uninstall(value: Any, at: str, notes: Notes) -> dict[str, bool] | None:
    data = as_mapping(value, at, "an uninstall block (enabled, apply)")
    unknown_fields(data, {"enabled", "apply"}, at, notes, "not an uninstall field")
    enabled, apply = data.get("enabled") is True, data.get("apply") is True
    if apply and not enabled:
        notes.not_carried(f"{at}.apply", "needs enabled: true (NodeWright refuses it too); no uninstall is requested")
        apply = False
    if not enabled:
        return None
    return {"enabled": True, "apply": True} if apply else {"enabled": True}

"""`noderoll import`: NodeWright (Skyhook) objects as noderoll Packages and DeploymentPolicies. Pure.

`import_documents(docs, options)` takes the documents of the files given (anything YAML holds) and
returns the noderoll documents and one `ImportNote` per field it could not carry, with the reason.
The field mapping is in docs/migration-from-nodewright.md; a Skyhook's conversion in
`api/nodewright_skyhook.py`, a policy's in `api/nodewright_policy.py`, the field converters in
`api/nodewright_fields.py` and `api/nodewright_interrupts.py`. Rules:
* read: `Skyhook` (group skyhook.nvidia.com), `NodeWright` (nodewright.nvidia.com, NodeWright 0.18
  and later) and `DeploymentPolicy` of either group, version v1alpha1, also inside a `List`
  (`kubectl get skyhooks -o yaml`); other documents are skipped. A legacy Skyhook and the
  NodeWright mirrored from it (same name) are one object: the NodeWright is read.
* names: package `a` of Skyhook `foo` becomes the Package `a` (`NameStyle.PACKAGE`, the name its
  steps already know) or `foo-a` (`NameStyle.SKYHOOK_PACKAGE`); `dependsOn` entries follow. A
  Package name made by two packages of the input is not imported (use the other style). A
  DeploymentPolicy keeps its name; a Skyhook's `interruptionBudget` becomes a policy named after
  the Skyhook; `policy_names` (`--policy-name OLD=NEW`) renames either, references included. A
  name that is no DNS label of at most 43 characters, or is `default`, needs such a rename.
* each package gets the Skyhook's nodeSelectors, podNonInterruptLabels, additionalTolerations,
  runtimeRequired, drain settings, pause, and its policy (a Skyhook with neither a policy nor a
  budget joins noderoll's built-in one-node-at-a-time fleet, with a note: NodeWright then updated
  every node at once).
* settle: every document written passes `api.validation.check_document`, and together they pass
  the cross-document checks (each dependency written at its version, no cycle); one that would
  not is not imported, with the problem, and neither are the packages depending on it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from api import keys
from api.names import check_name
from api.nodewright_fields import ImportNote, Notes, Severity, Unmappable, unknown_fields
from api.nodewright_policy import policy_spec, wants_budget_policy
from api.nodewright_skyhook import (
    NODEWRIGHT_GROUP,
    NODEWRIGHT_VERSION,
    POLICY_KIND,
    SKYHOOK_GROUP,
    SKYHOOK_KINDS,
    Imported,
    ImportOptions,
    Names,
    NameStyle,
    Source,
    convert_skyhook,
    document,
)
from api.validation import check_document, cross_check
from protocol import names

__all__ = ["ImportNote", "ImportOptions", "ImportResult", "ImportUsageError", "Imported", "NameStyle", "Severity",
           "Skipped", "import_documents"]


class ImportUsageError(ValueError):
    """The options do not fit the input (a rename naming nothing, an ambiguous --policy-name)."""


@dataclass(frozen=True)
class Skipped:
    """An input document that is not a NodeWright object."""

    source: int
    at: str  # its path in the document ('' unless an item of a List)
    kind: str
    name: str
    api_version: str


@dataclass
class ImportResult:
    """Documents written (policies first, Packages in dependency order), notes, skipped documents."""

    documents: list[Imported] = field(default_factory=list)
    notes: list[ImportNote] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    read: int = 0  # NodeWright objects read

    @property
    def failed(self) -> bool:
        """True when an object, or a package of a Skyhook, was not imported."""
        return any(n.severity is Severity.NOT_IMPORTED for n in self.notes)


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) else ""


def _expand(doc: object) -> Iterator[tuple[str, object]]:
    """The objects of a document: itself, or the items of a List (with their path prefix)."""
    items = doc.get("items") if isinstance(doc, Mapping) else None
    if isinstance(doc, Mapping) and str(doc.get("kind", "")).endswith("List") and isinstance(items, list):
        for index, item in enumerate(items):
            yield f"items[{index}]", item
    else:
        yield "", doc


def _collect(docs: Sequence[object], result: ImportResult) -> list[Source]:
    found: dict[tuple[bool, str], Source] = {}
    for source, doc in enumerate(docs):
        for prefix, item in _expand(doc):
            if not isinstance(item, Mapping):
                result.skipped.append(Skipped(source, prefix, "", "", ""))
                continue
            api_version, kind, name = str(item.get("apiVersion") or ""), str(item.get("kind") or ""), _name(item)
            group, _, version = api_version.partition("/")
            if group not in (NODEWRIGHT_GROUP, SKYHOOK_GROUP):
                result.skipped.append(Skipped(source, prefix, kind, name, api_version))
                continue
            result.read += 1
            notes = Notes(source, kind, name, prefix, result.notes)
            if version != NODEWRIGHT_VERSION or kind not in (*SKYHOOK_KINDS, POLICY_KIND):
                notes.add("apiVersion", Severity.NOT_IMPORTED, f"{api_version} {kind} is not read; NodeWright "
                          f"serves {', '.join(SKYHOOK_KINDS)} and {POLICY_KIND} in {NODEWRIGHT_VERSION}")
                continue
            if not name:
                notes.add("metadata.name", Severity.NOT_IMPORTED, "missing")
                continue
            obj = Source(notes, item, kind != POLICY_KIND, group)
            kept = found.setdefault((obj.skyhook, name), obj)
            if kept is obj:
                continue
            if kept.group == SKYHOOK_GROUP and group == NODEWRIGHT_GROUP:
                found[(obj.skyhook, name)], kept, obj = obj, obj, kept
            if obj.group != kept.group:
                obj.notes.note("", f"the same object as {kept.notes.kind}/{name} of {NODEWRIGHT_GROUP} (NodeWright "
                               "mirrors each legacy object into its new group): imported once, from there")
            else:
                obj.notes.add("metadata.name", Severity.NOT_IMPORTED, "defined twice in the input; the first is read")
    return list(found.values())


def _policy_name_problem(name: str, original: str) -> str | None:
    hint = f"; pass --policy-name {original}=NEW"
    if name == names.DEFAULT_FLEET:
        return f"the DeploymentPolicy name {name!r} is reserved in noderoll (its built-in fleet){hint}"
    try:
        check_name(name, "DeploymentPolicy name")
    except ValueError as err:
        return f"{err}{hint}"
    return None


def _decide_names(objects: list[Source], options: ImportOptions) -> Names:
    ctx = Names(options)
    skyhooks = [o for o in objects if o.skyhook]
    budgeted = [o.name for o in skyhooks if wants_budget_policy(o.data.get("spec"))]
    referenced = {str(o.data["spec"]["deploymentPolicy"]) for o in skyhooks
                  if isinstance(o.data.get("spec"), Mapping) and o.data["spec"].get("deploymentPolicy")}
    known = set(budgeted) | referenced | {o.name for o in objects if not o.skyhook}
    unused = sorted(set(options.policy_names) - known)
    if unused:
        raise ImportUsageError(f"--policy-name {unused[0]}=...: no DeploymentPolicy, and no Skyhook with an "
                               f"interruptionBudget, is named {unused[0]!r} in the input")
    unnamed = [name for name in budgeted if name not in options.policy_names]
    if options.policy_name is not None and len(unnamed) != 1:
        raise ImportUsageError(f"--policy-name {options.policy_name} (without OLD=): {len(unnamed)} Skyhooks of the "
                               "input get a policy from their interruptionBudget; name each: --policy-name SKYHOOK=NAME")
    for name in budgeted:
        ctx.budget_policies[name] = options.policy_names.get(name) or options.policy_name or name
    owners: dict[str, list[tuple[str, str]]] = {}  # noderoll name -> (NodeWright name, what makes it)
    for original in sorted({o.name for o in objects if not o.skyhook} | referenced):
        ctx.policies[original] = ctx.policy_name(original)
        owners.setdefault(ctx.policies[original], []).append((original, f"DeploymentPolicy/{original}"))
    for skyhook, target in ctx.budget_policies.items():
        owners.setdefault(target, []).append((skyhook, f"the interruptionBudget of Skyhook/{skyhook}"))
    for target, sources in owners.items():
        problem = _policy_name_problem(target, sources[0][0])
        if len(sources) > 1:
            problem = (f"the DeploymentPolicy name {target!r} would be made by {' and by '.join(s for _, s in sources)}; "
                       f"pass --policy-name {sources[-1][0]}=NEW")
        if problem:
            ctx.bad_policy_names[target] = problem
    _decide_package_names(skyhooks, ctx)
    return ctx


def _decide_package_names(skyhooks: list[Source], ctx: Names) -> None:
    owners: dict[str, list[tuple[str, str]]] = {}
    for obj in skyhooks:
        spec = obj.data.get("spec")
        packages = spec.get("packages") if isinstance(spec, Mapping) else None
        for key in packages if isinstance(packages, Mapping) else ():
            name = str(key) if ctx.options.names is NameStyle.PACKAGE else f"{obj.name}-{key}"
            ctx.packages[(obj.name, str(key))] = name
            owners.setdefault(name, []).append((obj.name, str(key)))
            try:
                check_name(name, "Package name")
            except ValueError as err:
                other = NameStyle.PACKAGE if ctx.options.names is NameStyle.SKYHOOK_PACKAGE else None
                ctx.problems[(obj.name, str(key))] = f"{err}" + (f" (try --names {other})" if other else "")
    for name, made_by in owners.items():
        if len(made_by) > 1:
            sources = ", ".join(f"Skyhook/{skyhook} package {key}" for skyhook, key in made_by)
            for owner in made_by:
                ctx.problems[owner] = (f"the Package name {name!r} is made by {sources}; noderoll names are "
                                       "cluster-wide: pass --names skyhook-package, or rename a package")


def _convert_policy(obj: Source, ctx: Names) -> list[Imported]:
    name = ctx.policies[obj.name]
    if name in ctx.bad_policy_names:
        raise Unmappable("metadata.name", ctx.bad_policy_names[name])
    unknown_fields(obj.data, {"apiVersion", "kind", "metadata", "spec", "status"}, "", obj.notes,
                   "not a field of a Kubernetes object")
    spec = policy_spec(obj.data.get("spec"), "spec", obj.notes)
    return [Imported(obj.notes.source, obj.notes.kind, obj.name, "", document(keys.POLICY_KIND, name, spec))]


def _settle(imported: list[Imported], result: ImportResult) -> list[Imported]:
    """Drop documents noderoll would refuse (and their dependents), each with a `not imported` note."""
    kept = list(imported)
    while True:
        checks = [check_document(item.document) for item in kept]
        cross_check(checks, policies_known=False)
        bad = {id(item): check for item, check in zip(kept, checks, strict=True) if check.problems}
        if not bad:
            return kept
        names = {item.document["metadata"]["name"] for item in kept if id(item) not in bad}
        for item in kept:
            for problem in bad[id(item)].problems if id(item) in bad else ():
                dep = problem.field.removeprefix("spec.dependsOn.")
                message = (f"depends on {dep}, which is not imported" if dep != problem.field and dep not in names
                           else f"noderoll would refuse it: {problem.field}: {problem.message}")
                where = f"{item.at}.{problem.field.removeprefix('spec.')}" if item.at else problem.field
                result.notes.append(ImportNote(item.source, item.kind, item.name, where, Severity.NOT_IMPORTED,
                                               f"{item.what} not imported: {message}"))
        kept = [item for item in kept if id(item) not in bad]


def _in_order(items: list[Imported]) -> list[Imported]:
    """Policies first, then Packages with each dependency before its dependents (else input order)."""
    policies = [i for i in items if i.document["kind"] == keys.POLICY_KIND]
    waiting = [i for i in items if i.document["kind"] == keys.PACKAGE_KIND]
    done: set[str] = set()
    ordered = []
    while waiting:
        ready = next((i for i in waiting if set(i.document["spec"].get("dependsOn", {})) <= done), waiting[0])
        ordered.append(ready)
        done.add(ready.document["metadata"]["name"])
        waiting.remove(ready)
    return policies + ordered


def import_documents(docs: Sequence[object], options: ImportOptions | None = None) -> ImportResult:
    """NodeWright objects among `docs` as noderoll documents (module rules); raises
    ImportUsageError when `options` do not fit the input."""
    options = options or ImportOptions()
    result = ImportResult()
    objects = _collect(docs, result)
    ctx = _decide_names(objects, options)
    imported: list[Imported] = []
    for obj in objects:
        try:
            imported += convert_skyhook(obj, ctx) if obj.skyhook else _convert_policy(obj, ctx)
        except Unmappable as err:
            what = "Skyhook" if obj.skyhook else "DeploymentPolicy"
            obj.notes.add(err.field, Severity.NOT_IMPORTED, f"{what} not imported: {err.message}")
    result.documents = _in_order(_settle(imported, result))
    _note_missing_policies(result)
    return result


def _note_missing_policies(result: ImportResult) -> None:
    written = {i.document["metadata"]["name"] for i in result.documents if i.document["kind"] == keys.POLICY_KIND}
    seen = set()
    for item in result.documents:
        policy = item.document["spec"].get("deploymentPolicy") if item.document["kind"] == keys.PACKAGE_KIND else None
        if policy is None or policy in written or (item.source, item.name, policy) in seen:
            continue
        seen.add((item.source, item.name, policy))
        result.notes.append(ImportNote(item.source, item.kind, item.name, "spec.deploymentPolicy", Severity.NOTE,
                                       f"the DeploymentPolicy {policy!r} is not among the objects written: import or "
                                       "write it too (until it exists the bridge holds these Packages)"))

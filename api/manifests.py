"""The noderoll objects of manifest files, as `kubectl apply` would read them. Pure (no I/O).

`noderoll plan -f FILE` merges these objects over the cluster's (`manifest_objects` per file, from
the documents `api.yaml_source.parse` read). Per document:

* a List is expanded into its items: `kind: List` (what `kubectl get -o yaml` writes, any kinds
  inside) and `PackageList` / `DeploymentPolicyList` (what the API answers a list with; an item
  without `kind` or `apiVersion` takes the List's);
* a `Package` or `DeploymentPolicy` of `noderoll.io/v1alpha1` with a `metadata.name` is kept;
* what looks meant for noderoll but cannot be read as its objects is refused, each with the file,
  line and kind: a `noderoll.io` document of another kind or version, a near miss of the group
  (`api.validation.near_miss_group`: `noderol.io`, `NodeRoll.io`), a noderoll kind without
  `apiVersion`, a kind that reads as a misspelled noderoll kind (`Pakage`, `packages`,
  `DeploymentPolicies`) in no API group or the core group (`v1`), where no such kind exists, a
  noderoll object without `metadata.name`, a document or List item that is not an object;
* a document of another API group (a ConfigMap, a Namespace, another operator's CRD in the same
  GitOps folder) is skipped with a note, as `noderoll validate` skips it: plan reads the files one
  applies, and other groups' objects are not noderoll's to judge.

Whether the kept objects are valid is not decided here: the plan validates the objects of the
fleets it plans (`cli.plan_command.desired_fleets`), so an invalid object of another fleet does not
stop it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from api import keys
from api.validation import NODEROLL_KINDS, is_noderoll_document, near_miss_group
from api.yaml_source import SourceDocument

LIST_KIND = "List"
# `<Kind>List` -> Kind: the API's list kinds of noderoll's objects.
TYPED_LISTS = {f"{kind}List": kind for kind in NODEROLL_KINDS}
# difflib ratio from which a kind is taken for a misspelling of a noderoll kind (Pakage: 0.92,
# packages: 0.93, DeploymentPolicies: 0.88; Deployment: 0.77, Policy: 0.55, Pod: 0.4).
NEAR_MISS_KIND_RATIO = 0.8


@dataclass(frozen=True)
class ManifestObject:
    """A Package or DeploymentPolicy read from a file, and where it is (`file:line`)."""

    kind: str
    name: str
    obj: Mapping[str, Any]
    where: str


@dataclass
class Manifests:
    """What a file holds for noderoll: its objects, why some documents cannot be read, what was skipped."""

    objects: list[ManifestObject] = field(default_factory=list)
    # One line per document refused: `file:line: ...` (the plan exits 1 on any).
    problems: list[str] = field(default_factory=list)
    # One line per document of another API group, left out.
    skipped: list[str] = field(default_factory=list)


def misspelled_kind(kind: str) -> str | None:
    """The noderoll kind `kind` reads as a misspelling of (another case, a plural, a typo), or None. Pure."""
    if not kind or kind in NODEROLL_KINDS:
        return None
    lowered = kind.lower()
    for known in NODEROLL_KINDS:
        if difflib.SequenceMatcher(None, lowered, known.lower()).ratio() >= NEAR_MISS_KIND_RATIO:
            return known
    return None


def _is_list(obj: Mapping[str, Any]) -> bool:
    kind = str(obj.get("kind") or "")
    return kind == LIST_KIND or (kind in TYPED_LISTS and is_noderoll_document(obj))


def _expand(source: SourceDocument, name: str) -> Iterator[tuple[object, str]]:
    """The objects of a document with where each is (`file:line`): itself, or the items of a List."""
    doc, where = source.data, f"{name}:{source.line}"
    items = doc.get("items") if isinstance(doc, Mapping) and _is_list(doc) else None
    if not isinstance(items, list):
        yield doc, where  # a List without a list of items is refused as it is
        return
    kind = str(doc.get("kind"))
    for index, item in enumerate(items):
        if isinstance(item, Mapping) and kind in TYPED_LISTS:
            item = {"apiVersion": doc.get("apiVersion"), "kind": TYPED_LISTS[kind], **item}
        yield item, f"{name}:{source.line_of(f'items[{index}]')} ({kind} item {index})"


def _problem(obj: object) -> tuple[str | None, bool]:
    """(why `obj` cannot be read as a noderoll object, None when it can or is foreign; whether it is
    foreign: of another API group, to be skipped)."""
    if not isinstance(obj, Mapping):
        shape = "a list" if isinstance(obj, list) else f"a {type(obj).__name__}"
        return f"is {shape}, not a Kubernetes object (a mapping with apiVersion, kind and metadata)", False
    kind, api_version = str(obj.get("kind") or ""), str(obj.get("apiVersion") or "")
    served = f"noderoll's kinds are {' and '.join(NODEROLL_KINDS)} in apiVersion {keys.API_VERSION}"
    if _is_list(obj):
        return f"a {kind} without a list of items", False
    if not kind:
        return f"has no kind ({served})", False
    if near_miss_group(api_version):
        return f"apiVersion {api_version!r} is not noderoll.io (a typo?); {served}", False
    if is_noderoll_document(obj):
        if kind not in NODEROLL_KINDS:
            guess = misspelled_kind(kind)
            hint = f" (did you mean {guess}?)" if guess else ""
            return f"kind {kind!r} is not a noderoll kind{hint}; {served}", False
        if api_version != keys.API_VERSION:
            return f"{kind} in apiVersion {api_version!r} is not served; {served}", False
        return None, False
    group = api_version.split("/")[0] if "/" in api_version else ""
    if kind in NODEROLL_KINDS and not api_version:
        return f"a {kind} without apiVersion; use apiVersion {keys.API_VERSION}", False
    guess = misspelled_kind(kind)
    if guess is not None and not group:
        return f"kind {kind!r} (apiVersion {api_version or 'missing'}) reads as a misspelled {guess}; {served}", False
    return None, True


def manifest_objects(name: str, documents: Sequence[SourceDocument]) -> Manifests:
    """The noderoll objects of one file's documents (module rules); `name` names the file in messages."""
    found = Manifests()
    for source in documents:
        for obj, where in _expand(source, name):
            problem, foreign = _problem(obj)
            if problem is not None:
                found.problems.append(f"{where}: document {source.index}: {problem}")
                continue
            assert isinstance(obj, Mapping)
            kind = str(obj.get("kind"))
            meta = obj.get("metadata")
            object_name = meta.get("name") if isinstance(meta, Mapping) else None
            if foreign:
                found.skipped.append(f"{where}: skipped {kind}/{object_name or '<unnamed>'} "
                                     f"(apiVersion {obj.get('apiVersion') or 'missing'}: not noderoll.io)")
                continue
            if not isinstance(object_name, str) or not object_name:
                found.problems.append(f"{where}: document {source.index}: a {kind} without metadata.name")
                continue
            found.objects.append(ManifestObject(kind, object_name, obj, where))
    return found

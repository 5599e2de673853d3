"""Field converters from NodeWright (Skyhook) to noderoll, for `noderoll import`. Pure (no I/O).

Each converter takes a NodeWright value as read from YAML (anything: the input is not trusted),
the dotted path of that value in its document, and a `Notes` collector. It returns the noderoll
value, records a `not carried` note for each part it leaves out and says why, and raises
`Unmappable` when the object cannot be imported without changing what it does in a way that is
unsafe to guess (a node selector that cannot be read would select every node). Here: the notes,
selectors, tolerations, env, resources and the image reference; interrupts, config and drain are
in `api/nodewright_interrupts.py`. The mapping as a whole: `api/nodewright_import.py` and
docs/migration-from-nodewright.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ValidationError

from api.package import EnvVar, Toleration
from api.problems import problems_from_error
from api.quantity import parse_quantity
from api.selectors import LabelSelector

_SHA256_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_RESOURCE_KEYS = {
    "cpuRequest": ("requests", "cpu"),
    "cpuLimit": ("limits", "cpu"),
    "memoryRequest": ("requests", "memory"),
    "memoryLimit": ("limits", "memory"),
}


class Severity(StrEnum):
    """How much of a NodeWright object a note says was lost."""

    NOT_CARRIED = "not carried"  # a field (or part of one) left out; the object was imported
    NOT_IMPORTED = "not imported"  # the object (or one package of a Skyhook) was not written
    NOTE = "note"  # imported, with something to know or do


@dataclass(frozen=True)
class ImportNote:
    """One line for the user: which input object, which of its fields, and what happened."""

    source: int  # index of the input document
    kind: str
    name: str
    field: str  # dotted path from the document's root (items[i]. for the items of a List)
    severity: Severity
    message: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.name or '<unnamed>'}: {self.field or '<document>'}: {self.severity}: {self.message}"


class Unmappable(Exception):
    """The object cannot be imported: `field` (relative to the object) and why."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass
class Notes:
    """Collects the notes of one NodeWright object (paths relative to the object)."""

    source: int
    kind: str
    name: str
    prefix: str = ""
    out: list[ImportNote] = field(default_factory=list)

    def add(self, at: str, severity: Severity, message: str) -> None:
        """Record a note on field `at` of the object."""
        path = f"{self.prefix}.{at}" if self.prefix and at else (self.prefix or at)
        self.out.append(ImportNote(self.source, self.kind, self.name, path, severity, message))

    def not_carried(self, at: str, message: str) -> None:
        """Record that field `at` (or part of it) was left out, and why."""
        self.add(at, Severity.NOT_CARRIED, message)

    def note(self, at: str, message: str) -> None:
        """Record something the user should know about field `at`."""
        self.add(at, Severity.NOTE, message)


def first_problem(err: ValidationError, at: str) -> str:
    """The first problem of a pydantic error, with its field below `at`."""
    problems = problems_from_error("", "", err)
    if not problems:
        return str(err)
    problem = problems[0]
    return f"{problem.field}: {problem.message}" if problem.field else problem.message


def compact(model: BaseModel) -> dict[str, Any]:
    """A spec model as CRD JSON without the fields left at their defaults."""
    return model.model_dump(mode="json", by_alias=True, exclude_defaults=True)


def as_mapping(value: Any, at: str, what: str) -> Mapping[str, Any]:
    """`value` when it is a mapping (None: empty), else Unmappable."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise Unmappable(at, f"is {type(value).__name__}, not {what}")
    return value


def unknown_fields(value: Mapping[str, Any], known: set[str], at: str, notes: Notes, why: str) -> None:
    """A `not carried` note per key of `value` that is not in `known`."""
    for key in sorted(str(k) for k in value if k not in known):
        notes.not_carried(f"{at}.{key}" if at else key, why)


def selector(value: Any, at: str) -> dict[str, Any] | None:
    """A LabelSelector as noderoll writes it (None when empty): unreadable ones are Unmappable,
    because leaving one out would widen it to every node or every pod."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise Unmappable(at, f"is {type(value).__name__}, not a label selector")
    try:
        parsed = LabelSelector.model_validate(value)
    except ValidationError as err:
        raise Unmappable(at, f"not a valid label selector ({first_problem(err, at)})") from err
    return None if parsed.is_empty() else compact(parsed)


def tolerations(value: Any, at: str, notes: Notes) -> list[dict[str, Any]]:
    """`additionalTolerations`: the valid ones; each invalid one is a `not carried` note."""
    if value is None:
        return []
    if not isinstance(value, list):
        notes.not_carried(at, "is not a list of tolerations; the stage pods get no additional toleration")
        return []
    out = []
    for index, item in enumerate(value):
        try:
            out.append(compact(Toleration.model_validate(item)))
        except ValidationError as err:
            notes.not_carried(f"{at}[{index}]", f"not a valid toleration ({first_problem(err, at)}); nodes "
                              "with a taint only it tolerated are reported blocked")
    return out


def env(value: Any, at: str, notes: Notes) -> list[dict[str, str]]:
    """`env`: literal variables; `valueFrom` ones cannot be carried (noderoll's env is literal)."""
    if value is None:
        return []
    if not isinstance(value, list):
        notes.not_carried(at, "is not a list of variables")
        return []
    by_name: dict[str, tuple[int, dict[str, str]]] = {}
    for index, item in enumerate(value):
        where = f"{at}[{index}]"
        if not isinstance(item, Mapping):
            notes.not_carried(where, "is not a variable (name and value)")
            continue
        if "valueFrom" in item:
            notes.not_carried(f"{where}.valueFrom", f"variable {item.get('name')!r} left out: noderoll's env takes "
                              "literal values only; put the secret in config, or read it on the host")
            continue
        raw = item.get("value", "")
        if not isinstance(raw, str):
            notes.not_carried(f"{where}.value", f"is {type(raw).__name__}, not a string (Kubernetes refuses it)")
            continue
        try:
            var = EnvVar.model_validate({"name": item.get("name"), "value": raw})
        except ValidationError as err:
            notes.not_carried(where, f"variable left out: {first_problem(err, where)}")
            continue
        if var.name in by_name:
            notes.not_carried(f"{at}[{by_name[var.name][0]}]", f"{var.name} is set again at [{index}]; the last "
                              "one wins in Kubernetes and is the one carried")
        by_name[var.name] = (index, {"name": var.name, "value": var.value})
    return [entry for _, entry in sorted(by_name.values(), key=lambda pair: pair[0])]


def resources(value: Any, at: str, notes: Notes) -> dict[str, dict[str, str]] | None:
    """NodeWright's `cpuRequest`/`cpuLimit`/`memoryRequest`/`memoryLimit` as requests and limits."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        notes.not_carried(at, "is not {cpuRequest, cpuLimit, memoryRequest, memoryLimit}")
        return None
    unknown_fields(value, set(_RESOURCE_KEYS), at, notes, "not a NodeWright resources field")
    out: dict[str, dict[str, str]] = {}
    parsed: dict[tuple[str, str], Decimal] = {}
    for key, (group, resource) in _RESOURCE_KEYS.items():
        raw = value.get(key)
        if raw is None or isinstance(raw, bool):
            continue
        try:
            amount = parse_quantity(raw)
        except ValueError as err:
            notes.not_carried(f"{at}.{key}", str(err))
            continue
        if amount <= 0:
            notes.not_carried(f"{at}.{key}", "is not positive (NodeWright refuses it too)")
            continue
        parsed[(group, resource)] = amount
        out.setdefault(group, {})[resource] = str(raw)
    for resource in ("cpu", "memory"):
        request, limit = parsed.get(("requests", resource)), parsed.get(("limits", resource))
        if request is not None and limit is not None and limit < request:
            notes.not_carried(f"{at}.{resource}Limit", f"is below {resource}Request (NodeWright refuses it too); "
                              "the stage pods get the request without a limit")
            del out["limits"][resource]
    return {group: values for group, values in out.items() if values} or None


def split_image(image: str) -> tuple[str, str | None, str | None]:
    """(repository, tag, digest) of an image reference; a colon before the last `/` is a
    registry port (`localhost:5000/pkg` has no tag), as NodeWright's current webhook reads it."""
    repository, digest = image, None
    if "@" in repository:
        repository, digest = repository.rsplit("@", 1)
    tag = None
    colon = repository.rfind(":")
    if colon > repository.rfind("/"):
        repository, tag = repository[:colon], repository[colon + 1:]
    return repository, tag, digest


def image_reference(package: Mapping[str, Any], version: str, at: str, notes: Notes) -> str:
    """The full image reference NodeWright pulled: `image@containerSHA`, else `image:version`."""
    image = package.get("image")
    if not isinstance(image, str) or not image.strip():
        raise Unmappable(f"{at}.image", "missing: NodeWright needs the package image repository")
    repository, tag, digest = split_image(image.strip())
    sha = package.get("containerSHA")
    if sha is not None and (not isinstance(sha, str) or not _SHA256_RE.match(sha)):
        raise Unmappable(f"{at}.containerSHA", "is not sha256:<64 lowercase hex digits>")
    if tag is not None:
        notes.not_carried(f"{at}.image", f"tag {tag!r} left out: NodeWright pulls the package image by its "
                          f"version ({repository}:{version}), and so does the imported Package")
    if digest is not None and sha is None:
        sha = digest
        notes.note(f"{at}.image", f"digest {digest} kept (NodeWright takes a digest from containerSHA)")
    elif digest is not None:
        notes.not_carried(f"{at}.image", f"digest {digest} left out: containerSHA {sha} is the one pulled")
    return f"{repository}@{sha}" if sha else f"{repository}:{version}"

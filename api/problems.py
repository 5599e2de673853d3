"""One error type for every rejected document: `ValidationProblem`. Pure (no I/O).

The bridge puts problems on the CR's status condition and in an Event, `noderoll validate`
prints them as `file: kind/name: field: message`; both use `str(problem)` for the part after
the file name. Every message names what would be valid.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from api.names import check_name


@dataclass(frozen=True)
class ValidationProblem:
    """One reason a document is invalid: which object, which field (dotted path), and why."""

    kind: str
    name: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.name or '<unnamed>'}: {self.field or '<document>'}: {self.message}"


class InvalidDocumentError(ValueError):
    """Raised when a document fails validation; carries every problem found."""

    def __init__(self, problems: list[ValidationProblem]) -> None:
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


def field_path(loc: Iterable[int | str]) -> str:
    """Render a pydantic error location as a dotted path with list indexes (`spec.env[0].name`)."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.startswith(("function-", "tagged-union", "model-before")):
            # Internal validator names carry no meaning for users.
            continue
        else:
            out += f".{part}" if out else part
    return out


def _clean_message(msg: str) -> str:
    # pydantic prefixes messages raised from validators with "Value error, ".
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            return msg[len(prefix) :]
    return msg


def problems_from_error(
    kind: str, name: str, err: ValidationError, prefix: str = ""
) -> list[ValidationProblem]:
    """Turn a pydantic ValidationError into ValidationProblems (fields prefixed with `prefix`)."""
    problems = []
    for item in err.errors(include_url=False):
        path = field_path(item["loc"])
        if prefix:
            path = f"{prefix}.{path}" if path else prefix
        message = _clean_message(item["msg"])
        if item["type"] == "missing":
            message = "required field is missing"
        problems.append(ValidationProblem(kind=kind, name=name, field=path, message=message))
    return problems


ModelT = TypeVar("ModelT", bound=BaseModel)


def validate_object(model: type[ModelT], kind: str, obj: dict[str, Any]) -> tuple[ModelT, list[ValidationProblem]]:
    """Validate a Kubernetes object dict (`metadata` + `spec`) as `model`, checking its name too.

    Returns the model and the problems found besides the model's own (the name); raises
    InvalidDocumentError, listing every problem, when the model itself does not validate.
    """
    meta = obj.get("metadata") or {}
    # A hand-written document may hold anything there; the model reports a metadata that is no mapping.
    name = str(meta.get("name") or "") if isinstance(meta, dict) else ""
    problems: list[ValidationProblem] = []
    try:
        check_name(name, "metadata.name")
    except ValueError as err:
        problems.append(ValidationProblem(kind, name, "metadata.name", str(err)))
    try:
        instance = model.model_validate({"metadata": meta, "spec": obj.get("spec")})
    except ValidationError as err:
        problems.extend(problems_from_error(kind, name, err))
        raise InvalidDocumentError(problems) from err
    return instance, problems

"""Kubernetes LabelSelector as a model, with a pure `matches(labels)`. Pure (no I/O).

Semantics are Kubernetes': every `matchLabels` pair must be present; `In`/`NotIn` need a
non-empty `values`, `Exists`/`DoesNotExist` take none; `NotIn` and `DoesNotExist` match nodes
without the key. An empty selector matches every node.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import StrEnum

from pydantic import Field, field_validator, model_validator

from api.base import SpecModel

# Qualified name with optional DNS-subdomain prefix, as Kubernetes validates label keys.
_LABEL_KEY_RE = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_LABEL_VALUE_RE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


class SelectorOperator(StrEnum):
    """Operators of a LabelSelector requirement."""

    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


def check_label_key(key: str) -> str:
    """Return `key` if it is a valid label key, else raise ValueError saying what is valid."""
    if not _LABEL_KEY_RE.match(key) or len(key.split("/")[-1]) > 63:
        raise ValueError(
            f"{key!r} is not a valid label key; use an optional DNS prefix and a name of at most "
            "63 characters of letters, digits, '-', '_' and '.' (for example example.com/gpu)"
        )
    return key


def check_label_value(value: str) -> str:
    """Return `value` if it is a valid label value, else raise ValueError saying what is valid."""
    if not _LABEL_VALUE_RE.match(value):
        raise ValueError(
            f"{value!r} is not a valid label value; use at most 63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return value


class SelectorRequirement(SpecModel):
    """One `matchExpressions` entry."""

    key: str
    operator: SelectorOperator
    values: list[str] = Field(default_factory=list)

    _key = field_validator("key")(check_label_key)

    @model_validator(mode="after")
    def _values_fit_operator(self) -> SelectorRequirement:
        if self.operator in (SelectorOperator.IN, SelectorOperator.NOT_IN) and not self.values:
            raise ValueError(f"operator {self.operator.value} needs a non-empty values list")
        if self.operator in (SelectorOperator.EXISTS, SelectorOperator.DOES_NOT_EXIST) and self.values:
            raise ValueError(f"operator {self.operator.value} takes no values; remove values")
        return self

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether `labels` satisfy this requirement."""
        present = self.key in labels
        if self.operator is SelectorOperator.IN:
            return present and labels[self.key] in self.values
        if self.operator is SelectorOperator.NOT_IN:
            return not present or labels[self.key] not in self.values
        if self.operator is SelectorOperator.EXISTS:
            return present
        return not present


class LabelSelector(SpecModel):
    """A Kubernetes LabelSelector (`matchLabels` and `matchExpressions`)."""

    match_labels: dict[str, str] = Field(default_factory=dict)
    match_expressions: list[SelectorRequirement] = Field(default_factory=list)

    @field_validator("match_labels")
    @classmethod
    def _labels_valid(cls, value: dict[str, str]) -> dict[str, str]:
        for key, label_value in value.items():
            check_label_key(key)
            check_label_value(label_value)
        return value

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a node with `labels` is selected (an empty selector selects everything)."""
        if any(labels.get(k) != v for k, v in self.match_labels.items()):
            return False
        return all(req.matches(labels) for req in self.match_expressions)

    def is_empty(self) -> bool:
        """True when the selector has no terms (selects every node)."""
        return not self.match_labels and not self.match_expressions

    def canonical(self) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str, tuple[str, ...]], ...]]:
        """A hashable normal form, to detect two selectors that select exactly alike."""
        exprs = sorted((r.key, r.operator.value, tuple(sorted(r.values))) for r in self.match_expressions)
        return tuple(sorted(self.match_labels.items())), tuple(exprs)

"""Analysis gates of a DeploymentPolicy (`spec.analysis[]`) and their success conditions. Pure.

A gate is a Prometheus query (PromQL, an instant query) with a success condition, sampled every
`intervalSeconds`. `when` says where it is evaluated: `afterCanary` (once the canary passed its
soak, before the first batch), `betweenBatches` (after every batch, the canary's included, before
the next one) or `continuous` (sampled while the fleet's windows are out, and before each batch is
handed out). At `afterCanary` and `betweenBatches` the gate passes after `count` successful samples
in a row (default 1) and fails when more than `failureLimit` samples failed (default 0: the first
failed sample fails it); a `continuous` gate fails when more than `failureLimit` samples in a row
failed, and a batch starts only after its latest sample succeeded. `address` (`http://host:port`,
optionally with a path prefix) overrides the worker's Prometheus address (`--prometheus-address`,
`NODEROLL_PROMETHEUS_ADDRESS`) for that gate. The rules are `planning/rollout/gates.py`.

The success condition is a small language, never evaluated as code:
* `result <op> <number>` with `<op>` one of `<`, `<=`, `==`, `!=`, `>=`, `>` and a decimal number
  (`0.5`, `-1`, `1e3`): the query's result must be a scalar, or a vector whose every series holds
  it; a vector without series fails the sample ("no series"); NaN holds no comparison;
* `empty` (or `no series`): the vector must have no series, the kured-style alert gate
  (`ALERTS{alertname="GPUXidErrors", alertstate="firing"}` with `empty`: no such alert firing).

Checks made here: a condition that does not parse (the message shows the forms), gate names
(lowercase DNS labels, unique in the policy), an `address` that is no http(s) URL, and `count` on a
`continuous` gate (it samples for as long as batches run; it never "passes").
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import StrEnum

from pydantic import Field, field_validator, model_validator

from api.base import SpecModel
from api.enums import GateWhen
from api.names import check_name

CONDITION_HINT = (
    "write `result <op> <number>` with <op> one of <, <=, ==, !=, >=, > (e.g. `result < 0.5`), or `empty` "
    "(the query returns no series, e.g. no alert firing)"
)
_COMPARISON = re.compile(r"^\s*result\s*(<=|>=|==|!=|<|>)\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*$")
_EMPTY = re.compile(r"^\s*(empty|no\s+series)\s*$", re.IGNORECASE)


class Operator(StrEnum):
    """A comparison of the condition language."""

    LT = "<"
    LE = "<="
    EQ = "=="
    NE = "!="
    GE = ">="
    GT = ">"


_COMPARE = {
    Operator.LT: lambda a, b: a < b,
    Operator.LE: lambda a, b: a <= b,
    Operator.EQ: lambda a, b: a == b,
    Operator.NE: lambda a, b: a != b,
    Operator.GE: lambda a, b: a >= b,
    Operator.GT: lambda a, b: a > b,
}


@dataclass(frozen=True)
class Condition:
    """A parsed success condition: a comparison with a threshold, or `empty` (no series)."""

    operator: Operator | None = None
    threshold: float = 0.0

    @property
    def wants_empty(self) -> bool:
        """True for `empty`: success means the query returned no series."""
        return self.operator is None

    def holds(self, value: float) -> bool:
        """True when `value` satisfies the comparison (NaN never does; `empty` conditions: never)."""
        if self.operator is None or math.isnan(value):
            return False
        return bool(_COMPARE[self.operator](value, self.threshold))

    def __str__(self) -> str:
        return "empty" if self.operator is None else f"result {self.operator.value} {self.threshold:g}"


def parse_condition(text: str) -> Condition:
    """The Condition of `text`; ValueError with the accepted forms when it does not parse."""
    if _EMPTY.match(text):
        return Condition()
    found = _COMPARISON.match(text)
    if found is None:
        raise ValueError(f"successCondition {text!r} is not understood: {CONDITION_HINT}")
    threshold = float(found.group(2))
    if math.isinf(threshold):
        raise ValueError(f"successCondition {text!r}: the number is too large; {CONDITION_HINT}")
    return Condition(Operator(found.group(1)), threshold)


class AnalysisGate(SpecModel):
    """One Prometheus query that must hold for the fleet to go on (module rules)."""

    name: str
    query: str = Field(min_length=1)
    success_condition: str
    when: GateWhen = GateWhen.BETWEEN_BATCHES
    interval_seconds: int = Field(default=30, ge=1, le=86_400)
    # None: 1 (afterCanary, betweenBatches); never set for continuous gates.
    count: int | None = Field(default=None, ge=1, le=1_000)
    failure_limit: int = Field(default=0, ge=0, le=1_000)
    address: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        check_name(value, "gate name")
        return value

    @field_validator("success_condition")
    @classmethod
    def _condition(cls, value: str) -> str:
        parse_condition(value)
        return value

    @field_validator("address")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^\s/]+(/\S*)?$", value):
            raise ValueError(f"address {value!r} is not a Prometheus URL: write http://host:port or https://host:port")
        return value

    @model_validator(mode="after")
    def _count_fits_when(self) -> AnalysisGate:
        if self.count is not None and self.when is GateWhen.CONTINUOUS:
            raise ValueError(
                "count is not used by when: continuous (a continuous gate samples for as long as batches run and "
                "fails after more than failureLimit failed samples in a row); remove count"
            )
        return self

    @property
    def condition(self) -> Condition:
        """The parsed success condition."""
        return parse_condition(self.success_condition)

    @property
    def needed(self) -> int:
        """Successful samples in a row that pass the gate (afterCanary, betweenBatches)."""
        return self.count or 1

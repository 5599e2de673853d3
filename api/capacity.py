"""GPU budgets of a DeploymentPolicy: capacity floors, topology limits and drain-ahead, as models. Pure.

Three additions to a policy (ADR 0015), each optional; a policy without them rolls exactly as before.

* `budget.minAvailable` (on `spec.default` and on each compartment): `{resource, count}` or
  `{resource, percent}`. `resource` is an extended resource name (`<domain>/<name>`, e.g.
  `nvidia.com/gpu`); `count` is in units of it, `percent` (1-99) is of the resource's allocatable
  summed over the compartment's nodes, rounded up. The fleet counts, per compartment, that
  resource's allocatable over the nodes that are Ready, not cordoned and in no node window, and
  takes a node into a window only if the sum stays at or above the floor without it. Nodes that
  are NotReady, cordoned by someone else, or left cordoned by a failed window count against the
  floor: the fleet waits (and says so) rather than go under it. `percent: 100` would keep every
  node out of windows and is refused. Only the nodes that a Package of the fleet targets are
  counted: nodes no Package selects neither add to nor take from the sum.
* `budget.maxUnavailablePerTopology`: a list of `{key, max}`. At most `max` nodes with the same
  value of the node label `key` are unavailable at once: in a node window (of any fleet),
  cordoned or NotReady. Counted within the compartment, as its budget is (a domain split over two
  compartments is limited in each). Nodes without the label form one group of their own, so at
  most `max` of them are unavailable at once: a node noderoll cannot place is never assumed to be
  alone in its domain. Keys are valid label keys, unique within one budget, and not noderoll's own
  (`noderoll.io/...` labels change with every window). `max` is at least 1.
* `spec.drainAhead`: `{seconds, taint}`. A node is labelled `noderoll.io/upcoming=true` at least
  `seconds` (1-86400) before its window starts, and with `taint: true` also gets the taint
  `noderoll.io/upcoming:PreferNoSchedule`, so schedulers stop placing new long jobs there; both
  are removed when its window answered, or when the node leaves the plan (the fleet paused,
  halted or out of its maintenance windows, the node no longer targeted, or drainAhead removed
  from the policy). The label and taint are shared by the fleets that want the node soon: the
  annotation `noderoll.io/upcoming-for` names them, and each removes only its own claim.

Counts (`count`, `percent`) stay required on a budget: `percent: 100` lets the floor and the
topology limits alone cap the batches. The rules are `planning/rollout/disruption.py` (floors, topology)
and `planning/rollout/drain_ahead.py`; these models stay data.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from api import keys
from api.base import SpecModel
from api.selectors import check_label_key

# `<DNS subdomain>/<name>`: the extended resources a device plugin advertises (nvidia.com/gpu).
_EXTENDED_RESOURCE_RE = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
RESOURCE_HINT = "an extended resource name, <domain>/<name> (for example nvidia.com/gpu or amd.com/gpu)"
DRAIN_AHEAD_MAX_SECONDS = 86400


def check_resource(name: str) -> str:
    """Return `name` if it is an extended resource name, else raise ValueError saying what is valid."""
    domain = name.split("/", 1)[0]
    # Kubernetes' own domains and quota names are not extended resources (cpu and memory have no domain).
    native = domain == "kubernetes.io" or domain.endswith(".kubernetes.io") or name.startswith("requests.")
    if not _EXTENDED_RESOURCE_RE.match(name) or native:
        raise ValueError(f"resource {name!r} is not {RESOURCE_HINT}; cpu and memory are not counted")
    return name


class MinAvailable(SpecModel):
    """A capacity floor: `count` units of `resource`, or `percent` of the compartment's, stay available."""

    resource: str
    count: int | None = Field(default=None, ge=1)
    percent: int | None = Field(default=None, ge=1, le=99)

    _resource = field_validator("resource")(check_resource)

    @model_validator(mode="after")
    def _exactly_one(self) -> MinAvailable:
        if (self.count is None) == (self.percent is None):
            raise ValueError(
                f"set exactly one of count (units of {self.resource}, at least 1) or percent (1-99)"
            )
        return self


class TopologyLimit(SpecModel):
    """At most `max` nodes sharing one value of the node label `key` unavailable at once."""

    key: str
    max: int = Field(ge=1)

    @field_validator("key")
    @classmethod
    def _key_valid(cls, value: str) -> str:
        check_label_key(value)
        if value.startswith(keys.PREFIX):
            raise ValueError(
                f"{value!r} is one of noderoll's own node labels (they change with every window); "
                "name a topology label such as topology.kubernetes.io/zone or your rack label"
            )
        return value


def check_unique_keys(limits: list[TopologyLimit]) -> list[TopologyLimit]:
    """Raise ValueError when two limits name the same key."""
    seen: set[str] = set()
    for index, limit in enumerate(limits):
        if limit.key in seen:
            raise ValueError(
                f"maxUnavailablePerTopology[{index}].key {limit.key!r} is used twice; keep one limit per key"
            )
        seen.add(limit.key)
    return limits


class DrainAhead(SpecModel):
    """Mark a node `noderoll.io/upcoming` (and optionally taint it) `seconds` before its window."""

    seconds: int = Field(ge=1, le=DRAIN_AHEAD_MAX_SECONDS)
    taint: bool = False

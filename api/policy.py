"""The DeploymentPolicy custom resource as pydantic models, with the checks a schema cannot make. Pure.

A policy paces rollouts: nodes are split into compartments (`compartments[]` by selector, the
rest in `default`), each with a `budget` (nodes disrupted at once, across all rollouts using the
policy) and a batch `strategy`. Checks made here: the object name, budget `count` xor `percent`,
unique compartment names (and `default` reserved), no two compartments with identical selectors,
strategy fields that belong to the strategy type (`delta` only for linear, `growthFactor` only
for exponential), and a canary that cannot fit in the budgets (when all budgets are counts).
`canary.onFailure` is `halt` (the default) or `rollback` (ADR 0009); it lives in `canary`, so a
rollback always has a canary to judge (a policy without `canary` never rolls back).
Maintenance windows (`maintenanceWindows`, `api/maintenance.py`): times in `HH:MM`, no empty
window (`start` == `end`), each day once, known IANA time zones, no two windows overlapping.
Analysis gates (`analysis`, `api/analysis.py`): a success condition that parses, gate names
unique in the policy, an http(s) `address`, no `count` on a `continuous` gate.
GPU budgets (`budget.minAvailable`, `budget.maxUnavailablePerTopology`, `drainAhead`; `api/capacity.py`):
an extended resource name and exactly one of `count` or `percent` (1-99) for a floor, valid and
unique label keys (not noderoll's own) with `max` at least 1 for topology limits, 1-86400 seconds
of drain-ahead.
Strategy `rolling` (no batches): each compartment keeps `min(budget, nodes left)` node windows
running at all times and starts the next node as soon as one window ends, so no batch waits for
its slowest node. `failureThreshold` then counts failed windows among the compartment's last N
finished ones (N = its budget) and halts below `safetyLimit` as for batches; `batchThreshold` and
`initialBatch` have no part (an `initialBatch` other than the default 1 is refused). The canary,
maintenance windows, pauses and gates apply as with batches: `betweenBatches` gates are sampled
after every N finished windows (N = the sum of the budgets) and hold new starts until they pass.
A policy rolls in every compartment or in none (refused otherwise). Measured against
`exponential` and `linear` in docs/benchmarks.md.
GPU workloads (`workloads`, `api/workloads.py`): the eviction notice (`noticeSeconds`, 0-86400), drain
rules (`rules[]`: a known `action`, `timeoutSeconds` with `WaitForCompletion` only, a non-empty list of
valid `namespaces`, a valid `podSelector`, no rule after a catch-all) and `onDrainTimeout`.
GPU health before uncordon (`verify`, `api/verify.py`) and other maintenance respected (`respect`,
`api/respect.py`): their own sections below.
The batch maths lives in `planning/rollout/batches.py` (rolling: `planning/rollout/rolling.py`), the window and
gate rules in `planning/rollout/maintenance.py` and `planning/rollout/gates.py`, the floors and topology limits in
`planning/rollout/disruption.py`; these models stay data.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from api import keys
from api.analysis import AnalysisGate
from api.base import LenientModel, SpecModel
from api.capacity import DrainAhead, MinAvailable, TopologyLimit, check_unique_keys
from api.clusters import ClustersSpec
from api.enums import CanaryFailure, Promotion, StrategyType
from api.maintenance import MaintenanceWindow, check_overlaps
from api.names import check_name
from api.package import ObjectMeta
from api.problems import InvalidDocumentError, ValidationProblem, validate_object
from api.respect import RespectSpec
from api.selectors import LabelSelector
from api.verify import VerifySpec
from api.workloads import WorkloadsSpec
from protocol import names

DEFAULT_COMPARTMENT = "default"
RESERVED_POLICY_NAME = (
    f"the name {names.DEFAULT_FLEET!r} is reserved: Packages that name no DeploymentPolicy roll out in the "
    f"built-in fleet {names.DEFAULT_FLEET!r} (one node at a time); pick another name"
)


class Budget(SpecModel):
    """How many nodes of a compartment may be disrupted at once: `count` or `percent`, not both.

    Optionally also a capacity floor (`minAvailable`) and topology limits (`maxUnavailablePerTopology`):
    `api/capacity.py`.
    """

    count: int | None = Field(default=None, ge=1)
    percent: int | None = Field(default=None, ge=1, le=100)
    # None (not []) when absent: a policy dumps as before, so its revision does not change (no new wave).
    min_available: MinAvailable | None = None
    max_unavailable_per_topology: list[TopologyLimit] | None = None

    @field_validator("max_unavailable_per_topology")
    @classmethod
    def _unique_keys(cls, value: list[TopologyLimit] | None) -> list[TopologyLimit] | None:
        return check_unique_keys(value) if value else value

    @property
    def topology_limits(self) -> list[TopologyLimit]:
        """`maxUnavailablePerTopology` ([] when absent)."""
        return list(self.max_unavailable_per_topology or [])

    @model_validator(mode="after")
    def _exactly_one(self) -> Budget:
        if (self.count is None) == (self.percent is None):
            raise ValueError("set exactly one of count (nodes, at least 1) or percent (1-100)")
        return self


class Strategy(SpecModel):
    """How batch sizes evolve in a compartment, and when failures halt the rollout."""

    type: StrategyType = StrategyType.FIXED
    initial_batch: int = Field(default=1, ge=1)
    delta: int | None = Field(default=None, ge=1)
    growth_factor: int | None = Field(default=None, ge=2)
    batch_threshold: int = Field(default=100, ge=1, le=100)
    failure_threshold: int | None = Field(default=None, ge=1)
    safety_limit: int = Field(default=50, ge=0, le=100)

    @model_validator(mode="after")
    def _fields_fit_type(self) -> Strategy:
        if self.delta is not None and self.type is not StrategyType.LINEAR:
            raise ValueError(f"delta is only used by type linear; remove it for type {self.type.value}")
        if self.growth_factor is not None and self.type is not StrategyType.EXPONENTIAL:
            raise ValueError(
                f"growthFactor is only used by type exponential; remove it for type {self.type.value}"
            )
        # 1 is the default the CRD's schema fills in: only another value is a mistake.
        if self.type is StrategyType.ROLLING and self.initial_batch != 1:
            raise ValueError("initialBatch is not used by type rolling (it keeps the budget's windows running); "
                             "remove it")
        return self

    @property
    def effective_delta(self) -> int:
        """Linear growth step (default 1)."""
        return self.delta or 1

    @property
    def effective_growth_factor(self) -> int:
        """Exponential growth factor (default 2)."""
        return self.growth_factor or 2


class Canary(SpecModel):
    """A first batch of `count` nodes, soaked for `soakSeconds`, then promoted auto or manually.

    `onFailure`: `halt` (the default) stops the fleet when a canary node fails; `rollback` first
    brings the canary nodes back to the previous spec of each Package the wave changed (ADR 0009).
    """

    count: int = Field(default=1, ge=1)
    soak_seconds: int = Field(default=0, ge=0)
    promotion: Promotion = Promotion.AUTO
    on_failure: CanaryFailure = CanaryFailure.HALT


class PolicyDefault(SpecModel):
    """Budget and strategy of nodes that match no compartment."""

    budget: Budget
    strategy: Strategy = Field(default_factory=Strategy)


class Compartment(SpecModel):
    """A named group of nodes (by selector) with its own budget and strategy."""

    name: str
    selector: LabelSelector
    budget: Budget
    # None: the compartment uses spec.default.strategy.
    strategy: Strategy | None = None

    @field_validator("name")
    @classmethod
    def _name_valid(cls, value: str) -> str:
        check_name(value, "compartment name")
        if value == DEFAULT_COMPARTMENT:
            raise ValueError(
                f"{DEFAULT_COMPARTMENT!r} is reserved for nodes matching no compartment; pick another name"
            )
        return value


class DeploymentPolicySpec(SpecModel):
    """`spec` of a DeploymentPolicy."""

    default: PolicyDefault
    compartments: list[Compartment] = Field(default_factory=list)
    canary: Canary | None = None
    # Empty: new node windows may start at any time.
    maintenance_windows: list[MaintenanceWindow] = Field(default_factory=list)
    analysis: list[AnalysisGate] = Field(default_factory=list)
    # None: each cluster rolls its changes out on its own (api/clusters.py, ADR 0017).
    clusters: ClustersSpec | None = None
    # None: nodes are not marked before their windows (api/capacity.py).
    drain_ahead: DrainAhead | None = None
    # None: windows drain every pod as the Packages' `drain` says, and a drain timeout fails (api/workloads.py).
    workloads: WorkloadsSpec | None = None
    # None: no GPU verify before the uncordon (api/verify.py).
    verify: VerifySpec | None = None
    # None: the default taints and NodeMaintenance objects are respected (api/respect.py).
    respect: RespectSpec | None = None

    @model_validator(mode="after")
    def _compartments_distinct(self) -> DeploymentPolicySpec:
        names: set[str] = set()
        selectors: dict[Any, str] = {}
        for index, compartment in enumerate(self.compartments):
            if compartment.name in names:
                raise ValueError(
                    f"compartments[{index}].name {compartment.name!r} is used twice; names must be unique"
                )
            names.add(compartment.name)
            canonical = compartment.selector.canonical()
            if canonical in selectors:
                raise ValueError(
                    f"compartments[{index}] ({compartment.name}) has the same selector as {selectors[canonical]}; "
                    "merge them or make the selectors differ"
                )
            selectors[canonical] = compartment.name
        return self

    @model_validator(mode="after")
    def _canary_fits(self) -> DeploymentPolicySpec:
        # With percent budgets the capacity depends on the fleet; the planner caps the canary then.
        if self.canary is None:
            return self
        budgets = [self.default.budget] + [c.budget for c in self.compartments]
        if all(b.count is not None for b in budgets):
            capacity = sum(b.count or 0 for b in budgets)
            if self.canary.count > capacity:
                raise ValueError(
                    f"canary.count {self.canary.count} is more than the budgets allow at once ({capacity}); "
                    f"use a canary count of at most {capacity} or raise a budget"
                )
        return self

    @model_validator(mode="after")
    def _rolls_or_batches(self) -> DeploymentPolicySpec:
        # One fleet either rolls (no batch barrier) or runs batches: a mix would need both at once.
        kinds = {item.name: self.strategy_of(item.name).type is StrategyType.ROLLING for item in self.compartments}
        kinds["default"] = self.default.strategy.type is StrategyType.ROLLING
        if len(set(kinds.values())) > 1:
            rolling = sorted(name for name, rolls in kinds.items() if rolls)
            others = sorted(name for name, rolls in kinds.items() if not rolls)
            raise ValueError(f"strategy type rolling in {', '.join(rolling)} but not in {', '.join(others)}; "
                             "a policy rolls in every compartment or in none")
        return self

    @model_validator(mode="after")
    def _windows_disjoint(self) -> DeploymentPolicySpec:
        problem = check_overlaps(self.maintenance_windows)
        if problem:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _gate_names_unique(self) -> DeploymentPolicySpec:
        seen: set[str] = set()
        for index, gate in enumerate(self.analysis):
            if gate.name in seen:
                raise ValueError(f"analysis[{index}].name {gate.name!r} is used twice; gate names must be unique")
            seen.add(gate.name)
        return self

    def budget_of(self, compartment: str) -> Budget:
        """The budget of `compartment` (`default`: the default's)."""
        for item in self.compartments:
            if item.name == compartment:
                return item.budget
        return self.default.budget

    def strategy_of(self, compartment: str) -> Strategy:
        """The strategy in force in `compartment` (a compartment without one uses the default's)."""
        for item in self.compartments:
            if item.name == compartment and item.strategy is not None:
                return item.strategy
        return self.default.strategy


class DeploymentPolicy(LenientModel):
    """A DeploymentPolicy object: metadata plus a validated spec."""

    metadata: ObjectMeta
    spec: DeploymentPolicySpec

    @property
    def name(self) -> str:
        """The policy name (metadata.name)."""
        return self.metadata.name

    @classmethod
    def from_k8s(cls, obj: dict[str, Any]) -> DeploymentPolicy:
        """Build from a Kubernetes object dict; raise InvalidDocumentError listing every problem."""
        policy, problems = validate_object(cls, keys.POLICY_KIND, obj)
        if policy.name == names.DEFAULT_FLEET:
            problems.append(ValidationProblem(keys.POLICY_KIND, policy.name, "metadata.name", RESERVED_POLICY_NAME))
        if problems:
            raise InvalidDocumentError(problems)
        return policy

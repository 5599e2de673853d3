"""Value types of the batch planner: its state (kept by the rollout workflow) and decisions. Pure.

Plain dataclasses and string enums only, so Temporal's data converter can carry the state
through signals, queries and continue-as-new. The rules that change them live in
`planning/rollout/batches.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from api.enums import CanaryPhase, Promotion, StrategyType
from api.policy import DeploymentPolicySpec
from planning.rollout.compartments import NodeInfo, absolute_budget
from planning.rollout.disruption import CapacityUse, WaitNote


class Verdict(StrEnum):
    """What a batch result means for the next batch."""

    CONTINUE = "continue"
    GROW = "grow"
    SHRINK = "shrink"
    HALT = "halt"


class PlannerPhase(StrEnum):
    """What the rollout should do next with its planner."""

    READY = "ready"  # call next_batch
    IN_BATCH = "in-batch"  # a batch is out: wait for its results, then record_batch_result
    CANARY_HOLD = "canary-hold"  # soak, then (manual promotion) wait for promote_canary
    HALTED = "halted"
    DONE = "done"


@dataclass
class CompartmentState:
    """A compartment's policy and batch progress within one rollout."""

    name: str
    strategy: StrategyType
    initial_batch: int
    delta: int
    growth_factor: int
    batch_threshold: int
    failure_threshold: int | None
    safety_limit: int
    budget_count: int | None
    budget_percent: int | None
    # LabelSelector JSON; None for the default compartment.
    selector: dict | None = None
    nodes: list[str] = field(default_factory=list)
    succeeded: int = 0
    failed: int = 0
    batches: int = 0
    last_batch_size: int = 0
    last_batch_failed: bool = False
    consecutive_failures: int = 0
    next_size: int = 0
    halted: bool = False
    # `rolling` (planning/rollout/rolling.py): the outcomes of its last finished windows (True: failed), at most
    # its budget of them, and the finished windows since the gates' last evaluation point.
    recent: list[bool] = field(default_factory=list)
    since_point: int = 0

    @property
    def budget(self) -> int:
        """Absolute budget for the compartment's current size."""
        return absolute_budget(self.budget_count, self.budget_percent, len(self.nodes))

    @property
    def progress_percent(self) -> float:
        """Finished nodes (succeeded or failed) in percent of the compartment's size."""
        return 100.0 * (self.succeeded + self.failed) / len(self.nodes) if self.nodes else 100.0


@dataclass
class BatchPlannerState:
    """Everything the planner remembers between batches (kept by the rollout workflow)."""

    identity: str
    compartments: dict[str, CompartmentState] = field(default_factory=dict)
    canary_count: int = 0
    canary_soak_seconds: int = 0
    canary_promotion: Promotion = Promotion.AUTO
    canary_phase: CanaryPhase = CanaryPhase.NONE
    canary_nodes: list[str] = field(default_factory=list)
    batch_number: int = 0
    # The batch that is out, by compartment (empty when none is).
    current: dict[str, list[str]] = field(default_factory=dict)
    halted: bool = False
    halt_reason: str = ""
    # Capacity floors and topology limits at the latest batch plan (planning/rollout/disruption.py): the nodes
    # they held back, and each floor with that batch out. Empty for a policy without them.
    waits: list[WaitNote] = field(default_factory=list)
    capacity: list[CapacityUse] = field(default_factory=list)

    @property
    def current_batch(self) -> list[str]:
        """Nodes of the batch that is out."""
        return sorted(n for nodes in self.current.values() for n in nodes)

    def compartment_of(self, node: str) -> str | None:
        """The compartment `node` was assigned to, if known."""
        return next((c.name for c in self.compartments.values() if node in c.nodes), None)


@dataclass(frozen=True)
class PlannerInput:
    """What a new planner is built from."""

    policy: DeploymentPolicySpec
    nodes: Sequence[NodeInfo]
    identity: str


@dataclass(frozen=True)
class CompartmentVerdict:
    """The evaluation of one compartment's part of a batch."""

    compartment: str
    verdict: Verdict
    succeeded: int
    failed: int
    next_size: int
    consecutive_failures: int
    reason: str


@dataclass(frozen=True)
class BatchDecision:
    """The evaluation of a whole batch."""

    verdict: Verdict
    reason: str
    compartments: tuple[CompartmentVerdict, ...] = ()
    # After a canary: how long to soak, and whether to wait for a manual promotion.
    soak_seconds: int = 0
    needs_promotion: bool = False

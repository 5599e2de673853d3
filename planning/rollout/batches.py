"""The batch planner of one rollout: canary first, batch sizes per strategy, evaluation. Pure.

The rollout workflow keeps a `BatchPlannerState` (plain dataclasses: serializable, so it can be
carried through continue-as-new) and calls, in a loop:
`next_batch(state, remaining)` -> nodes to start; then, when they have all finished,
`record_batch_result(state, succeeded, failed)` -> a `BatchDecision`. Both mutate `state` in
place (the workflow owns it) and are deterministic. `planner_phase` says what to do next.

Rules:
* Canary: with `canary.count` set, the first batch is the canary: the first nodes in stable order
  across all compartments, each compartment giving at most its budget, plus (a fleet's wave) one
  node of each `cover` group the first nodes miss, within the budgets. Any failed canary node
  halts the rollout; a canary where no node finished (all blocked) is picked again. Then the rollout soaks for `soakSeconds`, and with `promotion: manual`
  waits for promotion (`promote_canary`). Canary nodes count towards their compartment's
  progress but not as a compartment batch.
* Batch size per compartment: the first batch is `initialBatch`; `fixed` keeps it; `linear`
  adds `delta` after a good batch, subtracts it (at least 1) after a failed one; `exponential`
  multiplies by `growthFactor` after a good batch and divides after a failed one. Failed batches
  shrink only while progress is under `safetyLimit`; above it they are treated as good.
* Every batch is capped by the compartment's absolute budget and by the nodes it has left, so a
  batch never disrupts more nodes at once than the budget (NodeWright's strategies ignore the
  budget). A batch takes nodes from every compartment that has nodes left, each by its own size.
* Capacity floors and topology limits (given a `planning.rollout.disruption.Supply`): the canary and every
  batch take nodes in order, skipping each node that may not enter a window with the nodes already
  taken (`Tally.check`), so a batch may be smaller than its size, or empty: the planner then starts
  nothing and `state.waits` says why; `state.capacity` shows each floor with the batch out. The
  skipped nodes stay first in line for the next batch.
* Evaluation per compartment: nodes neither succeeded nor failed (blocked, skipped) do not count;
  a batch where none finished is not evaluated. A batch fails when
  `succeeded * 100 / (succeeded + failed) < batchThreshold`. A failed batch increments the
  compartment's consecutive failures (a good one resets them). The compartment halts when
  `failureThreshold` is set, consecutive failures reach it, and progress (finished nodes of the
  compartment, this batch included, in percent of its size) is under `safetyLimit`.
  Any compartment halting halts the whole rollout (a package that fails in one compartment is
  suspect everywhere); `resume_after_halt` clears it.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from api.enums import CanaryPhase, Promotion, StrategyType
from api.policy import DEFAULT_COMPARTMENT, DeploymentPolicySpec
from planning.rollout.batch_state import (
    BatchDecision,
    BatchPlannerState,
    CompartmentState,
    CompartmentVerdict,
    PlannerInput,
    PlannerPhase,
    Verdict,
)
from planning.rollout.compartments import NodeInfo, assign_compartments, order_key
from planning.rollout.disruption import RULE_COUNT, RULE_MAINTENANCE, Others, Supply, Tally, Wait, notes

# Re-exported: callers import the planner's types from here.
__all__ = [
    "BatchDecision",
    "BatchPlannerState",
    "CompartmentState",
    "CompartmentVerdict",
    "NodeInfo",
    "PlannerInput",
    "PlannerPhase",
    "Verdict",
    "add_nodes",
    "await_promotion",
    "budget_limit",
    "evaluate_batch",
    "new_planner",
    "next_batch",
    "planner_phase",
    "promote_canary",
    "record_batch_result",
    "resume_after_halt",
]


def _compartment(name: str, policy: DeploymentPolicySpec) -> CompartmentState:
    strategy = policy.strategy_of(name)
    if name == DEFAULT_COMPARTMENT:
        budget, selector = policy.default.budget, None
    else:
        comp = next(c for c in policy.compartments if c.name == name)
        budget, selector = comp.budget, comp.selector.dump()
    return CompartmentState(
        name=name,
        strategy=strategy.type,
        initial_batch=strategy.initial_batch,
        delta=strategy.effective_delta,
        growth_factor=strategy.effective_growth_factor,
        batch_threshold=strategy.batch_threshold,
        failure_threshold=strategy.failure_threshold,
        safety_limit=strategy.safety_limit,
        budget_count=budget.count,
        budget_percent=budget.percent,
        selector=selector,
        next_size=strategy.initial_batch,
    )


def new_planner(data: PlannerInput) -> BatchPlannerState:
    """A planner for `data.nodes` under `data.policy` (compartments assigned, nodes ordered)."""
    names = [DEFAULT_COMPARTMENT] + [c.name for c in data.policy.compartments]
    state = BatchPlannerState(
        identity=data.identity,
        compartments={name: _compartment(name, data.policy) for name in sorted(names)},
    )
    if data.policy.canary is not None:
        state.canary_count = data.policy.canary.count
        state.canary_soak_seconds = data.policy.canary.soak_seconds
        state.canary_promotion = data.policy.canary.promotion
    add_nodes(state, data.policy, data.nodes)
    return state


def add_nodes(state: BatchPlannerState, policy: DeploymentPolicySpec, nodes: Sequence[NodeInfo]) -> list[str]:
    """Assign nodes not yet known (e.g. joined mid-rollout) to compartments; returns the new names."""
    known = {n for c in state.compartments.values() for n in c.nodes}
    new = [n for n in nodes if n.name not in known]
    # Late joiners are assigned among themselves: the tie-break budget of overlapping percent
    # compartments is computed on them, not on the whole fleet (labels of known nodes are not kept).
    assignment = assign_compartments(policy, new)
    for node in new:
        state.compartments[assignment[node.name]].nodes.append(node.name)
    for name in set(assignment.values()):
        state.compartments[name].nodes.sort(key=lambda n: (order_key(n, state.identity), n))
    return [n.name for n in new]


def planner_phase(state: BatchPlannerState, remaining: Collection[str]) -> PlannerPhase:
    """What the rollout should do next (see PlannerPhase)."""
    if state.halted:
        return PlannerPhase.HALTED
    if state.current:
        return PlannerPhase.IN_BATCH
    if state.canary_phase in (CanaryPhase.SOAKING, CanaryPhase.AWAITING_PROMOTION):
        return PlannerPhase.CANARY_HOLD
    known = {n for c in state.compartments.values() if not c.halted for n in c.nodes}
    return PlannerPhase.READY if any(n in known for n in remaining) else PlannerPhase.DONE


class Admission:
    """Count budgets, floors, topology limits and other maintenance while one batch is picked: a node is
    admitted when no other maintenance holds it, its compartment's count budget has a slot (nodes down for
    others' reasons take slots: `Others`), and the floors and topology limits hold with it (`Supply`)."""

    def __init__(self, supply: Supply | None, others: Others | None = None) -> None:
        self.tally = Tally(supply) if supply is not None else None
        self.others = others or Others()
        # Compartment -> the nodes disrupted at once there: down for others' reasons, then those admitted.
        self.disrupted: dict[str, set[str]] = {c: set(nodes) for c, nodes in self.others.busy.items()}
        self.waits: list[Wait] = []
        self.held: set[str] = set()

    def slot(self, comp: CompartmentState, node: str) -> bool:
        """`node` fits `comp`'s count budget (a node already disrupted takes no further slot)."""
        taken = self.disrupted.get(comp.name, set())
        return node in taken or len(taken) < comp.budget

    def _wait(self, wait: Wait) -> None:
        if wait.node not in self.held:
            self.held.add(wait.node)
            self.waits.append(wait)

    def admit(self, node: str, comp: CompartmentState | None = None) -> bool:
        """True (and the node counted out) when it may enter a window with the nodes admitted so far."""
        why = self.others.held.get(node)
        if why is not None:
            self._wait(Wait(node, RULE_MAINTENANCE, comp.name if comp else "", why))
            return False
        if comp is not None and not self.slot(comp, node):
            self._wait(Wait(node, RULE_COUNT, comp.name, self.others.full_text(comp.name, comp.budget)))
            return False
        if self.tally is not None:
            wait = self.tally.check(node)
            if wait is not None:
                self._wait(wait)
                return False
            self.tally.take(node)
        if comp is not None:
            self.disrupted.setdefault(comp.name, set()).add(node)
        return True

    def count(self, node: str, comp: CompartmentState | None = None) -> None:
        """`node` is taken already (in the set, not yet in a window): it counts as out for the nodes after it."""
        if self.tally is not None:
            self.tally.take(node)
        if comp is not None:
            self.disrupted.setdefault(comp.name, set()).add(node)


def _take_canary(
    state: BatchPlannerState, remaining: Collection[str], cover: Sequence[Collection[str]], admission: Admission
) -> dict[str, list[str]]:
    pool = sorted(
        (order_key(n, state.identity), n, c.name)
        for c in state.compartments.values()
        for n in c.nodes
        if n in remaining
    )
    taken: dict[str, list[str]] = {}

    for _, node, comp in pool:
        if sum(len(v) for v in taken.values()) >= state.canary_count:
            break
        if admission.admit(node, state.compartments[comp]):
            taken.setdefault(comp, []).append(node)
    # Every group in `cover` (e.g. the nodes carrying one changed Package) gets a canary node,
    # within the budgets, even when that makes the canary larger than `canary.count`.
    for group in cover:
        if any(n in group for nodes in taken.values() for n in nodes):
            continue
        for _, node, comp in pool:
            if node in group and node not in admission.held and admission.admit(node, state.compartments[comp]):
                taken.setdefault(comp, []).append(node)
                break
    return taken


def take_admitted(comp: CompartmentState, left: list[str], size: int, admission: Admission) -> list[str]:
    """Up to `size` nodes of `left`, in order, each admitted by the count budget, the floors and topology
    limits and other maintenance."""
    taken: list[str] = []
    for node in left:
        if len(taken) >= size:
            break
        if admission.admit(node, comp):
            taken.append(node)
    return taken


def next_batch(
    state: BatchPlannerState, remaining: Collection[str], cover: Sequence[Collection[str]] = (),
    supply: Supply | None = None, others: Others | None = None,
) -> list[str]:
    """The next nodes to start, from `remaining` (nodes that still need the package).

    `cover`: groups of nodes of which the canary must take at least one each (a fleet passes,
    per Package its wave changes, the nodes that would carry it). `supply`: the fleet's nodes as
    the capacity floors and topology limits see them (None: the policy has neither). `others`: nodes down
    for someone else's reason, which take slots of the count budgets, and nodes another maintenance holds,
    which are not started (None: neither is counted).

    Returns the batch that is out again when one is (idempotent), and [] when the planner is
    halted, holding a canary, has nothing left, or the floors and topology limits hold every node
    (`state.waits`). Nodes not known to the planner are ignored: call `add_nodes` first.
    """
    if state.halted or state.canary_phase in (CanaryPhase.SOAKING, CanaryPhase.AWAITING_PROMOTION):
        return state.current_batch
    if state.current:
        return state.current_batch
    admission = Admission(supply, others)
    if state.canary_count and state.canary_phase is CanaryPhase.NONE:
        batch = _take_canary(state, remaining, cover, admission)
        if batch:
            state.canary_phase = CanaryPhase.RUNNING
            state.canary_nodes = sorted(n for v in batch.values() for n in v)
    else:
        batch = {}
        for comp in state.compartments.values():
            left = [n for n in comp.nodes if n in remaining]
            if comp.halted or not left:
                continue
            size = max(1, min(comp.next_size, comp.budget, len(left)))
            taken = take_admitted(comp, left, size, admission)
            if taken:
                batch[comp.name] = taken
    state.waits = notes(admission.waits)
    state.capacity = admission.tally.use() if admission.tally is not None else []
    if batch:
        state.batch_number += 1
        state.current = batch
    return state.current_batch


def batches_to_budget(comp: CompartmentState, most: int) -> int:
    """How many more batches the compartment hands out before its batches reach its budget (its strategy's
    growth from its next size, no failures); at most `most` (linear growth may take long)."""
    size, batches = max(1, comp.next_size or comp.initial_batch), 0
    while size < comp.budget and batches < most:
        grown = _next_size(comp, size, False, 0.0)
        if grown <= size:
            break  # fixed (and rolling): every batch has the same size
        size, batches = grown, batches + 1
    return batches


def _next_size(comp: CompartmentState, size: int, failed: bool, progress: float) -> int:
    shrink = failed and progress < comp.safety_limit
    if comp.strategy is StrategyType.LINEAR:
        return max(1, size - comp.delta) if shrink else size + comp.delta
    if comp.strategy is StrategyType.EXPONENTIAL:
        return max(1, size // comp.growth_factor) if shrink else size * comp.growth_factor
    return comp.initial_batch


def evaluate_batch(
    comp: CompartmentState, batch: Collection[str], succeeded: int, failed: int
) -> CompartmentVerdict:
    """Evaluate one compartment's part of a batch (module rules). Does not change `comp`."""
    finished = succeeded + failed
    if finished == 0:
        return CompartmentVerdict(
            comp.name,
            Verdict.CONTINUE,
            0,
            0,
            comp.next_size,
            comp.consecutive_failures,
            "no node finished (blocked or skipped): not evaluated",
        )
    rate = 100.0 * succeeded / finished
    progress = 100.0 * (comp.succeeded + comp.failed + finished) / len(comp.nodes) if comp.nodes else 100.0
    batch_failed = rate < comp.batch_threshold
    consecutive = comp.consecutive_failures + 1 if batch_failed else 0
    next_size = _next_size(comp, len(batch), batch_failed, progress)
    numbers = f"{succeeded}/{finished} succeeded ({rate:.0f}% vs batchThreshold {comp.batch_threshold}%)"
    if (
        batch_failed
        and comp.failure_threshold is not None
        and consecutive >= comp.failure_threshold
        and progress < comp.safety_limit
    ):
        reason = (
            f"compartment {comp.name}: {numbers}; {consecutive} failed batch(es) in a row reached "
            f"failureThreshold {comp.failure_threshold} at {progress:.0f}% progress (safetyLimit {comp.safety_limit}%)"
        )
        return CompartmentVerdict(comp.name, Verdict.HALT, succeeded, failed, next_size, consecutive, reason)
    # The verdict describes the batch that will really be started: capped by the budget.
    effective = min(next_size, comp.budget)
    if effective > len(batch):
        verdict = Verdict.GROW
    elif effective < len(batch):
        verdict = Verdict.SHRINK
    else:
        verdict = Verdict.CONTINUE
    capped = f", capped by budget {comp.budget}" if effective < next_size else ""
    reason = f"compartment {comp.name}: {numbers}; next batch {effective} ({comp.strategy.value}{capped})"
    return CompartmentVerdict(comp.name, verdict, succeeded, failed, next_size, consecutive, reason)


def _record_canary(state: BatchPlannerState, succeeded: set[str], failed: set[str]) -> BatchDecision:
    for comp in state.compartments.values():
        part = state.current.get(comp.name, [])
        comp.succeeded += len(succeeded.intersection(part))
        comp.failed += len(failed.intersection(part))
    state.current = {}
    bad = sorted(failed.intersection(state.canary_nodes))
    if bad:
        state.canary_phase = CanaryPhase.FAILED
        state.halted = True
        state.halt_reason = f"canary failed on {', '.join(bad)}"
        return BatchDecision(Verdict.HALT, state.halt_reason)
    if not succeeded.intersection(state.canary_nodes):
        # Every canary node was blocked or skipped: nothing was learned, so pick a new canary.
        state.canary_phase = CanaryPhase.NONE
        state.canary_nodes = []
        return BatchDecision(
            Verdict.CONTINUE, "canary not evaluated: no canary node finished; picking a new canary"
        )
    manual = state.canary_promotion is Promotion.MANUAL
    if state.canary_soak_seconds or manual:
        state.canary_phase = CanaryPhase.SOAKING
    else:
        state.canary_phase = CanaryPhase.PASSED
    reason = f"canary passed on {len(succeeded.intersection(state.canary_nodes))} node(s)"
    return BatchDecision(
        Verdict.CONTINUE, reason, soak_seconds=state.canary_soak_seconds, needs_promotion=manual
    )


def record_batch_result(
    state: BatchPlannerState, succeeded: Collection[str], failed: Collection[str]
) -> BatchDecision:
    """Record the outcome of the batch that is out and decide how to go on (module rules)."""
    ok, bad = set(succeeded), set(failed)
    if state.canary_phase is CanaryPhase.RUNNING:
        return _record_canary(state, ok, bad)
    verdicts = []
    for name, part in sorted(state.current.items()):
        comp = state.compartments[name]
        verdict = evaluate_batch(comp, part, len(ok.intersection(part)), len(bad.intersection(part)))
        verdicts.append(verdict)
        if verdict.succeeded + verdict.failed == 0:
            continue
        comp.succeeded += verdict.succeeded
        comp.failed += verdict.failed
        comp.batches += 1
        comp.last_batch_size = len(part)
        comp.last_batch_failed = verdict.consecutive_failures > 0
        comp.consecutive_failures = verdict.consecutive_failures
        comp.next_size = verdict.next_size
        comp.halted = verdict.verdict is Verdict.HALT
    state.current = {}
    return _combine(state, tuple(verdicts))


def _combine(state: BatchPlannerState, verdicts: tuple[CompartmentVerdict, ...]) -> BatchDecision:
    for wanted in (Verdict.HALT, Verdict.SHRINK, Verdict.GROW):
        hits = [v for v in verdicts if v.verdict is wanted]
        if hits:
            if wanted is Verdict.HALT:
                state.halted = True
                state.halt_reason = "; ".join(v.reason for v in hits)
            return BatchDecision(wanted, "; ".join(v.reason for v in hits), verdicts)
    return BatchDecision(Verdict.CONTINUE, "; ".join(v.reason for v in verdicts) or "empty batch", verdicts)


def promote_canary(state: BatchPlannerState) -> None:
    """End the canary hold (after the soak, and the manual promotion when required)."""
    if state.canary_phase in (CanaryPhase.SOAKING, CanaryPhase.AWAITING_PROMOTION):
        state.canary_phase = CanaryPhase.PASSED


def await_promotion(state: BatchPlannerState) -> None:
    """Mark that the soak is over and a manual promotion is awaited (for status)."""
    if state.canary_phase is CanaryPhase.SOAKING:
        state.canary_phase = CanaryPhase.AWAITING_PROMOTION


def resume_after_halt(state: BatchPlannerState) -> None:
    """Clear a halt (the `retry`/`resume` signal): compartments continue with batches of their initial size."""
    state.halted = False
    state.halt_reason = ""
    if state.canary_phase is CanaryPhase.FAILED:
        state.canary_phase = CanaryPhase.NONE
        state.canary_nodes = []
    for comp in state.compartments.values():
        comp.halted = False
        comp.consecutive_failures = 0
        comp.next_size = comp.initial_batch
        comp.recent = []  # `rolling`: the failures counted afresh


def budget_limit(state: BatchPlannerState, compartment: str) -> int:
    """The absolute budget of `compartment` (the limit passed to its budget workflow)."""
    return state.compartments[compartment].budget

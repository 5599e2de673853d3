"""The `rolling` strategy: the budget's windows at all times, no batch barrier. Pure.

A batch strategy (`fixed`, `linear`, `exponential`: planning/rollout/batches.py) starts a batch and waits
for its slowest node before the next one; with real GPU windows that vary from minutes to tens of
minutes, most of the budget idles behind that node. `rolling` keeps, per compartment, `min(budget,
nodes left)` windows running: the node after the last one started begins as soon as a window ends.
The planner's `current` is then the set of nodes in flight (a sliding batch), never a barrier.

Rules (the others' where they apply):
* the canary is the same first batch (planning/rollout/batches.py `next_batch`), soaked and promoted as
  for the other strategies; rolling starts after it;
* failures: a compartment halts when `failureThreshold` is set and at least that many of its last
  N finished windows failed, N being its budget (the windows a batch of the budget's size would
  have evaluated together), while its progress is under `safetyLimit`; any compartment halting
  halts the fleet, as with batches. `batchThreshold` and `initialBatch` have no part in it;
* nodes neither succeeded nor failed (blocked, withdrawn) leave the window set without counting;
* analysis gates `betweenBatches`: an evaluation point opens after every N finished windows of
  the fleet (N the sum of the budgets), and the next node starts once the gates passed; windows
  running meanwhile finish. Maintenance windows and pauses hold new starts the same way.
A policy either rolls or batches: rolling is the strategy of every compartment or of none
(api/policy.py refuses a mix).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from api.enums import CanaryPhase, StrategyType
from planning.rollout.batch_state import BatchPlannerState, CompartmentState
from planning.rollout.batches import Admission, take_admitted
from planning.rollout.disruption import Others, Supply, notes


def is_rolling(state: BatchPlannerState) -> bool:
    """True when the planner rolls (its compartments' strategy is `rolling`)."""
    return any(c.strategy is StrategyType.ROLLING for c in state.compartments.values())


def rolls_now(state: BatchPlannerState) -> bool:
    """True when the next starts are rolling ones (a rolling planner past its canary)."""
    return is_rolling(state) and state.canary_phase not in (CanaryPhase.RUNNING, CanaryPhase.SOAKING,
                                                            CanaryPhase.AWAITING_PROMOTION)


def top_up(state: BatchPlannerState, remaining: Collection[str], supply: Supply | None = None,
           others: Others | None = None) -> list[str]:
    """Add nodes of `remaining` to the window set so each compartment that is not halted has
    `min(budget, nodes left)` in it; returns the nodes added (in each compartment's order).

    `supply`: the fleet's nodes as the capacity floors and topology limits see them, its windows out
    included (ADR 0015); a node they would break waits (`state.waits` says why), as in a batch. `others`:
    nodes down for someone else's reason take slots of the count budget, and a node another maintenance
    holds is not started (`planning.rollout.batches.next_batch`)."""
    if state.halted:
        return []
    admission = Admission(supply, others)
    # Nodes of the set not handed out yet (drain-ahead's lead, a hold) are not in a window yet, but will be:
    # they count as out, or a node added beside one would break a floor or topology limit with it.
    for comp in state.compartments.values():
        for node in state.current.get(comp.name, []):
            admission.count(node, comp)
    # The window set starting from empty counts as a batch (the fleet's status numbers them).
    starting = not state.current
    added: list[str] = []
    for comp in state.compartments.values():
        if comp.halted:
            continue
        running = state.current.get(comp.name, [])
        room = comp.budget - len(running)
        if room <= 0:
            continue
        take = take_admitted(comp, [n for n in comp.nodes if n in remaining and n not in running], room, admission)
        if take:
            state.current[comp.name] = [*running, *take]
            added.extend(take)
    state.waits = notes(admission.waits)
    state.capacity = admission.tally.use() if admission.tally is not None else []
    if added and starting:
        state.batch_number += 1
    return added


@dataclass(frozen=True)
class RollingDecision:
    """What the windows that ended changed: halted (why), and whether the gates' evaluation point opens."""

    halted: bool
    reason: str
    evaluation_point: bool = False


def _halts(comp: CompartmentState) -> str:
    failed = sum(comp.recent)
    progress = 100.0 * (comp.succeeded + comp.failed) / len(comp.nodes) if comp.nodes else 100.0
    if comp.failure_threshold is None or failed < comp.failure_threshold or progress >= comp.safety_limit:
        return ""
    return (f"compartment {comp.name}: {failed} of its last {len(comp.recent)} window(s) failed, "
            f"reaching failureThreshold {comp.failure_threshold} at {progress:.0f}% progress "
            f"(safetyLimit {comp.safety_limit}%)")


def record_finished(state: BatchPlannerState, ended: Collection[str], succeeded: Collection[str],
                    failed: Collection[str]) -> RollingDecision:
    """Windows of `ended` (nodes of the window set no longer in flight) left the set; those that
    succeeded or failed count in their compartment's progress and last-N record (module rules)."""
    ok, bad, gone = set(succeeded), set(failed), set(ended)
    reasons: list[str] = []
    point = False
    total_budget = sum(c.budget for c in state.compartments.values() if c.nodes)
    for comp in state.compartments.values():
        part = state.current.get(comp.name, [])
        done = [n for n in part if n in gone]
        if not done:
            continue
        state.current[comp.name] = [n for n in part if n not in gone]
        if not state.current[comp.name]:
            del state.current[comp.name]
        counted = [n in bad for n in done if n in ok or n in bad]
        comp.succeeded += counted.count(False)
        comp.failed += counted.count(True)
        comp.recent = [*comp.recent, *counted][-max(1, comp.budget):]
        comp.since_point += len(counted)
        if counted:
            comp.batches += 1
            comp.last_batch_size = len(done)
            comp.last_batch_failed = any(counted)
        why = _halts(comp)
        if why:
            comp.halted = True
            reasons.append(why)
    if sum(c.since_point for c in state.compartments.values()) >= max(1, total_budget):
        point = True
        for comp in state.compartments.values():
            comp.since_point = 0
    if reasons:
        state.halted = True
        state.halt_reason = "; ".join(reasons)
        return RollingDecision(True, state.halt_reason, False)
    running = len(state.current_batch)
    return RollingDecision(False, f"rolling: {running} window(s) running, "
                                  + ", ".join(f"{c.name} {c.succeeded + c.failed}/{len(c.nodes)} done"
                                              for c in state.compartments.values() if c.nodes), point)

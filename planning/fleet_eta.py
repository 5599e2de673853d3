"""The ETA of a running fleet's wave, from its state: what is left, batch by batch. Pure.

`fleet_eta(state, now)` copies the fleet's batch planner and plays the rest of the wave with the
planner's own functions (`planning.batches`: `record_batch_result`, `promote_canary`,
`next_batch`), every window succeeding: the batch that is out ends, a canary soaks and is promoted,
then each next batch takes its nodes from those with work left. Each node's window is shaped by
the Packages it carries (`planning.fleet_state.wanted`, or its request in flight): the merged
interrupt of their specs, their stages, a drain when that interrupt is disruptive. The batches and
the fleet's measured `Timings` go to `planning.eta.estimate`.

Cost: one pass over the planner's nodes per batch left; past `SIMULATED_BATCHES` batches (a
one-node-at-a-time fleet of thousands of nodes), the rest is counted in batches of the last size,
so a `progress` query stays cheap.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import datetime

from api.enums import CanaryPhase, PlanAction, Stage
from api.interrupts import InterruptRequest, merge_interrupts
from api.package import PackageSpec
from planning import batches
from planning.batch_state import BatchPlannerState
from planning.eta import Eta, EtaInput, Running, WindowShape, estimate, kind_of
from planning.fleet_state import FleetState, canary_cover, entries, remaining, wanted
from planning.node_plan import stage_sequence

SIMULATED_BATCHES = 200


def _specs(state: FleetState) -> dict[str, tuple[PackageSpec | None, bool]]:
    specs: dict[str, tuple[PackageSpec | None, bool]] = {}
    for name, entry in entries(state).items():
        try:
            specs[name] = (PackageSpec.model_validate(entry.spec), entry.uninstall)
        except ValueError:
            specs[name] = (None, entry.uninstall)
    return specs


def window_shape(packages: list[str], specs: Mapping[str, tuple[PackageSpec | None, bool]]) -> WindowShape:
    """The window carrying `packages` as a fresh install (or uninstall) of each would run it."""
    interrupts: list[InterruptRequest | None] = []
    stages = 0
    for name in packages:
        spec, uninstall = specs.get(name, (None, False))
        if spec is None:
            continue
        request = (InterruptRequest(type=spec.interrupt.type, services=tuple(sorted(set(spec.interrupt.services))))
                   if spec.interrupt is not None else None)
        interrupts.append(request)
        action = PlanAction.UNINSTALL if uninstall else PlanAction.INSTALL
        stages += sum(1 for s in stage_sequence(action, request is not None) if s is not Stage.INTERRUPT)
    merged = merge_interrupts(interrupts)
    return WindowShape(kind=kind_of(merged.type.value if merged else ""), stages=stages,
                       drain=bool(merged and merged.disruptive))


def _rest(planner: BatchPlannerState, left: set[str], cover: list[list[str]]) -> list[list[str]]:
    """The batches after the one out, all succeeding (module docstring)."""
    out: list[list[str]] = []
    if planner.current:
        batches.record_batch_result(planner, planner.current_batch, [])
    while len(out) < SIMULATED_BATCHES:
        phase = batches.planner_phase(planner, left)
        if phase is batches.PlannerPhase.CANARY_HOLD:
            batches.promote_canary(planner)
            continue
        if phase is not batches.PlannerPhase.READY:
            return out
        batch = batches.next_batch(planner, left, cover)
        if not batch:
            return out
        out.append(batch)
        left.difference_update(batch)
        batches.record_batch_result(planner, batch, [])
    if left and out:
        size = len(out[-1])
        ordered = sorted(left)
        out.extend(ordered[i:i + size] for i in range(0, len(ordered), size))
    return out


def fleet_eta(state: FleetState, now: str, left: set[str] | None = None) -> Eta | None:
    """The ETA of the wave `state` runs (None: no wave, or the fleet is halted); `left`: the caller's
    `remaining(state)`, when it has it (a listing of every node's wanted Packages)."""
    planner = state.planner
    if planner is None or planner.halted or state.halted:
        return None
    specs = _specs(state)
    left = remaining(state) if left is None else left
    out = set(planner.current_batch)
    # One shape per set of Packages (most nodes of a fleet carry the same set), not one per node: the
    # `progress` query computes this on every poll, a thousand nodes at a time.
    by_packages: dict[tuple[str, ...], WindowShape] = {}

    def shape(packages: list[str]) -> WindowShape:
        key = tuple(packages)
        if key not in by_packages:
            by_packages[key] = window_shape(packages, specs)
        return by_packages[key]

    shapes = {n: shape(state.in_flight[n].packages if n in state.in_flight else wanted(state, n))
              for n in left | out}
    running = [Running(shapes[n], _elapsed(state.in_flight[n].sent_at, now)) for n in sorted(out)
               if n in state.in_flight]
    # Nodes of the batch out that were not handed over yet run as part of it (a full window each).
    running += [Running(shapes[n], 0.0) for n in sorted(out - set(state.in_flight)) if n in left]
    simulated = copy.deepcopy(planner)
    cover = canary_cover(state) if planner.canary_phase is CanaryPhase.NONE and planner.canary_count else []
    rest = _rest(simulated, left - out - set(state.in_flight), cover)
    soak = 0.0
    if planner.canary_phase is CanaryPhase.SOAKING and state.soak_until:
        soak = max((datetime.fromisoformat(state.soak_until) - datetime.fromisoformat(now)).total_seconds(), 0.0)
    elif planner.canary_count and planner.canary_phase in (CanaryPhase.NONE, CanaryPhase.RUNNING):
        soak = float(planner.canary_soak_seconds)
    return estimate(EtaInput(batches=[[shapes[n] for n in b] for b in rest], timings=state.timings, now=now,
                             running=running, soak_seconds=soak))


def _elapsed(sent_at: str, now: str) -> float:
    if not sent_at or not now:
        return 0.0
    return max((datetime.fromisoformat(now) - datetime.fromisoformat(sent_at)).total_seconds(), 0.0)

"""The bridge's rollout-level metrics: what the workflows' queries answered, turned into `metrics` calls. No I/O of its own.

The metric objects live in the leaf `metrics` (imports nothing of noderoll); the vocabulary of phases,
node states and the query answers belong to `api`, `planning` and `workflows`, so the translation sits
here, next to its only caller (`crd_bridge/status_poller.py`, and the reconciler for invalid Packages).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

import metrics
from api.enums import RolloutPhase
from api.node_state import NodeState, parse_node_state
from metrics import NodeCount
from planning.views.fleet_status import FleetProgress as FleetReport
from planning.views.status import RolloutProgress

ROLLOUT_PHASES = tuple(p.value for p in RolloutPhase)


def set_rollout_phase(package: str, phase: str) -> None:
    """Mark `phase` as the current phase of `package`'s rollout (1) and every other `RolloutPhase` 0."""
    metrics.set_rollout_phase(package, phase, ROLLOUT_PHASES)


def node_counts(package: str, annotations: Iterable[str | None]) -> list[NodeCount]:
    """(state, stage) counts of `package` over the `noderoll.io/state` annotations of its target nodes.

    Pure. A target node that has not recorded the package yet counts as `waiting` at stage `none`; one
    whose annotation cannot be read is held, so it counts as `blocked` at stage `none`.
    """
    totals: dict[tuple[str, str], int] = {}
    for raw in annotations:
        key = count_key(package, *parse_node_state(raw))
        totals[key] = totals.get(key, 0) + 1
    return [NodeCount(state, stage, count) for (state, stage), count in sorted(totals.items())]


def count_key(package: str, state: NodeState, problem: str) -> tuple[str, str]:
    """The (state, stage) a node counts under for `package` (`node_counts`). Pure."""
    if problem:
        return ("blocked", "none")
    entry = state.packages.get(package)
    return (entry.state.value, entry.stage.value if entry.stage else "none") if entry else ("waiting", "none")


def publish_progress(package: str, progress: RolloutProgress) -> None:
    """Publish what a rollout's `progress` query answered: phase, batch number and size."""
    set_rollout_phase(package, str(progress.phase))
    metrics.set_batch(package, progress.batch_number, progress.batch_size)


def publish_fleet(fleet: str, progress: FleetReport) -> None:
    """Publish a fleet's budget use (per compartment, windows out now and the budget), each compartment's
    finished share and the fleet's ETA (dropped when it has none); its capacity floors and the nodes its floors
    and topology limits held back (ADR 0015), as of its latest batch plan."""
    for compartment, use in sorted(progress.budgets.items()):
        metrics.set_budget(fleet, compartment, use.in_use, use.limit)
        metrics.set_compartment_progress(fleet, compartment, use.finished / use.nodes if use.nodes else 1.0)
    eta = progress.eta
    if eta is None or not eta.finish_at:
        metrics.set_fleet_eta(fleet, None, None)
    else:
        metrics.set_fleet_eta(fleet, eta.seconds_left, datetime.fromisoformat(eta.finish_at).timestamp())
    for floor in progress.capacity:
        metrics.set_capacity(fleet, floor.compartment, floor.resource, floor.available, floor.floor)
    metrics.set_nodes_held(fleet, {(w.compartment, w.rule): w.nodes for w in progress.waits})

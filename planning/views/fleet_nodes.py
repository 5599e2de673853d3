"""Each node of a fleet as its `progress` shows it, and the sums over them, kept up to date. Pure.

`node_progress(state, node)` is one node's view: per Package its state and reason (`package_state`: in
progress while its window is out, the outcome recorded in this wave, else what the latest listing says), the
node's own state (the first of erroring, in progress, waiting, blocked that a Package has, else complete),
the disruptions the fleet's windows caused there and, after a window that gave the node up, why.

The fleet's `progress` and its details line need these for every node, and their sums. Computed afresh at
every query that read every node of the fleet (issue 45: 10,000 nodes at every workflow task the bridge's
query saw). `NodeViews` keeps them, per fleet state (not one of its fields: derived data, not carried), and
recomputes only the nodes the state's rules reported changed since it last looked
(`planning.rollout.work_index.take_changed`: an answer, a hand-out; every node after a listing, a signal or
a new wave): the sums move by the changed nodes' differences.

`CHECK`: tests set it; every refresh is then compared with views computed from scratch, and a difference (a
change the state's rules did not report) fails loudly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from api.enums import State
from planning.rollout import fleet_rollback as rollbacks
from planning.rollout import work_index
from planning.rollout.batch_state import BatchPlannerState
from planning.rollout.disruption import is_held_by_others
from planning.rollout.fleet_state import FleetState

# A node's state from its Packages' states: the first that any Package has, in this order.
NODE_STATE_ORDER = (State.ERRORING, State.IN_PROGRESS, State.WAITING, State.BLOCKED, State.COMPLETE)
_ATTRIBUTE = "_node_views"
# Tests set this: every refresh is checked against views computed from scratch.
CHECK = False
DISRUPTION_KINDS = ("windows", "cordons", "drains", "interrupts")
_PROBLEMS = (State.BLOCKED.value, State.ERRORING.value)


@dataclass
class NodeProgress:
    """One node of the fleet."""

    state: str = State.WAITING.value
    # Package -> api.enums.State value.
    packages: dict[str, str] = field(default_factory=dict)
    reason: str = ""
    windows: int = 0
    cordons: int = 0
    drains: int = 0
    interrupts: int = 0
    # Why its last window gave the node up (`drain-timeout`; "" = it did not, or it is asked again).
    skipped: str = ""


def package_state(state: FleetState, node: str, package: str) -> tuple[str, str]:
    """(api.enums.State value, reason) of `package` on `node`."""
    flight = state.in_flight.get(node)
    if flight is not None and package in flight.packages:
        return State.IN_PROGRESS.value, ""
    rollback = state.rollback
    if rollback is not None and package in rollback.nodes.get(node, []):
        if node in rollback.failed:
            return State.ERRORING.value, f"rollback failed: {rollback.failed[node]}"
        if node in rollback.done:
            return State.WAITING.value, rollbacks.node_reason(rollback, node, package)
    record = state.records.get(node)
    targets = state.targets[node]
    outcome = record.outcomes.get(package) if record is not None else None
    if outcome is not None and (outcome == State.ERRORING.value or package not in targets.blocked):
        return outcome, record.messages.get(package, "") if record is not None else ""
    if package in targets.done:
        return State.COMPLETE.value, ""
    if package in targets.blocked:
        return State.BLOCKED.value, targets.blocked[package]
    if package in targets.waiting:
        return State.BLOCKED.value, targets.waiting[package]
    if node in state.departed:
        return State.SKIPPED.value, state.departed[node]
    if is_held_by_others(targets.down):
        return State.WAITING.value, targets.down  # not started while another maintenance holds it
    return State.WAITING.value, ""


def node_progress(state: FleetState, node: str) -> tuple[NodeProgress, dict[str, str]]:
    """The node's view, and the reason of each of its Packages that has one (blocked, erroring, waiting)."""
    targets = state.targets[node]
    packages, reasons, why = {}, [], {}
    for package in targets.packages():
        value, reason = package_state(state, node, package)
        packages[package] = value
        if reason and value != State.COMPLETE.value:
            reasons.append(f"{package}: {reason}")
            why[package] = reason
    present = set(packages.values())
    node_state = next((s.value for s in NODE_STATE_ORDER if s.value in present), State.COMPLETE.value)
    tally = state.disruptions.get(node)
    record = state.records.get(node)
    view = NodeProgress(
        state=node_state, packages=packages, reason="; ".join(reasons),
        windows=tally.windows if tally else 0, cordons=tally.cordons if tally else 0,
        drains=tally.drains if tally else 0, interrupts=tally.interrupts if tally else 0,
        skipped=record.skipped if record is not None and State.BLOCKED.value in present else "",
    )
    return view, why


@dataclass
class PackageNodes:
    """One Package over the nodes it targets: nodes per state, its blocked and erroring nodes with why."""

    counts: dict[str, int] = field(default_factory=dict)
    # node -> (state, reason), blocked and erroring nodes only; the blocked ones a window gave up.
    problems: dict[str, tuple[str, str]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


@dataclass
class NodeViews:
    """Every node's view and the sums over them (module docstring)."""

    nodes: dict[str, NodeProgress] = field(default_factory=dict)
    reasons: dict[str, dict[str, str]] = field(default_factory=dict)
    # Node state -> nodes; per Package its nodes; per disruption kind the sum and how many nodes had each count.
    counts: dict[str, int] = field(default_factory=dict)
    packages: dict[str, PackageNodes] = field(default_factory=dict)
    disruptions: dict[str, int] = field(default_factory=dict)
    histograms: dict[str, dict[int, int]] = field(default_factory=dict)
    # Node -> the planner's compartment of it (as of the last refresh of every node: the compartments change
    # only with a listing or a new wave, which touch every node).
    compartments: dict[str, str] = field(default_factory=dict)

    def compartment_of(self, planner: BatchPlannerState, node: str) -> str:
        """The compartment the planner put `node` in ("" when it does not know the node)."""
        found = self.compartments.get(node)
        return found if found is not None else (planner.compartment_of(node) or "")

    def _count(self, node: str, sign: int) -> None:
        view, why = self.nodes[node], self.reasons[node]
        _add(self.counts, view.state, sign)
        for kind in DISRUPTION_KINDS:
            value = getattr(view, kind)
            _add(self.disruptions, kind, sign * value)
            _add(self.histograms.setdefault(kind, {}), value, sign)
        for package, value in view.packages.items():
            part = self.packages.setdefault(package, PackageNodes())
            _add(part.counts, value, sign)
            if value in _PROBLEMS:
                if sign > 0:
                    part.problems[node] = (value, why.get(package, ""))
                    if value == State.BLOCKED.value and view.skipped:
                        part.skipped[node] = why.get(package, "")
                else:
                    part.problems.pop(node, None)
                    part.skipped.pop(node, None)

    def _update(self, state: FleetState, node: str) -> None:
        if node in self.nodes:
            self._count(node, -1)
            del self.nodes[node]
            del self.reasons[node]
        if node in state.targets:
            self.nodes[node], self.reasons[node] = node_progress(state, node)
            self._count(node, 1)

    def refresh(self, state: FleetState) -> None:
        """Recompute the nodes changed since the last refresh (every node when any may have)."""
        every, changed = work_index.take_changed(state)
        if every:
            fresh = NodeViews()
            for node in state.targets:
                fresh._update(state, node)
            planner = state.planner
            if planner is not None:
                fresh.compartments = {n: c.name for c in planner.compartments.values() for n in c.nodes}
            self.__dict__.update(fresh.__dict__)
            return
        for node in changed:
            self._update(state, node)


def _add(counts: dict, key: object, by: int) -> None:
    value = counts.get(key, 0) + by
    if value:
        counts[key] = value
    else:
        counts.pop(key, None)


def node_views(state: FleetState) -> NodeViews:
    """The node views of `state`, brought up to date."""
    views = state.__dict__.get(_ATTRIBUTE)
    if views is None:
        views = NodeViews()
        state.__dict__[_ATTRIBUTE] = views
    views.refresh(state)
    if CHECK:
        fresh = NodeViews()
        for node in state.targets:
            fresh._update(state, node)
        for part in ("nodes", "counts", "packages", "disruptions", "histograms"):
            if _non_empty(getattr(fresh, part)) != _non_empty(getattr(views, part)):
                raise AssertionError(f"node views out of date ({part}): {getattr(views, part)} != {getattr(fresh, part)}")
    return views


def _non_empty(value: object) -> object:
    """`value` without the empty dicts a sum leaves behind (for comparing views)."""
    return {k: v for k, v in value.items() if v != {}} if isinstance(value, dict) else value


def complete_nodes(state: FleetState) -> int:
    """How many of the fleet's nodes are complete (their view's state)."""
    return node_views(state).counts.get(State.COMPLETE.value, 0)


def histogram(counts: Mapping[int, int]) -> dict[str, int]:
    """`{"1": 48, "2": 2}`: nodes per count, as JSON keys (strings), in count order. Pure."""
    return {str(k): counts[k] for k in sorted(counts)}

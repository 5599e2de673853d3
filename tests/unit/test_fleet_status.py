"""A fleet's progress (planning/views/fleet_status.py): each rule of its docstring, and the budget property."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.enums import RolloutPhase, State
from planning.rollout import batches
from planning.rollout import fleet_state as fs
from planning.rollout.fleet_state import Disruptions, FleetState, InFlight, NodeRecord
from planning.views.fleet_status import details_line, fleet_progress
from protocol.fleet import FleetSpec, PackageEntry
from tests.unit.fleet_builders import (
    a_fleet_spec,
    a_policy,
    a_result,
    a_selection,
    an_entry,
    every_node,
    targets,
)

NOW = "2026-01-01T00:00:00+00:00"
FLEET = "fleet/gpu"


def a_state(*entries: PackageEntry, nodes: dict[str, Any] | None = None, **extra: Any) -> FleetState:
    """A fleet in its first wave over `nodes` (name -> NodeTargets; default: n1 pending every Package)."""
    spec = a_fleet_spec(*entries)
    state = FleetState()
    fs.set_spec(state, spec)
    selection = a_selection(**(nodes or {"n1": targets([e.name for e in entries])}))
    fs.start_wave(state, selection, a_policy(), FLEET)
    for key, value in extra.items():
        setattr(state, key, value)
    return state


A = an_entry("a")

# --- per node and Package ----------------------------------------------------------------------------

PACKAGE_STATES = [
    pytest.param({"in_flight": {"n1": InFlight("r", ["a"])}}, targets(["a"]), "in_progress", "", id="carried"),
    pytest.param({"in_flight": {"n1": InFlight("r", ["b"])}}, targets(["a"]), "waiting", "",
                 id="node-in-flight-without-it"),
    pytest.param({"in_flight": {"n1": InFlight("r", ["a"])}, "records": {"n1": NodeRecord({"a": "erroring"})}},
                 targets(["a"]), "in_progress", "", id="carried-again-after-retry"),
    pytest.param({"records": {"n1": NodeRecord({"a": "complete"})}}, targets(["a"]), "complete", "",
                 id="answered-complete"),
    pytest.param({"records": {"n1": NodeRecord({"a": "erroring"}, {"a": "apply failed"})}}, targets(done=["a"]),
                 "erroring", "apply failed", id="answer-before-listing"),
    pytest.param({"records": {"n1": NodeRecord({"a": "blocked"}, {"a": "held"})}}, targets(["a"]), "blocked",
                 "held", id="answered-blocked"),
    pytest.param({}, targets(done=["a"]), "complete", "", id="listed-done"),
    pytest.param({}, targets(blocked={"a": "taints not tolerated: x:NoSchedule"}), "blocked",
                 "taints not tolerated: x:NoSchedule", id="listed-blocked"),
    pytest.param({}, targets(waiting={"a": "waits for dependency b 1.0.0"}), "blocked",
                 "waits for dependency b 1.0.0", id="listed-waiting-for-a-dependency"),
    pytest.param({}, targets(["a"]), "waiting", "", id="listed-pending"),
    pytest.param({}, targets(paused=["a"]), "waiting", "", id="listed-paused"),
]


@pytest.mark.parametrize(("extra", "listed", "expected", "reason"), PACKAGE_STATES)
def test_a_package_state_on_a_node(extra: dict[str, Any], listed: Any, expected: str, reason: str) -> None:
    state = a_state(A, an_entry("b"), nodes={"n1": listed}, **extra)
    report = every_node(fleet_progress(state, RolloutPhase.PROGRESSING, NOW), state)
    node = report.nodes["n1"]
    assert node.packages["a"] == expected
    assert (f"a: {reason}" in node.reason) if reason else "a:" not in node.reason
    if expected == "erroring":
        assert report.packages["a"].erroring == {"n1": reason}
    if expected == "blocked":
        assert report.packages["a"].blocked == {"n1": reason}


NODE_STATES = [
    pytest.param({"a": "erroring", "b": "in_progress", "c": "waiting"}, "erroring", id="erroring-first"),
    pytest.param({"a": "in_progress", "b": "waiting", "c": "blocked"}, "in_progress", id="then-in-progress"),
    pytest.param({"a": "complete", "b": "waiting", "c": "blocked"}, "waiting", id="then-waiting"),
    pytest.param({"a": "complete", "b": "blocked", "c": "complete"}, "blocked", id="then-blocked"),
    pytest.param({"a": "complete", "b": "complete", "c": "complete"}, "complete", id="all-complete"),
]


@pytest.mark.parametrize(("states", "expected"), NODE_STATES)
def test_a_node_state_is_the_first_of_its_package_states_in_order(states: dict[str, str], expected: str) -> None:
    entries = [an_entry(p) for p in states]
    listed = targets(pending=[p for p, s in states.items() if s in ("waiting", "in_progress", "erroring")],
                     blocked={p: "why" for p, s in states.items() if s == "blocked"},
                     done=[p for p, s in states.items() if s == "complete"])
    records = {"n1": NodeRecord({p: s for p, s in states.items() if s == "erroring"})}
    in_flight = {"n1": InFlight("r", [p for p, s in states.items() if s == "in_progress"])}
    state = a_state(*entries, nodes={"n1": listed}, records=records, in_flight=in_flight)
    report = every_node(fleet_progress(state, RolloutPhase.PROGRESSING, NOW), state)
    assert report.nodes["n1"].packages == states
    assert report.nodes["n1"].state == expected
    assert report.counts == {expected: 1} and report.total_nodes == 1


def test_a_node_shows_the_disruptions_of_the_fleets_windows() -> None:
    state = a_state(A, disruptions={"n1": Disruptions(windows=2, cordons=1, drains=1, interrupts=1)})
    report = fleet_progress(state, RolloutPhase.PROGRESSING, NOW)
    node = every_node(report, state).nodes["n1"]
    assert (node.windows, node.cordons, node.drains, node.interrupts) == (2, 1, 1, 1)
    # The summary (no node listed) sums them, and says how many nodes had each count.
    assert report.nodes == {} and report.disruptions == {"windows": 2, "cordons": 1, "drains": 1, "interrupts": 1}
    assert report.disruption_nodes["drains"] == {"1": 1}


# --- per Package ----------------------------------------------------------------------------------------

PHASES = [
    pytest.param({}, targets(["a"]), RolloutPhase.PROGRESSING, RolloutPhase.PROGRESSING, id="work-left"),
    pytest.param({}, targets(done=["a"]), RolloutPhase.PROGRESSING, RolloutPhase.COMPLETE, id="done-everywhere"),
    pytest.param({"records": {"n1": NodeRecord({"a": "erroring"})}}, targets(["a"]), RolloutPhase.FAILED,
                 RolloutPhase.FAILED, id="erroring-failed"),
    pytest.param({}, targets(blocked={"a": "t"}), RolloutPhase.COMPLETE, RolloutPhase.COMPLETE,
                 id="only-blocked-complete"),
    pytest.param({}, targets(["a"]), RolloutPhase.HALTED, RolloutPhase.HALTED, id="fleet-halted"),
    pytest.param({}, targets(done=["a"]), RolloutPhase.HALTED, RolloutPhase.COMPLETE,
                 id="fleet-halted-package-done"),
    pytest.param({}, targets(["a"]), RolloutPhase.CANARY, RolloutPhase.CANARY, id="fleet-canary"),
    pytest.param({}, targets(["a"]), RolloutPhase.PAUSED, RolloutPhase.PAUSED, id="fleet-paused"),
    pytest.param({"paused": True}, targets(["a"]), RolloutPhase.PROGRESSING, RolloutPhase.PAUSED,
                 id="fleet-paused-by-signal"),
    pytest.param({"paused_packages": ["a"]}, targets(["a"]), RolloutPhase.PROGRESSING, RolloutPhase.PAUSED,
                 id="package-paused-by-signal"),
    pytest.param({"paused_packages": ["a"], "in_flight": {"n1": InFlight("r", ["a"])}}, targets(["a"]),
                 RolloutPhase.PROGRESSING, RolloutPhase.PROGRESSING, id="paused-but-its-window-runs"),
    pytest.param({"paused_packages": ["a"]}, targets(done=["a"]), RolloutPhase.PROGRESSING, RolloutPhase.COMPLETE,
                 id="paused-with-nothing-left"),
]


@pytest.mark.parametrize(("extra", "listed", "fleet_phase", "expected"), PHASES)
def test_package_phase(extra: dict[str, Any], listed: Any, fleet_phase: RolloutPhase,
                       expected: RolloutPhase) -> None:
    report = fleet_progress(a_state(A, nodes={"n1": listed}, **extra), fleet_phase, NOW)
    progress = report.packages["a"]
    assert progress.phase is expected
    assert progress.uninstalled is False and progress.generation == 1 and progress.version == "1.0.0"


def test_a_package_paused_by_spec_or_annotation_is_paused_while_work_is_left() -> None:
    state = a_state(A, nodes={"n1": targets(paused=["a"])})
    fs.set_spec(state, a_fleet_spec(an_entry("a", paused=True)))
    progress = fleet_progress(state, RolloutPhase.COMPLETE, NOW).packages["a"]
    assert progress.phase is RolloutPhase.PAUSED and progress.message.startswith("paused:")


def test_a_package_is_pending_until_a_wave_rolls_out_its_spec() -> None:
    state = a_state(A, nodes={"n1": targets(done=["a"])})
    assert fs.set_spec(state, a_fleet_spec(an_entry("a", "2.0.0"), an_entry("new")))
    report = fleet_progress(state, RolloutPhase.PENDING, NOW)
    assert {p: r.phase for p, r in report.packages.items()} == {"a": RolloutPhase.PENDING,
                                                                 "new": RolloutPhase.PENDING}
    assert report.packages["a"].message == "waiting for fleet/gpu to start a wave with this spec"
    assert report.packages["a"].version == "2.0.0"
    # A new generation of the same spec (say a label) is no new wave: not Pending.
    state = a_state(A, nodes={"n1": targets(done=["a"])})
    fs.set_spec(state, a_fleet_spec(an_entry("a", generation=2)))
    progress = fleet_progress(state, RolloutPhase.COMPLETE, NOW).packages["a"]
    assert progress.phase is RolloutPhase.COMPLETE and progress.generation == 2


UNINSTALLS = [
    pytest.param({}, targets(["a"]), RolloutPhase.UNINSTALLING, False, id="left"),
    pytest.param({"in_flight": {"n1": InFlight("r", ["a"])}}, targets(["a"]), RolloutPhase.UNINSTALLING, False,
                 id="in-progress"),
    pytest.param({"records": {"n1": NodeRecord({"a": "erroring"})}}, targets(["a"]), RolloutPhase.UNINSTALLING,
                 False, id="erroring-never-uninstalled"),
    pytest.param({"records": {"n1": NodeRecord({"a": "complete"})}}, targets(["a"]), RolloutPhase.COMPLETE, True,
                 id="complete"),
    pytest.param({}, targets(done=["a"]), RolloutPhase.COMPLETE, True, id="nothing-recorded-anywhere"),
    # A node the uninstall cannot reach yet still has the Package: not uninstalled (the finalizer stays).
    # Seen: a node listed right after its own reboot still carries `node.kubernetes.io/not-ready`.
    pytest.param({}, targets(blocked={"a": "taints not tolerated: node.kubernetes.io/not-ready:NoSchedule"}),
                 RolloutPhase.UNINSTALLING, False, id="blocked-by-a-taint"),
    pytest.param({"records": {"n1": NodeRecord({"a": "blocked"}, {"a": "held"})}}, targets(["a"]),
                 RolloutPhase.UNINSTALLING, False, id="answered-blocked"),
    pytest.param({}, targets(waiting={"a": "waits"}), RolloutPhase.UNINSTALLING, False, id="waiting"),
]


@pytest.mark.parametrize(("extra", "listed", "expected", "uninstalled"), UNINSTALLS)
def test_uninstalled_only_when_the_uninstall_is_complete(extra: dict[str, Any], listed: Any,
                                                         expected: RolloutPhase, uninstalled: bool) -> None:
    state = a_state(an_entry("a", uninstall=True), nodes={"n1": listed}, **extra)
    progress = fleet_progress(state, RolloutPhase.UNINSTALLING, NOW).packages["a"]
    assert (progress.phase, progress.uninstalled) == (expected, uninstalled)


def test_package_counts_cover_the_nodes_it_targets_and_carry_the_fleets_batch() -> None:
    nodes = {"n1": targets(["a"]), "n2": targets(done=["a"]), "n3": targets(blocked={"a": "t"}),
             "n4": targets(["b"])}
    state = a_state(A, an_entry("b"), nodes=nodes)
    report = fleet_progress(state, RolloutPhase.PROGRESSING, NOW)
    progress = report.packages["a"]
    assert progress.counts == {"waiting": 1, "complete": 1, "blocked": 1} and progress.total_nodes == 3
    assert report.total_nodes == 4 and sum(report.counts.values()) == 4
    assert (progress.batch_number, progress.updated_at) == (report.batch_number, NOW)
    assert report.policy == "gpu" and report.wave == 1


def test_the_message_names_the_fleet_while_it_works() -> None:
    state = a_state(A, message="batch 2: 3 node(s)")
    assert fleet_progress(state, RolloutPhase.PROGRESSING, NOW).packages["a"].message == "fleet/gpu: batch 2: 3 node(s)"
    done = a_state(A, nodes={"n1": targets(done=["a"])}, message="old")
    assert fleet_progress(done, RolloutPhase.COMPLETE, NOW).packages["a"].message == ""


DEPARTED = [
    pytest.param({"n9": "gone"}, "batch 2", RolloutPhase.COMPLETE,
                 "batch 2; 1 node(s) no longer targeted (left the selector, ignored or deleted), not updated: n9",
                 id="one-node-after-the-message"),
    pytest.param({f"n{i}": "gone" for i in range(3, 10)}, "", RolloutPhase.PROGRESSING,
                 "7 node(s) no longer targeted (left the selector, ignored or deleted), not updated: "
                 "n3, n4, n5, n6, n7 and 2 more", id="five-named-then-counted"),
]


@pytest.mark.parametrize(("departed", "message", "fleet_phase", "expected"), DEPARTED)
def test_nodes_that_left_before_they_were_updated_are_named(departed: dict[str, str], message: str,
                                                             fleet_phase: RolloutPhase, expected: str) -> None:
    state = a_state(A, nodes={"n1": targets(done=["a"])}, departed=departed, message=message)
    report = fleet_progress(state, fleet_phase, NOW)
    assert report.message == expected
    assert report.packages["a"].message == f"fleet/gpu: {expected}"
    assert report.total_nodes == 1 and report.packages["a"].counts == {"complete": 1}


# --- budgets ---------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12), st.integers(1, 4), st.integers(0, 2), st.sampled_from(["fixed", "linear", "exponential"]),
       st.data())
def test_budget_in_use_never_above_its_limit_when_requests_follow_batches(
    nodes: int, budget: int, canary: int, strategy: str, data: st.DataObject
) -> None:
    names = [f"n{i:02d}" for i in range(nodes)]
    zoned = {"compartments": [{"name": "zone-a", "selector": {"matchLabels": {"zone": "a"}},
                               "budget": {"count": max(1, budget - 1)}}]}
    policy = a_policy(budget, initial=1, canary=min(canary, budget - 1), strategy=strategy, **zoned)
    spec = FleetSpec("gpu", policy.model_dump(by_alias=True, exclude_none=True), 1, [an_entry("a"), an_entry("b")])
    state = FleetState()
    fs.set_spec(state, spec)
    selection = a_selection(**{n: targets(["a", "b"], labels={"zone": "a" if i % 3 == 0 else "b"})
                               for i, n in enumerate(names)})
    fs.start_wave(state, selection, policy, FLEET)
    planner = state.planner
    assert planner is not None
    for _ in range(3 * nodes + 6):
        if batches.planner_phase(planner, fs.remaining(state)) is batches.PlannerPhase.CANARY_HOLD:
            batches.promote_canary(planner)
        for node in batches.next_batch(planner, fs.startable(state), fs.canary_cover(state)):
            if node in fs.startable(state):
                state.in_flight[node] = InFlight(fs.request_id(state, FLEET, node), fs.wanted(state, node))
                fs.touch_nodes(state, [node])  # what the fleet's own hand-out reports
        report = fleet_progress(state, RolloutPhase.PROGRESSING, NOW)
        assert all(use.in_use <= use.limit for use in report.budgets.values()), report.budgets
        assert sum(use.in_use for use in report.budgets.values()) == len(state.in_flight)
        for node in data.draw(st.lists(st.sampled_from(sorted(state.in_flight)), unique=True)
                              if state.in_flight else st.just([])):
            outcome = data.draw(st.sampled_from([State.COMPLETE.value, State.ERRORING.value, State.BLOCKED.value]))
            fs.record_result(state, a_result(node, state.in_flight[node].request_id, a=outcome, b=outcome))
        if planner.current and (result := fs.batch_results(state, planner.current_batch)) is not None:
            batches.record_batch_result(planner, *result)
            if planner.halted:
                batches.resume_after_halt(planner)
    assert state.sequence > 0, "no request was handed out"


# --- the Temporal UI's details line -----------------------------------------------------------------------

LISTED = st.sampled_from(["pending", "done", "blocked", "waiting"])
OUTCOME = st.sampled_from([None, "complete", "erroring", "blocked"])


@settings(max_examples=200)
@given(st.lists(st.tuples(LISTED, LISTED, OUTCOME, OUTCOME, st.booleans()), min_size=1, max_size=8),
       st.sampled_from([RolloutPhase.PROGRESSING, RolloutPhase.CANARY, RolloutPhase.COMPLETE]))
def test_the_details_line_counts_complete_nodes_as_the_progress_report_does(
    nodes: list[tuple[str, str, str | None, str | None, bool]], phase: RolloutPhase
) -> None:
    """`details_line` counts nodes without building the report; its count is the report's `complete`."""
    listed, records, in_flight = {}, {}, {}
    for i, (a, b, outcome_a, outcome_b, flying) in enumerate(nodes):
        kinds = {"a": a, "b": b}
        listed[f"n{i}"] = targets(pending=[p for p, k in kinds.items() if k == "pending"],
                                  done=[p for p, k in kinds.items() if k == "done"],
                                  blocked={p: "why" for p, k in kinds.items() if k == "blocked"},
                                  waiting={p: "dep" for p, k in kinds.items() if k == "waiting"})
        outcomes = {p: o for p, o in (("a", outcome_a), ("b", outcome_b)) if o is not None}
        if outcomes:
            records[f"n{i}"] = NodeRecord(outcomes)
        if flying:
            in_flight[f"n{i}"] = InFlight("r", ["a"])
    state = a_state(A, an_entry("b", "2.0.0"), nodes=listed, records=records, in_flight=in_flight)
    report = fleet_progress(state, phase, "")
    expected = (f"**{phase.value}** {FLEET} wave 1, batch 0: {report.counts.get('complete', 0)}/{len(nodes)} "
                f"nodes complete; packages: a 1.0.0, b 2.0.0")
    assert details_line(state, phase, FLEET) == expected

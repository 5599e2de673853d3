"""What a fleet remembers (planning/rollout/fleet_state.py): each rule of its docstring, as tables.

The random sequences (a hypothesis state machine) are in test_fleet_state_machine.py.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from api.enums import CanaryPhase, State
from planning.rollout import fleet_state as fs
from planning.rollout.fleet_state import FleetState, InFlight, NodeRecord
from protocol.fleet import Filter, FleetSpec
from tests.unit.fleet_builders import (
    a_fleet_spec,
    a_policy,
    a_result,
    a_selection,
    an_entry,
    everywhere,
    targets,
)

FLEET = "fleet/gpu"
NOW = datetime(2026, 1, 1, tzinfo=UTC)
CANARY_POLICY = {"canary": {"count": 1}, "default": {"budget": {"count": 2}}}


def in_wave(spec: FleetSpec, nodes: list[str], pending: list[str] | None = None, policy: Any = None) -> FleetState:
    """A fleet that took `spec` and started its first wave over `nodes` (each pending every Package)."""
    state = FleetState()
    fs.set_spec(state, spec)
    names = [e.name for e in spec.packages] if pending is None else pending
    fs.start_wave(state, everywhere(nodes, names), policy or a_policy(), FLEET)
    return state


def send(state: FleetState, node: str) -> str:
    """Hand `node` a request for what it wants now (as the workflow's `_send`); returns its id."""
    request_id = fs.request_id(state, FLEET, node)
    state.in_flight[node] = InFlight(request_id, fs.wanted(state, node), NOW.isoformat())
    fs.touch_nodes(state, [node])  # what the fleet's own hand-out reports
    return request_id


# --- desired state ---------------------------------------------------------------------------------


def test_package_revision_ignores_paused_and_generation() -> None:
    base = an_entry("a")
    revision = fs.package_revision(base)
    assert fs.package_revision(an_entry("a", paused=True)) == revision
    assert fs.package_revision(an_entry("a", spec_paused=True, generation=7)) == revision
    assert fs.package_revision(an_entry("a", "1.1.0")) != revision
    assert fs.package_revision(an_entry("a", config={"x": "1"})) != revision
    assert fs.package_revision(an_entry("a", uninstall=True)) != revision


A, B = an_entry("a"), an_entry("b")

SPEC_CHANGES = [
    pytest.param(a_fleet_spec(A, B), False, id="same-spec"),
    pytest.param(a_fleet_spec(an_entry("a", paused=True), B), False, id="paused-by-annotation"),
    pytest.param(a_fleet_spec(an_entry("a", spec_paused=True), B), False, id="spec-paused"),
    pytest.param(a_fleet_spec(an_entry("a", generation=2), B), False, id="generation-only"),
    pytest.param(a_fleet_spec(A), False, id="removal-only"),
    pytest.param(a_fleet_spec(), False, id="every-package-removed"),
    pytest.param(a_fleet_spec(an_entry("a", "1.1.0"), B), True, id="version-bump"),
    pytest.param(a_fleet_spec(an_entry("a", config={"k": "v"}), B), True, id="config-change"),
    pytest.param(a_fleet_spec(A, B, an_entry("c")), True, id="package-added"),
    pytest.param(a_fleet_spec(an_entry("a", uninstall=True), B), True, id="uninstall"),
    pytest.param(a_fleet_spec(A, B, policy=CANARY_POLICY), True, id="policy-changed"),
    pytest.param(a_fleet_spec(A, policy=CANARY_POLICY), True, id="removal-and-policy-change"),
]


@pytest.mark.parametrize(("new", "wanted"), SPEC_CHANGES)
def test_set_spec_wants_a_wave_iff_a_revision_is_added_or_changed_or_the_policy_changed(
    new: FleetSpec, wanted: bool
) -> None:
    state = in_wave(a_fleet_spec(A, B), ["n1"])
    assert fs.set_spec(state, new) is wanted
    assert state.wave_wanted is wanted and state.spec is new
    if not wanted:
        # Removals leave the wave's revisions: nothing to roll out, nothing left to want.
        assert sorted(state.revisions) == sorted(e.name for e in new.packages)


def test_the_first_spec_wants_a_wave_even_without_packages() -> None:
    assert fs.set_spec(FleetState(), a_fleet_spec()) is True


def test_a_wanted_wave_stays_wanted_until_it_starts() -> None:
    state = in_wave(a_fleet_spec(A, B), ["n1"])
    assert fs.set_spec(state, a_fleet_spec(an_entry("a", "2.0.0"), B))
    # A later removal does not cancel it, and the revisions stay those of the running wave.
    assert fs.set_spec(state, a_fleet_spec(an_entry("a", "2.0.0")))
    assert sorted(state.revisions) == ["a", "b"]


WAVES = [
    pytest.param(a_fleet_spec(an_entry("a", "2.0.0"), B, policy=CANARY_POLICY), ["a"], CanaryPhase.NONE,
                 id="version-bump-runs-a-canary"),
    pytest.param(a_fleet_spec(A, B, an_entry("c"), policy=CANARY_POLICY), ["c"], CanaryPhase.NONE,
                 id="added-package-runs-a-canary"),
    pytest.param(a_fleet_spec(A, B, policy={**CANARY_POLICY, "default": {"budget": {"count": 3}}}), [],
                 CanaryPhase.PASSED, id="policy-only-no-canary"),
]


@pytest.mark.parametrize(("new", "changed", "canary"), WAVES)
def test_start_wave_names_the_changed_packages_and_starts_empty(new: FleetSpec, changed: list[str],
                                                                 canary: CanaryPhase) -> None:
    state = in_wave(a_fleet_spec(A, B, policy=CANARY_POLICY), ["n1", "n2"], policy=a_policy(canary=1))
    assert state.planner is not None
    state.planner.canary_phase = CanaryPhase.PASSED  # wave 1 went through its canary
    state.records["n1"] = NodeRecord({"a": State.COMPLETE.value})
    state.departed["n3"] = fs.DEPARTED_REASON
    state.soak_until, state.promote = NOW.isoformat(), True
    assert fs.set_spec(state, new)
    selection = everywhere(["n1", "n2"], [e.name for e in new.packages])
    fs.start_wave(state, selection, a_policy(canary=1), FLEET)
    assert (state.wave, state.changed, state.wave_wanted) == (2, changed, False)
    assert state.records == {} and state.departed == {} and (state.soak_until, state.promote) == ("", False)
    assert state.targets == selection.nodes
    assert state.planner is not None and state.planner.canary_phase is canary
    assert state.revisions == {e.name: fs.package_revision(e) for e in new.packages}


def test_refresh_adds_joiners_and_notes_departures() -> None:
    state = in_wave(a_fleet_spec(A), ["n1", "n2", "n3", "n4"])
    send(state, "n2")
    state.records["n3"] = NodeRecord({"a": State.COMPLETE.value})
    # n1 (work wanted) and n2 (in flight) and n3 (answered) leave the listing; n5 joins.
    joined = fs.refresh_targets(state, everywhere(["n4", "n5"], ["a"]), a_policy())
    assert joined == ["n5"]
    assert state.departed == {"n1": fs.DEPARTED_REASON}
    assert fs.startable(state) == {"n4", "n5"}
    # n1 comes back: it is a target again.
    fs.refresh_targets(state, everywhere(["n1", "n4", "n5"], ["a"]), a_policy())
    assert state.departed == {} and fs.startable(state) == {"n1", "n4", "n5"}


REFRESH_OUTCOMES = [
    pytest.param(State.BLOCKED, "f1", State.BLOCKED, id="blocked-node-unchanged-kept"),
    pytest.param(State.BLOCKED, "f2", None, id="blocked-node-changed-asked-again"),
    pytest.param(State.ERRORING, "f2", State.ERRORING, id="erroring-kept-until-retry"),
    pytest.param(State.COMPLETE, "f2", State.COMPLETE, id="complete-kept"),
]


@pytest.mark.parametrize(("outcome", "fingerprint", "after"), REFRESH_OUTCOMES)
def test_a_blocked_outcome_is_cleared_when_the_node_changes(outcome: State, fingerprint: str,
                                                             after: State | None) -> None:
    state = in_wave(a_fleet_spec(A), ["n1"])
    state.targets["n1"].fingerprint = "f1"
    fs.record_result(state, a_result("n1", send(state, "n1"), a=outcome.value))
    # The listing after the answer: a completed Package is done there, the others still pending.
    listed = targets(done=["a"]) if outcome is State.COMPLETE else targets(["a"])
    listed.fingerprint = fingerprint
    fs.refresh_targets(state, a_selection(n1=listed), a_policy())
    assert state.records["n1"].outcomes.get("a") == (after.value if after else None)
    assert (fs.startable(state) == {"n1"}) is (after is None)


# --- requests and results -------------------------------------------------------------------------


def test_wanted_is_pending_work_not_answered_not_paused_and_of_this_wave() -> None:
    state = in_wave(a_fleet_spec(A, B, an_entry("c")), ["n1", "n2", "n3"], pending=["a", "b"])
    state.targets["n1"] = targets(["a", "b", "c", "late"], paused=["x"])
    state.records["n1"] = NodeRecord({"b": State.COMPLETE.value})
    assert fs.wanted(state, "n1") == ["a", "c"]  # b answered; `late` is not part of this wave
    state.paused_packages.append("a")
    assert fs.wanted(state, "n1") == ["c"]
    state.paused_nodes.append("n2")
    state.departed["n3"] = fs.DEPARTED_REASON
    assert fs.wanted(state, "n2") == [] and fs.wanted(state, "n3") == [] and fs.wanted(state, "n9") == []


DEPENDENCY_HOLDS = [
    pytest.param({}, ["driver", "kernel"], id="both-in-one-window"),
    pytest.param({"paused": ["kernel"]}, [], id="dependency-paused-by-signal"),
    pytest.param({"kernel": "erroring"}, [], id="dependency-erroring"),
    pytest.param({"kernel": "blocked"}, [], id="dependency-blocked"),
    pytest.param({"kernel": "complete"}, ["driver"], id="dependency-complete-in-this-wave"),
    pytest.param({"paused": ["driver"]}, ["kernel"], id="dependent-paused"),
]


@pytest.mark.parametrize(("given", "expected"), DEPENDENCY_HOLDS)
def test_a_window_carries_a_dependent_only_with_its_pending_dependency(given: dict[str, Any],
                                                                        expected: list[str]) -> None:
    kernel, driver = an_entry("kernel"), an_entry("driver", dependsOn={"kernel": "1.0.0"})
    state = in_wave(a_fleet_spec(kernel, driver), ["n1"], pending=["driver", "kernel"])
    state.paused_packages = list(given.pop("paused", []))
    if given:
        state.records["n1"] = NodeRecord(dict(given))
    assert fs.wanted(state, "n1") == expected


def test_startable_and_remaining() -> None:
    state = in_wave(a_fleet_spec(A), ["n1", "n2", "n3"])
    send(state, "n1")
    fs.record_result(state, a_result("n2", send(state, "n2"), a="complete"))
    assert fs.startable(state) == {"n3"}
    assert fs.remaining(state) == {"n1", "n3"}


def test_canary_cover_names_per_changed_package_the_nodes_carrying_it() -> None:
    state = FleetState()
    fs.set_spec(state, a_fleet_spec(A, B))
    fs.start_wave(state, a_selection(n1=targets(["a"]), n2=targets(["a", "b"]), n3=targets(["b"])), a_policy(), FLEET)
    send(state, "n2")
    assert fs.canary_cover(state) == [["n1"], ["n3"]]


def test_request_ids_are_unique_within_the_fleet() -> None:
    state = in_wave(a_fleet_spec(A), ["n1"])
    ids = {fs.request_id(state, FLEET, "n1") for _ in range(5)}
    assert len(ids) == 5 and all(i.startswith(f"{FLEET}:1:") and i.endswith(":n1") for i in ids)


RESULTS = [
    pytest.param(lambda rid: a_result("n1", "other-id", a="complete"), False, {}, id="stale-request-id"),
    pytest.param(lambda rid: a_result("n9", rid, a="complete"), False, {}, id="node-not-in-flight"),
    pytest.param(lambda rid: a_result("n1", rid, withdrawn=True), True, {}, id="withdrawn-no-outcome"),
    pytest.param(lambda rid: a_result("n1", rid, a="skipped", b="complete"), True, {"b": "complete"},
                 id="skipped-not-recorded"),
    pytest.param(lambda rid: a_result("n1", rid, a="erroring", b="blocked"), True,
                 {"a": "erroring", "b": "blocked"}, id="erroring-and-blocked"),
]


@pytest.mark.parametrize(("result", "taken", "outcomes"), RESULTS)
def test_record_result(result: Any, taken: bool, outcomes: dict[str, str]) -> None:
    state = in_wave(a_fleet_spec(A, B), ["n1"])
    request = send(state, "n1")
    before = copy.deepcopy(state)
    assert fs.record_result(state, result(request)) is taken
    if not taken:
        assert state == before
        return
    assert "n1" not in state.in_flight
    assert (state.records["n1"].outcomes if "n1" in state.records else {}) == outcomes


def test_a_blocked_answer_keeps_the_fingerprint_and_disruptions_are_counted() -> None:
    state = in_wave(a_fleet_spec(A, B), ["n1", "n2"])
    state.targets["n1"].fingerprint = "f7"
    fs.record_result(state, a_result("n1", send(state, "n1"), a="blocked"))
    assert state.records["n1"].fingerprint == "f7" and "n1" not in state.disruptions
    fs.record_result(state, a_result("n2", send(state, "n2"), cordoned=True, drained=True, interrupt="reboot",
                                     a="complete", b="complete"))
    tally = state.disruptions["n2"]
    assert (tally.windows, tally.cordons, tally.drains, tally.interrupts) == (1, 1, 1, 1)


BATCHES = [
    pytest.param({"n1": {"a": "complete", "b": "complete"}}, (["n1"], []), id="complete"),
    pytest.param({"n1": {"a": "complete", "b": "erroring"}}, ([], ["n1"]), id="one-erroring-fails"),
    pytest.param({"n1": {"a": "blocked", "b": "blocked"}}, ([], []), id="all-blocked-neither"),
    pytest.param({"n1": {"a": "complete", "b": "blocked"}}, (["n1"], []), id="complete-and-blocked-succeeds"),
    pytest.param({"n1": {}}, ([], []), id="no-answer-recorded-neither"),
]


@pytest.mark.parametrize(("answers", "expected"), BATCHES)
def test_batch_results(answers: dict[str, dict[str, str]], expected: tuple[list[str], list[str]]) -> None:
    state = in_wave(a_fleet_spec(A, B), ["n1", "n2"])
    for node, outcomes in answers.items():
        request = send(state, node)
        assert fs.batch_results(state, ["n1", "n2"]) is None  # n1 is in flight
        fs.record_result(state, a_result(node, request, withdrawn=not outcomes, **outcomes))
    assert fs.batch_results(state, ["n1", "n2"]) == expected
    assert fs.failed_nodes(state) == expected[1]


# --- operator signals ------------------------------------------------------------------------------


def test_pause_and_resume_with_and_without_a_filter() -> None:
    state = in_wave(a_fleet_spec(A, B), ["n1", "n2"])
    fs.apply_pause(state, Filter(packages=["a"], nodes=["n2"]))
    fs.apply_pause(state, Filter(packages=["a", "b"]))
    assert (state.paused, state.paused_packages, state.paused_nodes) == (False, ["a", "b"], ["n2"])
    fs.apply_resume(state, Filter(packages=["b"]))
    assert (state.paused_packages, state.paused_nodes) == (["a"], ["n2"])
    fs.apply_pause(state, Filter())
    assert state.paused and not state.promote
    fs.apply_resume(state, Filter())
    assert (state.paused, state.halted, state.promote, state.paused_packages, state.paused_nodes) == (
        False, False, True, [], [])


HALTS = [
    pytest.param(Filter(), ["n1", "n2", "n3"], True, id="whole-fleet"),
    pytest.param(Filter(packages=["b"]), ["n2"], False, id="one-package"),
    pytest.param(Filter(nodes=["n3"]), ["n3"], False, id="one-node"),
    pytest.param(Filter(packages=["b"], nodes=["n1"]), ["n1", "n2"], False, id="package-or-node"),
]


@pytest.mark.parametrize(("scope", "withdrawn", "halted"), HALTS)
def test_halt_withdraws_the_requests_it_concerns(scope: Filter, withdrawn: list[str], halted: bool) -> None:
    state = FleetState()
    fs.set_spec(state, a_fleet_spec(A, B))
    fs.start_wave(state, a_selection(n1=targets(["a"]), n2=targets(["a", "b"]), n3=targets(["a"])), a_policy(),
                  FLEET)
    for node in ("n1", "n2", "n3"):
        send(state, node)
    assert fs.apply_halt(state, scope) == withdrawn
    assert state.halted is halted
    assert state.paused_packages == scope.packages and state.paused_nodes == scope.nodes


RETRIES = [
    pytest.param(Filter(), {("n1", "a"), ("n1", "b"), ("n2", "a")}, id="everything"),
    pytest.param(Filter(packages=["a"]), {("n1", "a"), ("n2", "a")}, id="one-package"),
    pytest.param(Filter(nodes=["n1"]), {("n1", "a"), ("n1", "b")}, id="one-node"),
    pytest.param(Filter(packages=["a"], nodes=["n2"]), {("n2", "a")}, id="package-on-node"),
    pytest.param(Filter(packages=["c"]), set(), id="nothing-matches"),
]


@pytest.mark.parametrize(("scope", "cleared"), RETRIES)
def test_retry_clears_only_erroring_and_blocked_outcomes_matching_the_filter(
    scope: Filter, cleared: set[tuple[str, str]]
) -> None:
    state = in_wave(a_fleet_spec(A, B, an_entry("c")), ["n1", "n2", "n3"], policy=a_policy(canary=1))
    state.records = {
        "n1": NodeRecord({"a": "erroring", "b": "blocked", "c": "complete"}),
        "n2": NodeRecord({"a": "blocked", "c": "complete"}),
        "n3": NodeRecord({"c": "complete"}),
    }
    state.halted = True
    assert state.planner is not None
    state.planner.halted, state.planner.canary_phase = True, CanaryPhase.FAILED
    before = {(n, p) for n, r in state.records.items() for p in r.outcomes}
    retried = fs.apply_retry(state, scope)
    after = {(n, p) for n, r in state.records.items() for p in r.outcomes}
    assert before - after == cleared
    assert retried == sorted({n for n, _ in cleared})
    assert not state.halted and not state.planner.halted and state.planner.canary_phase is CanaryPhase.NONE


# --- watchdog ----------------------------------------------------------------------------------------


def test_overdue_requests() -> None:
    state = in_wave(a_fleet_spec(A), ["n1", "n2", "n3"])
    state.in_flight = {"n1": InFlight("r1", ["a"], (NOW - timedelta(seconds=61)).isoformat()),
                       "n2": InFlight("r2", ["a"], (NOW - timedelta(seconds=60)).isoformat()),
                       "n3": InFlight("r3", ["a"], (NOW - timedelta(seconds=59)).isoformat())}
    assert fs.overdue(state, NOW, timedelta(seconds=60)) == ["n1", "n2"]


@pytest.mark.parametrize("resent", range(fs.LOST_RESENDS + 1))
def test_a_lost_request_is_sent_again_at_most_lost_resends_times(resent: int) -> None:
    state = in_wave(a_fleet_spec(A, B), ["n1"])
    send(state, "n1")
    state.in_flight["n1"].resent = resent
    again = fs.lost(state, "n1", "Terminated")
    assert again is (resent < fs.LOST_RESENDS)
    if again:
        assert "n1" in state.in_flight and "n1" not in state.records
        return
    assert "n1" not in state.in_flight
    assert state.records["n1"].outcomes == {"a": "erroring", "b": "erroring"}
    message = state.records["n1"].messages["a"]
    assert "node/n1 closed (Terminated)" in message and f"{resent + 1} times" in message


def test_lost_for_a_node_not_in_flight_changes_nothing() -> None:
    state = in_wave(a_fleet_spec(A), ["n1"])
    before = copy.deepcopy(state)
    assert fs.lost(state, "n1", "Terminated") is False and state == before

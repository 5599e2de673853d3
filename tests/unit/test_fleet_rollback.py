"""The rollback of a failed canary (planning/rollout/fleet_rollback.py) and how a fleet's state carries it
(planning/rollout/fleet_state.py): previous specs per wave, the rollback windows, answers, signals. Pure."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from api.enums import CanaryPhase, RolloutPhase
from api.policy import DeploymentPolicySpec
from planning.fleet.codec import state_from_json, state_to_json
from planning.rollout import batches
from planning.rollout import fleet_rollback as rb
from planning.rollout import fleet_state as fs
from planning.rollout.fleet_targets import FleetSelection, NodeTargets
from protocol.fleet import Filter, FleetSpec, PackageEntry, PackageOutcome, WindowResult

POLICY: dict[str, Any] = {"default": {"budget": {"count": 2}}, "canary": {"count": 1, "onFailure": "rollback"}}
NODES = ("n1", "n2", "n3")


def entry(name: str, version: str, generation: int = 1, **spec: Any) -> PackageEntry:
    return PackageEntry(name, {"version": version, "image": f"x/{name}:{version}", **spec}, generation)


def wave(state: fs.FleetState, *packages: PackageEntry, policy: dict[str, Any] | None = None) -> bool:
    """Hand the fleet a desired state and start its wave with every package pending on every node."""
    policy = policy or POLICY
    wanted = fs.set_spec(state, FleetSpec("gpu", policy, 1, list(packages)))
    if wanted:
        names = [p.name for p in packages]
        selection = FleetSelection({n: NodeTargets(pending=list(names)) for n in NODES})
        fs.start_wave(state, selection, DeploymentPolicySpec.model_validate(policy), "fleet/gpu")
    return wanted


def answer(state: fs.FleetState, node: str, outcomes: dict[str, str], message: str = "") -> None:
    flight = state.in_flight[node]
    result = WindowResult(node, flight.request_id,
                          {p: PackageOutcome(s, message=message if s != "complete" else "") for p, s in outcomes.items()})
    assert fs.record_result(state, result)


def canary(state: fs.FleetState, outcome: str, message: str = "apply failed: exit 7") -> list[str]:
    """Run the canary batch: each canary node answers every Package it carried with `outcome`."""
    planner = state.planner
    assert planner is not None
    batch = batches.next_batch(planner, fs.startable(state), fs.canary_cover(state))
    for node in batch:
        state.in_flight[node] = fs.InFlight(fs.request_id(state, "fleet/gpu", node), fs.wanted(state, node))
        fs.touch_nodes(state, [node])  # what the fleet's own hand-out reports
    for node in batch:
        answer(state, node, dict.fromkeys(state.in_flight[node].packages, outcome), message)
    results = fs.batch_results(state, batch)
    assert results is not None
    batches.record_batch_result(planner, *results)
    return batch


# --- previous specs ---------------------------------------------------------------------------------


def test_previous_is_the_last_spec_whose_canary_passed() -> None:
    state = fs.FleetState()
    one, two, fixed = entry("a", "1.0.0"), entry("a", "2.0.0", 2), entry("a", "2.0.1", 3)
    assert wave(state, one)
    assert state.previous == {"a": None}  # new: a rollback uninstalls it
    canary(state, "complete")
    assert wave(state, two)
    assert state.previous == {"a": one} and state.changed == ["a"]
    canary(state, "erroring")
    assert state.planner is not None and state.planner.canary_phase is CanaryPhase.FAILED
    assert not wave(state, two), "the same desired state again starts no wave"
    assert wave(state, fixed)
    assert state.previous == {"a": one}, "the failed 2.0.0 never passed its canary: still back to 1.0.0"
    assert not state.outgoing


def test_a_change_whose_canary_did_not_pass_is_changed_again_in_a_policy_only_wave() -> None:
    state = fs.FleetState()
    wave(state, entry("a", "1.0.0"))
    canary(state, "complete")
    wave(state, entry("a", "2.0.0", 2))
    canary(state, "erroring")
    edited = POLICY | {"default": {"budget": {"count": 3}}}
    assert wave(state, entry("a", "2.0.0", 2), policy=edited)
    # Without this the edit would roll 2.0.0 out everywhere with no canary.
    assert state.changed == ["a"] and state.planner is not None
    assert state.planner.canary_phase is CanaryPhase.NONE
    assert state.previous == {"a": entry("a", "1.0.0")}


def test_a_spec_replaced_twice_before_the_wave_keeps_the_rolled_out_one() -> None:
    state = fs.FleetState()
    wave(state, entry("a", "1.0.0"))
    canary(state, "complete")
    fs.set_spec(state, FleetSpec("gpu", POLICY, 1, [entry("a", "2.0.0", 2)]))
    fs.set_spec(state, FleetSpec("gpu", POLICY, 1, [entry("a", "3.0.0", 3)]))
    assert state.outgoing == {"a": entry("a", "1.0.0")}
    wave(state, entry("a", "3.0.0", 3))
    assert state.previous == {"a": entry("a", "1.0.0")}


def test_paused_and_removed_packages_keep_no_copy() -> None:
    state = fs.FleetState()
    wave(state, entry("a", "1.0.0"), entry("b", "1.0.0"))
    paused = PackageEntry("a", entry("a", "1.0.0").spec, 1, paused=True)
    fs.set_spec(state, FleetSpec("gpu", POLICY, 1, [paused]))  # a paused, b removed: no new revision
    assert state.outgoing == {}


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["bump", "bump-twice", "policy"]),
                          st.sampled_from(["pass", "fail", "skip"])), min_size=1, max_size=8))
def test_previous_follows_the_stable_spec(steps: list[tuple[str, str]]) -> None:
    """Model: the stable spec is the one of the last wave whose canary passed (None before any)."""
    state = fs.FleetState()
    version, budget = 1, 2
    current = entry("a", "1.0.0")
    wave(state, current)
    stable: PackageEntry | None = None
    outcome_before = "skip"
    for change, outcome in [("first", "pass"), *steps]:
        if change == "bump-twice":
            version += 1
            fs.set_spec(state, FleetSpec("gpu", POLICY | {"default": {"budget": {"count": budget}}}, 1,
                                         [entry("a", f"{version}.0.0", version)]))
        if change in ("bump", "bump-twice"):
            version += 1
            current = entry("a", f"{version}.0.0", version)
        elif change == "policy":
            budget += 1
        if change != "first":
            started = wave(state, current, policy=POLICY | {"default": {"budget": {"count": budget}}})
            assert started
            if change == "policy" and outcome_before == "pass":
                assert state.changed == []
                outcome = "skip"  # no canary: nothing changed
            else:
                assert state.changed == ["a"]
                assert state.previous == {"a": stable}
        if outcome != "skip":
            canary(state, "complete" if outcome == "pass" else "erroring")
        if outcome == "pass":
            stable = current
        outcome_before = outcome if change != "policy" or outcome != "skip" else outcome_before


# --- planning the rollback ----------------------------------------------------------------------------


def failed_canary(**outcomes: dict[str, str]) -> rb.RollbackInput:
    return rb.RollbackInput(
        wave=2, canary=sorted(outcomes), changed=["a", "b"],
        previous={"a": entry("a", "1.0.0"), "b": None},
        entries={"a": entry("a", "2.0.0", 2), "b": entry("b", "1.0.0")},
        outcomes=outcomes,
        messages={n: {p: f"{p} failed on {n}" for p, s in o.items() if s == "erroring"} for n, o in outcomes.items()},
    )


def test_plan_rolls_back_every_changed_package_the_canary_ran() -> None:
    planned = rb.plan(failed_canary(n1={"a": "erroring", "b": "complete"}, n2={"a": "complete", "b": "blocked"},
                                    n3={"b": "blocked"}))
    assert isinstance(planned, rb.Rollback)
    assert planned.nodes == {"n1": ["a", "b"], "n2": ["a"]}  # n3 ran nothing: untouched
    assert planned.reason == "canary failed on n1 (a: a failed on n1)"
    assert planned.failures == {"n1": "a: a failed on n1"}
    assert planned.orders["a"].spec["version"] == "1.0.0" and not planned.orders["a"].uninstall
    assert planned.orders["b"].uninstall and planned.orders["b"].spec["version"] == "1.0.0"
    assert planned.versions == {"a": "1.0.0", "b": ""}
    assert [o.name for o in rb.orders_for(planned, "n1")] == ["a", "b"]
    assert rb.phase(planned) is RolloutPhase.ROLLING_BACK


def test_plan_refuses_an_unknown_previous_spec() -> None:
    data = failed_canary(n1={"a": "erroring"})
    unknown = rb.RollbackInput(data.wave, data.canary, data.changed, {"b": None}, data.entries, data.outcomes,
                               data.messages)
    assert "the spec before wave 2 of a is unknown" in str(rb.plan(unknown))


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(NODES), st.dictionaries(
    st.sampled_from(["a", "b", "c"]), st.sampled_from(["complete", "erroring", "blocked"]), max_size=3), max_size=3))
def test_plan_properties(outcomes: dict[str, dict[str, str]]) -> None:
    data = rb.RollbackInput(
        wave=3, canary=["n1", "n2"], changed=["a", "b"], previous={"a": entry("a", "1.0.0"), "b": None},
        entries={"a": entry("a", "2.0.0"), "b": entry("b", "1.0.0"), "c": entry("c", "1.0.0")},
        outcomes=outcomes, messages={})
    planned = rb.plan(data)
    assert isinstance(planned, rb.Rollback)
    for node, packages in planned.nodes.items():
        assert node in data.canary, "nodes outside the canary are never touched"
        assert packages and set(packages) <= {"a", "b"}
        assert all(outcomes[node][p] in ("complete", "erroring") for p in packages)
    assert all(planned.orders[p].uninstall == (data.previous[p] is None) for p in planned.orders)
    assert set(planned.failures) == {n for n in data.canary if "erroring" in outcomes.get(n, {}).values()}


# --- running it: answers, signals ------------------------------------------------------------------------


def rolled_back_state() -> fs.FleetState:
    """Wave 2 changed a (1.0.0 -> 2.0.0) and added b; the canary (n1) failed; the rollback is planned."""
    state = fs.FleetState()
    wave(state, entry("a", "1.0.0"))
    canary(state, "complete")
    wave(state, entry("a", "2.0.0", 2), entry("b", "1.0.0"))
    [node] = canary(state, "erroring")
    assert node == state.planner.canary_nodes[0]  # type: ignore[union-attr]
    assert fs.start_rollback(state) == ""
    return state


def send(state: fs.FleetState, node: str) -> None:
    assert state.rollback is not None
    orders = rb.orders_for(state.rollback, node)
    state.in_flight[node] = fs.InFlight(fs.request_id(state, "fleet/gpu", node), [o.name for o in orders],
                                        rollback=True)
    fs.touch_nodes(state, [node])  # what the fleet's own hand-out reports


def test_answers_end_the_rollback_and_the_records_keep_the_canary() -> None:
    state = rolled_back_state()
    rollback = state.rollback
    assert rollback is not None and list(rollback.nodes) == state.planner.canary_nodes  # type: ignore[union-attr]
    [node] = list(rollback.nodes)
    send(state, node)
    assert fs.rolling_back(state)
    withdrawn = WindowResult(node, state.in_flight[node].request_id, withdrawn=True)
    assert fs.record_result(state, withdrawn) and rb.pending(rollback) == [node]
    send(state, node)
    answer(state, node, {"a": "complete", "b": "complete"})
    assert rollback.done == [node] and rb.phase(rollback) is RolloutPhase.ROLLED_BACK
    assert not fs.rolling_back(state)
    assert state.records[node].outcomes == {"a": "erroring", "b": "erroring"}, "the wave's outcomes stay"
    assert "rolled back" in rb.message(rollback) and "apply a fixed spec" in rb.message(rollback)


def test_a_failed_rollback_is_retried_and_resume_reattempts_the_wave() -> None:
    state = rolled_back_state()
    rollback = state.rollback
    assert rollback is not None
    [node] = list(rollback.nodes)
    send(state, node)
    answer(state, node, {"a": "erroring", "b": "complete"}, "apply failed: exit 9")
    assert rollback.failed == {node: "a: apply failed: exit 9"}
    assert rb.phase(rollback) is RolloutPhase.HALTED
    assert rb.message(rollback).startswith(f"halted: rollback of wave 2 failed on {node} (a: apply failed: exit 9), "
                                           "after: canary failed on")
    assert fs.apply_retry(state, Filter(nodes=["other"])) == []
    assert fs.apply_retry(state, Filter()) == [node] and rb.pending(rollback) == [node]
    assert state.planner is not None and state.planner.canary_phase is CanaryPhase.FAILED, "retry does not go on"
    fs.apply_resume(state, Filter())
    assert state.rollback is None and state.wave_wanted
    wave(state, entry("a", "2.0.0", 2), entry("b", "1.0.0"))
    assert state.wave == 3 and state.changed == ["a", "b"]
    assert state.previous == {"a": entry("a", "1.0.0"), "b": None}


def test_the_rollback_survives_continue_as_new() -> None:
    state = rolled_back_state()
    [node] = list(state.rollback.nodes)  # type: ignore[union-attr]
    send(state, node)
    carried = state_from_json(state_to_json(state))
    assert carried == state
    assert carried.in_flight[node].rollback and carried.previous == {"a": entry("a", "1.0.0"), "b": None}


def test_a_filtered_halt_leaves_rollback_windows_alone() -> None:
    state = rolled_back_state()
    [node] = list(state.rollback.nodes)  # type: ignore[union-attr]
    send(state, node)
    assert fs.apply_halt(state, Filter(packages=["a"])) == []
    assert fs.apply_halt(state, Filter()) == [node] and not fs.rolling_back(state)


def test_retry_goes_on_with_a_rollback_halted_before_its_windows_started() -> None:
    state = rolled_back_state()
    rollback = state.rollback
    assert rollback is not None
    [node] = list(rollback.nodes)
    send(state, node)
    fs.apply_halt(state, Filter())
    assert fs.record_result(state, WindowResult(node, state.in_flight[node].request_id, withdrawn=True))
    assert "halted while rolling back wave 2" in rb.message(rollback, halted=True)
    assert rb.report(rollback, halted=True).phase is RolloutPhase.HALTED
    fs.apply_retry(state, Filter())
    assert not state.halted and fs.rolling_back(state) and rb.pending(rollback) == [node]


def test_a_node_workflow_that_keeps_closing_fails_its_rollback() -> None:
    state = rolled_back_state()
    [node] = list(state.rollback.nodes)  # type: ignore[union-attr]
    send(state, node)
    state.in_flight[node].resent = fs.LOST_RESENDS
    assert not fs.lost(state, node, "TERMINATED")
    assert "closed (TERMINATED) without answering" in state.rollback.failed[node]  # type: ignore[union-attr]


def test_the_events_of_a_rollback() -> None:
    state = rolled_back_state()
    rollback = state.rollback
    assert rollback is not None
    [node] = list(rollback.nodes)
    assert rb.rollback_event(None, rb.report(rollback)) == ""  # still rolling back
    rollback.done.append(node)
    text = rb.rollback_event(None, rb.report(rollback))
    assert text.startswith(f"wave 2 rolled back on {node}: canary failed on {node}")
    assert rb.rollback_event({"wave": 2, "phase": "RolledBack"}, rb.report(rollback)) == ""
    assert rb.rollback_event({"wave": 1, "phase": "RolledBack"}, rb.report(rollback)) == text
    rollback.done.clear()
    assert rb.rollback_event(None, rb.report(rollback, halted=True)) == "", "an operator halt is not an outcome"


def test_no_rollback_when_no_canary_node_ran_a_changed_package() -> None:
    state = rolled_back_state()
    [node] = list(state.rollback.nodes)  # type: ignore[union-attr]
    state.rollback = None
    state.records[node].outcomes = {"a": "blocked", "b": "blocked", "other": "erroring"}
    assert fs.start_rollback(state) == "no canary node ran a Package the wave changes"
    assert state.rollback is None

"""planning.rollout.rolling: the budget's windows at all times, the next node as soon as one ends, the
failure threshold over the last N finished windows."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from api.policy import DeploymentPolicySpec
from planning.rollout import batches, rolling
from planning.rollout.batches import NodeInfo, PlannerInput
from planning.rollout.disruption import CompartmentLimits, NodeSupply, Spread, Supply


def planner(nodes: int, budget: int = 3, **strategy: object) -> batches.BatchPlannerState:
    spec = DeploymentPolicySpec.model_validate(
        {"default": {"budget": {"count": budget}, "strategy": {"type": "rolling", **strategy}}})
    infos = [NodeInfo(f"n{i:02d}", {}) for i in range(nodes)]
    return batches.new_planner(PlannerInput(spec, infos, "fleet/x"))


def test_the_set_is_topped_up_to_the_budget_as_windows_end() -> None:
    state = planner(8, budget=3)
    left = {f"n{i:02d}" for i in range(8)}
    assert rolling.is_rolling(state) and rolling.rolls_now(state)
    first = rolling.top_up(state, left)
    assert len(first) == 3 and state.current_batch == sorted(first) and state.batch_number == 1
    left -= set(first)
    # One window ends: it leaves the set and exactly one node takes its place, no barrier.
    decision = rolling.record_finished(state, [first[0]], [first[0]], [])
    assert not decision.halted and len(state.current_batch) == 2
    added = rolling.top_up(state, left)
    assert len(added) == 1 and len(state.current_batch) == 3 and state.batch_number == 1
    assert state.compartments["default"].succeeded == 1
    # A node that ended neither succeeded nor failed (blocked, withdrawn) leaves without counting.
    rolling.record_finished(state, [first[1]], [], [])
    assert state.compartments["default"].succeeded + state.compartments["default"].failed == 1


def test_nodes_of_the_set_not_yet_in_a_window_count_against_the_topology_limits() -> None:
    """A node topped up but not handed out yet (drain-ahead's lead) is out for the next top-up: a second
    node of its rack is not added beside it (found by tests/unit/test_fleet_machine.py)."""
    state = planner(4, budget=2)
    limits = {"default": CompartmentLimits(spreads=(Spread("rack", 1),))}
    supply = Supply(limits, {f"n{i:02d}": NodeSupply(labels={"rack": "r0"}) for i in range(4)})
    first = rolling.top_up(state, {f"n{i:02d}" for i in range(4)}, supply)
    assert len(first) == 1 and [w.rule for w in state.waits] == ["topology"]
    # Nothing handed out yet (in_windows is empty): the next top-up still sees the first node out.
    assert rolling.top_up(state, {f"n{i:02d}" for i in range(4)} - set(first), supply) == []
    assert state.current_batch == first


def test_failures_halt_when_the_threshold_is_reached_over_the_last_n_windows() -> None:
    state = planner(20, budget=3, failureThreshold=2)
    nodes = rolling.top_up(state, {f"n{i:02d}" for i in range(20)})
    assert not rolling.record_finished(state, [nodes[0]], [], [nodes[0]]).halted  # 1 of the last 3 failed
    assert not rolling.record_finished(state, [nodes[1]], [nodes[1]], []).halted
    decision = rolling.record_finished(state, [nodes[2]], [], [nodes[2]])  # 2 of the last 3
    assert decision.halted and state.halted and "2 of its last 3 window(s) failed" in decision.reason
    assert rolling.top_up(state, {"n10"}) == []  # nothing starts while halted
    batches.resume_after_halt(state)
    assert state.compartments["default"].recent == [] and rolling.top_up(state, {"n10"}) == ["n10"]


def test_old_failures_slide_out_of_the_window() -> None:
    state = planner(20, budget=2, failureThreshold=2)
    nodes = rolling.top_up(state, {f"n{i:02d}" for i in range(20)})
    rolling.record_finished(state, [nodes[0]], [], [nodes[0]])
    rolling.top_up(state, {"n02"})
    rolling.record_finished(state, [nodes[1], "n02"], [nodes[1], "n02"], [])  # the failure slides out
    rolling.top_up(state, {"n03", "n04"})
    assert not rolling.record_finished(state, ["n03"], [], ["n03"]).halted  # 1 of the last 2


def test_no_halt_above_the_safety_limit() -> None:
    state = planner(4, budget=2, failureThreshold=1, safetyLimit=50)
    nodes = rolling.top_up(state, {"n00", "n01", "n02", "n03"})
    rolling.record_finished(state, nodes, nodes, [])  # 50% done
    rolling.top_up(state, {"n02", "n03"})
    assert not rolling.record_finished(state, ["n02"], [], ["n02"]).halted


def test_the_gates_point_opens_after_every_budget_of_finished_windows() -> None:
    state = planner(10, budget=3)
    nodes = rolling.top_up(state, {f"n{i:02d}" for i in range(10)})
    assert not rolling.record_finished(state, nodes[:2], nodes[:2], []).evaluation_point
    assert rolling.record_finished(state, nodes[2:], nodes[2:], []).evaluation_point
    assert state.compartments["default"].since_point == 0


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 30), st.integers(1, 6), st.lists(st.integers(0, 5), min_size=1, max_size=200))
def test_never_more_than_the_budget_and_every_node_once(nodes: int, budget: int, ends: list[int]) -> None:
    state = planner(nodes, budget=budget)
    left = {f"n{i:02d}" for i in range(nodes)}
    started: list[str] = []
    for pick in ends:
        new = rolling.top_up(state, left)
        started += new
        left -= set(new)
        assert len(state.current_batch) <= budget
        assert len(state.current_batch) == min(budget, len(state.current_batch) + len(left))
        if state.current_batch:
            node = state.current_batch[pick % len(state.current_batch)]
            rolling.record_finished(state, [node], [node], [])
    assert len(started) == len(set(started))

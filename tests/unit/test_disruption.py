"""Capacity floors and topology limits (planning/rollout/disruption.py) and the batch planner under them: rules and
hypothesis properties (mixed 4- and 8-GPU nodes, racks, nodes down on their own)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.enums import StrategyType
from api.policy import DeploymentPolicySpec
from planning.rollout.batches import (
    PlannerInput,
    PlannerPhase,
    new_planner,
    next_batch,
    planner_phase,
    promote_canary,
    record_batch_result,
)
from planning.rollout.compartments import NodeInfo
from planning.rollout.disruption import (
    DOWN_CORDONED,
    DOWN_NOT_READY,
    DOWN_WINDOW,
    RULE_FLOOR,
    RULE_TOPOLOGY,
    NodeSupply,
    Supply,
    Tally,
    capacity_use,
    describe,
    floor_resources,
    limits_of,
    may_enter,
    noun,
    supply_of,
    topology_keys,
)
from planning.rollout.fleet_targets import NodeTargets
from planning.rollout.rolling import record_finished, top_up

GPU = "nvidia.com/gpu"
RACK = "example.com/rack"


def policy(budget: dict[str, Any] | None = None, **spec: Any) -> DeploymentPolicySpec:
    return DeploymentPolicySpec.model_validate({"default": {"budget": budget or {"percent": 100}}} | spec)


def gpu_floor(count: int | None = None, percent: int | None = None, **budget: Any) -> DeploymentPolicySpec:
    floor: dict[str, Any] = {"resource": GPU}
    floor.update({"count": count} if count is not None else {"percent": percent})
    return policy({"percent": 100, "minAvailable": floor, **budget})


def per_rack(limit: int = 1, **budget: Any) -> DeploymentPolicySpec:
    return policy({"percent": 100, "maxUnavailablePerTopology": [{"key": RACK, "max": limit}], **budget})


def node(gpus: int = 8, rack: str | None = None, down: str = "", compartment: str = "default") -> NodeSupply:
    return NodeSupply(compartment, {GPU: gpus} if gpus else {}, {RACK: rack} if rack else {}, down)


def supply(pol: DeploymentPolicySpec, nodes: dict[str, NodeSupply], out: set[str] | None = None) -> Supply:
    return Supply(limits_of(pol), nodes, frozenset(out or ()))


# --- floors -------------------------------------------------------------------------------------


def test_floor_admits_a_node_only_while_the_rest_stays_at_the_floor() -> None:
    # 4 + 8 + 8 + 4 = 24 GPUs, floor 16: one 8-GPU node may go (16 remain), not a second (8).
    snap = supply(gpu_floor(count=16), {"a": node(4), "b": node(8), "c": node(8), "d": node(4)})
    assert may_enter(snap, "b") is None
    assert may_enter(snap, "c", also={"b"}) is not None
    assert may_enter(snap, "a", also={"b"}) is not None  # 24 - 8 - 4 = 12 < 16
    wait = may_enter(snap, "c", also={"b"})
    assert wait is not None and wait.rule == RULE_FLOOR
    assert wait.text == "8 of 16 GPUs would remain"


def test_floor_text_names_thousands_and_the_compartment() -> None:
    nodes = {f"n{i}": node(8, compartment="h100") for i in range(225)}  # 1,800 GPUs
    pol = DeploymentPolicySpec.model_validate({
        "default": {"budget": {"count": 1}},
        "compartments": [{"name": "h100", "selector": {"matchLabels": {"gpu": "h100"}},
                          "budget": {"percent": 100, "minAvailable": {"resource": GPU, "count": 1795}}}],
    })
    wait = may_enter(supply(pol, nodes), "n0")
    assert wait is not None and wait.text == "1,792 of 1,795 GPUs would remain in compartment h100"


@pytest.mark.parametrize(("percent", "total", "expected"), [(80, 192, 154), (90, 2000, 1800), (1, 8, 1), (99, 8, 8)])
def test_percent_floor_rounds_up(percent: int, total: int, expected: int) -> None:
    count = total // 8
    tally = Tally(supply(gpu_floor(percent=percent), {f"n{i}": node(8) for i in range(count)}))
    assert tally.floor_units("default") == expected


def test_nodes_down_on_their_own_count_against_the_floor_and_are_named() -> None:
    nodes = {"a": node(8), "b": node(8, down=DOWN_NOT_READY), "c": node(8, down=DOWN_CORDONED), "d": node(8)}
    snap = supply(gpu_floor(count=16), nodes)
    wait = may_enter(snap, "a")
    assert wait is not None
    assert wait.text == "8 of 16 GPUs would remain; down: b (NotReady), c (cordoned)"
    # A node already down takes nothing away: it may enter.
    assert may_enter(snap, "b") is None
    [use] = capacity_use(snap)
    assert (use.available, use.floor, use.total, use.down, use.down_count) == (16, 16, 32, ["b (NotReady)", "c (cordoned)"], 2)


def test_the_fleets_own_windows_count_and_are_not_named_as_down() -> None:
    snap = supply(gpu_floor(count=8), {"a": node(8), "b": node(8), "c": node(8)}, out={"a"})
    wait = may_enter(snap, "b")
    assert wait is None
    wait = may_enter(snap, "c", also={"b"})
    assert wait is not None and wait.text == "0 of 8 GPUs would remain"


def test_nodes_without_the_resource_never_break_a_floor() -> None:
    snap = supply(gpu_floor(count=8), {"gpu": node(8), "cpu": node(0)})
    assert may_enter(snap, "cpu", also={"gpu"}) is None


# --- topology limits ------------------------------------------------------------------------------


def test_at_most_max_nodes_of_a_rack_in_windows() -> None:
    snap = supply(per_rack(1), {"a": node(rack="r12"), "b": node(rack="r12"), "c": node(rack="r13")})
    assert may_enter(snap, "a") is None
    wait = may_enter(snap, "b", also={"a"})
    assert wait is not None and wait.rule == RULE_TOPOLOGY
    assert wait.text == "rack r12 has 1 node in a window (max 1)"
    assert may_enter(snap, "c", also={"a"}) is None
    two = supply(per_rack(2), {"a": node(rack="r1"), "b": node(rack="r1"), "c": node(rack="r1")})
    assert may_enter(two, "b", also={"a"}) is None
    wait = may_enter(two, "c", also={"a", "b"})
    assert wait is not None and wait.text == "rack r1 has 2 nodes in a window (max 2)"


def test_nodes_down_in_a_rack_count_and_say_why() -> None:
    nodes = {"a": node(rack="r1", down=DOWN_NOT_READY), "b": node(rack="r1"), "c": node(rack="r1", down=DOWN_WINDOW)}
    wait = may_enter(supply(per_rack(2), nodes), "b")
    assert wait is not None
    assert wait.text == "rack r1 has 2 nodes unavailable (1 NotReady, 1 in a window) (max 2)"


def test_nodes_without_the_label_share_one_group() -> None:
    snap = supply(per_rack(1), {"x": node(), "y": node(), "r": node(rack="r1")})
    assert may_enter(snap, "x") is None
    wait = may_enter(snap, "y", also={"x"})
    assert wait is not None and wait.text == f"nodes without {RACK} has 1 node in a window (max 1)"
    assert may_enter(snap, "r", also={"x"}) is None


def test_a_limit_counts_within_its_compartment() -> None:
    pol = DeploymentPolicySpec.model_validate({
        "default": {"budget": {"percent": 100}},
        "compartments": [{"name": "big", "selector": {"matchLabels": {"size": "big"}},
                          "budget": {"percent": 100, "maxUnavailablePerTopology": [{"key": RACK, "max": 1}]}}],
    })
    nodes = {"d": node(rack="r1"), "b": node(rack="r1", compartment="big"), "b2": node(rack="r1", compartment="big"),
             "d2": node(rack="r1")}
    snap = supply(pol, nodes)
    assert may_enter(snap, "b", also={"d"}) is None  # a default node of r1 is not the big compartment's
    assert may_enter(snap, "b2", also={"d", "b"}) is not None
    assert may_enter(snap, "d2", also={"d", "b"}) is None  # the default compartment has no limit


def test_supply_of_assigns_nodes_the_planner_does_not_know_and_is_none_without_rules() -> None:
    pol = DeploymentPolicySpec.model_validate({
        "default": {"budget": {"percent": 100}},
        "compartments": [{"name": "h100", "selector": {"matchLabels": {"gpu": "h100"}},
                          "budget": {"count": 2, "minAvailable": {"resource": GPU, "count": 8},
                                     "maxUnavailablePerTopology": [{"key": RACK, "max": 1}]}}],
    })
    listed = {"a": NodeTargets(labels={"gpu": "h100", RACK: "r1"}, capacity={GPU: 8}),
              "blocked": NodeTargets(labels={"gpu": "h100"}, capacity={GPU: 8}, down=DOWN_CORDONED)}
    snap = supply_of(pol, listed, {"a": "h100"}, in_windows={"a"})
    assert snap is not None
    assert snap.nodes["blocked"].compartment == "h100" and snap.nodes["blocked"].down == DOWN_CORDONED
    assert snap.nodes["a"].labels == {RACK: "r1"} and snap.in_windows == {"a"}
    assert floor_resources(pol) == [GPU] and topology_keys(pol) == [RACK]
    assert supply_of(policy({"count": 3}), listed, {}) is None


def test_noun_and_describe() -> None:
    assert noun("nvidia.com/gpu") == "GPUs" and noun("example.com/fpga") == "example.com/fpga"
    pol = DeploymentPolicySpec.model_validate({"default": {
        "budget": {"percent": 100, "maxUnavailablePerTopology": [{"key": RACK, "max": 1}]},
        "strategy": {"type": "fixed", "initialBatch": 3}}})
    snap = supply(pol, {"a": node(rack="r1"), "b": node(rack="r1"), "c": node(rack="r1")})
    state = new_planner(PlannerInput(pol, [NodeInfo(n) for n in "abc"], "fleet/x"))
    assert next_batch(state, {"a", "b", "c"}, supply=snap) and len(state.current_batch) == 1
    assert describe(state.waits) == "waiting: rack r1 has 1 node in a window (max 1), 2 nodes held"


# --- the batch planner under them -------------------------------------------------------------------


def test_a_batch_is_capped_by_the_floor_and_skips_to_nodes_that_fit() -> None:
    # Budget 100 %, fixed batches of 10: only the floor caps. 3 x 8 + 2 x 4 = 32, floor 20: 12 may go.
    gpus = {"n0": 8, "n1": 8, "n2": 8, "n3": 4, "n4": 4}
    pol = DeploymentPolicySpec.model_validate({"default": {
        "budget": {"percent": 100, "minAvailable": {"resource": GPU, "count": 20}},
        "strategy": {"type": "fixed", "initialBatch": 10}}})
    state = new_planner(PlannerInput(pol, [NodeInfo(n) for n in gpus], "fleet/x"))
    snap = supply(pol, {n: node(g) for n, g in gpus.items()})
    batch = next_batch(state, set(gpus), supply=snap)
    taken = sum(gpus[n] for n in batch)
    assert 32 - taken >= 20 and taken >= 8
    assert state.waits and state.waits[0].rule == RULE_FLOOR
    assert state.capacity[0].available == 32 - taken and state.capacity[0].floor == 20


def test_an_empty_plan_starts_nothing_and_says_why() -> None:
    pol = gpu_floor(count=16)
    state = new_planner(PlannerInput(pol, [NodeInfo("a"), NodeInfo("b")], "fleet/x"))
    snap = supply(pol, {"a": node(8), "b": node(8, down=DOWN_NOT_READY)})
    assert next_batch(state, {"a"}, supply=snap) == []
    assert state.batch_number == 0 and not state.current
    assert [(w.rule, w.nodes, w.reason) for w in state.waits] == [
        (RULE_FLOOR, 1, "0 of 16 GPUs would remain; down: b (NotReady)")]
    # Without a supply (the policy's rules removed) the stale reasons go.
    assert next_batch(state, {"a"}) == ["a"] and state.waits == [] and state.capacity == []


def test_the_canary_keeps_to_the_rules() -> None:
    pol = DeploymentPolicySpec.model_validate({"default": {"budget": {
        "percent": 100, "maxUnavailablePerTopology": [{"key": RACK, "max": 1}]}}, "canary": {"count": 3}})
    nodes = {"a": node(rack="r1"), "b": node(rack="r1"), "c": node(rack="r2")}
    state = new_planner(PlannerInput(pol, [NodeInfo(n) for n in nodes], "fleet/x"))
    batch = next_batch(state, set(nodes), cover=[["b"]], supply=supply(pol, nodes))
    racks = [nodes[n].labels[RACK] for n in batch]
    assert len(racks) == len(set(racks)), batch


# --- properties --------------------------------------------------------------------------------------

RACKS = ["r0", "r1", "r2", "r3", None]


def _strategy(rng: random.Random) -> dict[str, Any]:
    # Batch strategies only: `rolling` is a policy's for every compartment or none (its own property below).
    kind = rng.choice([t for t in StrategyType if t is not StrategyType.ROLLING])
    out: dict[str, Any] = {"type": kind.value, "initialBatch": rng.randint(1, 6)}
    if kind is StrategyType.EXPONENTIAL:
        out["growthFactor"] = rng.randint(2, 3)
    return out


def _budget(rng: random.Random) -> dict[str, Any]:
    budget: dict[str, Any] = {"count": rng.randint(1, 8)} if rng.random() < 0.5 else {"percent": rng.randint(10, 100)}
    if rng.random() < 0.8:
        floor = {"count": rng.randint(1, 120)} if rng.random() < 0.5 else {"percent": rng.randint(1, 99)}
        budget["minAvailable"] = {"resource": GPU, **floor}
    if rng.random() < 0.7:
        budget["maxUnavailablePerTopology"] = [{"key": RACK, "max": rng.randint(1, 3)}]
    return budget


@st.composite
def gpu_fleets(draw: st.DrawFn) -> tuple[DeploymentPolicySpec, dict[str, NodeSupply], dict[str, dict[str, str]]]:
    # One seeded generator for the details (as tests/unit/test_batches.py): hypothesis draws the seed and sizes.
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    count = draw(st.integers(1, 30))
    down_rate = draw(st.sampled_from([0.0, 0.0, 0.1, 0.3]))
    spec: dict[str, Any] = {"default": {"budget": _budget(rng), "strategy": _strategy(rng)}}
    if rng.random() < 0.5:
        spec["compartments"] = [{"name": "big", "selector": {"matchLabels": {"size": "8"}}, "budget": _budget(rng),
                                 "strategy": _strategy(rng)}]
    if rng.random() < 0.3:
        spec["canary"] = {"count": 1}
    pol = DeploymentPolicySpec.model_validate(spec)
    labels, nodes = {}, {}
    for i in range(count):
        gpus = rng.choice([4, 8])
        rack = rng.choice(RACKS)
        labels[f"n{i:02d}"] = {"size": str(gpus), **({RACK: rack} if rack else {})}
        down = rng.choice([DOWN_NOT_READY, DOWN_CORDONED, DOWN_WINDOW]) if rng.random() < down_rate else ""
        nodes[f"n{i:02d}"] = NodeSupply("", {GPU: gpus}, {RACK: rack} if rack else {}, down)
    return pol, nodes, labels


def _units(snap: Supply, comp: str, out: set[str]) -> int:
    return sum(n.resources.get(GPU, 0) for name, n in snap.nodes.items()
               if n.compartment == comp and not n.down and name not in out)


@settings(max_examples=600, deadline=None)
@given(gpu_fleets())
def test_planner_never_breaks_a_floor_or_a_topology_limit(
    case: tuple[DeploymentPolicySpec, dict[str, NodeSupply], dict[str, dict[str, str]]],
) -> None:
    pol, raw, labels = case
    state = new_planner(PlannerInput(pol, [NodeInfo(n, labels[n]) for n in sorted(raw)], "fleet/prop"))
    compartments = {n: state.compartment_of(n) or "default" for n in raw}
    nodes = {n: NodeSupply(compartments[n], s.resources, s.labels, s.down) for n, s in raw.items()}
    limits = limits_of(pol)
    snap = Supply(limits, nodes)
    remaining = set(nodes)
    for _ in range(len(nodes) + 3):
        phase = planner_phase(state, remaining)
        if phase is PlannerPhase.CANARY_HOLD:
            promote_canary(state)
            continue
        if phase is not PlannerPhase.READY:
            break
        batch = next_batch(state, remaining, supply=snap)
        if not batch:
            # Nothing starts only when every remaining node is held by a rule (liveness).
            assert all(may_enter(snap, n) is not None for n in remaining), state.waits
            assert state.waits
            break
        out = set(batch)
        for comp, lim in limits.items():
            before, after = _units(snap, comp, set()), _units(snap, comp, out)
            if lim.floor is not None and after < before:
                total = sum(n.resources.get(GPU, 0) for n in nodes.values() if n.compartment == comp)
                assert after >= lim.floor.units(total), (comp, before, after, batch)
        for name in batch:
            lim = limits.get(nodes[name].compartment)
            for spread in lim.spreads if lim is not None else ():
                value = nodes[name].labels.get(spread.key)
                group = {m for m, s in nodes.items() if s.compartment == nodes[name].compartment
                         and s.labels.get(spread.key) == value and (s.down or m in out)}
                assert len(group) <= spread.max, (spread, value, group)
        record_batch_result(state, batch, [])
        remaining -= out
    else:
        pytest.fail("planner did not terminate")
    # Progress: with nothing down on its own and floors that let the largest node go, every node is planned.
    loose = all(not n.down for n in nodes.values()) and all(
        lim.floor is None
        or sum(n.resources.get(GPU, 0) for n in nodes.values() if n.compartment == comp)
        - lim.floor.units(sum(n.resources.get(GPU, 0) for n in nodes.values() if n.compartment == comp)) >= 8
        for comp, lim in limits.items())
    if loose:
        assert not remaining, (remaining, state.waits)


@settings(max_examples=300, deadline=None)
@given(gpu_fleets(), st.integers(0, 2**32 - 1))
def test_rolling_top_ups_never_break_a_floor_or_a_topology_limit(
    case: tuple[DeploymentPolicySpec, dict[str, NodeSupply], dict[str, dict[str, str]]], seed: int,
) -> None:
    """`rolling` keeps the budget's windows running with no batch barrier: every top-up is admitted by
    the rules with the windows still out counted down (planning/rollout/rolling.py over planning.rollout.batches.Admission)."""
    pol, raw, labels = case
    rolling_spec = pol.model_dump(by_alias=True, exclude_none=True)
    for part in [rolling_spec["default"], *rolling_spec.get("compartments", [])]:
        part["strategy"] = {"type": "rolling"}
    rolling_spec.pop("canary", None)
    pol = DeploymentPolicySpec.model_validate(rolling_spec)
    rng = random.Random(seed)
    state = new_planner(PlannerInput(pol, [NodeInfo(n, labels[n]) for n in sorted(raw)], "fleet/prop"))
    compartments = {n: state.compartment_of(n) or "default" for n in raw}
    nodes = {n: NodeSupply(compartments[n], s.resources, s.labels, s.down) for n, s in raw.items()}
    limits = limits_of(pol)
    remaining = set(nodes)
    for _ in range(4 * len(nodes) + 3):
        running = set(state.current_batch)
        snap = Supply(limits, nodes, frozenset(running))
        top_up(state, remaining - running, snap)
        out = set(state.current_batch)
        for comp, lim in limits.items():
            # A node already down on its own takes nothing from the floor (as for batches).
            if lim.floor is not None and _units(snap, comp, out) < _units(snap, comp, running):
                total = sum(n.resources.get(GPU, 0) for n in nodes.values() if n.compartment == comp)
                assert _units(snap, comp, out) >= lim.floor.units(total), (comp, out)
            for spread in lim.spreads:
                for name in out:
                    value = nodes[name].labels.get(spread.key)
                    if nodes[name].compartment != comp:
                        continue
                    group = {m for m, x in nodes.items() if x.compartment == comp
                             and x.labels.get(spread.key) == value and (x.down or m in out)}
                    assert len(group) <= spread.max, (spread, value, group)
        if not out:
            assert all(may_enter(Supply(limits, nodes), n) is not None for n in remaining), state.waits
            break
        ended = [n for n in sorted(out) if rng.random() < 0.5] or sorted(out)[:1]
        record_finished(state, ended, ended, [])
        remaining -= set(ended)
    else:
        pytest.fail("rolling did not terminate")

"""Properties of the fleet's decision machine (planning/fleet/machine.py) over random fleets and policies.

The machine is driven by a fake fleet written apart from the plan's simulation
(tests/unit/fleet_machine_harness.py): Nodes with GPUs and racks in one or two compartments, every strategy
with or without a canary, count budgets, GPU floors, rack limits and drain-ahead, windows of random lengths,
and other people cordoning nodes, nodes going NotReady and other maintenance holding nodes (a respected
taint) while the fleet rolls.

* No window the fleet starts breaks a budget: at every hand-out, on the Nodes as they are then, each node
  handed out fits its compartment's count budget (nodes cordoned by someone else or held by another
  maintenance counted in it), floor and topology limits, and no node another maintenance holds is started.
* `noderoll plan` is the machine's run: with the windows taking what the plan assumes, the plan's batches
  (for `rolling`: its start order), each node's request, the peak of windows out and the end are what the
  machine does with the fake fleet.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from api.policy import DeploymentPolicySpec
from planning.fleet.handout import HOLD_PAUSE
from planning.fleet.run import FleetRun
from planning.views.eta import Timings
from planning.views.rollout_plan import PlanInput, plan_fleet
from protocol.fleet import FleetInput
from tests.unit.fleet_builders import an_entry
from tests.unit.fleet_machine_harness import START, Harness, Node, Outside

KINDS = ("reboot", "none", "service", "restartAllServices", "noop")


def _strategy(kind: str, initial: int) -> dict[str, Any]:
    extra = {"fixed": {}, "linear": {"delta": 1}, "exponential": {"growthFactor": 2}, "rolling": {}}[kind]
    return {"type": kind, **({} if kind == "rolling" else {"initialBatch": initial}), **extra}


@st.composite
def fleets(draw: st.DrawFn) -> tuple[list[Node], dict[str, Any], list[Any]]:
    """Nodes, a valid policy and the Packages (one reboot Package, maybe a dependent one)."""
    count = draw(st.integers(2, 9))
    nodes = [Node(f"n{i:02d}", {"pool": "gpu", "rack": f"r{draw(st.integers(0, 3))}",
                                "zone": draw(st.sampled_from(["a", "b"]))}, gpus=draw(st.sampled_from([0, 4, 8])))
             for i in range(count)]
    kind = draw(st.sampled_from(["fixed", "linear", "exponential", "rolling"]))
    budget: dict[str, Any] = (
        {"count": draw(st.integers(1, 4))} if draw(st.booleans()) else {"percent": draw(st.sampled_from([25, 50]))})
    floor = draw(st.none() | st.integers(30, 90))
    if floor is not None:
        budget["minAvailable"] = {"resource": "nvidia.com/gpu", "percent": floor}
    rack_max = draw(st.none() | st.integers(1, 2))
    if rack_max is not None:
        budget["maxUnavailablePerTopology"] = [{"key": "rack", "max": rack_max}]
    policy: dict[str, Any] = {"default": {"budget": budget, "strategy": _strategy(kind, draw(st.integers(1, 2)))}}
    if draw(st.booleans()):
        policy["compartments"] = [{"name": "zone-b", "selector": {"matchLabels": {"zone": "b"}},
                                   "budget": {"count": draw(st.integers(1, 2))},
                                   "strategy": _strategy(kind, 1)}]
    canary = draw(st.integers(0, 1))
    if canary:
        policy["canary"] = {"count": canary, "soakSeconds": draw(st.sampled_from([0, 30]))}
    ahead = draw(st.none() | st.sampled_from([5, 40]))
    if ahead is not None:
        policy["drainAhead"] = {"seconds": ahead}
    try:
        DeploymentPolicySpec.model_validate(policy)
    except ValidationError:
        assume(False)
    packages = [an_entry("kernel", interrupt={"type": "reboot"}, nodeSelector={"matchLabels": {"pool": "gpu"}})]
    if draw(st.booleans()):
        packages.append(an_entry("driver", dependsOn={"kernel": "1.0.0"}, nodeSelector={"matchLabels": {"pool": "gpu"}}))
    return nodes, policy, packages


@st.composite
def outside_events(draw: st.DrawFn, names: list[str]) -> list[Outside]:
    events = []
    for _ in range(draw(st.integers(0, 4))):
        node = draw(st.sampled_from(names))
        at = draw(st.integers(0, 900))
        down, up = draw(st.sampled_from([("cordon", "uncordon"), ("notready", "ready"), ("hold", "release")]))
        events.append(Outside(float(at), node, down))
        if draw(st.booleans()):
            events.append(Outside(float(at + draw(st.integers(5, 600))), node, up))
    return events


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_no_window_the_fleet_starts_breaks_a_budget(data: st.DataObject) -> None:
    nodes, policy, packages = data.draw(fleets())
    names = [n.name for n in nodes]
    seconds = {n: float(data.draw(st.integers(10, 400), label=f"seconds {n}")) for n in names}
    events = data.draw(outside_events(names))
    harness = Harness.of(nodes, policy, packages, seconds, outside=events).run()
    assert not harness.violations, (policy, events, harness.handouts, harness.violations)
    handed = [n for _at, _batch, _canary, batch in harness.handouts for n in batch]
    assert len(handed) == len(set(handed)), "a node got two windows in one wave"


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleet=fleets(), minutes=st.integers(1, 5), held=st.lists(st.sampled_from(["", "cordon", "hold"]), max_size=2))
def test_the_plan_is_the_machines_run(fleet: tuple[list[Node], dict[str, Any], list[Any]], minutes: int,
                                      held: list[str]) -> None:
    nodes, policy, packages = fleet
    window = 60.0 * minutes
    # Someone else's cordon and another maintenance's hold on the first nodes, from the start to the end.
    for node, how in zip(nodes, held, strict=False):
        node.cordoned, node.held = how == "cordon", how == "hold"
    # What the plan assumes a window takes (the fleet's measured p50 of every kind), and no gap.
    timings = Timings(windows={k: [window] for k in KINDS}, gaps=[0.0])
    harness = Harness.of(nodes, policy, packages, {n.name: window for n in nodes}).run()
    plan = plan_fleet(PlanInput(harness.spec, [n.view(False) for n in _fresh(nodes)], START.isoformat(),
                                timings=timings))
    if plan.rolling:
        # The start order: each start's nodes (the windows that ended together make room together).
        assert [sorted(b.nodes) for b in plan.batches] == [sorted(h[3]) for h in harness.handouts]
    else:
        ran: dict[tuple[int, bool], list[str]] = {}
        for _at, number, canary, batch in harness.handouts:
            ran.setdefault((number, canary), []).extend(batch)
        assert [(b.number, b.canary, sorted(b.nodes)) for b in plan.batches] == [
            (number, canary, sorted(batch)) for (number, canary), batch in ran.items()]
    assert {n: [sorted(o.name for o in r.packages) for r in reqs] for n, reqs in harness.requests.items()} == {
        n: [sorted(p.name for p in w.packages)] for n, w in plan.windows.items()}
    assert plan.totals.peak == harness.peak
    assert plan.eta is not None and plan.eta.seconds_left == harness.seconds_now()


def test_nothing_starts_unchecked_while_the_nodes_cannot_be_read() -> None:
    """A read before a hand-out that fails holds every node of the batch (rule `unread`, saying why) and
    starts none; the fleet plans again after the pause and starts them once a read succeeds."""
    nodes = [Node(f"n{i}", {"pool": "gpu", "rack": "r0"}, gpus=8) for i in range(4)]
    policy = {"default": {"budget": {"count": 2, "minAvailable": {"resource": "nvidia.com/gpu", "percent": 50}},
                          "strategy": {"type": "fixed", "initialBatch": 2}}}
    packages = [an_entry("kernel", interrupt={"type": "reboot"}, nodeSelector={"matchLabels": {"pool": "gpu"}})]
    harness = Harness.of(nodes, policy, packages, dict.fromkeys([n.name for n in nodes], 60.0), unreadable=2).run()
    assert len(harness.unread_holds) == 2 and not harness.unreadable
    for held in harness.unread_holds:
        assert held and all(why.startswith("the nodes could not be read: the apiserver did not answer")
                            for why in held.values()), held
    first_at = harness.handouts[0][0]
    assert first_at >= 2 * HOLD_PAUSE.total_seconds(), harness.handouts  # not before two pauses
    assert sorted(n for *_, batch in harness.handouts for n in batch) == ["n0", "n1", "n2", "n3"]
    assert not harness.violations


@pytest.mark.parametrize("gap", [30, 5])
def test_node_changes_are_listed_at_most_once_per_relist_gap(gap: int) -> None:
    """`FleetInput.relist_min_seconds` (the bridge's --fleet-relist-min-seconds; 30 by default): a
    `nodes_changed` re-list is due once that long has passed since the last listing, not before; and a
    continue-as-new keeps the value."""
    run = FleetRun(input=FleetInput(policy_name="gpu", relist_min_seconds=gap), relist=True, listed_at=START)
    later = START + timedelta(days=1)  # the periodic re-list: not due here

    def due(seconds: float) -> bool:
        run.now = START + timedelta(seconds=seconds)
        steps = run.relist_due(later)
        with pytest.raises(StopIteration) as ended:  # nothing to ask Temporal: no batch out
            next(steps)
        return bool(ended.value.value)

    assert not due(gap - 1) and due(gap)
    assert run.carry_over().relist_min_seconds == gap


def _fresh(nodes: list[Node]) -> list[Node]:
    """The nodes as they were before the harness ran its windows (nothing recorded; others' cordons and holds
    as they were)."""
    return [Node(n.name, dict(n.labels), n.gpus, cordoned=n.cordoned, held=n.held) for n in nodes]

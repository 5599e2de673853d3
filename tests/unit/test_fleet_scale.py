"""The fleet at scale (issue 45): its carried state and listings packed, `progress` paged and capped, the ETA
bounded and kept, the fresh read before a hand-out reading what is down, the work index checked."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import timedelta

import pytest

from api.enums import RolloutPhase, State
from bench.decisions import START, fleet_spec, synthetic_nodes
from bench.scenario import Scenario
from planning.fleet import carry
from planning.fleet.codec import selection_from_json, selection_to_json, state_from_json, state_to_json
from planning.fleet.handout import read_supply, take_supply
from planning.fleet.messages import Desired
from planning.fleet.run import FleetRun
from planning.rollout import fleet_state as fs
from planning.rollout import work_index
from planning.rollout.disruption import DOWN_CORDONED, DOWN_NOT_READY, DOWN_WINDOW
from planning.rollout.fleet_targets import FleetSelection, NodeTargets, supply_read
from planning.views.capped import NODES_PER_REASON, REASONS_SHOWN, capped
from planning.views.fleet_eta import EtaKeeper, fleet_eta
from planning.views.fleet_status import fleet_progress, with_nodes
from planning.views.simulate import simulate
from planning.views.worlds import SnapshotWorld
from protocol.activities import NodeAvailability, ReadNodeSupplyResult
from protocol.fleet import FleetInput, ProgressFilter
from tests.unit.fleet_builders import a_node


def rolled(nodes: int, windows: int, budget: int = 5) -> FleetRun:
    """A fleet of the bench's scale scenario after the simulated answers of its first `windows` windows."""
    sc = Scenario("s", nodes, budget_count=budget, floor_percent=50, packages=2)
    run = FleetRun(input=FleetInput(policy_name=sc.name))
    run.receive(Desired(fleet_spec(sc)))

    class Sample(SnapshotWorld):
        answered = 0

        def close_window(self, node: str, result: object) -> None:
            super().close_window(node, result)  # type: ignore[arg-type]
            Sample.answered += 1
            if Sample.answered >= windows:
                raise StopIteration

    try:
        simulate(run, Sample(synthetic_nodes(sc), fs.Timings(windows={"reboot": [55.0]}, gaps=[3.0])), START)
    except StopIteration:
        pass
    return run


def test_the_carry_is_packed_and_reads_back_as_the_state_less_idle_fingerprints() -> None:
    run = rolled(60, 20)
    state = run.state
    assert state.in_flight and state.records
    packed = state_to_json(state)
    assert set(packed) == {"format", "packed"}
    back = state_from_json(packed)
    assert set(back.targets) == set(state.targets)
    for node, targets in state.targets.items():
        kept = targets.fingerprint if node in state.in_flight else ""
        assert back.targets[node].fingerprint == kept
        assert back.targets[node].pending == targets.pending and back.targets[node].capacity == targets.capacity
    assert (back.records, back.disruptions, back.node_order, back.in_flight) == (
        state.records, state.disruptions, state.node_order, state.in_flight)
    assert back.planner == state.planner  # the compartments' nodes in the planner's own order again
    assert fs.startable(back) == fs.startable(state)
    # A carry written before issue 45 (the whole state as JSON) still reads.
    plain = fs.FleetState()
    plain_json = carry.unpack({"wave": 3, "message": "old"})
    assert plain_json == {"wave": 3, "message": "old"} and state_from_json({"wave": 3}).wave == 3 and plain.wave == 0


def test_the_carry_per_node_is_a_few_bytes() -> None:
    small, large = rolled(200, 100, budget=50), rolled(2000, 100, budget=50)
    size = {n: len(state_to_json(r.state)["packed"]) for n, r in ((200, small), (2000, large))}
    per_node = (size[2000] - size[200]) / 1800
    assert per_node < 10, size  # under 1 MB for 100,000 nodes


def test_a_listing_is_packed_and_reads_back() -> None:
    selection = FleetSelection({f"n{i:04d}": NodeTargets(pending=["a", "b"], fingerprint=f"{i:016x}",
                                                         capacity={"nvidia.com/gpu": 8}) for i in range(300)})
    selection.nodes["n0007"] = NodeTargets(done=["a"], blocked={"b": "taints"}, fingerprint="f7")
    packed = selection_to_json(selection)
    assert "packed" in packed and selection_from_json(packed) == selection
    # A listing returned before issue 45 (plain JSON) still reads.
    assert selection_from_json({"nodes": {"x": {"pending": ["a"]}}}).nodes["x"].pending == ["a"]


def test_nodes_with_a_reason_are_capped_per_reason_and_counted() -> None:
    nodes = {f"n{i:03d}": f"reason {i % 12}" for i in range(120)}
    shown, reasons = capped(nodes)
    assert len(reasons) == REASONS_SHOWN and all(r.nodes == 10 for r in reasons)
    assert len(shown) == REASONS_SHOWN * NODES_PER_REASON
    assert {r.reason for r in reasons} == {f"reason {i}" for i in (0, 1, 10, 11, 2, 3, 4, 5, 6, 7)}
    assert shown["n000"] == "reason 0" and "n120" not in shown


def test_progress_is_a_summary_and_pages_its_nodes_on_request() -> None:
    run = rolled(30, 10)
    report = fleet_progress(run.state, run.phase, START.isoformat(), run.fleet_id)
    assert report.nodes == {} and report.total_nodes == 30 and sum(report.counts.values()) == 30
    drained = sum(d.drains for d in run.state.disruptions.values())
    assert drained and report.disruptions["drains"] == drained
    assert report.disruption_nodes["drains"] == {"0": 30 - drained, "1": drained}
    pages, after = [], ""
    while True:
        page = with_nodes(report, run.state, ProgressFilter(all=True, after=after, limit=7))
        assert page.nodes_matched == 30
        pages.append(list(page.nodes))
        if not page.nodes_next:
            break
        after = page.nodes_next
    assert [len(p) for p in pages] == [7, 7, 7, 7, 2]
    assert [n for p in pages for n in p] == sorted(run.state.targets)
    busy = with_nodes(report, run.state, ProgressFilter(states=[State.IN_PROGRESS.value]))
    assert set(busy.nodes) == set(run.state.in_flight) and busy.nodes_next == ""
    named = with_nodes(report, run.state, ProgressFilter(nodes=["s-000", "nope"]))
    assert list(named.nodes) == ["s-000"] and named.nodes_matched == 1
    assert report.nodes == {}, "the cached summary is not changed by a page"


def test_the_eta_simulates_a_horizon_then_goes_on_at_its_rate() -> None:
    run = rolled(600, 30, budget=20)
    exact, bounded = fleet_eta(run, horizon=10_000), fleet_eta(run, horizon=100)
    assert exact is not None and bounded is not None
    assert exact.windows_left == bounded.windows_left
    assert abs(bounded.seconds_left - exact.seconds_left) <= 0.05 * exact.seconds_left, (bounded, exact)


def test_the_eta_after_the_first_batch_simulates_the_ramp_before_it_extrapolates(monkeypatch: pytest.MonkeyPatch) -> None:
    """Few hand-outs per ETA on a large fleet (`HANDOUT_WORK` / N) would end the run ahead inside the exponential
    ramp, whose small batches' rate then stood for the whole wave (10,000 nodes: 3.9 times the time left after
    batch 1). The ramp is simulated to the budget first; here 600 nodes with the hand-outs of 10,000."""
    from planning.views import fleet_eta as eta_module

    run = rolled(600, 1, budget=20)  # batch 1 (one window) answered: the ramp 2, 4, 8, 16, then 20s
    exact = fleet_eta(run, horizon=10_000)
    monkeypatch.setattr(eta_module, "HANDOUT_WORK", 3 * 600)  # 3 hand-outs, as at 10,000 nodes
    bounded = fleet_eta(run)
    assert exact is not None and bounded is not None
    assert abs(bounded.seconds_left - exact.seconds_left) <= 0.1 * exact.seconds_left, (bounded, exact)
    monkeypatch.setattr(eta_module, "PAST_RAMP", -10)  # the ramp cut short again: the old estimate, far off
    cut = fleet_eta(run)
    assert cut is not None and cut.seconds_left > 1.5 * exact.seconds_left, (cut, exact)


def test_the_eta_leaves_the_fleet_as_it_was_and_is_kept_until_due() -> None:
    run = rolled(80, 15)
    before = copy.deepcopy(state_to_json(run.state))
    keeper = EtaKeeper()
    first = keeper.get(run)
    assert first is not None and state_to_json(run.state) == before
    assert keeper.get(run) == first  # the same batch, moments later: not computed again
    at = keeper.at
    run.now += timedelta(seconds=61)
    keeper.get(run)
    assert keeper.at != at  # REFRESH passed


def test_a_down_only_read_selects_what_is_cordoned_or_in_a_window_and_the_named() -> None:
    nodes = [a_node("a"), replace(a_node("b"), unschedulable=True), replace(a_node("c"), status_label="in-progress"),
             a_node("d")]
    assert [n.name for n in supply_read(nodes, ["d"], down_only=True)] == ["b", "c", "d"]
    assert [n.name for n in supply_read(nodes, ["d"], down_only=False)] == ["d"]
    # Before a hand-out the fleet asks, beside what is cordoned or in a window, for the candidates, the nodes the
    # bridge reported, and every node its view has down outside its own windows (to see it up again).
    run = FleetRun(input=FleetInput(policy_name="p"), state=fs.FleetState(targets={
        "a": NodeTargets(down=DOWN_CORDONED), "b": NodeTargets(down=DOWN_WINDOW), "c": NodeTargets(down=DOWN_NOT_READY),
        "d": NodeTargets(), "e": NodeTargets(down=DOWN_WINDOW), "f": NodeTargets(), "g": NodeTargets()}))
    run.state.in_flight["e"] = fs.InFlight("r")
    run.availability_changed.add("f")
    steps = read_supply(run, ["d"])
    command = next(steps)
    assert command.input.down_only and command.input.nodes == ["a", "b", "c", "d", "f"]
    with pytest.raises(StopIteration):
        steps.send(ReadNodeSupplyResult({"a": NodeAvailability(""), "c": NodeAvailability(DOWN_NOT_READY)}))
    assert {n: t.down for n, t in run.state.targets.items()} == {
        "a": "", "b": DOWN_WINDOW, "c": DOWN_NOT_READY, "d": "", "e": DOWN_WINDOW, "f": "", "g": ""}
    assert not run.availability_changed
    take_supply(run.state, {"b": NodeAvailability("")})
    assert run.state.targets["b"].down == ""


def test_the_work_index_check_catches_a_change_nobody_reported() -> None:
    run = rolled(20, 4)
    state = run.state
    node = sorted(fs.startable(state))[0]
    state.records[node] = fs.NodeRecord({p: State.COMPLETE.value for p in state.targets[node].pending})
    with pytest.raises(AssertionError, match="work index out of date"):
        fs.startable(state)
    fs.touch_nodes(state, [node])
    assert node not in fs.startable(state)
    work_index.touch_all(state)
    assert node not in fs.startable(state)


def test_phase_of_a_large_summary_does_not_list_nodes() -> None:
    run = rolled(500, 50, budget=50)
    report = fleet_progress(run.state, RolloutPhase.PROGRESSING, START.isoformat(), run.fleet_id)
    package = next(iter(report.packages.values()))
    assert report.nodes == {} and package.blocked == {} and package.total_nodes == 500


def test_a_snapshot_listing_reuses_a_classification_only_while_its_node_and_query_are_unchanged() -> None:
    """`SnapshotWorld.listing` keeps each node's classification (a plan lists the whole fleet dozens of times):
    every listing equals the target selection run afresh over the world's nodes, as windows open and close."""
    from planning.rollout.fleet_targets import FleetPackage, FleetQuery, select_fleet
    from planning.views.worlds import spec_of
    from protocol.activities import ListFleetNodesInput
    from protocol.fleet import PackageOrder, WindowRequest

    sc = Scenario("m", 12, budget_count=3, floor_percent=50, packages=2)
    world = SnapshotWorld(synthetic_nodes(sc), fs.Timings())
    entries = fleet_spec(sc).packages

    def asked(in_flight: dict[str, list[str]], paused: bool = False) -> ListFleetNodesInput:
        packages = [replace(e, paused=paused and i == 1) for i, e in enumerate(entries)]
        return ListFleetNodesInput(packages=packages, in_flight=in_flight, supply=True, resources=["nvidia.com/gpu"])

    def fresh(input: ListFleetNodesInput) -> dict:
        packages = {e.name: FleetPackage(spec_of(e.spec), uninstall=e.uninstall, paused=e.paused) for e in input.packages}
        views = [world._view(n) for n in sorted(world.views)]
        return selection_to_json(select_fleet(FleetQuery(
            packages, views, {n: frozenset(p) for n, p in input.in_flight.items()}, frozenset(), True,
            frozenset(input.resources), None)))

    first = asked({})
    assert world.listing(first).selection == fresh(first)
    # Two windows out, then one of them answered: those two nodes are classified again, the others reused.
    names = sorted(world.views)[:2]
    requests = {}
    for name in names:
        request = WindowRequest("fleet/m", f"r-{name}", [PackageOrder(e.name, e.spec, e.generation) for e in entries])
        world.open_window(name, request)
        requests[name] = request
    out = asked({n: [e.name for e in entries] for n in names})
    assert world.listing(out).selection == fresh(out)
    still_open = world.listing(out).selection
    _seconds, result = world.open_window(names[0], requests[names[0]])
    world.close_window(names[0], result)  # the node records its Packages complete: a new view
    assert world.listing(out).selection == fresh(out) != still_open
    after = asked({names[1]: [e.name for e in entries]})
    assert world.listing(after).selection == fresh(after)
    # A changed query (a Package paused) classifies every node again.
    paused = asked({names[1]: [e.name for e in entries]}, paused=True)
    assert world.listing(paused).selection == fresh(paused) != world.listing(after).selection

"""Operator verbs, the pure parts: rerun plans and bookkeeping, node reset, annotations, versions."""

from __future__ import annotations

import json

from api.enums import NodeStatus, PlanAction, Stage
from api.node_state import NodeState, PackageNodeState, config_hashes, dump_node_state
from api.package import PackageSpec
from crd_bridge.node_changes import forgotten_records, packages_to_notify, reset_from_annotation
from planning.node.node_plan import NodePlanInput, plan_node
from planning.node.node_reset import reset_state
from planning.node.targets import NodeView
from planning.rollout import fleet_rerun
from planning.rollout import fleet_state as fs
from planning.rollout.batch_state import BatchPlannerState
from planning.rollout.fleet_targets import NodeTargets
from protocol.fleet import FleetSpec, PackageEntry, PackageOutcome, Rerun, WindowResult
from protocol.version import identity_version, worker_identity

REBOOT = {"type": "reboot"}


def spec(**extra: object) -> PackageSpec:
    return PackageSpec.model_validate({"version": "1.0.0", "image": "x/a:1", **extra})


def complete(package: PackageSpec) -> NodeState:
    entry = PackageNodeState(version="1.0.0", image="x/a:1", stage=Stage.CONFIG, state="complete",
                             config=config_hashes(package.config), action=PlanAction.INSTALL)
    return NodeState(packages={"a": entry})


def test_rerun_plan_runs_the_install_sequence_from_the_stage() -> None:
    package = spec(interrupt=REBOOT)
    plan = plan_node(NodePlanInput("n", complete(package), {"a": package}, rerun={"a": ""}))
    assert plan.packages["a"].stages == (Stage.APPLY, Stage.CONFIG, Stage.INTERRUPT, Stage.POST_INTERRUPT)
    assert plan.needs_drain
    plan = plan_node(NodePlanInput("n", complete(package), {"a": package},
                                   rerun={"a": "post-interrupt"}))
    assert plan.packages["a"].stages == (Stage.POST_INTERRUPT,) and not plan.needs_drain
    # No rerun: nothing to do.
    assert not plan_node(NodePlanInput("n", complete(package), {"a": package})).packages["a"].has_work


def test_rerun_of_a_stage_the_package_does_not_have_runs_nothing() -> None:
    package = spec()
    plan = plan_node(NodePlanInput("n", complete(package), {"a": package}, rerun={"a": "interrupt"}))
    assert not plan.packages["a"].has_work and not plan.packages["a"].blocked
    assert "rerun from interrupt skipped" in plan.packages["a"].reason


def test_a_rerun_of_an_unknown_stage_is_refused() -> None:
    state = fs.FleetState(revisions={"a": "r"})
    assert not fs.apply_rerun(state, Rerun("r1", "a", [], "reboot")) and not state.reruns


def test_a_package_with_work_gets_its_normal_plan_despite_a_rerun() -> None:
    package = spec(version="2.0.0")
    plan = plan_node(NodePlanInput("n", complete(spec()), {"a": package}, rerun={"a": "config"}))
    assert plan.packages["a"].action is PlanAction.UPGRADE


def state_with(nodes: dict[str, NodeTargets]) -> fs.FleetState:
    entries = [PackageEntry(n, {"version": "1.0.0", "image": "x/a:1"}, 1) for n in ("a", "b")]
    state = fs.FleetState(spec=FleetSpec("p", None, 0, entries), targets=nodes, revisions={"a": "r", "b": "r"})
    state.planner = BatchPlannerState(identity="fleet/p")
    for node in nodes:
        state.records[node] = fs.NodeRecord(outcomes={"a": "complete"})
    return state


def test_rerun_bookkeeping_once_per_id_and_only_for_its_window() -> None:
    state = state_with({"n1": NodeTargets(done=["a"]), "n2": NodeTargets(done=["a"]), "n3": NodeTargets(pending=["b"])})
    assert fs.apply_rerun(state, Rerun("r1", "a", [], "config"))
    assert not fs.apply_rerun(state, Rerun("r1", "a", [], "config"))
    assert fs.wanted(state, "n1") == ["a"] and fs.wanted(state, "n2") == ["a"] and fs.wanted(state, "n3") == ["b"]
    orders, ids = fs.package_orders(state, "n1", ["a"])
    assert ids == ["r1"] and (orders[0].rerun, orders[0].rerun_stage) == ("r1", "config")
    state.in_flight["n1"] = fs.InFlight("q1", ["a"], reruns=ids)
    fs.record_result(state, WindowResult("n1", "q1", {"a": PackageOutcome("complete")}))
    assert fs.wanted(state, "n1") == []
    # A window handed out before the rerun (no id) does not end it; a withdrawal does not either.
    state.in_flight["n2"] = fs.InFlight("q2", ["a"])
    fs.record_result(state, WindowResult("n2", "q2", {"a": PackageOutcome("complete")}))
    state.records["n2"].outcomes.pop("a")
    assert fs.wanted(state, "n2") == ["a"]
    state.in_flight["n2"] = fs.InFlight("q3", ["a"], reruns=["r1"])
    fs.record_result(state, WindowResult("n2", "q3", withdrawn=True))
    assert fs.wanted(state, "n2") == ["a"]
    state.in_flight["n2"] = fs.InFlight("q4", ["a"], reruns=["r1"])
    fs.record_result(state, WindowResult("n2", "q4", {"a": PackageOutcome("erroring")}))
    assert not state.reruns and state.rerun_ids == ["r1"]


def test_a_rerun_before_the_first_listing_waits_for_the_targets() -> None:
    state = fs.FleetState(revisions={"a": "r"})
    assert fs.apply_rerun(state, Rerun("r1", "a", ["n2"]))
    assert state.reruns and not state.reruns[0].resolved
    asked = fleet_rerun.resolve(state.reruns, {"n1": NodeTargets(done=["a"]), "n2": NodeTargets(done=["a"])})
    assert asked == [("n2", "a")]


def test_rerun_annotation() -> None:
    assert fleet_rerun.rerun_from_annotation("a", "") is None
    assert fleet_rerun.rerun_from_annotation("a", "x7:config") == Rerun("annotation:a:x7", "a", [], "config")


def recorded(*names: str) -> str:
    return dump_node_state(NodeState(packages={n: PackageNodeState(version="1.0.0", state="complete")
                                               for n in names}))


def test_reset_forgets_what_it_names() -> None:
    outcome = reset_state(recorded("a", "b"), ["a", "zz"])
    assert json.loads(outcome.annotation)["packages"].keys() == {"b"}
    assert (outcome.forgotten, outcome.unknown, outcome.status) == (["a"], ["zz"], NodeStatus.COMPLETE)
    everything = reset_state(recorded("a", "b"), [])
    assert json.loads(everything.annotation)["packages"] == {} and everything.status is NodeStatus.WAITING
    garbage = reset_state("{not json", ["a"])
    assert garbage.problem and json.loads(garbage.annotation)["packages"] == {}


def test_a_forgotten_record_notifies_its_fleet() -> None:
    before, after = NodeView("n", {"pool": "gpu"}, [], recorded("a", "b")), NodeView("n", {"pool": "gpu"}, [],
                                                                                       recorded("b"))
    assert forgotten_records(before, after) == {"a"}
    specs = {"a": spec(), "b": spec()}
    assert packages_to_notify(before, after, specs) == ["a"]
    assert packages_to_notify(after, after, specs) == []


def test_reset_annotation() -> None:
    obj = {"metadata": {"name": "n", "annotations": {"noderoll.io/reset": "r9:b, a"}}}
    request = reset_from_annotation(obj)
    assert request is not None and (request.id, request.packages) == ("annotation:r9", ["a", "b"])
    assert reset_from_annotation({"metadata": {"name": "n"}}) is None


def test_worker_identity_carries_the_version() -> None:
    assert identity_version(worker_identity()) not in (None, "")
    assert identity_version("12345@host") is None


def test_the_cli_refuses_a_rerun_stage_that_does_not_exist(capsys: object) -> None:
    from cli.main import main

    assert main(["rerun", "some-package", "--stage", "reboot"]) == 2

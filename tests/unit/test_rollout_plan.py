"""`noderoll plan`'s simulation (planning/views/rollout_plan.py): the fleet's own rules, every window succeeding."""

from __future__ import annotations

from typing import Any

from planning.rollout.compartments import stable_order
from planning.views.eta import Timings
from planning.views.rollout_plan import PlanInput, plan_fleet
from protocol.names import fleet_workflow_id
from tests.unit.fleet_builders import a_fleet_spec, a_node, an_entry, recorded, taint

NOW = "2025-01-01T00:00:00+00:00"
REBOOT = {"type": "reboot"}
TWO_COMPARTMENTS: dict[str, Any] = {
    "canary": {"count": 1, "soakSeconds": 60},
    "default": {"budget": {"count": 2}, "strategy": {"type": "fixed", "initialBatch": 2}},
    "compartments": [{"name": "rack-a", "selector": {"matchLabels": {"rack": "a"}}, "budget": {"count": 1},
                      "strategy": {"type": "fixed", "initialBatch": 1}}],
}


def two_reboot_packages() -> list[Any]:
    return [an_entry("kernel", interrupt=REBOOT),
            an_entry("driver", interrupt=REBOOT, dependsOn={"kernel": "1.0.0"})]


def fleet_nodes(count: int = 6) -> list[Any]:
    return [a_node(f"n{i}", {"pool": "gpu", "rack": "a" if i % 2 else "b"}) for i in range(count)]


def test_canary_then_batches_per_compartment_in_the_fleets_order() -> None:
    plan = plan_fleet(PlanInput(a_fleet_spec(*two_reboot_packages(), policy=TWO_COMPARTMENTS), fleet_nodes(), NOW))
    assert plan.batches[0].canary and len(plan.canary) == 1 and plan.canary == plan.batches[0].nodes
    assert not any(b.canary for b in plan.batches[1:])
    identity = fleet_workflow_id("gpu")
    for compartment, members in (("rack-a", ["n1", "n3", "n5"]), ("default", ["n0", "n2", "n4"])):
        taken = [n for b in plan.batches for n in b.compartments.get(compartment, [])]
        assert taken == [n for n in stable_order(members, identity) if n in taken], compartment
    # Budgets: rack-a one node per batch, default two.
    assert all(len(b.compartments.get("rack-a", [])) <= 1 and len(b.compartments.get("default", [])) <= 2
               for b in plan.batches)
    assert sorted(plan.windows) == sorted(n for b in plan.batches for n in b.nodes) == [f"n{i}" for i in range(6)]
    assert plan.totals.batches == len(plan.batches) and plan.changes


def test_one_merged_window_per_node_dependency_first_one_reboot() -> None:
    plan = plan_fleet(PlanInput(a_fleet_spec(*two_reboot_packages(), policy=TWO_COMPARTMENTS), fleet_nodes(2), NOW))
    for window in plan.windows.values():
        assert [p.name for p in window.packages] == ["kernel", "driver"]
        assert window.packages[0].stages == ["apply", "config", "interrupt", "post-interrupt"]
        assert (window.drain, window.interrupt) == (True, "reboot")
    assert (plan.totals.windows, plan.totals.drains, plan.totals.reboots) == (2, 2, 2)


def test_done_tainted_and_untargeted_nodes_are_named_not_planned() -> None:
    nodes = [a_node("done", state=recorded(kernel="1.0.0")), a_node("tainted", taints=[taint("gpu-broken")]),
             a_node("cpu", {"pool": "cpu"}), a_node("todo")]
    plan = plan_fleet(PlanInput(a_fleet_spec(an_entry("kernel", interrupt=REBOOT)), nodes, NOW))
    assert sorted(plan.windows) == ["todo"]
    assert plan.done == ["done"] and plan.not_targeted == ["cpu"]
    assert plan.skipped == {"tainted": {"kernel": "taints not tolerated: gpu-broken:NoSchedule"}}


def test_dependency_not_met_is_a_skip_with_its_reason() -> None:
    entry = an_entry("driver", dependsOn={"kernel": "2.0.0"})
    plan = plan_fleet(PlanInput(a_fleet_spec(entry), [a_node("n1", state=recorded(kernel="1.0.0"))], NOW))
    assert not plan.changes
    assert "waits for dependency kernel 2.0.0" in plan.skipped["n1"]["driver"]


def test_nothing_changes_when_the_cluster_is_at_the_desired_state() -> None:
    spec = a_fleet_spec(an_entry("kernel"))
    plan = plan_fleet(PlanInput(spec, [a_node("n1", state=recorded(kernel="1.0.0"))], NOW, current=spec))
    assert not plan.changes and plan.batches == [] and plan.changed == []


def test_only_changed_packages_count_as_changes_against_the_running_fleet() -> None:
    running = a_fleet_spec(an_entry("kernel"), an_entry("driver"))
    desired = a_fleet_spec(an_entry("kernel", "1.1.0"), an_entry("driver"))
    nodes = [a_node("n1", state=recorded(kernel="1.0.0", driver="1.0.0"))]
    plan = plan_fleet(PlanInput(desired, nodes, NOW, current=running, wave=3))
    assert plan.changed == ["kernel"] and plan.wave == 4
    assert [(p.name, p.action, p.previous_version) for p in plan.windows["n1"].packages] == [
        ("kernel", "upgrade", "1.0.0")]


def test_eta_from_defaults_says_so_and_from_measurements_uses_their_p50() -> None:
    spec = a_fleet_spec(an_entry("kernel", interrupt=REBOOT))
    nodes = [a_node(f"n{i}") for i in range(3)]
    fresh = plan_fleet(PlanInput(spec, nodes, NOW))
    assert fresh.eta is not None and fresh.eta.source.startswith("defaults")
    # 3 batches of one node (the default policy), each: 10 s gap + 3 stages x 60 + drain 60 + reboot 300.
    assert fresh.eta.seconds_left == 3 * (10 + 180 + 60 + 300)
    measured = plan_fleet(PlanInput(spec, nodes, NOW, timings=Timings(windows={"reboot": [40, 50, 90]}, gaps=[5])))
    assert measured.eta is not None and measured.eta.source.startswith("measured")
    assert measured.eta.seconds_left == 3 * (5 + 50)

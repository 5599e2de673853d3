"""Target selection with windows in flight and dependencies (planning.targets). Pure."""

from __future__ import annotations

import json

from api.node_state import parse_node_state
from api.package import PackageSpec
from planning.targets import NodeView, TargetQuery, dependency_blocker, select_targets

SPEC = PackageSpec.model_validate({"version": "1.0.0", "image": "example.test/p:1.0.0", "dependsOn": {"base": "2.0.0"}})
REBOOTING = [{"key": "node.kubernetes.io/not-ready", "value": "", "effect": "NoSchedule"}]


def state(version: str, status: str = "complete") -> str:
    return json.dumps({"packages": {"base": {"version": version, "image": "i", "state": status}}})


def test_a_node_in_flight_stays_a_target_through_its_reboot_taint() -> None:
    nodes = [NodeView("a", taints=REBOOTING, state_annotation=state("2.0.0")),
             NodeView("b", taints=REBOOTING, state_annotation=state("2.0.0"))]
    selection = select_targets(TargetQuery("p", SPEC, nodes, in_flight=frozenset({"a"}), check_dependencies=True))
    assert [n.name for n in selection.eligible] == ["a"]
    assert list(selection.blocked) == ["b"] and "not-ready" in selection.blocked["b"]


def test_dependency_not_complete_makes_a_node_wait_with_the_reason() -> None:
    nodes = [NodeView("none"), NodeView("old", state_annotation=state("1.0.0")),
             NodeView("running", state_annotation=state("2.0.0", "in_progress")),
             NodeView("ok", state_annotation=state("2.0.0")),
             NodeView("flying")]
    query = TargetQuery("p", SPEC, nodes, in_flight=frozenset({"flying"}), check_dependencies=True)
    selection = select_targets(query)
    assert sorted(n.name for n in selection.eligible) == ["flying", "ok"]
    assert sorted(selection.waiting) == ["none", "old", "running"]
    assert "base 2.0.0" in selection.waiting["none"] and "1.0.0 is installed" in selection.waiting["old"]
    # Without the check (rollouts recorded before it) nothing waits.
    assert not select_targets(TargetQuery("p", SPEC, nodes)).waiting


def test_dependency_blocker_accepts_the_required_version_only() -> None:
    assert dependency_blocker(SPEC, parse_node_state(state("2.0.0"))[0]) is None
    assert dependency_blocker(SPEC, parse_node_state("")[0]) is not None


def test_bridge_notifies_dependents_when_a_dependency_record_changes() -> None:
    from crd_bridge.node_changes import packages_to_notify

    dependent = PackageSpec.model_validate({"version": "1.0.0", "image": "example.test/p:1.0.0", "dependsOn": {"base": "2.0.0"}})
    plain = PackageSpec.model_validate({"version": "1.0.0", "image": "example.test/p:1.0.0"})
    packages = {"dep": dependent, "plain": plain}
    before, after = NodeView("n", state_annotation=state("2.0.0", "in_progress")), NodeView("n", state_annotation=state("2.0.0"))
    assert packages_to_notify(before, after, packages) == ["dep"]
    assert packages_to_notify(after, after, packages) == []

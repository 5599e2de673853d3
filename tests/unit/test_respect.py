"""Other maintenance respected (`spec.respect`): the model, planning/rollout/respect.py, the listing's down
reason, and which NodeMaintenance objects hold a node (kube/node_maintenance.py, its pure part)."""

from __future__ import annotations

from typing import Any

import pytest

from api.package import PackageSpec
from api.policy import DeploymentPolicySpec
from api.respect import DEFAULT_TAINTS, TAINT_OWNERS, RespectSpec
from kube.node_maintenance import NODEROLL_REQUESTOR, held_nodes_of
from planning.node.targets import NodeView
from planning.rollout.disruption import DOWN_CORDONED, DOWN_WINDOW
from planning.rollout.fleet_targets import FleetPackage, FleetQuery, down_reason, select_fleet
from planning.rollout.respect import DOWN_MAINTENANCE, Hold, Respect, may_start, respect_of
from tests.helpers.packages import example_image


def node(*taints: str, maintenance: str = "", **fields: Any) -> NodeView:
    return NodeView("n1", taints=[{"key": k, "value": "", "effect": "NoSchedule"} for k in taints],
                    ready=True, maintenance=maintenance, **fields)


def test_absent_respect_means_the_defaults() -> None:
    spec = DeploymentPolicySpec.model_validate({"default": {"budget": {"count": 1}}})
    assert spec.respect is None and "respect" not in spec.dump()
    assert respect_of(spec.respect) == Respect(frozenset(DEFAULT_TAINTS), True)


def test_given_taints_replace_the_defaults() -> None:
    assert respect_of(RespectSpec(taints=["example.com/rma"])).taints == frozenset({"example.com/rma"})
    assert respect_of(RespectSpec(taints=[], node_maintenance=False)) == Respect(frozenset(), False)
    assert RespectSpec.model_validate({"nodeMaintenance": False}).dump() == {"nodeMaintenance": False}


def test_every_default_taint_has_its_owner_and_is_a_valid_key() -> None:
    assert set(DEFAULT_TAINTS) == set(TAINT_OWNERS) and len(DEFAULT_TAINTS) >= 10
    RespectSpec(taints=list(DEFAULT_TAINTS))  # the validators accept the defaults themselves


@pytest.mark.parametrize(("taints", "message"), [
    pytest.param(["noderoll.io/upcoming"], "one of noderoll's own taints", id="noderoll-key"),
    pytest.param(["a/b", "a/b"], "listed twice", id="twice"),
    pytest.param(["not a key"], "is not a valid taint key", id="invalid"),
])
def test_bad_taint_keys_are_refused(taints: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RespectSpec(taints=taints)


def test_a_respected_taint_holds_the_node_named_with_its_owner() -> None:
    hold = may_start(node("karpenter.sh/disrupted", "other/key"), Respect())
    assert hold == Hold("taint", "karpenter.sh/disrupted") and hold.text == "taint karpenter.sh/disrupted (Karpenter)"
    assert may_start(node("other/key"), Respect()) is None
    assert may_start(node("example.com/rma"), Respect(frozenset({"example.com/rma"}))).text == "taint example.com/rma"


def test_a_node_maintenance_holds_the_node_when_respected() -> None:
    held = node(maintenance="ops/nm-1 (requestor ops.example.com)")
    assert may_start(held, Respect()).text == "NodeMaintenance ops/nm-1 (requestor ops.example.com)"
    assert may_start(held, Respect(node_maintenance=False)) is None


def test_the_down_reason_names_the_maintenance_after_a_window_and_before_a_cordon() -> None:
    held = node("ToBeDeletedByClusterAutoscaler", unschedulable=True)
    assert down_reason(held, Respect()) == f"{DOWN_MAINTENANCE}: taint ToBeDeletedByClusterAutoscaler (cluster-autoscaler)"
    assert down_reason(held) == DOWN_CORDONED  # respect not asked: as before
    in_window = node("ToBeDeletedByClusterAutoscaler", status_label="in-progress")
    assert down_reason(in_window, Respect()) == DOWN_WINDOW
    assert down_reason(node(), Respect()) == ""


def test_the_listing_reports_why_each_node_is_down_when_respect_is_asked() -> None:
    packages = {"p": FleetPackage(PackageSpec(version="1.0.0", image=example_image("p")))}
    nodes = [NodeView("held", ready=True, maintenance="ops/nm (requestor x)"), NodeView("free", ready=True)]
    respected = select_fleet(FleetQuery(packages, nodes, respect=Respect()))
    assert respected.nodes["held"].down.startswith(DOWN_MAINTENANCE) and respected.nodes["free"].down == ""
    assert select_fleet(FleetQuery(packages, nodes)).nodes["held"].down == ""  # not asked: nothing reported


def nm(namespace: str, name: str, node_name: str, requestor: str = "network.operator.com") -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name},
            "spec": {"nodeName": node_name, "requestorID": requestor}}


def test_node_maintenances_of_other_requestors_hold_their_nodes() -> None:
    held = held_nodes_of([nm("ops", "b", "n1"), nm("ops", "a", "n1", "gpu.operator.com"), nm("x", "c", "n2"),
                          nm("x", "ours", "n3", NODEROLL_REQUESTOR), {"metadata": {"name": "no-node"}, "spec": {}}])
    assert held == {"n1": "ops/a (requestor gpu.operator.com)", "n2": "x/c (requestor network.operator.com)"}


def test_a_node_maintenance_counts_whatever_its_phase_and_while_it_is_deleted() -> None:
    pending = nm("ops", "a", "n1") | {"status": {"conditions": [{"type": "Ready", "status": "False",
                                                                   "reason": "Pending"}]}}
    leaving = nm("ops", "b", "n2")
    leaving["metadata"] |= {"deletionTimestamp": "2026-12-07T10:00:00Z", "finalizers": ["maintenance.finalizers.nvidia.com"]}
    assert set(held_nodes_of([pending, leaving])) == {"n1", "n2"}

"""Target selection (planning/targets.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from api.keys import NODE_IGNORE_LABEL, RUNTIME_REQUIRED_TAINT_KEY
from api.package import PackageSpec, Toleration
from planning.targets import (
    NodeView,
    TargetQuery,
    select_targets,
    tolerates,
)

GPU = {"pool": "gpu"}


def spec(**extra: Any) -> PackageSpec:
    return PackageSpec.model_validate({"version": "1.0.0", "image": "example.test/pkg:1.0.0",
                                       "nodeSelector": {"matchLabels": GPU}, **extra})


def recorded(version: str, state: str = "complete", package: str = "pkg") -> str:
    # A finished install: the last stage of its sequence, complete.
    entry = {"version": version, "image": "example.test/pkg:1.0.0", "stage": "config", "state": state,
             "action": "install"}
    return json.dumps({"packages": {package: entry}})


def taint(key: str, effect: str = "NoSchedule", value: str = "") -> dict[str, str]:
    return {"key": key, "value": value, "effect": effect}


def test_selector_ignore_label_and_untolerated_taints() -> None:
    nodes = [
        NodeView("a", GPU),
        NodeView("b", {"pool": "cpu"}),
        NodeView("c", {**GPU, NODE_IGNORE_LABEL: "true"}),
        NodeView("d", GPU, [taint("dedicated", value="infer")]),
        NodeView("e", GPU, [taint("node.kubernetes.io/unschedulable"), taint("soft", "PreferNoSchedule")]),
    ]
    selection = select_targets(TargetQuery("pkg", spec(), nodes))
    assert [n.name for n in selection.eligible] == ["a", "e"]
    assert selection.blocked == {"d": "taints not tolerated: dedicated=infer:NoSchedule"}
    assert selection.done == []


def test_additional_tolerations_and_runtime_required_taint() -> None:
    nodes = [NodeView("d", GPU, [taint("dedicated", value="infer")]), NodeView("r", GPU, [taint(RUNTIME_REQUIRED_TAINT_KEY)])]
    plain = select_targets(TargetQuery("pkg", spec(additionalTolerations=[{"key": "dedicated", "operator": "Exists"}]), nodes))
    assert [n.name for n in plain.eligible] == ["d"] and list(plain.blocked) == ["r"]
    runtime = select_targets(TargetQuery("pkg", spec(runtimeRequired=True), nodes))
    assert [n.name for n in runtime.eligible] == ["r"]


def test_nodes_already_at_the_spec_are_done() -> None:
    nodes = [NodeView("a", GPU, state_annotation=recorded("1.0.0")), NodeView("b", GPU, state_annotation=recorded("0.9.0"))]
    selection = select_targets(TargetQuery("pkg", spec(), nodes))
    assert selection.done == ["a"] and len(selection.eligible) == 2


UNREADABLE = [
    pytest.param("{garbage", "not JSON", id="not-json"),
    pytest.param("[1, 2, 3]", "not a JSON object", id="json-list"),
    # Another package's entry in a vocabulary this noderoll does not know: the window would drop it.
    pytest.param(json.dumps({"packages": {"other": {"version": "1", "stage": "warp"}}}), "packages.other.stage",
                 id="unknown-stage-of-another-package"),
]


@pytest.mark.parametrize(("raw", "problem"), UNREADABLE)
def test_a_node_with_an_unreadable_state_is_held_blocked_with_the_reason(raw: str, problem: str) -> None:
    nodes = [NodeView("a", GPU), NodeView("b", GPU, state_annotation=raw), NodeView("c", {"pool": "cpu"}, state_annotation=raw)]
    selection = select_targets(TargetQuery("pkg", spec(), nodes, check_dependencies=True))
    assert [n.name for n in selection.eligible] == ["a"] and selection.done == []
    # Only candidates are reported: a node outside the selector is nobody's business here.
    assert list(selection.blocked) == ["b"]
    assert selection.blocked["b"].startswith("noderoll.io/state unreadable: ") and problem in selection.blocked["b"]


def test_a_complete_node_whose_state_turned_to_garbage_is_no_longer_done() -> None:
    garbage = recorded("1.0.0")[:-3]  # the complete record, cut short
    selection = select_targets(TargetQuery("pkg", spec(), [NodeView("a", GPU, state_annotation=garbage)]))
    assert selection.done == [] and selection.eligible == [] and list(selection.blocked) == ["a"]


def test_an_unreadable_state_is_held_before_taints_and_for_an_uninstall() -> None:
    node = NodeView("a", GPU, [taint("dedicated")], state_annotation="{garbage")
    held = select_targets(TargetQuery("pkg", spec(), [node]))
    assert "unreadable" in held.blocked["a"]
    uninstall = select_targets(TargetQuery("pkg", spec(uninstall={"enabled": True}), [node], uninstall=True))
    assert "unreadable" in uninstall.blocked["a"] and uninstall.eligible == []


def test_a_node_whose_window_is_in_flight_is_not_held() -> None:
    # Garbled while our window runs: that window writes the node's state next, so it stays ours.
    node = NodeView("a", GPU, state_annotation="{garbage")
    selection = select_targets(TargetQuery("pkg", spec(), [node], in_flight=frozenset({"a"})))
    assert [n.name for n in selection.eligible] == ["a"] and selection.blocked == {}


def test_rollouts_recorded_before_the_hold_read_garbage_as_nothing_recorded() -> None:
    node = NodeView("a", GPU, state_annotation="{garbage")
    selection = select_targets(TargetQuery("pkg", spec(), [node], hold_malformed=False))
    assert [n.name for n in selection.eligible] == ["a"] and selection.blocked == {}


def test_done_node_is_not_blocked_by_a_transient_taint() -> None:
    # Another package rebooting the node adds not-ready taints; this package is complete there.
    rebooting = [taint("node.kubernetes.io/not-ready", "NoExecute")]
    nodes = [NodeView("a", GPU, rebooting, state_annotation=recorded("1.0.0")),
             NodeView("b", GPU, rebooting, state_annotation=recorded("0.9.0"))]
    selection = select_targets(TargetQuery("pkg", spec(), nodes))
    assert selection.done == ["a"] and [n.name for n in selection.eligible] == ["a"]
    assert list(selection.blocked) == ["b"]


def test_uninstall_targets_nodes_where_the_package_is_recorded() -> None:
    nodes = [NodeView("a", {"pool": "cpu"}, state_annotation=recorded("1.0.0")), NodeView("b", GPU)]
    selection = select_targets(TargetQuery("pkg", spec(uninstall={"enabled": True}), nodes, uninstall=True))
    assert [n.name for n in selection.eligible] == ["a"] and selection.done == []


@pytest.mark.parametrize(
    ("toleration", "expected"),
    [
        pytest.param(Toleration(operator="Exists"), True, id="empty-key-exists-tolerates-all"),
        pytest.param(Toleration(key="k", operator="Exists"), True, id="key-exists"),
        pytest.param(Toleration(key="k", value="v"), True, id="key-value-equal"),
        pytest.param(Toleration(key="k", value="w"), False, id="other-value"),
        pytest.param(Toleration(key="k", operator="Exists", effect="NoExecute"), False, id="other-effect"),
    ],
)
def test_toleration_semantics(toleration: Toleration, expected: bool) -> None:
    assert tolerates(toleration, taint("k", value="v")) is expected


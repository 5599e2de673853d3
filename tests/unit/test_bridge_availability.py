"""The bridge's `availability_changed` (issue 43 item 3): which Node changes are someone else's cordon,
uncordon or Ready flip (`crd_bridge.node_changes.availability_change`), which fleets hear of them
(`fleets_targeting`), and how bursts are coalesced (`crd_bridge.availability`, `crd_bridge.nodes`)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from api.package import PackageSpec
from crd_bridge.availability import AvailabilityNotes
from crd_bridge.node_changes import availability_change, fleets_targeting, node_view
from crd_bridge.nodes import NodeHandler
from kube.node_snapshot import node_facts
from protocol.fleet import AvailabilityChanged, FleetSpec, PackageEntry
from protocol.names import SIGNAL_AVAILABILITY_CHANGED, SIGNAL_NODES_CHANGED

OURS = {"noderoll.io/cordoned-by": "noderoll"}


def a_node(name: str = "n1", *, cordoned: bool = False, ready: bool = True, annotations: dict[str, str] | None = None,
           status: str = "", pool: str = "a100", taints: tuple[str, ...] = ()) -> dict[str, Any]:
    labels = {"gpu": pool, **({"noderoll.io/status": status} if status else {})}
    return {"metadata": {"name": name, "labels": labels, "annotations": annotations or {}},
            "spec": {"unschedulable": cordoned, "taints": [{"key": k, "effect": "NoSchedule"} for k in taints]},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


@pytest.mark.parametrize(("old", "new", "expected"), [
    pytest.param(a_node(), a_node(cordoned=True), True, id="kubectl-cordon"),
    pytest.param(a_node(cordoned=True), a_node(), True, id="kubectl-uncordon"),
    pytest.param(a_node(), a_node(cordoned=True, annotations=OURS), False, id="noderolls-cordon"),
    pytest.param(a_node(cordoned=True, annotations=OURS), a_node(), False, id="noderolls-uncordon"),
    # An operator lifting noderoll's cordon leaves the annotation: someone else's uncordon.
    pytest.param(a_node(cordoned=True, annotations=OURS), a_node(annotations=OURS), True, id="outside-uncordon-of-ours"),
    pytest.param(a_node(), a_node(ready=False), True, id="not-ready"),
    pytest.param(a_node(ready=False), a_node(), True, id="ready-again"),
    pytest.param(a_node(status="in-progress"), a_node(ready=False, status="in-progress"), False,
                 id="not-ready-in-noderolls-window"),
    pytest.param(a_node(ready=False, status="in-progress"), a_node(status="in-progress"), False,
                 id="ready-after-noderolls-reboot"),
    pytest.param(a_node(ready=False, status="in-progress"), a_node(status="complete"), False,
                 id="ready-as-the-window-ends"),
    pytest.param(a_node(status="complete"), a_node(ready=False, status="complete"), True,
                 id="not-ready-after-the-window"),
    pytest.param(a_node(status="waiting"), a_node(status="in-progress"), False, id="status-label-only"),
    pytest.param(a_node(), a_node(), False, id="no-change"),
    # Another maintenance's taint (spec.respect may hold the node by it) set or lifted, in a window or not:
    # a hand-out's read finds such a node only when the bridge names it (issue 45).
    pytest.param(a_node(), a_node(taints=("maintenance.example.com/hold",)), True, id="maintenance-taint-set"),
    pytest.param(a_node(taints=("maintenance.example.com/hold",)), a_node(), True, id="maintenance-taint-lifted"),
    pytest.param(a_node(status="in-progress"), a_node(status="in-progress", taints=("repair/hold",)), True,
                 id="maintenance-taint-in-a-window"),
    pytest.param(a_node(status="in-progress"), a_node(ready=False, status="in-progress",
                                                       taints=("node.kubernetes.io/not-ready",)), False,
                 id="kubelets-taint-in-noderolls-reboot"),
    pytest.param(a_node(), a_node(taints=("noderoll.io/upcoming",)), False, id="drain-ahead-mark"),
    pytest.param(a_node(taints=("noderoll.io/runtime-required",)), a_node(), False, id="runtime-required-lifted"),
    pytest.param(None, a_node(cordoned=True, ready=False), False, id="a-new-node-is-nodes-changed"),
])
def test_someone_elses_cordon_and_ready_flips_are_availability_changes(
        old: dict[str, Any] | None, new: dict[str, Any], expected: bool) -> None:
    assert availability_change(node_facts(old) if old else None, node_facts(new)) is expected


def specs(**pools: str) -> dict[str, PackageSpec]:
    """Package name -> a spec of fleet `pools[name]` selecting `gpu=<name>`."""
    return {name: PackageSpec.model_validate({"version": "1.0", "image": "x:1", "deploymentPolicy": fleet,
                                              "nodeSelector": {"matchLabels": {"gpu": name}}})
            for name, fleet in pools.items()}


def test_the_fleets_of_the_packages_targeting_the_node_hear_of_it() -> None:
    packages = specs(a100="train", h100="serve")
    uninstalling = {"old": FleetSpec("old", packages=[PackageEntry("gone", {
        "version": "1.0", "image": "x:1", "nodeSelector": {"matchLabels": {"gpu": "a100"}}}, 1, uninstall=True)])}
    assert fleets_targeting([node_view(a_node())], packages, uninstalling) == {"train", "old"}
    assert fleets_targeting([node_view(a_node(pool="h100"))], packages, {}) == {"serve"}
    # Relabelled in the same change: the fleets of before and after.
    assert fleets_targeting([node_view(a_node()), node_view(a_node(pool="h100"))], packages, {}) == {"train", "serve"}
    assert fleets_targeting([node_view(a_node(pool="cpu"))], packages, uninstalling) == set()


def test_notes_are_due_a_short_interval_after_the_first_and_handed_over_once() -> None:
    notes = AvailabilityNotes(coalesce_seconds=1.0)
    assert notes.due_in(100.0) is None and notes.take(100.0) == {}
    notes.note([], "n0", 100.0)  # a node no fleet targets starts nothing
    assert notes.due_in(100.0) is None
    notes.note(["train", "serve"], "n1", 100.0)
    notes.note(["train"], "n2", 100.4)
    assert notes.due_in(100.5) == pytest.approx(0.5) and notes.take(100.5) == {}
    notes.note(["train"], "n1", 100.9)  # the same node again: once
    assert notes.take(101.0) == {"serve": AvailabilityChanged(["n1"]), "train": AvailabilityChanged(["n1", "n2"])}
    assert notes.due_in(101.0) is None and notes.take(200.0) == {}


class Fleets:
    """The bridge's fleet client as `NodeHandler.flush` calls it: every signal recorded."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, Any]] = []

    async def signal(self, fleet: str, signal: str, arg: Any = None) -> None:
        self.sent.append((fleet, signal, arg))


def a_handler(coalesce_seconds: float, active: set[str]) -> tuple[NodeHandler, Fleets]:
    fleets = Fleets()
    packages = specs(a100="train", h100="serve")
    valid = {name: SimpleNamespace(package=SimpleNamespace(spec=spec)) for name, spec in packages.items()}
    reconciler = SimpleNamespace(valid=valid, sent={}, active=active, fleets=fleets)
    return NodeHandler(reconciler, coalesce_seconds), fleets  # type: ignore[arg-type]


async def test_a_burst_of_nodes_going_not_ready_is_one_signal_per_fleet_carrying_them_all() -> None:
    handler, fleets = a_handler(0.0, active={"train", "serve"})
    for index in range(40):
        pool = "a100" if index % 4 else "h100"
        handler.note_change(a_node(f"n{index:02d}", pool=pool), a_node(f"n{index:02d}", pool=pool, ready=False))
    handler.note_change(a_node("mine", status="in-progress"), a_node("mine", ready=False, status="in-progress"))
    handler.note_change(a_node("cordoned"), a_node("cordoned", cordoned=True, annotations=OURS))
    assert await handler.flush() is None
    signals = [(fleet, name) for fleet, name, _arg in fleets.sent]
    assert signals == [("serve", SIGNAL_AVAILABILITY_CHANGED), ("train", SIGNAL_AVAILABILITY_CHANGED)]
    carried = {fleet: arg.nodes for fleet, _name, arg in fleets.sent}
    assert carried["serve"] == [f"n{i:02d}" for i in range(0, 40, 4)]
    assert carried["train"] == [f"n{i:02d}" for i in range(40) if i % 4]
    assert SIGNAL_NODES_CHANGED not in {name for _fleet, name, _arg in fleets.sent}  # no re-list for these


async def test_notes_wait_for_their_interval_and_a_fleet_not_running_gets_nothing() -> None:
    handler, fleets = a_handler(30.0, active={"train"})
    handler.note_change(a_node("n1"), a_node("n1", cordoned=True))
    handler.note_change(a_node("n2", pool="h100"), a_node("n2", pool="h100", cordoned=True))
    due = await handler.flush()
    assert due is not None and 29.0 < due <= 30.0 and fleets.sent == []
    handler.availability.coalesce_seconds = 0.0
    assert await handler.flush() is None
    assert fleets.sent == [("train", SIGNAL_AVAILABILITY_CHANGED, AvailabilityChanged(["n1"]))]

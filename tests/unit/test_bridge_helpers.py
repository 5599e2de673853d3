"""Pure helpers of the bridge: validation in context, Node change filters, status patches, Lease expiry, cache."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from api import keys
from crd_bridge.cache import ObjectCache
from crd_bridge.leader import lease_expired
from crd_bridge.node_changes import (
    fleets_uninstalling_on,
    node_view,
    packages_to_notify,
    parse_time,
    runtime_package,
    runtime_taint_input,
)
from crd_bridge.status_writer import status_patch, without_empty_strings
from crd_bridge.validation import check_package, references
from crd_bridge.watcher import SYNC, WatchEvent
from planning.node.targets import NodeView


def package(name: str, generation: int = 1, **spec: Any) -> dict[str, Any]:
    body = {"version": "1.0", "image": "example/p:1", **spec}
    return {"apiVersion": keys.API_VERSION, "kind": keys.PACKAGE_KIND,
            "metadata": {"name": name, "generation": generation, "uid": f"uid-{name}"}, "spec": body}


def policy(name: str, generation: int = 1, **spec: Any) -> dict[str, Any]:
    body = spec or {"default": {"budget": {"count": 1}, "strategy": {"type": "fixed", "initialBatch": 1}}}
    return {"apiVersion": keys.API_VERSION, "kind": keys.POLICY_KIND,
            "metadata": {"name": name, "generation": generation}, "spec": body}


def test_valid_package_carries_its_policy_revision() -> None:
    obj = package("a", deploymentPolicy="gpu")
    check = check_package(obj, {"a": obj}, {"gpu": policy("gpu", generation=4)})
    assert check.package is not None and check.problems == []
    assert check.policy_revision == "gpu@4"


def test_missing_policy_and_dependency_are_problems() -> None:
    obj = package("a", deploymentPolicy="nope", dependsOn={"b": "2.0"})
    check = check_package(obj, {"a": obj, "b": package("b")}, {})
    assert check.package is None
    fields = sorted(p.field for p in check.problems)
    assert fields == ["spec.dependsOn.b", "spec.deploymentPolicy"], check.problems


def test_invalid_policy_is_named_in_the_package_problem() -> None:
    obj = package("a", deploymentPolicy="bad")
    check = check_package(obj, {"a": obj}, {"bad": policy("bad", default={"budget": {"count": -1}})})
    assert check.package is None
    assert "DeploymentPolicy 'bad' is invalid" in check.problems[0].message


def test_cycle_is_reported_on_the_package() -> None:
    a, b = package("a", dependsOn={"b": "1.0"}), package("b", dependsOn={"a": "1.0"})
    check = check_package(a, {"a": a, "b": b}, {})
    assert check.package is None and "cycle" in check.problems[0].message


def test_references_name_the_policy_and_the_dependencies_a_verdict_reads() -> None:
    obj = package("a", deploymentPolicy="gpu", dependsOn={"c": "1.0", "b": "2.0"})
    assert references(obj) == [(keys.POLICY_KIND, "gpu"), (keys.PACKAGE_KIND, "b"), (keys.PACKAGE_KIND, "c")]
    assert references(package("a")) == []
    # A Package that fails its own checks is judged without reading anything else.
    assert references(package("a", deploymentPolicy="gpu", version="not a version")) == []


def node(name: str, labels: dict[str, str], taints: list[dict[str, str]] | None = None, state: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if state:
        meta["annotations"] = {"noderoll.io/state": state}
    return {"metadata": meta, "spec": {"taints": taints or []}}


COMPLETE_STATE = '{"packages": {"a100": {"version": "1.0", "stage": "apply", "state": "complete"}}}'


def specs(**selectors: dict[str, str]) -> dict[str, Any]:
    from api.package import PackageSpec

    return {n: PackageSpec.model_validate({"version": "1.0", "image": "x:1", "nodeSelector": {"matchLabels": s}})
            for n, s in selectors.items()}


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        pytest.param(None, node("n", {"gpu": "a100"}), ["a100"], id="new-node"),
        pytest.param(node("n", {"gpu": "a100"}), node("n", {"gpu": "a100"}), [], id="no-targeting-change"),
        pytest.param(node("n", {"gpu": "a100"}), node("n", {"gpu": "h100"}), ["a100", "h100"], id="relabel"),
        pytest.param(node("n", {"gpu": "h100"}), node("n", {"gpu": "h100"}, [{"key": "k", "effect": "NoSchedule"}]),
                     ["h100"], id="taint-added"),
        pytest.param(None, node("n", {"other": "x"}), [], id="matches-nothing"),
        pytest.param(node("n", {"gpu": "h100"}),
                     node("n", {"gpu": "h100"}, [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]),
                     [], id="cordon-is-not-a-targeting-change"),
        pytest.param(node("n", {"gpu": "a100"}, state=COMPLETE_STATE), node("n", {"gpu": "a100"}, state="{garbage"),
                     ["a100"], id="state-became-unreadable"),
        pytest.param(node("n", {"gpu": "a100"}, state="{garbage"), node("n", {"gpu": "a100"}),
                     ["a100"], id="unreadable-state-removed"),
        pytest.param(node("n", {"gpu": "a100"}, state="{garbage"), node("n", {"gpu": "a100"}, state="[1]"),
                     [], id="garbage-to-other-garbage"),
        pytest.param(node("n", {"gpu": "a100", "noderoll.io/status": "complete"}),
                     node("n", {"gpu": "a100", "noderoll.io/status": "blocked"}),
                     [], id="noderoll-status-label-is-not-a-targeting-change"),
        pytest.param(node("n", {"gpu": "a100"}),
                     node("n", {"gpu": "a100", "noderoll.io/upcoming": "true"},
                          [{"key": "noderoll.io/upcoming", "effect": "PreferNoSchedule"}]),
                     [], id="drain-ahead-mark-is-not-a-targeting-change"),
    ],
)
def test_packages_to_notify(old: dict[str, Any] | None, new: dict[str, Any], expected: list[str]) -> None:
    selected = specs(a100={"gpu": "a100"}, h100={"gpu": "h100"})
    assert packages_to_notify(node_view(old) if old else None, node_view(new), selected) == expected


def test_a_fleet_uninstalling_a_deleted_package_hears_of_its_nodes_changes() -> None:
    # The deletion test's lost wake-up: every Package of the set was deleted, so none was among the
    # valid specs; the node its uninstall wave found tainted lifted the taint, and nobody told the fleet.
    from protocol.fleet import FleetSpec, PackageEntry

    selector = {"version": "1.0", "image": "x:1", "nodeSelector": {"matchLabels": {"gpu": "a100"}}}
    sent = {
        "gpu": FleetSpec("gpu", packages=[PackageEntry("kmod", selector, 1, uninstall=True)]),
        "installing": FleetSpec("installing", packages=[PackageEntry("tune", selector, 1)]),
        "elsewhere": FleetSpec("elsewhere", packages=[PackageEntry("h100", {**selector, "nodeSelector": {
            "matchLabels": {"gpu": "h100"}}}, 1, uninstall=True)]),
    }
    tainted = node("n", {"gpu": "a100"}, [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}])
    lifted = node("n", {"gpu": "a100"})
    assert fleets_uninstalling_on(node_view(tainted), node_view(lifted), sent) == ["gpu"]
    # Only a change that may change targets: a cordon or a status label is none.
    assert fleets_uninstalling_on(node_view(lifted), node_view(lifted), sent) == []
    # The bridge's node handler routes it so, with no valid Package left to route it by.
    from types import SimpleNamespace

    from crd_bridge.nodes import NodeHandler

    handler = NodeHandler(SimpleNamespace(valid={}, sent=sent))  # type: ignore[arg-type]
    handler.note_change(tainted, lifted)
    assert handler.to_notify == {"gpu"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("2024-07-01T12:00:05Z", datetime(2024, 7, 1, 12, 0, 5, tzinfo=UTC), id="raw-watch-object"),
        pytest.param("2024-07-01T12:00:05+00:00", datetime(2024, 7, 1, 12, 0, 5, tzinfo=UTC), id="sanitized-list"),
        pytest.param("2024-07-01T12:00:05", None, id="no-zone"),
        pytest.param("yesterday", None, id="garbage"),
        pytest.param("", None, id="absent"),
    ],
)
def test_parse_time(text: str, expected: datetime | None) -> None:
    assert parse_time(text) == expected


def test_runtime_taint_input_reads_both_creation_timestamps() -> None:
    from api.package import Package

    obj = package("rr", runtimeRequired=True)
    obj["metadata"]["creationTimestamp"] = "2024-07-01T12:00:00Z"
    rr = runtime_package(Package.from_k8s(obj))
    assert rr.name == "rr" and rr.spec.runtime_required and rr.created == datetime(2024, 7, 1, 12, tzinfo=UTC)
    taint = {"key": keys.RUNTIME_REQUIRED_TAINT_KEY, "value": "true", "effect": "NoSchedule", "timeAdded": None}
    node = {"metadata": {"name": "n", "creationTimestamp": "2024-07-01T12:00:01Z", "labels": {"a": "b"}},
            "spec": {"taints": [taint]}}
    built = runtime_taint_input(node, [rr])
    assert built.node_created == datetime(2024, 7, 1, 12, 0, 1, tzinfo=UTC)
    assert built.node == NodeView("n", {"a": "b"}, [{"key": keys.RUNTIME_REQUIRED_TAINT_KEY, "value": "true",
                                                    "effect": "NoSchedule"}])
    assert built.packages == [rr]


def test_status_patch_nulls_removed_keys_and_skips_equal() -> None:
    assert status_patch({"phase": "Complete"}, {"phase": "Complete"}) is None
    assert status_patch({"phase": "Complete", "version": "1"}, {"phase": "Paused"}) == {
        "phase": "Paused", "version": None}
    # Empty strings are left out (the 1.20 apiserver would store them as null).
    assert status_patch({"phase": "X"}, {"phase": "X", "message": ""}) is None
    assert without_empty_strings({"a": "", "c": [{"m": "", "t": "Ready"}]}) == {"c": [{"t": "Ready"}]}


def test_lease_expiry() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert lease_expired(None, 15, now)
    assert not lease_expired(now - timedelta(seconds=10), 15, now)
    assert lease_expired(now - timedelta(seconds=16), 15, now)


def test_cache_sync_replaces_and_events_update() -> None:
    cache = ObjectCache()
    cache.apply(WatchEvent("Node", SYNC, objects=[node("a", {}), node("b", {})]))
    assert sorted(cache.of("Node")) == ["a", "b"] and "Node" in cache.synced
    previous = cache.apply(WatchEvent("Node", "MODIFIED", obj=node("a", {"x": "1"})))
    assert previous == node("a", {})
    cache.apply(WatchEvent("Node", "DELETED", obj=node("b", {})))
    cache.apply(WatchEvent("Node", SYNC, objects=[node("c", {})]))
    assert sorted(cache.of("Node")) == ["c"]

"""The bridge's pure decisions: per Package object (`decisions`) and per fleet (`fleets`)."""

from __future__ import annotations

from typing import Any

import pytest

from api.package import Package
from api.policy import DeploymentPolicy
from crd_bridge.decisions import Action, PackageFacts, decide_package
from crd_bridge.fleets import Change, FleetFacts, desired_fleet, package_changes, raw_fleet, spec_digest
from crd_bridge.fleets import PackageFacts as Facts
from protocol.fleet import FleetSpec, PackageEntry


@pytest.mark.parametrize(
    ("facts", "actions"),
    [
        pytest.param(PackageFacts("p", valid=True), [], id="valid-plain"),
        pytest.param(PackageFacts("p", valid=True, uninstall_enabled=True), [Action.ADD_FINALIZER], id="add-finalizer"),
        pytest.param(PackageFacts("p", valid=True, has_finalizer=True), [Action.REMOVE_FINALIZER],
                     id="uninstall-disabled-removes-finalizer"),
        pytest.param(PackageFacts("p", valid=False), [Action.WRITE_INVALID_STATUS], id="invalid"),
        pytest.param(PackageFacts("p", valid=True, deleting=True, has_finalizer=True, carried=True), [],
                     id="deleting-still-uninstalling"),
        pytest.param(PackageFacts("p", valid=True, deleting=True, has_finalizer=True, carried=False),
                     [Action.REMOVE_FINALIZER], id="deleting-uninstalled"),
        pytest.param(PackageFacts("p", valid=False, deleting=True), [], id="deleting-without-finalizer"),
    ],
)
def test_decide_package(facts: PackageFacts, actions: list[Action]) -> None:
    assert decide_package(facts) == actions


def a_package(name: str, version: str = "1.0.0", policy: str | None = "gpu", **spec: Any) -> Package:
    body: dict[str, Any] = {"version": version, "image": f"example.test/{name}:{version}", **spec}
    if policy:
        body["deploymentPolicy"] = policy
    return Package.from_k8s({"metadata": {"name": name, "generation": 3, "uid": f"uid-{name}"}, "spec": body})


POLICY = DeploymentPolicy.from_k8s({"metadata": {"name": "gpu", "generation": 7},
                                    "spec": {"default": {"budget": {"count": 2}}}})


def test_valid_packages_of_the_fleet_are_carried_with_the_policy() -> None:
    facts = FleetFacts([Facts("a", "gpu", a_package("a")), Facts("b", "default", a_package("b", policy=None))], POLICY)
    spec = desired_fleet("gpu", facts, None)
    assert [e.name for e in spec.packages] == ["a"]
    assert spec.policy == POLICY.spec.dump() and spec.policy_generation == 7
    assert spec.packages[0].generation == 3 and spec.packages[0].uid == "uid-a"
    assert desired_fleet("default", facts, None).policy is None


def test_invalid_package_keeps_the_entry_last_handed_over() -> None:
    before = FleetSpec("gpu", POLICY.spec.dump(), 7, [PackageEntry("a", {"version": "0.9.0"}, 2)])
    spec = desired_fleet("gpu", FleetFacts([Facts("a", "gpu", None)], POLICY), before)
    assert spec.packages == before.packages
    assert desired_fleet("gpu", FleetFacts([Facts("a", "gpu", None)], POLICY), None).packages == []


def test_deleting_with_finalizer_is_uninstalled_and_without_is_gone() -> None:
    uninstalling = a_package("a", uninstall={"enabled": True})
    facts = FleetFacts([Facts("a", "gpu", uninstalling, deleting=True, has_finalizer=True),
                        Facts("b", "gpu", a_package("b"), deleting=True)], POLICY)
    spec = desired_fleet("gpu", facts, None)
    assert [(e.name, e.uninstall) for e in spec.packages] == [("a", True)]


def test_paused_by_annotation_travels_in_the_entry() -> None:
    paused = Package.from_k8s({"metadata": {"name": "a", "annotations": {"noderoll.io/pause": "true"}},
                               "spec": {"version": "1.0.0", "image": "x/y:1", "deploymentPolicy": "gpu"}})
    spec = desired_fleet("gpu", FleetFacts([Facts("a", "gpu", paused)], POLICY), None)
    assert spec.packages[0].paused


def test_invalid_policy_keeps_the_policy_last_handed_over() -> None:
    before = FleetSpec("gpu", {"default": {"budget": {"count": 5}}}, 6, [])
    spec = desired_fleet("gpu", FleetFacts([Facts("a", "gpu", a_package("a"))], None), before)
    assert (spec.policy, spec.policy_generation) == (before.policy, 6)


def test_digest_and_changes() -> None:
    one = desired_fleet("gpu", FleetFacts([Facts("a", "gpu", a_package("a"))], POLICY), None)
    same = desired_fleet("gpu", FleetFacts([Facts("a", "gpu", a_package("a"))], POLICY), None)
    bumped = desired_fleet("gpu", FleetFacts([Facts("a", "gpu", a_package("a", "1.1.0")),
                                              Facts("b", "gpu", a_package("b"))], POLICY), None)
    assert spec_digest(one) == spec_digest(same) != spec_digest(bumped)
    assert package_changes(one, bumped) == {"a": [Change.SPEC], "b": [Change.ADDED]}
    assert package_changes(bumped, one) == {"a": [Change.SPEC], "b": [Change.REMOVED]}


@pytest.mark.parametrize(
    ("obj", "fleet"),
    [
        pytest.param({"spec": {"deploymentPolicy": "gpu"}}, "gpu", id="named"),
        pytest.param({"spec": {}}, "default", id="none"),
        pytest.param({"spec": {"deploymentPolicy": 3}}, "default", id="garbage"),
        pytest.param({}, "default", id="no-spec"),
    ],
)
def test_raw_fleet(obj: dict[str, Any], fleet: str) -> None:
    assert raw_fleet(obj) == fleet

"""Deletion protection, the pure rules (crd_bridge/protection.py)."""

from __future__ import annotations

from api import keys
from crd_bridge.fleets import FleetFacts, PackageFacts, desired_fleet
from crd_bridge.protection import (
    FinalizerAction,
    InUse,
    PackageRef,
    decide_finalizer,
    in_use_condition,
    package_ref,
    usage,
    with_condition,
)


def ref(name: str, fleet: str = "p", deps: tuple[str, ...] = (), deleting: bool = False,
        uninstalling: bool = False) -> PackageRef:
    return PackageRef(name, fleet, deps, deleting, uninstalling)


def test_users_of_a_policy_and_of_a_dependency() -> None:
    found = usage([ref("a"), ref("b", deps=("a",)), ref("c", fleet="q", deps=("a",))])
    assert found.policy_users == {"p": ["a", "b"], "q": ["c"]}
    assert found.package_users == {"a": ["b", "c"]}
    assert not found.held


def test_a_deleted_dependency_is_held_while_a_live_dependent_uses_it() -> None:
    found = usage([ref("a", deleting=True), ref("b", deps=("a",))])
    assert found.package_users == {"a": ["b"]} and found.held == {"a"}
    assert found.active == {"a", "b"}


def test_a_prune_releases_in_dependency_order() -> None:
    """Everything deleted: the dependent uninstalls, its dependency (same fleet) uninstalls alongside it."""
    refs = [ref("a", deleting=True, uninstalling=True), ref("b", deps=("a",), deleting=True, uninstalling=True)]
    found = usage(refs)
    assert found.package_users == {"a": ["b"]} and not found.held
    # Once b is uninstalled (finalizer gone) it uses nothing: a goes, then the policy.
    found = usage([refs[0], ref("b", deps=("a",), deleting=True)])
    assert not found.package_users and found.policy_users == {"p": ["a"]}
    assert usage([ref("a", deleting=True)]).policy_users == {}


def test_a_dependent_uninstalling_in_another_fleet_holds_its_dependency() -> None:
    found = usage([ref("a", deleting=True, uninstalling=True),
                   ref("b", fleet="q", deps=("a",), deleting=True, uninstalling=True)])
    assert found.held == {"a"}


def test_a_deleted_package_without_uninstall_uses_nothing_unless_kept() -> None:
    # b (deleted, no uninstall) is kept by c, so it still uses a; d (deleted, unused) does not.
    found = usage([ref("a"), ref("b", deps=("a",), deleting=True), ref("c", deps=("b",)),
                   ref("d", deps=("a",), deleting=True)])
    assert found.package_users == {"a": ["b"], "b": ["c"]} and found.held == {"b"}


def test_a_cycle_of_deleted_packages_releases_itself() -> None:
    found = usage([ref("a", deps=("b",), deleting=True), ref("b", deps=("a",), deleting=True)])
    assert not found.active and not found.package_users


def test_finalizer_added_while_used_removed_once_unused() -> None:
    assert decide_finalizer(["b"], [], deleting=False) is FinalizerAction.ADD
    assert decide_finalizer(["b"], [], deleting=True) is None  # the API refuses it
    assert decide_finalizer(["b"], [keys.IN_USE_FINALIZER], deleting=True) is None
    assert decide_finalizer([], [keys.IN_USE_FINALIZER, keys.FINALIZER], deleting=True) is FinalizerAction.REMOVE
    assert decide_finalizer([], [], deleting=False) is None


def test_in_use_condition() -> None:
    used = in_use_condition(InUse(keys.PACKAGE_KIND, ["b"], False, 3), "t1")
    assert used is not None and (used["status"], used["reason"], used["observedGeneration"]) == ("True", "InUse", 3)
    assert "b" in used["message"]
    blocked = in_use_condition(InUse(keys.POLICY_KIND, ["b"], True, 3), "t2", [used])
    assert blocked is not None and blocked["reason"] == "DeletionBlocked" and blocked["lastTransitionTime"] == "t1"
    released = in_use_condition(InUse(keys.POLICY_KIND, [], True, 3), "t3", [blocked])
    assert released is not None and (released["status"], released["lastTransitionTime"]) == ("False", "t3")
    assert in_use_condition(InUse(keys.PACKAGE_KIND, [], False, 1), "t4") is None


def test_with_condition_replaces_only_its_type() -> None:
    status = {"phase": "Complete", "conditions": [{"type": "Ready"}, {"type": "InUse", "status": "True"}]}
    assert with_condition(status, {"type": "InUse", "status": "False"}, "InUse")["conditions"] == [
        {"type": "Ready"}, {"type": "InUse", "status": "False"}]
    assert with_condition({"conditions": [{"type": "InUse"}]}, None, "InUse") == {}


def test_package_ref_reads_the_raw_spec() -> None:
    obj = {"metadata": {"name": "b", "deletionTimestamp": "x", "finalizers": [keys.FINALIZER]},
           "spec": {"deploymentPolicy": "gpu", "dependsOn": {"a": "1.0.0"}}}
    assert package_ref(obj) == PackageRef("b", "gpu", ("a",), True, True)
    assert package_ref({"metadata": {"name": "x"}, "spec": {"dependsOn": ["bad"]}}).depends_on == ()


def test_a_held_package_keeps_its_entry_in_the_fleet() -> None:
    from api.package import Package

    package = Package.from_k8s({"metadata": {"name": "a", "generation": 1},
                                "spec": {"version": "1.0.0", "image": "x/a:1", "uninstall": {"enabled": True}}})
    held = PackageFacts("a", "default", package, deleting=True, has_finalizer=True, held=True)
    assert [(e.name, e.uninstall) for e in desired_fleet("default", FleetFacts([held]), None).packages] == [("a", False)]
    free = PackageFacts("a", "default", package, deleting=True, has_finalizer=True)
    assert [(e.name, e.uninstall) for e in desired_fleet("default", FleetFacts([free]), None).packages] == [("a", True)]

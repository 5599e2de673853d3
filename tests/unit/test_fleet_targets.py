"""Target selection of a fleet (planning/rollout/fleet_targets.py): each rule of its docstring, then properties."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.keys import NODE_IGNORE_LABEL, RUNTIME_REQUIRED_TAINT_KEY
from api.node_state import parse_node_state
from api.versions import same_version
from planning.node.node_plan import complete_version, plan_package
from planning.node.targets import NodeView
from planning.rollout.fleet_targets import (
    FleetPackage,
    FleetQuery,
    FleetSelection,
    NodeTargets,
    dependency_packages,
    fingerprint,
    select_fleet,
)
from tests.unit.fleet_builders import GPU, a_node, a_package, entry_record, recorded, taint

CPU = {"pool": "cpu"}
GARBAGE = "{garbage"


def category(found: NodeTargets | None, package: str) -> str:
    """Where `package` ended up on one node ("absent" when the node or the Package is not listed)."""
    if found is None:
        return "absent"
    for name in ("pending", "done", "paused"):
        if package in getattr(found, name):
            return name
    if package in found.blocked:
        return "blocked"
    if package in found.waiting:
        return "waiting"
    return "absent"


def classify(packages: Mapping[str, FleetPackage], node: NodeView,
             in_flight: Mapping[str, list[str]] | None = None) -> NodeTargets | None:
    selection = select_fleet(FleetQuery(packages, [node], in_flight or {}))
    return selection.nodes.get(node.name)


# --- one Package on one node --------------------------------------------------------------------

ONE_PACKAGE = [
    pytest.param({}, a_node(), False, "pending", "", id="selector-matches-work-to-do"),
    pytest.param({}, a_node(labels=CPU), False, "absent", "", id="selector-does-not-match"),
    pytest.param({"nodeSelector": None}, a_node(labels=CPU), False, "pending", "", id="no-selector-every-node"),
    pytest.param({}, a_node(labels={**GPU, NODE_IGNORE_LABEL: "true"}), False, "absent", "", id="ignored-node"),
    pytest.param({}, a_node(labels={**GPU, NODE_IGNORE_LABEL: "false"}), False, "pending", "",
                 id="ignore-label-false-is-not-ignored"),
    pytest.param({}, a_node(state=recorded(pkg="1.0.0")), False, "done", "", id="recorded-at-the-version-done"),
    pytest.param({}, a_node(state=recorded(pkg="0.9.0")), False, "pending", "", id="older-version-pending"),
    pytest.param({}, a_node(state=recorded(pkg=entry_record("1.0.0", "erroring"))), False, "pending", "",
                 id="recorded-erroring-pending"),
    pytest.param({"config": {"a.conf": "x"}}, a_node(state=recorded(pkg="1.0.0")), False, "pending", "",
                 id="config-changed-pending"),
    pytest.param({}, a_node(taints=[taint("dedicated", value="infer")], state=recorded(pkg="1.0.0")), False,
                 "done", "", id="done-decided-before-taints"),
    pytest.param({}, a_node(taints=[taint("dedicated", value="infer")]), False, "blocked",
                 "taints not tolerated: dedicated=infer:NoSchedule", id="untolerated-noschedule"),
    pytest.param({}, a_node(taints=[taint("gone", "NoExecute")]), False, "blocked",
                 "taints not tolerated: gone:NoExecute", id="untolerated-noexecute"),
    pytest.param({}, a_node(taints=[taint("soft", "PreferNoSchedule")]), False, "pending", "",
                 id="prefer-noschedule-is-not-blocking"),
    pytest.param({}, a_node(taints=[taint("node.kubernetes.io/unschedulable")]), False, "pending", "",
                 id="cordon-taint-tolerated"),
    pytest.param({"additionalTolerations": [{"key": "dedicated", "operator": "Exists"}]},
                 a_node(taints=[taint("dedicated", value="infer")]), False, "pending", "",
                 id="additional-toleration"),
    pytest.param({}, a_node(taints=[taint(RUNTIME_REQUIRED_TAINT_KEY, value="true")]), False, "blocked",
                 RUNTIME_REQUIRED_TAINT_KEY, id="runtime-required-taint-blocks-others"),
    pytest.param({"runtimeRequired": True}, a_node(taints=[taint(RUNTIME_REQUIRED_TAINT_KEY, value="true")]),
                 False, "pending", "", id="runtime-required-taint-tolerated-by-runtime-packages"),
    pytest.param({}, a_node(taints=[taint("node.kubernetes.io/not-ready", "NoExecute")]), True, "pending", "",
                 id="carried-in-flight-whatever-the-taints"),
    pytest.param({}, a_node(state=GARBAGE), False, "blocked", "noderoll.io/state unreadable: not JSON",
                 id="unreadable-state-held"),
    pytest.param({}, a_node(state="[1]"), False, "blocked", "not a JSON object", id="unreadable-state-not-object"),
    pytest.param({}, a_node(labels=CPU, state=GARBAGE), False, "absent", "",
                 id="unreadable-state-outside-the-selector-not-listed"),
    pytest.param({}, a_node(state=GARBAGE), True, "pending", "", id="unreadable-state-carried-in-flight"),
]


@pytest.mark.parametrize(("fields", "node", "carried", "expected", "reason"), ONE_PACKAGE)
def test_one_package_on_one_node(fields: dict[str, Any], node: NodeView, carried: bool, expected: str,
                                 reason: str) -> None:
    found = classify({"pkg": a_package(**fields)}, node, {node.name: ["pkg"]} if carried else None)
    assert category(found, "pkg") == expected
    if reason:
        assert found is not None and reason in {**found.blocked, **found.waiting}["pkg"]


UNINSTALL = [
    pytest.param(a_node(state=recorded(pkg="1.0.0")), "pending", id="recorded-uninstalled"),
    pytest.param(a_node(), "absent", id="not-recorded-no-target"),
    pytest.param(a_node(labels=CPU, state=recorded(pkg="1.0.0")), "pending", id="recorded-outside-the-selector"),
    pytest.param(a_node(labels={**GPU, NODE_IGNORE_LABEL: "true"}, state=recorded(pkg="1.0.0")), "pending",
                 id="recorded-on-an-ignored-node"),
    pytest.param(a_node(state=recorded(pkg="1.0.0"), taints=[taint("dedicated")]), "blocked", id="tainted"),
    pytest.param(a_node(state=GARBAGE), "blocked", id="unreadable-state-held"),
]


@pytest.mark.parametrize(("node", "expected"), UNINSTALL)
def test_an_uninstall_targets_the_nodes_where_the_package_is_recorded(node: NodeView, expected: str) -> None:
    assert category(classify({"pkg": a_package(uninstall=True)}, node), "pkg") == expected


PAUSED = [
    pytest.param(a_node(), None, "paused", id="work-to-do-paused"),
    pytest.param(a_node(state=recorded(pkg="1.0.0")), None, "done", id="nothing-to-do-done"),
    pytest.param(a_node(taints=[taint("dedicated")]), None, "blocked", id="blocked-before-paused"),
    pytest.param(a_node(), ["pkg"], "pending", id="carried-in-flight"),
]


@pytest.mark.parametrize(("node", "carried", "expected"), PAUSED)
def test_a_paused_package_stays_out_of_new_windows(node: NodeView, carried: list[str] | None,
                                                    expected: str) -> None:
    found = classify({"pkg": a_package(paused=True)}, node, {node.name: carried} if carried else None)
    assert category(found, "pkg") == expected


# --- dependencies --------------------------------------------------------------------------------

NEEDS_BASE = {"dependsOn": {"base": "1.0.0"}}

DEPENDENCIES = [
    pytest.param({"base": a_package("base")}, a_node(), "pending", "", id="dependency-pending-same-window"),
    pytest.param({"base": a_package("base", "2.0.0")}, a_node(), "waiting",
                 "waits for dependency base 1.0.0 (2.0.0 is being rolled out)", id="dependency-pending-other-version"),
    pytest.param({"base": a_package("base", paused=True)}, a_node(), "waiting",
                 "waits for dependency base 1.0.0 (paused)", id="dependency-paused"),
    pytest.param({"base": a_package("base")}, a_node(taints=[taint("only-base")]), "waiting",
                 "not updatable on this node", id="dependency-blocked"),
    pytest.param({"base": a_package("base", dependsOn={"root": "1.0.0"})}, a_node(), "waiting",
                 "waits for dependency base 1.0.0 (not updatable on this node)", id="dependency-waiting-itself"),
    pytest.param({}, a_node(state=recorded(base="1.0.0")), "pending", "", id="outside-the-fleet-complete"),
    pytest.param({}, a_node(state=recorded(base="1.0")), "pending", "", id="outside-the-fleet-same-version"),
    pytest.param({}, a_node(state=recorded(base="0.9.0")), "waiting",
                 "waits for dependency base 1.0.0 (0.9.0 is installed)", id="outside-the-fleet-other-version"),
    pytest.param({}, a_node(state=recorded(base=entry_record("1.0.0", "in_progress"))), "waiting",
                 "(not complete on this node)", id="outside-the-fleet-unfinished"),
    pytest.param({}, a_node(), "waiting", "waits for dependency base 1.0.0 (not complete on this node)",
                 id="outside-the-fleet-absent"),
    pytest.param({"base": a_package("base")}, a_node(state=recorded(base="1.0.0")), "pending", "",
                 id="dependency-done-in-the-fleet"),
    pytest.param({"base": a_package("base", "2.0.0")}, a_node(state=recorded(base="2.0.0")), "waiting",
                 "(2.0.0 is installed)", id="dependency-done-at-another-version"),
]


@pytest.mark.parametrize(("others", "node", "expected", "reason"), DEPENDENCIES)
def test_a_dependent_is_pending_only_when_its_dependency_is_there(
    others: dict[str, FleetPackage], node: NodeView, expected: str, reason: str
) -> None:
    packages = {"app": a_package("app", **NEEDS_BASE), **others}
    if "base" in others and "only-base" in str(node.taints):
        # The taint blocks `base` only: `app` tolerates it.
        packages["app"] = a_package("app", **NEEDS_BASE, additionalTolerations=[{"key": "only-base",
                                                                                "operator": "Exists"}])
    found = classify(packages, node)
    assert category(found, "app") == expected
    if reason:
        assert found is not None and reason in found.waiting["app"]


def test_a_carried_dependent_and_an_uninstall_ignore_dependencies() -> None:
    packages = {"app": a_package("app", **NEEDS_BASE), "gone": a_package("gone", uninstall=True, **NEEDS_BASE)}
    node = a_node(state=recorded(gone="1.0.0"))
    found = classify(packages, node, {"n1": ["app"]})
    assert found is not None and sorted(found.pending) == ["app", "gone"]


def test_dependents_of_a_waiting_dependency_wait_too_whatever_the_order() -> None:
    # c -> b -> a, a waits for something outside the fleet: the whole chain waits (a fixpoint).
    packages = {"a": a_package("a", dependsOn={"ext": "1.0.0"}), "b": a_package("b", dependsOn={"a": "1.0.0"}),
                "c": a_package("c", dependsOn={"b": "1.0.0"})}
    found = classify(packages, a_node())
    assert found is not None and found.pending == [] and sorted(found.waiting) == ["a", "b", "c"]
    assert not found.eligible


# --- nodes ----------------------------------------------------------------------------------------


def test_eligible_nodes_have_a_package_pending_or_done_and_keep_only_compartment_labels() -> None:
    packages = {"a": a_package("a"), "b": a_package("b", paused=True)}
    nodes = [
        a_node("pending", labels={**GPU, "zone": "z1", "other": "x"}),
        a_node("done", labels={**GPU, "zone": "z2"}, state=recorded(a="1.0.0", b="1.0.0")),
        a_node("paused-only", labels={**GPU, "zone": "z3"}, state=recorded(a="1.0.0")),
        a_node("blocked", labels={**GPU, "zone": "z3"}, taints=[taint("dedicated")]),
        a_node("cpu", labels=CPU),
    ]
    selection = select_fleet(FleetQuery(packages, nodes, label_keys=["zone"]))
    assert sorted(selection.nodes) == ["blocked", "done", "paused-only", "pending"]
    assert [(n.name, dict(n.labels)) for n in selection.eligible()] == [
        ("done", {"zone": "z2"}), ("paused-only", {"zone": "z3"}), ("pending", {"zone": "z1"})]
    assert not selection.nodes["blocked"].eligible
    assert selection.nodes["pending"].packages() == ["a", "b"]


def test_dependency_packages_keep_the_records_of_every_dependency() -> None:
    packages = {"app": a_package("app", dependsOn={"base": "1.0.0", "ext": "2.0.0"}), "base": a_package("base")}
    assert dependency_packages(packages) == ["app", "base", "ext"]


FINGERPRINT_CHANGES = [
    pytest.param(a_node(labels={**GPU, "zone": "z2"}), id="label-value"),
    pytest.param(a_node(labels={**GPU, "zone": "z1", "x": "y"}), id="label-added"),
    pytest.param(a_node(labels={"zone": "z1"}), id="label-removed"),
    pytest.param(a_node(labels={**GPU, "zone": "z1"}, taints=[taint("a"), taint("b")]), id="taint-added"),
    pytest.param(a_node(labels={**GPU, "zone": "z1"}, taints=[taint("a", "NoExecute")]), id="taint-effect"),
    pytest.param(a_node(labels={**GPU, "zone": "z1"}, taints=[taint("a", value="v")]), id="taint-value"),
    pytest.param(a_node(labels={**GPU, "zone": "z1"}, taints=[taint("a")], state=recorded(a="1.0.0")),
                 id="annotation"),
]


@pytest.mark.parametrize("changed", FINGERPRINT_CHANGES)
def test_fingerprint_follows_labels_taints_and_the_state_annotation(changed: NodeView) -> None:
    base = a_node(labels={**GPU, "zone": "z1"}, taints=[taint("a")])
    assert fingerprint(changed) != fingerprint(base)
    same = NodeView("other-name", dict(reversed(list(base.labels.items()))), base.taints, base.state_annotation,
                    status_label="complete")
    assert fingerprint(same) == fingerprint(base)


# --- properties -------------------------------------------------------------------------------------

NAMES = ["a", "b", "c", "d"]
VERSIONS = ["1.0.0", "1.1.0", "2.0.0"]
TAINTS = [taint("dedicated", value="infer"), taint("soft", "PreferNoSchedule"), taint("gone", "NoExecute"),
          taint("node.kubernetes.io/unschedulable"), taint(RUNTIME_REQUIRED_TAINT_KEY, value="true")]


@st.composite
def packages_st(draw: st.DrawFn) -> dict[str, FleetPackage]:
    chosen = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4, unique=True))
    out = {}
    for name in chosen:
        fields: dict[str, Any] = {}
        deps = draw(st.lists(st.sampled_from([n for n in [*NAMES, "ext"] if n != name]), max_size=2, unique=True))
        if deps:
            fields["dependsOn"] = {d: draw(st.sampled_from(VERSIONS)) for d in deps}
        selector = draw(st.sampled_from(["gpu", "cpu", "none"]))
        if selector == "none":
            fields["nodeSelector"] = None
        elif selector == "cpu":
            fields["nodeSelector"] = {"matchLabels": CPU}
        if draw(st.booleans()):
            fields["additionalTolerations"] = [{"key": "dedicated", "operator": "Exists"}]
        fields["runtimeRequired"] = draw(st.booleans())
        out[name] = a_package(name, draw(st.sampled_from(VERSIONS)), paused=draw(st.booleans()),
                              uninstall=draw(st.integers(0, 5)) == 0, **fields)
    return out


@st.composite
def annotation_st(draw: st.DrawFn) -> str:
    if draw(st.integers(0, 9)) == 0:
        return GARBAGE
    entries = {}
    for name in draw(st.lists(st.sampled_from([*NAMES, "ext"]), max_size=5, unique=True)):
        entries[name] = entry_record(draw(st.sampled_from(VERSIONS)),
                                     draw(st.sampled_from(["complete", "complete", "erroring", "in_progress"])))
    return recorded(**entries)


@st.composite
def node_st(draw: st.DrawFn, name: str) -> NodeView:
    labels = {"pool": draw(st.sampled_from(["gpu", "cpu"]))}
    if draw(st.integers(0, 6)) == 0:
        labels[NODE_IGNORE_LABEL] = "true"
    return a_node(name, labels, draw(st.lists(st.sampled_from(TAINTS), max_size=2, unique_by=str)),
                  draw(annotation_st()))


@st.composite
def query_st(draw: st.DrawFn) -> FleetQuery:
    packages = draw(packages_st())
    nodes = [draw(node_st(f"n{i}")) for i in range(draw(st.integers(1, 4)))]
    in_flight = {}
    for node in nodes:
        carried = draw(st.lists(st.sampled_from(sorted(packages)), max_size=2, unique=True))
        if carried:
            in_flight[node.name] = carried
    return FleetQuery(packages, nodes, in_flight)


def _has_work(name: str, package: FleetPackage, node: NodeView) -> bool:
    state, _problem = parse_node_state(node.state_annotation)
    return plan_package(name, package.spec, state.packages.get(name), package.uninstall).has_work


@settings(max_examples=150, deadline=None)
@given(query_st())
def test_select_fleet_properties(query: FleetQuery) -> None:
    """The docstring's rules on random snapshots (one generation, three checks: the unit tier stays fast)."""
    selection = select_fleet(query)
    check_classes(query, selection)
    check_dependencies(query, selection)
    check_paused_and_non_candidates(query, selection)


def check_classes(query: FleetQuery, selection: FleetSelection) -> None:
    """One class per listed Package; pending means work; paused is never carried; carried is ours."""
    by_name = {n.name: n for n in query.nodes}
    for node_name, found in selection.nodes.items():
        node = by_name[node_name]
        carried = set(query.in_flight.get(node_name, ()))
        malformed = parse_node_state(node.state_annotation)[1] is not None
        classes = [found.pending, found.done, found.paused, list(found.blocked), list(found.waiting)]
        assert sum(len(c) for c in classes) == len(found.packages()), "a Package in two classes"
        assert found.eligible == bool(found.pending or found.done)
        for name in found.pending:
            # Never pending without work: the node's plan has stages to run (unreadable: only when carried).
            assert (malformed and name in carried) or _has_work(name, query.packages[name], node)
        for name in found.done:
            assert not malformed and not _has_work(name, query.packages[name], node)
        for name in found.paused:
            assert query.packages[name].paused and name not in carried
        for name in carried & set(found.packages()):
            assert name in found.pending or name in found.done, "a carried Package is the fleet's own"
        if malformed:
            assert not found.done and set(found.pending) <= carried


def check_dependencies(query: FleetQuery, selection: FleetSelection) -> None:
    """A dependent is pending only with each dependency pending at the version or complete there."""
    for node in query.nodes:
        found = selection.nodes.get(node.name)
        if found is None:
            continue
        state, _problem = parse_node_state(node.state_annotation)
        carried = set(query.in_flight.get(node.name, ()))
        for name in found.pending:
            package = query.packages[name]
            if package.uninstall or name in carried:
                continue
            for dep, version in package.spec.depends_on.items():
                in_window = dep in found.pending and same_version(query.packages[dep].spec.version, version)
                installed = complete_version(state, dep)
                assert in_window or (installed is not None and same_version(installed, version)), (name, dep)


def check_paused_and_non_candidates(query: FleetQuery, selection: FleetSelection) -> None:
    """A paused Package is pending only when carried; a node outside the selector or ignored is not a target."""
    for node in query.nodes:
        found = selection.nodes.get(node.name)
        carried = set(query.in_flight.get(node.name, ()))
        for name, package in query.packages.items():
            where = category(found, name)
            if package.paused and name not in carried:
                assert where != "pending"
            ignored = node.labels.get(NODE_IGNORE_LABEL) == "true"
            selected = package.spec.node_selector is None or package.spec.node_selector.matches(node.labels)
            if not package.uninstall and (ignored or (not selected and name not in carried)):
                # (A carried Package on a node whose state became unreadable stays the window's own.)
                assert where == "absent"


label_values = st.sampled_from(["a", "b", "gpu", "z-1", "x.y"])
labels_st = st.dictionaries(st.sampled_from(["pool", "zone", "example.com/rack"]), label_values, max_size=3)
taints_st = st.lists(st.builds(taint, st.sampled_from(["k", "dedicated", "example.com/t"]),
                               st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule"]), label_values),
                     max_size=3, unique_by=str)
annotations_st = st.sampled_from(["", GARBAGE, recorded(a="1.0.0"), recorded(a="1.1.0"), recorded(b="1.0.0")])


@settings(max_examples=200, deadline=None)
@given(labels_st, taints_st, annotations_st, labels_st, taints_st, annotations_st, st.randoms())
def test_fingerprint_changes_iff_labels_taints_or_annotation_change(
    labels: dict[str, str], taints: list[dict[str, str]], annotation: str,
    labels2: dict[str, str], taints2: list[dict[str, str]], annotation2: str, rnd: Any,
) -> None:
    first = a_node("x", labels, taints, annotation)
    shuffled = list(taints2)
    rnd.shuffle(shuffled)
    second = a_node("y", labels2, shuffled, annotation2)
    same = labels == labels2 and sorted(map(str, taints)) == sorted(map(str, taints2)) and annotation == annotation2
    assert (fingerprint(first) == fingerprint(second)) == same


@pytest.mark.parametrize(
    ("view", "down"),
    [
        pytest.param(NodeView("n", GPU, ready=True), "", id="up"),
        pytest.param(NodeView("n", GPU, ready=False), "NotReady", id="not-ready"),
        pytest.param(NodeView("n", GPU, ready=True, unschedulable=True), "cordoned", id="cordoned"),
        pytest.param(NodeView("n", GPU, status_label="in-progress", ready=True, unschedulable=True), "in a window",
                     id="in-a-window"),
    ],
)
def test_a_listing_for_floors_says_why_a_node_is_down_and_counts_its_units(view: NodeView, down: str) -> None:
    view = NodeView(view.name, view.labels, view.taints, "", view.status_label, False, view.ready, view.unschedulable,
                    {"nvidia.com/gpu": "8", "example.com/fpga": "2k", "bad.io/x": "lots"})
    packages = {"pkg": a_package()}
    found = select_fleet(FleetQuery(packages, [view], supply=True, resources=["nvidia.com/gpu", "bad.io/x", "a.io/b"]))
    targets = found.nodes["n"]
    assert targets.down == down and targets.capacity == {"nvidia.com/gpu": 8}
    plain = select_fleet(FleetQuery(packages, [view])).nodes["n"]
    assert plain.down == "" and plain.capacity == {}, "without floors or topology limits: not reported"


def test_drain_ahead_marks_do_not_change_a_fingerprint() -> None:
    plain = NodeView("n", GPU, [taint("k")])
    marked = NodeView("n", {**GPU, "noderoll.io/upcoming": "true"},
                      [taint("k"), taint("noderoll.io/upcoming", "PreferNoSchedule")])
    assert fingerprint(plain) == fingerprint(marked)
    assert fingerprint(plain) != fingerprint(NodeView("n", {**GPU, "rack": "r1"}, [taint("k")]))

"""Dependency order on one node (planning/node/dependencies.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.graph import find_cycle
from planning.node.dependencies import DependencyCycleError, ready_packages, topological_order


def test_order_puts_dependencies_first_ties_by_name() -> None:
    assert topological_order({"c": ["a"], "b": [], "a": [], "d": ["c", "b"]}) == ["a", "b", "c", "d"]


def test_dependencies_not_pending_impose_no_wait() -> None:
    assert topological_order({"b": ["installed-already"], "a": ["b"]}) == ["b", "a"]


def test_a_dependent_waits_only_for_its_own_dependencies() -> None:
    # NodeWright would hold c until every root (a and b) completed.
    pending = {"a": [], "b": [], "c": ["a"]}
    assert ready_packages(pending, complete={"a"}) == ["b", "c"]
    assert ready_packages(pending, complete=set()) == ["a", "b"]
    assert ready_packages(pending, complete={"a", "b", "c"}) == []


@pytest.mark.parametrize(
    ("graph", "path"),
    [
        ({"a": ["a"]}, ["a", "a"]),
        ({"a": ["b"], "b": ["a"]}, ["a", "b", "a"]),
        ({"a": ["b"], "b": ["c"], "c": ["a"], "d": []}, ["a", "b", "c", "a"]),
        ({"x": ["b"], "b": ["c"], "c": ["b"]}, ["b", "c", "b"]),
    ],
)
def test_cycles_are_named(graph: dict[str, list[str]], path: list[str]) -> None:
    assert find_cycle(graph) == path
    with pytest.raises(DependencyCycleError, match=" -> ".join(path)):
        topological_order(graph)


def test_no_cycle() -> None:
    assert find_cycle({"a": ["b"], "b": [], "c": ["a", "b"]}) is None


names = st.sampled_from(list("abcdefgh"))


@settings(max_examples=300)
@given(st.dictionaries(names, st.lists(names, max_size=4), max_size=8))
def test_order_respects_every_edge_or_reports_a_real_cycle(graph: dict[str, list[str]]) -> None:
    cycle = find_cycle(graph)
    if cycle is not None:
        assert cycle[0] == cycle[-1]
        for left, right in zip(cycle, cycle[1:], strict=False):
            assert right in graph[left]
        return
    order = topological_order(graph)
    assert sorted(order) == sorted(graph)
    position = {n: i for i, n in enumerate(order)}
    for name, deps in graph.items():
        for dep in deps:
            if dep in graph:
                assert position[dep] < position[name]

"""Nodes whose `noderoll.io/state` cannot be read, and nodes blocked by taints, on the time-skipping server.

* The node workflow holds such a node: the request is answered `blocked` with the reason, nothing
  runs, nothing is written over the annotation, and the node is marked.
* The fleet never asks a node it lists as unreadable, reports and marks it, and asks it once the
  annotation is removed; a complete node whose annotation turns to garbage is blocked again and,
  once the annotation is removed, gets a window (its record decides, not the fleet's memory).
* A taint-blocked node is labelled `blocked` once, not at every listing.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from api.enums import NodeMarkKind
from protocol import names
from protocol.fleet import FleetSpec
from tests.workflows.fleet_fakes import FakeNodes
from tests.workflows.node_fakes import FakeNode
from tests.workflows.node_harness import a_spec, harness
from tests.workflows.skipping import skip
from tests.workflows.test_fleet import fleet, package, policy, progress, settled

pytestmark = pytest.mark.workflows
GARBAGE = "{{{ written by hand"
ONE_AT_A_TIME = policy({"type": "fixed", "initialBatch": 1}, 1)


def spec(nodes: FakeNodes) -> FleetSpec:
    return FleetSpec("held", ONE_AT_A_TIME, 1, [package("sysctl")])


async def relist(env: WorkflowEnvironment, handle: WorkflowHandle[Any, Any]) -> None:
    """`nodes_changed`, then past the fleet's re-list interval (30 s) so that it lists again."""
    await handle.signal(names.SIGNAL_NODES_CHANGED)
    await skip(env, timedelta(seconds=40), handle)


async def test_node_workflow_holds_a_node_whose_state_is_unreadable(temporal_test_env: WorkflowEnvironment) -> None:
    node = FakeNode(name="node-held", state_annotation=GARBAGE)
    async with harness(temporal_test_env, node) as h:
        await h.request("sysctl", a_spec())
        [result] = await h.results(1)
        assert result.state == "blocked"
        assert result.message.startswith("noderoll.io/state unreadable: not JSON") and "held" in result.message
        await h.closed()
    names_called = node.names()
    assert node.stage_jobs() == [] and "write_node_state" not in names_called and "cordon_node" not in names_called
    assert node.state_annotation == GARBAGE, "the garbage is kept for inspection"
    [marked] = [call for name, call in node.calls if name == "mark_blocked_nodes"]
    assert [(m["node"], m["kind"]) for m in marked.marks] == [("node-held", NodeMarkKind.STATE_MALFORMED.value)]


async def test_fleet_holds_marks_and_releases_an_unreadable_node(temporal_test_env: WorkflowEnvironment) -> None:
    env, nodes = temporal_test_env, FakeNodes.of(2)
    nodes.nodes["n01"].garbage = GARBAGE
    async with fleet(env, nodes, spec(nodes)) as handle:
        report = await settled(handle)
        # Done with what it can reach; the held node is named with the reason and was never asked.
        assert report.counts == {"complete": 1, "blocked": 1}, report
        assert "noderoll.io/state unreadable" in report.packages["sysctl"].blocked["n01"]
        assert nodes.requested() == ["n00"]
        assert [(m.node, m.kind) for m in nodes.marks] == [("n01", NodeMarkKind.STATE_MALFORMED)]
        assert nodes.nodes["n01"].status_label == "blocked" and nodes.nodes["n01"].state_malformed
        # More listings: the node shows it already, nothing is marked again.
        await relist(env, handle)
        await relist(env, handle)
        assert len(nodes.marks) == 1
        # An operator removes the annotation: the node gets its window, and shows readable again.
        nodes.nodes["n01"].garbage = ""
        await relist(env, handle)
        report = await settled(handle)
        assert nodes.requested() == ["n00", "n01"]
        assert nodes.marks[-1].kind is NodeMarkKind.STATE_REPAIRED and not nodes.nodes["n01"].state_malformed
    assert report.counts == {"complete": 2} and not report.packages["sysctl"].blocked, report


async def test_a_complete_node_garbled_later_is_blocked_then_updated_once_cleared(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    env, nodes = temporal_test_env, FakeNodes.of(1)
    async with fleet(env, nodes, spec(nodes)) as handle:
        await settled(handle)
        nodes.nodes["n00"].garbage = GARBAGE
        await relist(env, handle)
        report = await progress(handle)
        assert report.counts == {"blocked": 1} and "unreadable" in report.packages["sysctl"].blocked["n00"], report
        nodes.nodes["n00"].garbage = ""
        nodes.nodes["n00"].recorded.clear()  # the operator removed the annotation: nothing recorded
        await relist(env, handle)
        # Nothing recorded any more: the node is asked again (its checks decide), not counted done.
        report = await settled(handle, wave=1)
        assert nodes.requested() == ["n00", "n00"]
    assert report.counts == {"complete": 1} and not report.packages["sysctl"].blocked, report


async def test_a_taint_blocked_node_is_labelled_once(temporal_test_env: WorkflowEnvironment) -> None:
    env, nodes = temporal_test_env, FakeNodes.of(2)
    nodes.nodes["n01"].taints = [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]
    async with fleet(env, nodes, spec(nodes)) as handle:
        report = await settled(handle)
        assert "dedicated=infer:NoSchedule" in report.packages["sysctl"].blocked["n01"]
        for _ in range(3):
            await relist(env, handle)
        assert [(m.node, m.kind) for m in nodes.marks] == [("n01", NodeMarkKind.BLOCKED)]
        assert nodes.nodes["n01"].status_label == "blocked"
        nodes.nodes["n01"].taints = []
        await relist(env, handle)
        report = await settled(handle)
        assert report.counts == {"complete": 2} and not report.packages["sysctl"].blocked, report
    assert nodes.requested() == ["n00", "n01"]

"""Nodes whose `noderoll.io/state` cannot be read, and nodes blocked by taints, on the time-skipping server.

* The node workflow holds such a node: the request is answered `blocked` (held, with the reason),
  nothing runs, nothing is written over the annotation, and the node is marked.
* The rollout never requests a node it lists as unreadable, reports and marks it, and requests it
  once the annotation is removed; a complete node whose annotation turns to garbage is blocked
  again and, once the annotation is removed, gets a window (its record decides, not the rollout's
  memory); a node its node workflow held is requested again once a listing finds it readable.
* A taint-blocked node is labelled `blocked` once, not at every listing.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.testing import WorkflowEnvironment

from api.enums import NodeMarkKind, RolloutPhase, State
from tests.workflows.node_fakes import FakeNode
from tests.workflows.rollout_fakes import RebootingFleet, answer
from tests.workflows.test_node_workflow import a_spec, harness
from tests.workflows.test_rollout import SPEC, policy
from tests.workflows.test_rollout_targets import poll, record, rollout
from workflows.messages import SIGNAL_NODES_CHANGED

GARBAGE = "{{{ written by hand"
ONE_AT_A_TIME = policy({"type": "fixed", "initialBatch": 1}, 1)


async def test_node_workflow_holds_a_node_whose_state_is_unreadable(temporal_test_env: WorkflowEnvironment) -> None:
    node = FakeNode(name="node-held", state_annotation=GARBAGE)
    async with harness(temporal_test_env, node) as h:
        await h.request("sysctl", a_spec())
        [result] = await h.results(1)
        assert (result.state, result.held) == ("blocked", True)
        assert result.message.startswith("noderoll.io/state unreadable: not JSON") and "held" in result.message
        await h.closed()
    names = node.names()
    assert node.stage_jobs() == [] and "write_node_state" not in names and "cordon_node" not in names
    assert node.state_annotation == GARBAGE, "the garbage is kept for inspection"
    [marked] = [call for name, call in node.calls if name == "mark_blocked_nodes"]
    assert [(m.node, m.kind) for m in marked.marks] == [("node-held", NodeMarkKind.STATE_MALFORMED)]


async def test_rollout_holds_marks_and_releases_an_unreadable_node(temporal_test_env: WorkflowEnvironment) -> None:
    env, fleet = temporal_test_env, RebootingFleet.of(2, auto=False)
    fleet.nodes[1].state_annotation = GARBAGE
    async with rollout(env, fleet, ONE_AT_A_TIME, dict(SPEC)) as (handle, _name):
        await poll(env, handle, lambda p: bool(fleet.outstanding))
        await fleet.finish(env.client)
        report = await poll(env, handle, lambda p: p.phase is RolloutPhase.COMPLETE)
        # Done with what it can reach; the held node is named with the reason and was never asked.
        assert report.counts == {State.COMPLETE.value: 1, State.BLOCKED.value: 1}, report
        assert "noderoll.io/state unreadable" in report.blocked["n01"] and fleet.requested() == ["n00"]
        assert [(m.node, m.kind) for m in fleet.marks] == [("n01", NodeMarkKind.STATE_MALFORMED)]
        assert fleet.nodes[1].status_label == "blocked" and fleet.nodes[1].state_malformed
        # More listings: the node shows it already, nothing is marked again.
        await handle.signal(SIGNAL_NODES_CHANGED)
        await env.sleep(timedelta(minutes=1))
        assert len(fleet.marks) == 1
        # An operator removes the annotation: the node gets its window, and shows readable again.
        fleet.nodes[1].state_annotation = ""
        await handle.signal(SIGNAL_NODES_CHANGED)
        await poll(env, handle, lambda p: bool(fleet.outstanding))
        assert fleet.requested() == ["n00", "n01"]
        assert fleet.marks[-1].kind is NodeMarkKind.STATE_REPAIRED and not fleet.nodes[1].state_malformed
        await fleet.finish(env.client)
        report = await poll(env, handle, lambda p: p.phase is RolloutPhase.COMPLETE)
    assert report.counts == {State.COMPLETE.value: 2} and not report.blocked, report


async def test_a_complete_node_garbled_later_is_blocked_then_updated_once_cleared(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    env, fleet = temporal_test_env, RebootingFleet.of(1, auto=False)
    async with rollout(env, fleet, ONE_AT_A_TIME, dict(SPEC)) as (handle, name):
        await poll(env, handle, lambda p: bool(fleet.outstanding))
        await fleet.finish(env.client)
        await poll(env, handle, lambda p: p.phase is RolloutPhase.COMPLETE and p.counts == {"complete": 1})
        fleet.nodes[0].state_annotation = record(name)[:-5]  # the complete record, cut short
        await handle.signal(SIGNAL_NODES_CHANGED)
        report = await poll(env, handle, lambda p: bool(p.blocked))
        assert report.counts == {State.BLOCKED.value: 1} and "unreadable" in report.blocked["n00"], report
        fleet.nodes[0].state_annotation = ""
        await handle.signal(SIGNAL_NODES_CHANGED)
        # Nothing recorded any more: the node is asked again (its checks decide), not counted done.
        await poll(env, handle, lambda p: bool(fleet.outstanding))
        assert fleet.requested() == ["n00", "n00"]
        await fleet.finish(env.client)
        report = await poll(env, handle, lambda p: p.phase is RolloutPhase.COMPLETE and not p.blocked)
    assert report.counts == {State.COMPLETE.value: 1}, report


async def test_a_node_held_by_its_node_workflow_is_asked_again_once_readable(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    env, fleet = temporal_test_env, RebootingFleet.of(1, auto=False)
    async with rollout(env, fleet, ONE_AT_A_TIME, dict(SPEC)) as (handle, _name):
        await poll(env, handle, lambda p: bool(fleet.outstanding))
        # Garbled between the listing and the window, repaired before the next listing.
        request = fleet.outstanding.pop("n00")
        await answer(env.client, "n00", request, State.BLOCKED, held=True)
        await handle.signal(SIGNAL_NODES_CHANGED)
        await poll(env, handle, lambda p: bool(fleet.outstanding))
        assert fleet.requested() == ["n00", "n00"]
        await fleet.finish(env.client)
        report = await poll(env, handle, lambda p: p.phase is RolloutPhase.COMPLETE)
    assert report.counts == {State.COMPLETE.value: 1} and not report.blocked, report


async def test_a_taint_blocked_node_is_labelled_once(temporal_test_env: WorkflowEnvironment) -> None:
    env, fleet = temporal_test_env, RebootingFleet.of(2, auto=False)
    fleet.nodes[1].taints = [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]
    async with rollout(env, fleet, ONE_AT_A_TIME, dict(SPEC)) as (handle, _name):
        await poll(env, handle, lambda p: bool(fleet.outstanding))
        await fleet.finish(env.client)
        report = await poll(env, handle, lambda p: p.phase is RolloutPhase.COMPLETE)
        assert "dedicated=infer:NoSchedule" in report.blocked["n01"]
        for _ in range(3):
            await handle.signal(SIGNAL_NODES_CHANGED)
            await env.sleep(timedelta(minutes=1))
        assert [(m.node, m.kind) for m in fleet.marks] == [("n01", NodeMarkKind.BLOCKED)]
        assert fleet.nodes[1].status_label == "blocked"
        fleet.nodes[1].taints = []
        await handle.signal(SIGNAL_NODES_CHANGED)
        await poll(env, handle, lambda p: bool(fleet.outstanding))
        await fleet.finish(env.client)
        report = await poll(env, handle, lambda p: p.phase is RolloutPhase.COMPLETE and not p.blocked)
    assert report.counts == {State.COMPLETE.value: 2}, report

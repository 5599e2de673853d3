"""Rollout target bookkeeping on the time-skipping server: windows in flight, dependencies, relabels.

* Nodes reboot in their window (not-ready taint) while the rollout re-lists: a node in flight stays
  a target until its answer, so the rollout is never Complete before every window ended, no node
  is asked twice, and 50 nodes run exactly the planned 7 batches; `nodes_changed` during a batch
  costs no listing (one before each batch instead).
* A node whose dependency is not complete there is reported blocked (with the reason), is never
  picked as canary or batch member, and is picked up once the dependency completes on it.
* A node relabelled out of the selector before its batch is not requested (targets are re-resolved
  before every batch) and is reported.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from api.enums import CanaryPhase, RolloutPhase, State
from api.keys import rollout_workflow_id
from api.policy import DeploymentPolicySpec
from planning.batches import PlannerInput, new_planner, next_batch, record_batch_result
from planning.compartments import NodeInfo
from planning.status import RolloutProgress
from tests.helpers import new_task_queue, unique_name
from tests.workflows.rollout_fakes import RebootingFleet, progress
from tests.workflows.test_node_workflow import register_search_attributes
from tests.workflows.test_rollout import SPEC, policy
from workflows.messages import (
    SIGNAL_NODES_CHANGED,
    SIGNAL_PACKAGE_DELETED,
    SIGNAL_SPEC_CHANGED,
    RolloutInput,
    SpecChange,
)
from workflows.rollout import RolloutWorkflow


@asynccontextmanager
async def rollout(
    env: WorkflowEnvironment, fleet: RebootingFleet, policy_spec: dict[str, Any], spec: dict[str, Any]
) -> AsyncIterator[tuple[WorkflowHandle[Any, Any], str]]:
    """Run a worker with the fakes and start `package/<unique>` for `spec`; delete it afterwards."""
    task_queue, name = new_task_queue(), unique_name("pkg")
    await register_search_attributes(env.client)
    async with Worker(env.client, task_queue=task_queue, workflows=[RolloutWorkflow], activities=fleet.activities()):
        handle = await env.client.start_workflow(
            RolloutWorkflow.run,
            RolloutInput(package=name, spec=spec, generation=1, policy_name="p", policy=policy_spec),
            id=rollout_workflow_id(name),
            task_queue=task_queue,
        )
        try:
            yield handle, name
        finally:
            await handle.signal(SIGNAL_PACKAGE_DELETED)
            await handle.result()


async def poll(
    env: WorkflowEnvironment, handle: WorkflowHandle[Any, Any], check: Callable[[RolloutProgress], bool],
    steps: int = 120,
) -> RolloutProgress:
    """Poll `progress` each virtual second until `check` holds."""
    report = await progress(env.client, handle.id)
    for _ in range(steps):
        if check(report):
            return report
        await env.sleep(timedelta(seconds=1))
        report = await progress(env.client, handle.id)
    raise AssertionError(f"condition not met; last progress: {report}")


def planned_batches(count: int, policy_spec: dict[str, Any]) -> list[int]:
    """The planner's batch sizes when every node succeeds."""
    names = [f"n{i:02d}" for i in range(count)]
    state = new_planner(PlannerInput(DeploymentPolicySpec.model_validate(policy_spec),
                                     [NodeInfo(n, {}) for n in names], "plan"))
    remaining, sizes = set(names), []
    while batch := next_batch(state, remaining):
        sizes.append(len(batch))
        remaining -= set(batch)
        record_batch_result(state, batch, [])
    return sizes


async def test_reboots_during_windows_keep_the_planned_batches(temporal_test_env: WorkflowEnvironment) -> None:
    env, fleet = temporal_test_env, RebootingFleet.of(50, auto=False)
    policy_spec = {"default": {"budget": {"percent": 25},
                               "strategy": {"type": "exponential", "initialBatch": 1, "growthFactor": 2}}}
    assert planned_batches(50, policy_spec) == [1, 2, 4, 8, 13, 13, 9]
    async with rollout(env, fleet, policy_spec, dict(SPEC)) as (handle, _name):
        for _ in range(20):
            report = await poll(env, handle, lambda p: bool(fleet.outstanding) or p.phase is RolloutPhase.COMPLETE)
            if not fleet.outstanding:
                break
            # The windows reboot their nodes and the bridge reports it: while the batch is out that
            # costs no listing (targets are re-resolved before the next batch) ...
            listings = fleet.listings
            await handle.signal(SIGNAL_NODES_CHANGED)
            await env.sleep(timedelta(seconds=60))
            assert fleet.listings == listings
            # Past the periodic re-list: the first answer wakes the rollout, which re-lists while the
            # other nodes of the batch still carry their reboot (not-ready) taints.
            await env.sleep(timedelta(seconds=300))
            report = await progress(env.client, handle.id)
            assert report.phase is not RolloutPhase.COMPLETE, (sorted(fleet.outstanding), report)
            assert report.counts.get(State.IN_PROGRESS.value) == len(fleet.outstanding), report
            await fleet.finish(env.client)
        assert report.phase is RolloutPhase.COMPLETE and report.counts == {State.COMPLETE.value: 50}, report
    assert [len(call) for call in fleet.calls] == [1, 2, 4, 8, 13, 13, 9]
    assert sorted(fleet.requested()) == sorted(n.name for n in fleet.nodes), "each node asked exactly once"


def record(package: str, version: str = "1.0.0") -> str:
    """A node state annotation where `package` is complete at `version`."""
    entry = {"version": version, "image": f"example.test/{package}:{version}", "state": "complete",
             "stage": "post-interrupt"}
    return json.dumps({"packages": {package: entry}})


async def test_dependency_blocked_nodes_are_reported_and_never_canary(temporal_test_env: WorkflowEnvironment) -> None:
    env, fleet = temporal_test_env, RebootingFleet.of(4, auto=False)
    base = unique_name("base")
    for node in fleet.nodes[2:]:
        node.state_annotation = record(base)
    spec = dict(SPEC, dependsOn={base: "1.0.0"})
    policy_spec = policy({"type": "fixed", "initialBatch": 2}, 2, {"count": 1})
    async with rollout(env, fleet, policy_spec, spec) as (handle, _name):
        report = await poll(env, handle, lambda p: bool(fleet.outstanding))
        assert sorted(fleet.outstanding) in (["n02"], ["n03"]), "the canary is a node whose dependency is complete"
        assert sorted(report.blocked) == ["n00", "n01"] and base in report.blocked["n00"], report
        await fleet.finish(env.client)
        report = await poll(env, handle, lambda p: bool(fleet.outstanding))
        await fleet.finish(env.client)
        report = await poll(env, handle, lambda p: p.counts.get(State.COMPLETE.value) == 2)
        await env.sleep(timedelta(minutes=2))
        report = await progress(env.client, handle.id)
        # Nodes waiting for a dependency: the rollout waits for them instead of reporting Complete.
        assert report.phase is RolloutPhase.PROGRESSING and "dependenc" in report.message, report
        assert report.canary_phase is CanaryPhase.PASSED and fleet.requested().count("n00") == 0
        for node in fleet.nodes[:2]:
            node.state_annotation = record(base)
        await handle.signal(SIGNAL_NODES_CHANGED)
        report = await poll(env, handle, lambda p: bool(fleet.outstanding))
        await fleet.finish(env.client)
        report = await poll(env, handle, lambda p: p.phase is RolloutPhase.COMPLETE)
    assert report.counts == {State.COMPLETE.value: 4} and not report.blocked, report
    assert sorted(fleet.requested()) == ["n00", "n01", "n02", "n03"]


async def test_node_relabelled_out_of_the_selector_before_its_batch(temporal_test_env: WorkflowEnvironment) -> None:
    env, fleet = temporal_test_env, RebootingFleet.of(3, auto=False)
    async with rollout(env, fleet, policy({"type": "fixed", "initialBatch": 1}, 1), dict(SPEC)) as (handle, _name):
        await poll(env, handle, lambda p: bool(fleet.outstanding))
        first = next(iter(fleet.outstanding))
        # Relabelled out while another node's window runs; no `nodes_changed` reaches the rollout.
        left = [n for n in fleet.nodes if n.name != first]
        left[0].labels = {"pool": "cpu"}
        for _ in range(3):
            await fleet.finish(env.client)
            report = await poll(env, handle, lambda p: bool(fleet.outstanding) or p.phase is RolloutPhase.COMPLETE)
    assert left[0].name not in fleet.requested(), fleet.requested()
    assert report.phase is RolloutPhase.COMPLETE and report.counts == {State.COMPLETE.value: 2}, report
    assert left[0].name in report.message and "selector" in report.message, report


async def test_a_spec_resent_mid_window_asks_no_node_twice(temporal_test_env: WorkflowEnvironment) -> None:
    env, fleet = temporal_test_env, RebootingFleet.of(4, auto=False)
    async with rollout(env, fleet, policy({"type": "fixed", "initialBatch": 2}, 2), dict(SPEC)) as (handle, _name):
        await poll(env, handle, lambda p: bool(fleet.outstanding))
        first = sorted(fleet.outstanding)
        # Same package spec, new generation and policy (a policy edit, or a bridge resending the spec).
        await handle.signal(SIGNAL_SPEC_CHANGED, SpecChange(dict(SPEC), 2, "p", policy({"type": "fixed", "initialBatch": 1}, 1)))
        report = await poll(env, handle, lambda p: p.phase is not RolloutPhase.PENDING)
        assert sorted(fleet.outstanding) == first and report.counts.get(State.IN_PROGRESS.value) == 2, report
        for _ in range(4):
            await fleet.finish(env.client)
            report = await poll(env, handle, lambda p: bool(fleet.outstanding) or p.phase is RolloutPhase.COMPLETE)
    assert report.phase is RolloutPhase.COMPLETE and report.counts == {State.COMPLETE.value: 4}, report
    assert sorted(fleet.requested()) == ["n00", "n01", "n02", "n03"], fleet.requested()

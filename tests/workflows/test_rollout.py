"""Rollout workflow on the time-skipping server with fake activities under the real names.

Covers canary (auto after a virtual soak, manual promotion), batch growth, halts at thresholds,
pause/resume/halt/retry, spec changes, joining nodes and continue-as-new keeping done work.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.io import NodeSnapshot
from api.enums import CanaryPhase, RolloutPhase, State
from api.keys import SIGNAL_HALT, SIGNAL_PAUSE, SIGNAL_RESUME, SIGNAL_RETRY, rollout_workflow_id
from planning.status import RolloutProgress
from tests.helpers import new_task_queue, unique_name
from tests.workflows.rollout_fakes import FakeFleet, answer, progress
from tests.workflows.test_node_workflow import register_search_attributes
from workflows.messages import (
    SIGNAL_NODES_CHANGED,
    SIGNAL_PACKAGE_DELETED,
    SIGNAL_SPEC_CHANGED,
    RolloutInput,
    SpecChange,
)
from workflows.rollout import RolloutWorkflow

SPEC = {"version": "1.0.0", "image": "example.test/sysctl:1.0.0", "nodeSelector": {"matchLabels": {"pool": "gpu"}}}


def policy(strategy: dict[str, Any], budget: int = 10, canary: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"default": {"budget": {"count": budget}, "strategy": strategy}}
    if canary:
        spec["canary"] = canary
    return spec


@asynccontextmanager
async def rollout(
    env: WorkflowEnvironment, fleet: FakeFleet, policy_spec: dict[str, Any] | None, **extra: Any
) -> AsyncIterator[WorkflowHandle[Any, Any]]:
    """Run a worker with the fakes and start `package/<unique>`; delete the Package afterwards."""
    task_queue, name = new_task_queue(), unique_name("pkg")
    await register_search_attributes(env.client)
    async with Worker(env.client, task_queue=task_queue, workflows=[RolloutWorkflow], activities=fleet.activities()):
        handle = await env.client.start_workflow(
            RolloutWorkflow.run,
            RolloutInput(package=name, spec=dict(SPEC), generation=1, policy_name="p" if policy_spec else None,
                         policy=policy_spec, **extra),
            id=rollout_workflow_id(name),
            task_queue=task_queue,
        )
        try:
            yield handle
        finally:
            await handle.signal(SIGNAL_PACKAGE_DELETED)
            await handle.result()


async def until(
    env: WorkflowEnvironment, handle: WorkflowHandle[Any, Any], check: Callable[[RolloutProgress], bool],
    step: timedelta = timedelta(seconds=1), steps: int = 60,
) -> RolloutProgress:
    """Poll `progress` in virtual time until `check` holds; fail with the last report otherwise."""
    report = await progress(env.client, handle.id)
    for _ in range(steps):
        if check(report):
            return report
        await env.sleep(step)
        report = await progress(env.client, handle.id)
    raise AssertionError(f"condition not met; last progress: {report}")


def complete(count: int) -> Callable[[RolloutProgress], bool]:
    return lambda p: p.phase is RolloutPhase.COMPLETE and p.counts.get(State.COMPLETE.value) == count


async def test_canary_auto_promotion_soaks_then_batches_grow(temporal_test_env: WorkflowEnvironment) -> None:
    fleet = FakeFleet.of(12)
    strategy = {"type": "exponential", "initialBatch": 1, "growthFactor": 2}
    started = await temporal_test_env.get_current_time()
    async with rollout(temporal_test_env, fleet, policy(strategy, 10, {"count": 1, "soakSeconds": 600})) as handle:
        report = await until(temporal_test_env, handle, complete(12), step=timedelta(seconds=30), steps=80)
        elapsed = await temporal_test_env.get_current_time() - started
    assert [len(call) for call in fleet.calls] == [1, 1, 2, 4, 4]
    assert elapsed >= timedelta(seconds=600)
    assert report.canary_phase is CanaryPhase.PASSED and len(report.canary_nodes) == 1
    assert sorted(fleet.requested()) == sorted(n.name for n in fleet.nodes)


async def test_manual_promotion_waits_for_resume(temporal_test_env: WorkflowEnvironment) -> None:
    fleet = FakeFleet.of(5)
    canary = {"count": 2, "promotion": "manual"}
    async with rollout(temporal_test_env, fleet, policy({"type": "fixed", "initialBatch": 3}, 3, canary)) as handle:
        report = await until(temporal_test_env, handle, lambda p: p.canary_phase is CanaryPhase.AWAITING_PROMOTION)
        await temporal_test_env.sleep(timedelta(hours=6))
        assert len(fleet.requested()) == 2 and report.phase is RolloutPhase.CANARY
        await handle.signal(SIGNAL_RESUME)
        await until(temporal_test_env, handle, complete(5))
    assert [len(call) for call in fleet.calls] == [2, 3]


async def test_failed_canary_halts_and_retry_continues(temporal_test_env: WorkflowEnvironment) -> None:
    fleet2 = FakeFleet.of(4)
    # Fail whichever node the canary picks: every node fails until retry.
    fleet2.fail = {n.name for n in fleet2.nodes}
    async with rollout(temporal_test_env, fleet2, policy({"type": "fixed", "initialBatch": 2}, 2, {"count": 1})) as handle:
        report = await until(temporal_test_env, handle, lambda p: p.phase is RolloutPhase.HALTED)
        await temporal_test_env.sleep(timedelta(hours=1))
        assert len(fleet2.requested()) == 1
        assert report.canary_phase is CanaryPhase.FAILED and list(report.erroring) == fleet2.requested()
        fleet2.fail = set()
        await handle.signal(SIGNAL_RETRY)
        await until(temporal_test_env, handle, complete(4))
    # The failed canary node got another window.
    assert fleet2.requested().count(fleet2.requested()[0]) == 2


async def test_failure_threshold_halts_and_resume_continues(temporal_test_env: WorkflowEnvironment) -> None:
    fleet = FakeFleet.of(6)
    strategy = {"type": "fixed", "initialBatch": 2, "batchThreshold": 100, "failureThreshold": 1, "safetyLimit": 100}
    async with rollout(temporal_test_env, fleet, policy(strategy, 2)) as handle:
        fleet.fail = {n.name for n in fleet.nodes}
        report = await until(temporal_test_env, handle, lambda p: p.phase is RolloutPhase.HALTED)
        assert len(fleet.requested()) == 2 and "failureThreshold 1" in report.message
        fleet.fail = set()
        await handle.signal(SIGNAL_RESUME)
        report = await until(temporal_test_env, handle, lambda p: p.phase is RolloutPhase.FAILED)
    # Resume continues with the nodes left; the two failed ones stay failed (retry would re-run them).
    assert report.counts == {State.COMPLETE.value: 4, State.ERRORING.value: 2}
    assert len(fleet.requested()) == 6


async def test_pause_halt_resume(temporal_test_env: WorkflowEnvironment) -> None:
    fleet = FakeFleet.of(4, auto=False)
    async with rollout(temporal_test_env, fleet, policy({"type": "fixed", "initialBatch": 2}, 2), paused=True) as handle:
        await until(temporal_test_env, handle, lambda p: p.phase is RolloutPhase.PAUSED)
        assert fleet.requested() == []
        await handle.signal(SIGNAL_RESUME)
        # In progress for the rollout as soon as it hands the requests over, before the fake's
        # activity has recorded them: wait for both.
        await until(temporal_test_env, handle,
                    lambda p: p.counts.get(State.IN_PROGRESS.value) == 2 and len(fleet.requests) == 2)
        first = list(fleet.requests)
        # Halt: the batch's requests are withdrawn; nothing new starts.
        await handle.signal(SIGNAL_HALT)
        report = await until(temporal_test_env, handle, lambda p: p.phase is RolloutPhase.HALTED)
        assert report.counts.get(State.WAITING.value) == 4
        await handle.signal(SIGNAL_RESUME)
        await until(temporal_test_env, handle, lambda p: len(fleet.requests) == 4)
        # The same nodes are asked again, with new request ids.
        assert [n for n, _ in fleet.requests[2:]] == [n for n, _ in first]
        await handle.signal(SIGNAL_PAUSE)
        for node, request in fleet.requests[2:]:
            await answer(temporal_test_env.client, node, request, State.COMPLETE)
        await until(temporal_test_env, handle, lambda p: p.phase is RolloutPhase.PAUSED)
        await temporal_test_env.sleep(timedelta(minutes=30))
        assert len(fleet.requests) == 4
        fleet.auto = True
        await handle.signal(SIGNAL_RESUME)
        await until(temporal_test_env, handle, complete(4))


async def test_spec_change_and_joining_nodes(temporal_test_env: WorkflowEnvironment) -> None:
    fleet = FakeFleet.of(3)
    async with rollout(temporal_test_env, fleet, policy({"type": "linear", "initialBatch": 1, "delta": 1}, 5)) as handle:
        await until(temporal_test_env, handle, complete(3))
        fleet.nodes.append(NodeSnapshot(name="late", labels={"pool": "gpu"}))
        fleet.nodes.append(NodeSnapshot(name="other", labels={"pool": "cpu"}))
        await handle.signal(SIGNAL_NODES_CHANGED)
        await until(temporal_test_env, handle, complete(4))
        assert "late" in fleet.requested() and "other" not in fleet.requested()
        before = len(fleet.requests)
        bumped = dict(SPEC, version="1.1.0")
        await handle.signal(SIGNAL_SPEC_CHANGED, SpecChange(bumped, 2, "p", policy({"type": "fixed", "initialBatch": 2}, 2)))
        await until(temporal_test_env, handle, lambda p: len(fleet.requests) == before + 4 and complete(4)(p))
    upgrades = fleet.requests[before:]
    assert sorted(n for n, _ in upgrades) == ["late", "n00", "n01", "n02"]
    assert {r.spec["version"] for _, r in upgrades} == {"1.1.0"} and {r.generation for _, r in upgrades} == {2}
    assert [len(call) for call in fleet.calls[-2:]] == [2, 2]


async def test_continue_as_new_keeps_done_work(temporal_test_env: WorkflowEnvironment) -> None:
    fleet = FakeFleet.of(20)
    strategy = {"type": "fixed", "initialBatch": 1}
    async with rollout(temporal_test_env, fleet, policy(strategy, 1), history_limit=40) as handle:
        first_run = (await handle.describe()).run_id
        await until(temporal_test_env, handle, complete(20), steps=200)
        assert (await handle.describe()).run_id != first_run
    # Every node was asked exactly once across the runs.
    assert sorted(fleet.requested()) == sorted(n.name for n in fleet.nodes)

"""Budget workflow on the time-skipping server: FIFO leases, limit, reclaim, idle end, continue-as-new."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

import pytest
from temporalio import workflow
from temporalio.client import Client, WorkflowContinuedAsNewError, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.describe import describe_workflow_runs
from workflows import budget as budget_module
from workflows.budget import BudgetWorkflow
from workflows.messages import (
    QUERY_BUDGET_STATUS,
    SIGNAL_BUDGET_ACQUIRE,
    SIGNAL_BUDGET_RELEASE,
    SIGNAL_LEASE_GRANTED,
    BudgetInput,
    BudgetStatus,
    LeaseGrant,
    LeaseRelease,
    LeaseRequest,
)

pytestmark = pytest.mark.workflows


@workflow.defn(name="TestLeaseHolder")
class LeaseHolder:
    """Stands in for a node window: records grants, waits to be told to finish."""

    def __init__(self) -> None:
        self.granted: list[str] = []
        self.finish = False

    @workflow.run
    async def run(self) -> list[str]:
        await workflow.wait_condition(lambda: self.finish)
        return self.granted

    @workflow.signal(name=SIGNAL_LEASE_GRANTED)
    def lease_granted(self, grant: LeaseGrant) -> None:
        self.granted.append(grant.lease_id)

    @workflow.signal
    def finish_now(self) -> None:
        self.finish = True

    @workflow.query
    def grants(self) -> list[str]:
        return self.granted


async def _holder(client: Client, task_queue: str) -> str:
    holder_id = f"holder-{uuid.uuid4()}"
    await client.start_workflow(LeaseHolder.run, id=holder_id, task_queue=task_queue)
    _started.setdefault(task_queue, []).append(holder_id)
    return holder_id


async def _acquire(
    client: Client, task_queue: str, budget_id: str, request: LeaseRequest, history_limit: int = 0
) -> None:
    await client.start_workflow(
        BudgetWorkflow.run,
        BudgetInput(history_limit=history_limit),
        id=budget_id,
        task_queue=task_queue,
        start_signal=SIGNAL_BUDGET_ACQUIRE,
        start_signal_args=[request],
    )


async def _status(client: Client, budget_id: str) -> BudgetStatus:
    return await client.get_workflow_handle(budget_id).query(QUERY_BUDGET_STATUS, result_type=BudgetStatus)


async def _settled_status(env: WorkflowEnvironment, budget_id: str, in_use: int) -> BudgetStatus:
    """Poll (in virtual time) until the budget shows `in_use` leases: grants take a task round trip."""
    status = await _status(env.client, budget_id)
    for _ in range(20):
        if status.in_use == in_use:
            break
        await env.sleep(timedelta(milliseconds=200))
        status = await _status(env.client, budget_id)
    return status


async def _grants(env: WorkflowEnvironment, holder: str, expected: list[str]) -> list[str]:
    """Poll (in virtual time) until the holder has seen `expected` grants."""
    got: list[str] = []
    for _ in range(20):
        got = await env.client.get_workflow_handle(holder).query(LeaseHolder.grants)
        if got == expected:
            break
        await env.sleep(timedelta(milliseconds=200))
    return got


@asynccontextmanager
async def _worker(env: WorkflowEnvironment, task_queue: str, budget_id: str) -> AsyncIterator[Worker]:
    """Run a worker; afterwards terminate every workflow left on the queue.

    A leftover timer on the shared time-skipping server would hold a workflow task without a worker
    and so lock time skipping for every later test.
    """
    worker = Worker(
        env.client, task_queue=task_queue, workflows=[BudgetWorkflow, LeaseHolder], activities=[describe_workflow_runs]
    )
    async with worker:
        try:
            yield worker
        finally:
            # Holders end by themselves (terminating one during its workflow task would leave the
            # test server's time-skipping lock taken); the budget, idle on a timer, is terminated.
            for holder in _started.pop(task_queue, []):
                handle = env.client.get_workflow_handle(holder)
                if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                    await handle.signal(LeaseHolder.finish_now)
                    await handle.result()
            try:
                await env.client.get_workflow_handle(budget_id).terminate("test cleanup")
            except RPCError:
                pass  # already closed


_started: dict[str, list[str]] = {}


async def test_leases_are_granted_fifo_within_the_limit(temporal_test_env: WorkflowEnvironment) -> None:
    client, task_queue = temporal_test_env.client, str(uuid.uuid4())
    budget_id = f"budget/p-{uuid.uuid4().hex[:8]}/gpu"
    async with _worker(temporal_test_env, task_queue, budget_id):
        holders = [await _holder(client, task_queue) for _ in range(3)]
        for index, holder in enumerate(holders):
            await _acquire(client, task_queue, budget_id, LeaseRequest(holder, f"lease-{index}", f"n{index}", 2))
        status = await _settled_status(temporal_test_env, budget_id, 2)
        assert (status.in_use, status.waiting, status.limit) == (2, 1, 2)
        assert sorted(status.holders) == ["lease-0", "lease-1"]
        assert await _grants(temporal_test_env, holders[2], []) == []

        await client.get_workflow_handle(budget_id).signal(SIGNAL_BUDGET_RELEASE, LeaseRelease("lease-0"))
        assert await _grants(temporal_test_env, holders[2], ["lease-2"]) == ["lease-2"]
        status = await _settled_status(temporal_test_env, budget_id, 2)
        assert sorted(status.holders) == ["lease-1", "lease-2"]


async def test_duplicate_acquire_is_answered_again_not_queued(temporal_test_env: WorkflowEnvironment) -> None:
    client, task_queue = temporal_test_env.client, str(uuid.uuid4())
    budget_id = f"budget/p-{uuid.uuid4().hex[:8]}/default"
    async with _worker(temporal_test_env, task_queue, budget_id):
        holder = await _holder(client, task_queue)
        request = LeaseRequest(holder, "lease-a", "n1", 1)
        await _acquire(client, task_queue, budget_id, request)
        assert await _grants(temporal_test_env, holder, ["lease-a"]) == ["lease-a"]
        # Once held, a repeated acquire (a retried sender) is answered again, never queued.
        await _acquire(client, task_queue, budget_id, request)
        status = await _settled_status(temporal_test_env, budget_id, 1)
        assert (status.in_use, status.waiting) == (1, 0)
        assert await _grants(temporal_test_env, holder, ["lease-a", "lease-a"]) == ["lease-a", "lease-a"]


async def test_lease_of_a_terminated_holder_is_reclaimed(temporal_test_env: WorkflowEnvironment) -> None:
    client, task_queue = temporal_test_env.client, str(uuid.uuid4())
    budget_id = f"budget/p-{uuid.uuid4().hex[:8]}/default"
    async with _worker(temporal_test_env, task_queue, budget_id):
        crashed, patient = await _holder(client, task_queue), await _holder(client, task_queue)
        await _acquire(client, task_queue, budget_id, LeaseRequest(crashed, "lease-x", "n1", 1))
        assert await _grants(temporal_test_env, crashed, ["lease-x"]) == ["lease-x"]
        await _acquire(client, task_queue, budget_id, LeaseRequest(patient, "lease-y", "n2", 1))
        await client.get_workflow_handle(crashed).terminate("simulated crash of a node window")
        start = await temporal_test_env.get_current_time()
        await temporal_test_env.sleep(budget_module.RECLAIM_INTERVAL * 2)
        assert await _grants(temporal_test_env, patient, ["lease-y"]) == ["lease-y"]
        status = await _status(client, budget_id)
        assert status.holders == {"lease-y": "n2"}
        elapsed = await temporal_test_env.get_current_time() - start
        assert elapsed <= budget_module.RECLAIM_INTERVAL * 3


async def test_unreachable_holder_gets_nothing(temporal_test_env: WorkflowEnvironment) -> None:
    client, task_queue = temporal_test_env.client, str(uuid.uuid4())
    budget_id = f"budget/p-{uuid.uuid4().hex[:8]}/default"
    async with _worker(temporal_test_env, task_queue, budget_id):
        patient = await _holder(client, task_queue)
        await _acquire(client, task_queue, budget_id, LeaseRequest("node/never-existed", "lease-g", "n0", 1))
        await _acquire(client, task_queue, budget_id, LeaseRequest(patient, "lease-p", "n1", 1))
        assert await _grants(temporal_test_env, patient, ["lease-p"]) == ["lease-p"]
        assert (await _status(client, budget_id)).holders == {"lease-p": "n1"}


async def test_idle_budget_completes(temporal_test_env: WorkflowEnvironment) -> None:
    client, task_queue = temporal_test_env.client, str(uuid.uuid4())
    budget_id = f"budget/p-{uuid.uuid4().hex[:8]}/default"
    async with _worker(temporal_test_env, task_queue, budget_id):
        holder = await _holder(client, task_queue)
        await _acquire(client, task_queue, budget_id, LeaseRequest(holder, "lease-1", "n1", 3))
        handle = client.get_workflow_handle(budget_id)
        await handle.signal(SIGNAL_BUDGET_RELEASE, LeaseRelease("lease-1"))
        await temporal_test_env.sleep(budget_module.IDLE_TIMEOUT + timedelta(seconds=5))
        assert (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED


async def test_continue_as_new_keeps_leases_and_queue(temporal_test_env: WorkflowEnvironment) -> None:
    client, task_queue = temporal_test_env.client, str(uuid.uuid4())
    budget_id = f"budget/p-{uuid.uuid4().hex[:8]}/default"
    async with _worker(temporal_test_env, task_queue, budget_id):
        holders = [await _holder(client, task_queue) for _ in range(2)]
        await _acquire(client, task_queue, budget_id, LeaseRequest(holders[0], "first", "n1", 1), 40)
        await _acquire(client, task_queue, budget_id, LeaseRequest(holders[1], "second", "n2", 1), 40)
        handle = client.get_workflow_handle(budget_id)
        first = client.get_workflow_handle(budget_id, run_id=(await handle.describe()).run_id)
        # Many duplicate acquires grow history past the limit and force a continue-as-new. They go
        # to the first run only (by run id): one sent to the next run could push that one past the
        # limit too, and a query racing a continue-as-new is never answered by the test server.
        for _ in range(50):
            try:
                await first.signal(SIGNAL_BUDGET_ACQUIRE, LeaseRequest(holders[1], "second", "n2", 1))
            except RPCError as err:
                assert err.status is RPCStatusCode.NOT_FOUND, err  # the first run has continued as new
                break
        with pytest.raises(WorkflowContinuedAsNewError):
            await first.result(follow_runs=False)
        status = await _status(client, budget_id)
        assert (await handle.describe()).run_id != first.run_id
        assert (status.holders, status.waiting) == ({"first": "n1"}, 1)
        await handle.signal(SIGNAL_BUDGET_RELEASE, LeaseRelease("first"))
        assert await _grants(temporal_test_env, holders[1], ["second"]) == ["second"]


async def test_grants_of_one_round_are_sent_together_in_fifo_order(temporal_test_env: WorkflowEnvironment) -> None:
    client, task_queue = temporal_test_env.client, str(uuid.uuid4())
    budget_id = f"budget/p-{uuid.uuid4().hex[:8]}/default"
    async with _worker(temporal_test_env, task_queue, budget_id):
        holders = [await _holder(client, task_queue) for _ in range(6)]
        # Limit 0 queues every request; raising the limit to 5 frees five at once: one round.
        for index, holder in enumerate(holders):
            await _acquire(client, task_queue, budget_id, LeaseRequest(holder, f"lease-{index}", f"n{index}", 0))
        assert (await _status(client, budget_id)).waiting == 6
        await _acquire(client, task_queue, budget_id, LeaseRequest(holders[0], "lease-0", "n0", 5))
        status = await _settled_status(temporal_test_env, budget_id, 5)
        assert (status.in_use, status.waiting) == (5, 1)
        for index, holder in enumerate(holders[:5]):
            assert await _grants(temporal_test_env, holder, [f"lease-{index}"]) == [f"lease-{index}"]

        events = [event async for event in client.get_workflow_handle(budget_id).fetch_history_events()]
        initiated = [e for e in events if e.HasField("signal_external_workflow_execution_initiated_event_attributes")]
        completed = [e.event_id for e in events if e.HasField("external_workflow_execution_signaled_event_attributes")]
        # Sent without waiting on each other: every signal of the round is commanded by the same
        # workflow task, before the first one is acknowledged, in FIFO order.
        attributes = [e.signal_external_workflow_execution_initiated_event_attributes for e in initiated]
        assert [a.workflow_execution.workflow_id for a in attributes] == holders[:5]
        assert len({a.workflow_task_completed_event_id for a in attributes}) == 1
        assert max(e.event_id for e in initiated) < min(completed)

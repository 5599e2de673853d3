"""`tests.workflows.skipping.skip`: a skip that ends just before a workflow's timer does not strand it.

On its own test server (a stranded run would leave the session's server's time-skipping lock taken):
a workflow wakes every minute, like the fleet's watchdog, and its signal's task is slow. Skipped with
`env.sleep` to 20 ms before the next round, the signal's task cancels a timer that fires while it
runs, and the server refuses it (the run never answers: seen when this test used `env.sleep`);
`skip` goes past the round first.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tests.helpers import new_task_queue
from tests.workflows.skipping import TIMER_GUARD, next_timer, settle, skip, start_server

pytestmark = pytest.mark.workflows

ROUND = timedelta(seconds=60)


@workflow.defn(name="TestPeriodicWaiter")
class PeriodicWaiter:
    """Wakes every `ROUND` (and on each poke) until stopped; returns how many rounds it woke for."""

    def __init__(self) -> None:
        self.pokes = 0
        self.seen = 0
        self.stopped = False

    @workflow.run
    async def run(self) -> int:
        rounds = 0
        while not self.stopped:
            try:
                await workflow.wait_condition(lambda: self.pokes > self.seen or self.stopped, timeout=ROUND)
            except TimeoutError:
                rounds += 1
            self.seen = self.pokes
        return rounds

    @workflow.signal
    def poke(self) -> None:
        self.pokes += 1
        # A slow task (a loaded machine's): CPU time while the server's clock runs at real pace. The task
        # cancels the round's timer and starts the next (no command that ends the run: with one, the
        # server fails the task as "unhandled command" and sends it again instead).
        sum(i * i for i in range(3_000_000))

    @workflow.signal
    def stop(self) -> None:
        self.stopped = True


async def just_before_the_round(env: WorkflowEnvironment, handle: WorkflowHandle[Any, Any]) -> timedelta:
    """The skip that ends 20 ms before the waiter's next round."""
    await settle(handle)
    due = await next_timer(handle)
    assert due is not None
    return due - (await env.get_current_time()).replace(tzinfo=None) - timedelta(milliseconds=20)


async def test_a_signal_after_a_skip_that_ends_just_before_a_timer_is_answered() -> None:
    env = await start_server()
    try:
        task_queue = new_task_queue()
        async with Worker(env.client, task_queue=task_queue, workflows=[PeriodicWaiter]):
            handle = await env.client.start_workflow(PeriodicWaiter.run, id=f"waiter-{task_queue}",
                                                     task_queue=task_queue)
            await skip(env, await just_before_the_round(env, handle), handle)
            after = await next_timer(handle)
            assert after is not None
            assert after - (await env.get_current_time()).replace(tzinfo=None) > TIMER_GUARD
            await handle.signal(PeriodicWaiter.poke)
            await handle.signal(PeriodicWaiter.stop)
            assert await handle.result(rpc_timeout=timedelta(seconds=30)) == 1
    finally:
        await env.shutdown()

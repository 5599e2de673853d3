"""A workflow task bound for the sticky queue of a worker that has gone, with a sticky schedule-to-start
far longer than noderoll's (`noderoll worker --sticky-schedule-to-start`, service/connection.py).

What a longer wait costs when a worker goes away rests on the SDK and the server, not on the
timeout: a worker shut down gracefully (`noderoll worker` on SIGTERM) tells the server, whose next
task for the run goes to the task queue at once; and once no poll has come from a sticky queue for
10 s (a worker that crashed), the server puts the run's next workflow task on the task queue for any
worker (temporalio/temporal#2811). If neither held, these tasks would wait the whole 600 s and the
tests would time out.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest
from temporalio import workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from tests.helpers import new_task_queue

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

LONGER_THAN_THE_TEST = timedelta(seconds=600)
# The server's rule: a sticky queue with no poll for this long is treated as gone.
NO_POLL_WINDOW_SECONDS = 10


@workflow.defn(name="TestWaitForGo")
class WaitForGo:
    """One workflow task to start (cached by the first worker, bound to its sticky queue), one after `go`."""

    def __init__(self) -> None:
        self._go = False

    @workflow.signal
    def go(self) -> None:
        self._go = True

    @workflow.run
    async def run(self) -> str:
        await workflow.wait_condition(lambda: self._go)
        return "went"


def sticky_worker(client: Client, queue: str) -> Worker:
    return Worker(client, task_queue=queue, workflows=[WaitForGo],
                  sticky_queue_schedule_to_start_timeout=LONGER_THAN_THE_TEST)


async def started_and_cached(client: Client, queue: str) -> WorkflowHandle[WaitForGo, str]:
    """Start the workflow and wait until its first workflow task is done (the run then sits in the
    worker's cache and its next task goes to that worker's sticky queue)."""
    handle = await client.start_workflow(WaitForGo.run, id=f"sticky-{uuid.uuid4().hex[:8]}", task_queue=queue)
    for _ in range(100):
        events = [event async for event in handle.fetch_history_events()]
        if any(event.HasField("workflow_task_completed_event_attributes") for event in events):
            return handle
        await asyncio.sleep(0.1)
    raise AssertionError("the first workflow task was not completed within 10 s")


async def test_a_worker_gone_for_10_seconds_holds_no_task_on_its_sticky_queue(temporal_client: Client) -> None:
    queue = new_task_queue()
    async with sticky_worker(temporal_client, queue):
        handle = await started_and_cached(temporal_client, queue)
    await asyncio.sleep(NO_POLL_WINDOW_SECONDS + 2)
    async with sticky_worker(temporal_client, queue):
        await handle.signal(WaitForGo.go)
        # Far below the 600 s the task would wait on the gone worker's sticky queue.
        assert await asyncio.wait_for(handle.result(), timeout=60) == "went"


async def test_a_worker_shut_down_gracefully_holds_no_task_on_its_sticky_queue(temporal_client: Client) -> None:
    queue = new_task_queue()
    async with sticky_worker(temporal_client, queue):
        handle = await started_and_cached(temporal_client, queue)
    async with sticky_worker(temporal_client, queue):  # at once: no 10 s without a poll
        await handle.signal(WaitForGo.go)
        # 0.1 s measured; far below the 600 s the task would wait on the gone worker's sticky queue.
        assert await asyncio.wait_for(handle.result(), timeout=NO_POLL_WINDOW_SECONDS) == "went"

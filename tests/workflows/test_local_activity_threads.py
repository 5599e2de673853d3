"""`noderoll worker`'s executor keeps threads for local activities (worker/run_worker.py, ADR 0020): with
every activity slot held by a long wait, a window's short calls still run at once."""

from __future__ import annotations

import asyncio
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from temporalio import activity, workflow
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from worker.tuning import LOCAL_ACTIVITY_SLOTS, activity_threads

pytestmark = pytest.mark.workflows

RELEASE = threading.Event()


@activity.defn(name="long_wait")
def long_wait() -> str:
    """Holds its thread like a stage pod's wait, until the test releases it."""
    RELEASE.wait(30)
    return "waited"


@activity.defn(name="short_call")
def short_call() -> str:
    return "answered"


@workflow.defn(name="LongWait")
class LongWait:
    @workflow.run
    async def run(self) -> str:
        return str(await workflow.execute_activity("long_wait", start_to_close_timeout=timedelta(seconds=60)))


@workflow.defn(name="ShortCall")
class ShortCall:
    @workflow.run
    async def run(self) -> str:
        return str(await workflow.execute_local_activity("short_call", start_to_close_timeout=timedelta(seconds=10)))


async def _short_call_answers_while_the_slots_are_busy(env: WorkflowEnvironment, threads: int) -> bool:
    """One activity slot, held by `long_wait`; does a local activity answer within 5 s?"""
    RELEASE.clear()
    queue = f"threads-{uuid.uuid4().hex[:8]}"
    with ThreadPoolExecutor(max_workers=threads) as pool:
        async with Worker(env.client, task_queue=queue, workflows=[LongWait, ShortCall],
                          activities=[long_wait, short_call], activity_executor=pool, max_concurrent_activities=1,
                          max_concurrent_local_activities=LOCAL_ACTIVITY_SLOTS):
            waiting = await env.client.start_workflow(LongWait.run, id=f"long-{queue}", task_queue=queue)
            await asyncio.sleep(0.5)  # the long wait holds its thread
            short = await env.client.start_workflow(ShortCall.run, id=f"short-{queue}", task_queue=queue)
            try:
                answered = await asyncio.wait_for(short.result(), timeout=5) == "answered"
            except TimeoutError:
                answered = False
            RELEASE.set()
            assert await waiting.result() == "waited"
            await short.result()
    return answered


async def test_a_local_activity_runs_while_every_activity_slot_holds_a_long_wait(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    # Real time (no time skipping): the point is a thread that is or is not free now.
    with temporal_test_env.auto_time_skipping_disabled():
        assert await _short_call_answers_while_the_slots_are_busy(temporal_test_env, activity_threads(1))
        # The executor sized for the activity slots alone: the local activity waits for the long wait.
        assert not await _short_call_answers_while_the_slots_are_busy(temporal_test_env, 1)

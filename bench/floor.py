"""Measure the bare Temporal floor of this machine: N workflows of L no-op local activities and K no-op
activities (a window's shape). Temporal I/O.

Same server, same worker shape as `noderoll worker` (sandboxed workflows, synchronous activities on
a pool of a thread per activity and local-activity slot, its workflow task polling): start N
workflows at once, wait for all, report workflows per second and activities per second. noderoll's
windows per second are compared to it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from temporalio.client import Client
from temporalio.worker import Worker

from bench.floor_workflow import FLOOR_WORKFLOW, FloorInput, FloorWorkflow, noop
from service.connection import ACTIVITY_THREADS
from worker.tuning import LOCAL_ACTIVITY_SLOTS, activity_threads, polling

START_CONCURRENCY = 50


@dataclass(frozen=True)
class FloorResult:
    """Throughput of the bare floor."""

    workflows: int
    activities_per_workflow: int
    seconds: float
    local_activities_per_workflow: int = 0

    @property
    def workflows_per_s(self) -> float:
        return self.workflows / self.seconds if self.seconds else 0.0

    @property
    def activities_per_s(self) -> float:
        return self.workflows * self.activities_per_workflow / self.seconds if self.seconds else 0.0


async def measure_floor(client: Client, workflows: int, activities: int, pollers: int | None = None,
                        local_activities: int = 0) -> FloorResult:
    """Run the floor once on a fresh task queue (its own worker in this process, sized and polling
    like a `noderoll worker --workflow-task-pollers pollers`)."""
    task_queue = f"bench-floor-{uuid.uuid4().hex[:8]}"
    run_id = uuid.uuid4().hex[:8]
    limit = asyncio.Semaphore(START_CONCURRENCY)
    with ThreadPoolExecutor(max_workers=activity_threads(ACTIVITY_THREADS), thread_name_prefix="floor") as pool:
        async with Worker(client, task_queue=task_queue, workflows=[FloorWorkflow], activities=[noop],
                          activity_executor=pool, max_concurrent_activities=ACTIVITY_THREADS,
                          max_concurrent_local_activities=LOCAL_ACTIVITY_SLOTS, **polling(pollers)):

            async def one(index: int) -> None:
                async with limit:  # bounded start rate; every workflow then runs concurrently
                    handle = await client.start_workflow(
                        FLOOR_WORKFLOW, FloorInput(activities, local_activities), id=f"bench-floor/{run_id}/{index}",
                        task_queue=task_queue)
                await handle.result()

            started = time.monotonic()
            await asyncio.gather(*(one(i) for i in range(workflows)))
            seconds = time.monotonic() - started
    return FloorResult(workflows, activities, seconds, local_activities)

"""The bench's bare-Temporal floor has a node window's shape (bench/floor.py, docs/benchmarks.md): its
short calls as local activities, then its activities, on a worker sized like `noderoll worker`."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from bench.floor import measure_floor
from bench.floor_workflow import FLOOR_WORKFLOW, FloorInput, FloorWorkflow, noop

pytestmark = pytest.mark.workflows


async def test_the_floor_workflow_runs_its_local_activities_then_its_activities(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    queue = f"floor-{uuid.uuid4().hex[:8]}"
    # Real time: skipped time would run out the local activities' timeouts while their threads work.
    with temporal_test_env.auto_time_skipping_disabled(), ThreadPoolExecutor(4) as pool:
        async with Worker(temporal_test_env.client, task_queue=queue, workflows=[FloorWorkflow],
                          activities=[noop], activity_executor=pool):
            handle = await temporal_test_env.client.start_workflow(
                FLOOR_WORKFLOW, FloorInput(activities=2, local_activities=3), id=queue, task_queue=queue)
            assert await handle.result() == 5
            events = [e.event_type async for e in handle.fetch_history_events()]
    markers = [i for i, e in enumerate(events) if e == EventType.EVENT_TYPE_MARKER_RECORDED]
    scheduled = [i for i, e in enumerate(events) if e == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    assert len(markers) == 3 and len(scheduled) == 2
    assert max(markers) < min(scheduled)  # the window's short calls come first


async def test_measure_floor_reports_the_shape_it_ran(temporal_test_env: WorkflowEnvironment) -> None:
    with temporal_test_env.auto_time_skipping_disabled():
        floor = await measure_floor(temporal_test_env.client, 4, 2, local_activities=3)
    assert (floor.workflows, floor.activities_per_workflow, floor.local_activities_per_workflow) == (4, 2, 3)
    assert floor.workflows_per_s > 0

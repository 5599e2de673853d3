"""A sync activity blocked longer than its heartbeat timeout stays alive with `keep_alive`.

One Kubernetes call under CPU saturation can outlast the heartbeat timeout (docs/benchmarks.md,
1,000 nodes); the activity here blocks the same way (on an event the test sets) for well over its
heartbeat timeout. With `keep_alive` the first attempt finishes; without it Temporal declares the
attempt lost and starts a second one.
"""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.heartbeats import beat, keep_alive
from tests.helpers import assert_eventually_async

pytestmark = pytest.mark.workflows

HEARTBEAT_TIMEOUT = timedelta(seconds=1)
_release: dict[str, threading.Event] = {}


def _blocked(key: str) -> list[str]:
    beat("before the blocking call")
    if not _release[key].wait(timeout=60):  # stands in for one slow API call: no beat of its own
        raise TimeoutError("never released")
    return [str(activity.info().attempt)]


@activity.defn(name="test_blocked_kept_alive")
@keep_alive
def blocked_kept_alive(key: str) -> list[str]:
    return _blocked(key)


@activity.defn(name="test_blocked_bare")
def blocked_bare(key: str) -> list[str]:
    return _blocked(key)


@workflow.defn(name="TestKeepAlive")
class KeepAliveWorkflow:
    @workflow.run
    async def run(self, activity_name: str, key: str) -> list[str]:
        return await workflow.execute_activity(
            activity_name, key, result_type=list[str], start_to_close_timeout=timedelta(seconds=60),
            heartbeat_timeout=HEARTBEAT_TIMEOUT, retry_policy=RetryPolicy(maximum_attempts=3),
        )


async def _run_blocked(client: Client, task_queue: str, activity_name: str) -> tuple[list[str], bytes]:
    """Run the activity until it blocked long enough; its result and the server's last details."""
    key = str(uuid.uuid4())
    _release[key] = threading.Event()
    handle = await client.start_workflow(KeepAliveWorkflow.run, args=[activity_name, key],
                                         id=f"keep-alive-{key}", task_queue=task_queue)

    started = time.monotonic()
    details: list[bytes] = []

    async def blocked_long_enough() -> bool:
        pending = (await handle.describe()).raw_description.pending_activities
        if pending and pending[0].heartbeat_details.payloads:
            details.append(pending[0].heartbeat_details.payloads[0].data)
        blocked_for = time.monotonic() - started
        # Four heartbeat timeouts blocked in one attempt (or a second attempt, the control's fate).
        return bool(pending) and (pending[0].attempt > 1 or blocked_for >= 4 * HEARTBEAT_TIMEOUT.total_seconds())

    await assert_eventually_async(blocked_long_enough, timeout=30)
    _release[key].set()
    return await handle.result(), (details[-1] if details else b"")


async def test_keep_alive_carries_a_blocked_activity_past_its_heartbeat_timeout(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    client, task_queue = temporal_test_env.client, str(uuid.uuid4())
    with ThreadPoolExecutor(4) as pool:
        async with Worker(client, task_queue=task_queue, workflows=[KeepAliveWorkflow],
                          activities=[blocked_kept_alive, blocked_bare], activity_executor=pool):
            kept = await _run_blocked(client, task_queue, "test_blocked_kept_alive")
            bare = await _run_blocked(client, task_queue, "test_blocked_bare")
    # The first attempt finished, and the background beats repeated the activity's own details.
    assert kept == (["1"], b'"before the blocking call"')
    assert bare[0] != ["1"]  # the control: without keep_alive the blocked attempt was declared lost

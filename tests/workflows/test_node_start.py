"""The node workflow started with its first request (issue 26 item 2: `protocol.node.start_window`),
on the time-skipping server with fake activities: the run takes the request from its input (no
signal), a retried hand-over of the same request to the open run is dropped (one answer), and a
second request while the run is open is signalled to it (one run, two windows)."""

from __future__ import annotations

import uuid

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment

from protocol.fleet import PackageOrder, WindowRequest
from protocol.names import SIGNAL_WINDOW
from protocol.node import Route, signal_node_workflow
from tests.workflows.node_harness import a_spec, harness

pytestmark = pytest.mark.workflows


def request(h: object, package: str) -> WindowRequest:
    collector = h.collector.id  # type: ignore[attr-defined]
    node = h.node.name  # type: ignore[attr-defined]
    return WindowRequest(fleet_workflow_id=collector, request_id=f"{collector}:{uuid.uuid4().hex[:8]}:{node}",
                         packages=[PackageOrder(package, a_spec(), 1)])


async def test_a_window_starts_its_run_and_a_retried_hand_over_is_dropped(temporal_test_env: WorkflowEnvironment) -> None:
    async with harness(temporal_test_env) as h:
        first = request(h, "sysctl")
        await signal_node_workflow(h.client, h.node.name, SIGNAL_WINDOW, first, Route(h.task_queue))
        await signal_node_workflow(h.client, h.node.name, SIGNAL_WINDOW, first, Route(h.task_queue))  # a retry
        [result] = await h.windows(1)
        assert result.request_id == first.request_id and result.outcomes["sysctl"].state == "complete"
        history = await h.client.get_workflow_handle(h.workflow_id).fetch_history()
        started = history.events[0].workflow_execution_started_event_attributes
        assert first.request_id in started.input.payloads[0].data.decode(), "the request came in the run's input"
        # The first request needed no signal: a duplicate, if it reached the run, was dropped.
        assert h.node.names().count("run_stage_pod") == 1
        assert len(await h.windows(1)) == 1
        signals = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED]
        assert len(signals) <= 1


async def test_a_request_to_an_open_run_is_signalled_to_it(temporal_test_env: WorkflowEnvironment) -> None:
    async with harness(temporal_test_env) as h:
        await signal_node_workflow(h.client, h.node.name, SIGNAL_WINDOW, request(h, "a"), Route(h.task_queue))
        await signal_node_workflow(h.client, h.node.name, SIGNAL_WINDOW, request(h, "b"), Route(h.task_queue))
        results = await h.windows(2)
        # Both answered, by one run or two: `a` ran (its run may have completed before `b` came, or
        # had started its window), or, still queued in the open run when `b` came from the same fleet,
        # was answered withdrawn as superseded (a fleet's newer request replaces its queued one).
        assert len(results) == 2, results
        [first, second] = results
        if first.withdrawn:
            assert "superseded" in first.message and not first.outcomes, first
        else:
            assert {p: o.state for p, o in first.outcomes.items()} == {"a": "complete"}, first
        assert {p: o.state for p, o in second.outcomes.items()} == {"b": "complete"}, second


def test_the_eager_start_is_asked_for_only_when_the_environment_says_so() -> None:
    from protocol.node_settings import EAGER_START_ENV, eager_node_start

    assert not eager_node_start({}) and not eager_node_start({EAGER_START_ENV: "0"})
    assert eager_node_start({EAGER_START_ENV: "1"}) and eager_node_start({EAGER_START_ENV: "True"})

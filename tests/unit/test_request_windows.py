"""`request_windows` hands a batch over concurrently, a bounded number at a time, and every node once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from activities import fleet, node_requests
from protocol.activities import RequestWindowsInput
from protocol.names import SIGNAL_WINDOW, node_workflow_id


class _Frontend:
    """Stands in for the Temporal client: each signal-with-start takes a moment; counts the overlap."""

    def __init__(self, fail_on: str = "") -> None:
        self.started: list[str] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.fail_on = fail_on

    async def start_workflow(self, workflow: str, arg: Any, *, id: str, start_signal: str, **_: Any) -> None:
        assert start_signal == SIGNAL_WINDOW
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.01)
            if id == self.fail_on:
                raise RuntimeError("frontend unavailable")
            self.started.append(id)
        finally:
            self.in_flight -= 1


def _input(count: int) -> RequestWindowsInput:
    nodes = [f"n{i:03d}" for i in range(count)]
    return RequestWindowsInput(requests=[{"node": n} for n in nodes], nodes=nodes, task_queue="q")  # type: ignore[misc]


def test_every_node_is_asked_once_with_bounded_overlap() -> None:
    frontend = _Frontend()
    asyncio.run(ActivityEnvironment(client=frontend).run(fleet.request_windows, _input(50)))  # type: ignore[arg-type]
    assert sorted(frontend.started) == sorted(node_workflow_id(f"n{i:03d}") for i in range(50))
    # Concurrent (the serial hand-over made a batch of 50 wait for 50 round trips), but bounded.
    assert 1 < frontend.most_in_flight <= node_requests.HAND_OVER_CONCURRENCY


def test_a_failed_call_fails_the_activity_so_it_is_retried() -> None:
    frontend = _Frontend(fail_on=node_workflow_id("n007"))
    with pytest.raises(RuntimeError, match="frontend unavailable"):
        asyncio.run(ActivityEnvironment(client=frontend).run(fleet.request_windows, _input(20)))  # type: ignore[arg-type]


def test_the_environment_can_make_the_hand_over_serial(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(node_requests.HAND_OVER_CONCURRENCY_ENV, "1")
    frontend = _Frontend()
    asyncio.run(ActivityEnvironment(client=frontend).run(fleet.request_windows, _input(10)))  # type: ignore[arg-type]
    assert len(frontend.started) == 10 and frontend.most_in_flight == 1
    monkeypatch.setenv(node_requests.HAND_OVER_CONCURRENCY_ENV, "many")
    with pytest.raises(ValueError, match="NODEROLL_HAND_OVER_CONCURRENCY='many': not a whole number"):
        node_requests.hand_over_concurrency()

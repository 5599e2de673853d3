"""The fleet's `progress` query is computed once per workflow task (`FleetWorkflow.progress`): asked again
between two tasks it answers from the last computation; the next task's state shows in the next answer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

import planning.views.fleet_status
from api.enums import RolloutPhase, State
from protocol.fleet import FleetSpec
from tests.helpers import assert_eventually_async, unique_name
from tests.workflows.fleet_fakes import FakeNodes
from tests.workflows.test_fleet import EXPONENTIAL, fleet, package, policy, progress

pytestmark = pytest.mark.workflows


def counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the calls of `fleet_progress` (the workflow imports it through the sandbox, unchanged)."""
    calls = [0]
    real: Callable[..., Any] = planning.views.fleet_status.fleet_progress

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(planning.views.fleet_status, "fleet_progress", counted)
    return calls


async def test_progress_is_computed_once_per_workflow_task(
    temporal_test_env: WorkflowEnvironment, monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = counting(monkeypatch)
    nodes = FakeNodes.of(2, auto=False)
    spec = FleetSpec(unique_name("query"), policy(EXPONENTIAL, budget=1), 1, [package("a")])
    async with fleet(temporal_test_env, nodes, spec) as handle:
        async def out() -> str:
            assert len(nodes.outstanding) == 1, nodes.outstanding
            [node] = nodes.outstanding
            report = await progress(handle)
            assert report.nodes[node].state == State.IN_PROGRESS.value, report.nodes
            return node

        first = await assert_eventually_async(out)
        before = calls[0]
        answers = [await progress(handle) for _ in range(5)]
        assert calls[0] == before, "asked again between two tasks, the query computed the report again"
        assert all(a == answers[0] for a in answers)

        await nodes.finish(temporal_test_env.client)  # a window result: a workflow task

        async def answered() -> bool:
            report = await progress(handle)
            assert report.nodes[first].state == State.COMPLETE.value, report.nodes
            return True

        await assert_eventually_async(answered)
        assert calls[0] > before

        async def next_out() -> bool:  # the fleet idle again before it ends (tests/workflows/skipping.py)
            report = await progress(handle)
            assert report.phase is RolloutPhase.PROGRESSING and len(nodes.outstanding) == 1, nodes.outstanding
            assert report.nodes[next(iter(nodes.outstanding))].state == State.IN_PROGRESS.value, report.nodes
            return True

        await assert_eventually_async(next_out)

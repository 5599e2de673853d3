"""Maintenance windows and analysis gates of a fleet, on the time-skipping server with fake activities.

Windows: nothing starts before the opening (phase Waiting, the opening in the progress, the
message and the Temporal UI details line), the wait is one durable timer (virtual time skips to
it), a node window in flight when the maintenance window closes finishes and nothing new starts
until the next opening. Gates (a fake `query_prometheus` under the real name): a failed gate
halts the fleet with the query, the value and the time; `resume` overrides it once; `count` and
`failureLimit`; a continuous gate stops new windows while those in flight finish; an unreachable
Prometheus is retried, then the gate fails with the reason.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from api.enums import RolloutPhase, State
from planning.views.fleet_status import FleetProgress
from protocol import names
from protocol.activities import PromSeries, QueryPrometheusInput, QueryPrometheusResult
from protocol.activity_refs import QUERY_PROMETHEUS
from protocol.errors import PROMETHEUS_UNAVAILABLE
from protocol.fleet import FleetInput, FleetSpec
from tests.helpers import assert_eventually_async, new_task_queue, unique_name
from tests.workflows.cancel_log import WindowCancelLog
from tests.workflows.fleet_fakes import FakeNodes
from tests.workflows.node_harness import register_search_attributes
from tests.workflows.skipping import end, skip
from tests.workflows.test_fleet import package, policy, progress, settled
from workflows.fleet import FleetWorkflow

DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
FIXED_2 = {"type": "fixed", "initialBatch": 2}


@dataclass
class FakePrometheus:
    """Answers `query_prometheus` from `values` (the query's current answer), recording each call's time."""

    # A number (one series), None (no series), a list of label dicts (one series each, value 1), or an exception.
    answer: Any = 0.0
    calls: list[tuple[str, datetime]] = field(default_factory=list)

    def activity(self) -> Callable[..., Any]:
        @activity.defn(name=QUERY_PROMETHEUS.name)
        async def query_prometheus(input: QueryPrometheusInput) -> QueryPrometheusResult:
            self.calls.append((input.query, activity.info().current_attempt_scheduled_time))
            if isinstance(self.answer, Exception):
                raise self.answer
            if self.answer is None:
                return QueryPrometheusResult("vector", [], "http://fake")
            if isinstance(self.answer, list):
                return QueryPrometheusResult("vector", [PromSeries(labels, "1") for labels in self.answer], "http://fake")
            return QueryPrometheusResult("vector", [PromSeries({"job": "gpu"}, f"{self.answer:g}")], "http://fake")

        return query_prometheus


@asynccontextmanager
async def fleet(env: WorkflowEnvironment, nodes: FakeNodes, spec: FleetSpec,
                prom: FakePrometheus | None = None) -> AsyncIterator[WorkflowHandle[Any, Any]]:
    """A worker with the fakes, and `fleet/<policy>` started with `spec` (signal-with-start, as the bridge)."""
    task_queue = new_task_queue()
    await register_search_attributes(env.client)
    activities = nodes.activities() + ([prom.activity()] if prom else [])
    async with Worker(env.client, task_queue=task_queue, workflows=[FleetWorkflow, WindowCancelLog],
                      activities=activities):
        handle = await env.client.start_workflow(
            FleetWorkflow.run, FleetInput(policy_name=spec.policy_name),
            id=names.fleet_workflow_id(spec.policy_name), task_queue=task_queue,
            start_signal=names.SIGNAL_FLEET_SPEC, start_signal_args=[spec],
        )
        try:
            yield handle
        finally:
            await end(handle)


def window(start: datetime, minutes: int, days: tuple[str, ...] | None = None) -> dict[str, Any]:
    """A UTC window opening at `start` (whole minutes) for `minutes`, on `start`'s weekday unless `days`."""
    end = start + timedelta(minutes=minutes)
    return {"days": list(days or (DAYS[start.weekday()],)), "start": f"{start:%H:%M}", "end": f"{end:%H:%M}",
            "timeZone": "UTC"}


def whole_minute(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


async def phase_is(handle: WorkflowHandle[Any, Any], phase: RolloutPhase) -> FleetProgress:
    async def check() -> FleetProgress:
        report = await progress(handle)
        assert report.phase is phase, (report.phase, report.message)
        return report

    return await assert_eventually_async(check, timeout=60)


async def details(handle: WorkflowHandle[Any, Any]) -> str:
    """The fleet's current details line (what the Temporal UI shows)."""
    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    return metadata.current_details


async def timers(handle: WorkflowHandle[Any, Any]) -> list[float]:
    """Seconds of every timer the fleet started."""
    history = await handle.fetch_history()
    return [e.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta().total_seconds()
            for e in history.events if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED]


# --- maintenance windows -----------------------------------------------------------------------


async def test_nothing_starts_before_the_opening_and_the_wait_is_one_timer(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    env = temporal_test_env
    now = await env.get_current_time()
    opening = whole_minute(now) + timedelta(hours=3)
    nodes = FakeNodes.of(4)
    rules = policy(FIXED_2, budget=2) | {"maintenanceWindows": [window(opening, 60)]}
    spec = FleetSpec(unique_name("win"), rules, 1, [package("a")])
    async with fleet(env, nodes, spec) as handle:
        report = await phase_is(handle, RolloutPhase.WAITING)
        assert datetime.fromisoformat(report.next_window) == opening
        assert "outside the maintenance windows; the next opens" in report.message
        assert opening.strftime("%Y-%m-%dT%H:%M:%SZ") in report.message
        assert report.packages["a"].phase is RolloutPhase.WAITING
        assert report.packages["a"].next_window == report.next_window
        assert f"next maintenance window opens {report.next_window}" in await details(handle)
        assert nodes.requests == []
        # One timer up to the opening (seconds of virtual time, no polling in between).
        waited = (opening - await env.get_current_time()).total_seconds()
        assert any(abs(t - waited) < 120 for t in await timers(handle)), (await timers(handle), waited)
        await skip(env, opening - await env.get_current_time() - timedelta(minutes=1), handle)
        assert nodes.requests == [] and (await progress(handle)).phase is RolloutPhase.WAITING
        listed = nodes.listings
        await skip(env, timedelta(minutes=2), handle)
        report = await settled(handle)
        assert nodes.listings > listed  # listed again at the opening, before the first batch
        assert sorted(nodes.requested()) == sorted(nodes.nodes)
        assert report.next_window == "" and report.packages["a"].next_window == ""


async def test_a_window_in_flight_finishes_after_the_close_and_nothing_new_starts(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    env = temporal_test_env
    start = whole_minute(await env.get_current_time()) - timedelta(minutes=1)
    nodes = FakeNodes.of(4, prefix=unique_name("c") + "-", auto=False)
    rules = policy(FIXED_2, budget=2) | {"maintenanceWindows": [window(start, 31, days=DAYS)]}
    spec = FleetSpec(unique_name("close"), rules, 1, [package("a")])
    async with fleet(env, nodes, spec) as handle:
        logs = {n: await env.client.start_workflow(WindowCancelLog.run, id=names.node_workflow_id(n),
                                                   task_queue=(await handle.describe()).task_queue)
                for n in nodes.nodes}

        async def two_out() -> bool:
            assert len(nodes.outstanding) == 2, nodes.outstanding
            return True

        await assert_eventually_async(two_out)
        first = sorted(nodes.outstanding)
        await skip(env, timedelta(minutes=45), handle)  # the maintenance window closed while both windows run
        assert len(nodes.requests) == 2
        assert (await progress(handle)).phase is RolloutPhase.PROGRESSING
        # At the close the fleet withdrew both requests (a node workflow drops one that has not started).
        for node in first:
            assert await logs[node].query("cancelled") == [nodes.outstanding[node].request_id]
        await nodes.finish(env.client)  # windows in progress always finish
        report = await phase_is(handle, RolloutPhase.WAITING)
        assert sorted(n for n, p in report.nodes.items() if p.state == State.COMPLETE.value) == first
        assert len(nodes.requests) == 2
        assert datetime.fromisoformat(report.next_window) == start + timedelta(days=1)
        await skip(env, start + timedelta(days=1, minutes=1) - await env.get_current_time(), handle)
        await assert_eventually_async(two_out)
        assert len(nodes.requests) == 4
        for log in logs.values():
            await log.terminate("test over")


# --- analysis gates ----------------------------------------------------------------------------


def gate(**fields: Any) -> dict[str, Any]:
    return {"name": "errors", "query": "sum(gpu_xid_errors)", "successCondition": "result < 1",
            "intervalSeconds": 10, **fields}


async def test_failed_gate_halts_with_query_value_and_time_and_resume_overrides_once(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    env = temporal_test_env
    nodes = FakeNodes.of(5)
    prom = FakePrometheus(answer=3.0)
    rules = policy(FIXED_2, budget=2, canary={"count": 1, "soakSeconds": 60}) | {"analysis": [gate(count=2)]}
    spec = FleetSpec(unique_name("gate"), rules, 1, [package("a")])
    async with fleet(env, nodes, spec, prom) as handle:
        await assert_eventually_async(lambda: _requests(nodes, 1))  # the canary
        await skip(env, 61, handle)  # its soak
        report = await phase_is(handle, RolloutPhase.HALTED)
        failure = report.gate_failure
        assert failure is not None and (failure.gate, failure.query, failure.value) == (
            "errors", "sum(gpu_xid_errors)", '{job="gpu"} 3')
        assert failure.condition == "result < 1" and failure.when == "betweenBatches"
        assert "1 failed sample(s), more than failureLimit 0" in failure.reason
        # Sampled once the canary's 60 s soak was over, at the time recorded.
        assert len(prom.calls) == 1 and datetime.fromisoformat(failure.at) >= prom.calls[0][1]
        assert len(nodes.requests) == 1  # only the canary
        assert f"gate errors failed at {failure.at}: sum(gpu_xid_errors) = " in report.message
        assert report.packages["a"].phase is RolloutPhase.HALTED
        assert report.packages["a"].gate_failure == failure
        assert "gate errors failed" in await details(handle)

        # resume overrides the failed evaluation once: the next batch starts although the value is still bad ...
        await handle.signal(names.SIGNAL_RESUME)

        async def next_halt() -> FleetProgress:
            report = await progress(handle)
            assert report.phase is RolloutPhase.HALTED and report.gate_failure is not None, report.phase
            assert report.gate_failure.at != failure.at
            return report

        report = await assert_eventually_async(next_halt, timeout=60)
        # ... and the evaluation after it halts again.
        assert len(nodes.requests) == 3 and len(prom.calls) == 2
        prom.answer = 0.0
        await handle.signal(names.SIGNAL_RETRY)  # retry evaluates the gate again: two good samples pass it
        await assert_eventually_async(lambda: _sampled(prom, 3))
        await skip(env, 11, handle)
        report = await settled(handle)
        assert report.gate_failure is None
        assert sorted(nodes.requested()) == sorted(nodes.nodes)
        after_retry = [t for _, t in prom.calls[2:4]]
        assert after_retry[1] - after_retry[0] >= timedelta(seconds=10)


async def test_count_successes_in_a_row_and_failure_limit(temporal_test_env: WorkflowEnvironment) -> None:
    env = temporal_test_env
    nodes = FakeNodes.of(4)
    answers = [0.0, 5.0, 0.0, 0.0, 0.0]  # ok, failed (within failureLimit 1), then three in a row: passed
    prom = FakePrometheus(answer=answers[0])
    # A long interval: the virtual clock moves only when the test sleeps (not while it polls).
    rules = policy(FIXED_2, budget=2) | {"analysis": [gate(count=3, failureLimit=1, intervalSeconds=300)]}
    spec = FleetSpec(unique_name("count"), rules, 1, [package("a")])
    async with fleet(env, nodes, spec, prom) as handle:
        await assert_eventually_async(lambda: _first_batch(nodes))
        for taken, answer in enumerate(answers[1:], start=1):
            await assert_eventually_async(lambda n=taken: _sampled(prom, n))
            assert len(nodes.requests) == 2, f"second batch after {taken} sample(s), before the gate passed"
            if taken == 1:
                message = (await phase_is(handle, RolloutPhase.PROGRESSING)).message
                assert message.startswith('gates between batches: errors 1/3 (value {job="gpu"} 0); next sample at ')
            prom.answer = answer
            await skip(env, 300, handle)
        report = await settled(handle)
        track = report.gates["errors"]
        assert track.passed and (track.samples, track.failures, track.successes) == (5, 1, 3)
        assert len(prom.calls) == 5 and len(nodes.requests) == 4
        gaps = [b[1] - a[1] for a, b in zip(prom.calls, prom.calls[1:], strict=False)]
        assert all(g >= timedelta(seconds=300) for g in gaps), gaps


async def _sampled(prom: FakePrometheus, count: int) -> bool:
    assert len(prom.calls) == count, prom.calls
    return True


async def _first_batch(nodes: FakeNodes) -> bool:
    assert len(nodes.requests) == 2, nodes.requests
    return True


async def test_continuous_gate_stops_new_windows_while_those_in_flight_finish(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    env = temporal_test_env
    nodes = FakeNodes.of(4, auto=False)
    prom = FakePrometheus(answer=None)  # no alert firing
    alert = gate(name="alerts", query='ALERTS{alertname="GPUXid",alertstate="firing"}', successCondition="empty",
                 when="continuous", intervalSeconds=15)
    spec = FleetSpec(unique_name("cont"), policy(FIXED_2, budget=2) | {"analysis": [alert]}, 1, [package("a")])
    async with fleet(env, nodes, spec, prom) as handle:
        await assert_eventually_async(lambda: _first_batch(nodes))
        prom.answer = [{"alertname": "GPUXid", "instance": "n00"}]  # the alert fires during the batch
        await skip(env, 20, handle)
        report = await phase_is(handle, RolloutPhase.HALTED)
        assert report.gate_failure is not None and report.gate_failure.gate == "alerts"
        assert report.gate_failure.value == '1 series: {alertname="GPUXid",instance="n00"} 1'
        assert "1 failed sample(s) in a row, more than failureLimit 0" in report.gate_failure.reason
        await nodes.finish(env.client)  # windows in flight finish
        report = await phase_is(handle, RolloutPhase.HALTED)
        assert report.counts.get(State.COMPLETE.value) == 2 and len(nodes.requests) == 2
        prom.answer = None
        await handle.signal(names.SIGNAL_RESUME)
        await assert_eventually_async(lambda: _requests(nodes, 4))


async def _requests(nodes: FakeNodes, count: int) -> bool:
    assert len(nodes.requests) == count, nodes.requests
    return True


async def test_unreachable_prometheus_is_retried_then_the_gate_fails_with_the_reason(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    env = temporal_test_env
    nodes = FakeNodes.of(4)
    prom = FakePrometheus(answer=ApplicationError(
        "Prometheus at http://prometheus:9090 unreachable: [Errno 111] Connection refused", type=PROMETHEUS_UNAVAILABLE))
    spec = FleetSpec(unique_name("down"), policy(FIXED_2, budget=2) | {"analysis": [gate()]}, 1, [package("a")])
    async with fleet(env, nodes, spec, prom) as handle:
        report = await phase_is(handle, RolloutPhase.HALTED)
        assert report.gate_failure is not None
        assert report.gate_failure.reason == (
            "the query could not be evaluated: Prometheus at http://prometheus:9090 unreachable: [Errno 111] "
            "Connection refused (gave up after 4 attempts)")
        assert len(prom.calls) == 4 and len(nodes.requests) == 2
        assert datetime.fromisoformat(report.gate_failure.at).tzinfo is not None
        assert datetime.fromisoformat(report.gate_failure.at) <= await env.get_current_time() + timedelta(seconds=1)


async def test_continuous_gate_holds_the_next_batch_until_a_good_sample(temporal_test_env: WorkflowEnvironment) -> None:
    env = temporal_test_env
    nodes = FakeNodes.of(2)
    firing = [{"alertname": "GPUXid", "instance": "n00"}]
    prom = FakePrometheus(answer=firing)  # firing before the first batch
    alert = gate(name="alerts", query='ALERTS{alertstate="firing"}', successCondition="empty", when="continuous",
                 intervalSeconds=300, failureLimit=2)
    spec = FleetSpec(unique_name("wait"), policy(FIXED_2, budget=2) | {"analysis": [alert]}, 1, [package("a")])
    async with fleet(env, nodes, spec, prom) as handle:
        await assert_eventually_async(lambda: _sampled(prom, 1))

        async def held() -> FleetProgress:
            report = await progress(handle)
            assert report.message.startswith('next batch waits for continuous gate(s) alerts (value 1 series: '
                                              '{alertname="GPUXid",instance="n00"} 1); next sample at '), report.message
            return report

        report = await assert_eventually_async(held)
        assert report.phase is RolloutPhase.PROGRESSING and nodes.requests == []
        prom.answer = None  # the alert stops firing
        await skip(env, 301, handle)
        report = await settled(handle)
        assert len(prom.calls) >= 2 and report.gate_failure is None
        assert sorted(nodes.requested()) == sorted(nodes.nodes)

"""Two clusters' fleets and `global/<policy>` on the time-skipping server (ADR 0017).

Each cluster is a worker on its own task queue with its own fake nodes (THE SAME node names in both),
running `fleet/<cluster>/<policy>`; the real `report_to_global` activity starts `global/<policy>` on
`noderoll-global`, polled by a third worker. Covers: stages `[[a], [b]]` with a soak (b is not asked
before a is complete and soaked), a failure in a halting the promotion (b never asked), copies of
`spec.clusters` that disagree (the second cluster held and told so), `pause`/`resume` on the global
workflow relayed to every fleet, a fleet without spec.clusters issuing no report at all, and the
global workflow ending once every cluster's fleet ended, not before (a staged cluster never heard
from keeps it open).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.global_reports import report_to_global
from api.enums import RolloutPhase
from planning.clusters.global_codec import global_view_from_json
from protocol import names
from protocol.clusters import GlobalView
from protocol.fleet import FleetInput, FleetSpec
from tests.helpers import assert_eventually_async, new_task_queue, unique_name
from tests.workflows.fleet_fakes import FakeNodes
from tests.workflows.node_harness import register_search_attributes
from tests.workflows.skipping import closed, end, skip
from tests.workflows.test_fleet import EXPONENTIAL, RELIST_NEVER, package, policy, progress
from workflows.fleet import FleetWorkflow
from workflows.global_rollout import GlobalRolloutWorkflow


def staged(stages: list[list[str]], soak: int = 0, **extra: Any) -> dict[str, Any]:
    spec = policy(EXPONENTIAL, budget=2)
    spec["clusters"] = {"stages": stages, "soakSeconds": soak, **extra}
    return spec


@asynccontextmanager
async def clusters(env: WorkflowEnvironment, fakes: dict[str, FakeNodes]) -> AsyncIterator[dict[str, str]]:
    """A worker per cluster (its fakes and the real report_to_global) and one for global/*; the task queues."""
    await register_search_attributes(env.client)
    queues = {c: new_task_queue() for c in fakes}
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(Worker(env.client, task_queue=names.GLOBAL_TASK_QUEUE,
                                               workflows=[GlobalRolloutWorkflow]))
        for cluster, nodes in fakes.items():
            await stack.enter_async_context(Worker(
                env.client, task_queue=queues[cluster], workflows=[FleetWorkflow],
                activities=[*nodes.activities(), report_to_global]))
        yield queues


async def start_fleet(env: WorkflowEnvironment, queue: str, cluster: str, spec: FleetSpec) -> WorkflowHandle[Any, Any]:
    """`fleet/<cluster>/<policy>` started as the bridge of `cluster` starts it."""
    return await env.client.start_workflow(
        FleetWorkflow.run, FleetInput(policy_name=spec.policy_name, cluster=cluster, relist_seconds=RELIST_NEVER),
        id=names.fleet_workflow_id(spec.policy_name, cluster), task_queue=queue,
        start_signal=names.SIGNAL_FLEET_SPEC, start_signal_args=[spec])


async def global_view(env: WorkflowEnvironment, policy_name: str) -> GlobalView:
    handle = env.client.get_workflow_handle(names.global_workflow_id(policy_name))
    try:
        return global_view_from_json(await handle.query(names.QUERY_PROGRESS))
    except RPCError as err:  # not started yet: the first report starts it
        raise AssertionError(f"global/{policy_name}: {err}") from err


async def phase_is(handle: WorkflowHandle[Any, Any], phase: RolloutPhase) -> None:
    async def check() -> bool:
        report = await progress(handle)
        assert report.phase is phase, (report.phase, report.message)
        return True

    await assert_eventually_async(check, timeout=60)


async def end_all(env: WorkflowEnvironment, *ids: str) -> None:
    for workflow_id in ids:
        await end(env.client.get_workflow_handle(workflow_id))


async def test_stage_b_waits_for_a_complete_and_soaked(temporal_test_env: WorkflowEnvironment) -> None:
    env = temporal_test_env
    fakes = {"a": FakeNodes.of(3), "b": FakeNodes.of(3)}  # the same node names in both clusters
    name = unique_name("gp")
    spec = FleetSpec(name, staged([["a"], ["b"]], soak=600), 1, [package("tuned")])
    async with clusters(env, fakes) as queues:
        try:
            fleet_a = await start_fleet(env, queues["a"], "a", spec)
            fleet_b = await start_fleet(env, queues["b"], "b", spec)
            await phase_is(fleet_a, RolloutPhase.COMPLETE)
            view = await global_view(env, name)
            # a is complete: the global soaks before stage 2, and b was asked nothing yet.
            assert view.stage == 0 and view.soak_until, view
            assert {c.cluster: c.state for c in view.clusters}["a"] == "complete"
            assert fakes["b"].requests == []
            report_b = await progress(fleet_b)
            assert report_b.phase is RolloutPhase.WAITING and "global/" in report_b.message
            await skip(env, 601, fleet_a, fleet_b, env.client.get_workflow_handle(names.global_workflow_id(name)))
            await phase_is(fleet_b, RolloutPhase.COMPLETE)
            assert sorted(fakes["b"].requested()) == sorted(fakes["b"].nodes)
            assert {r.fleet_workflow_id for _, r in fakes["b"].requests} == {f"fleet/b/{name}"}

            async def both_complete() -> GlobalView:
                got = await global_view(env, name)
                assert got.phase == "Complete" and [c.state for c in got.clusters] == ["complete"] * 2, got
                return got

            await assert_eventually_async(both_complete, timeout=60)
            # Every cluster's fleet shows the global view in its progress (and so in its statuses).
            assert (await progress(fleet_b)).global_rollout.phase == "Complete"
        finally:
            await end_all(env, f"fleet/a/{name}", f"fleet/b/{name}", f"global/{name}")


async def test_failure_in_a_halts_every_cluster(temporal_test_env: WorkflowEnvironment) -> None:
    env = temporal_test_env
    fakes = {"a": FakeNodes.of(2, fail_versions={"6.6.6"}), "b": FakeNodes.of(2)}
    name = unique_name("gf")
    spec = FleetSpec(name, staged([["a"], ["b"]]), 1, [package("bad", version="6.6.6")])
    async with clusters(env, fakes) as queues:
        try:
            await start_fleet(env, queues["a"], "a", spec)
            fleet_b = await start_fleet(env, queues["b"], "b", spec)

            async def halted() -> GlobalView:
                got = await global_view(env, name)
                assert got.phase == "Halted" and "cluster a failed" in got.halted, got
                return got

            view = await assert_eventually_async(halted, timeout=60)
            assert {c.cluster: c.state for c in view.clusters} == {"a": "failed", "b": "waiting"}
            await phase_is(fleet_b, RolloutPhase.HALTED)
            await skip(env, 3600, fleet_b, env.client.get_workflow_handle(names.global_workflow_id(name)))
            assert fakes["b"].requests == []
        finally:
            await end_all(env, f"fleet/a/{name}", f"fleet/b/{name}", f"global/{name}")


async def test_disagreeing_spec_clusters_hold_the_other_cluster(temporal_test_env: WorkflowEnvironment) -> None:
    env = temporal_test_env
    fakes = {"a": FakeNodes.of(1), "b": FakeNodes.of(1)}
    name = unique_name("gd")
    spec_a = FleetSpec(name, staged([["a", "b"]]), 1, [package("tuned")])
    spec_b = FleetSpec(name, staged([["b"], ["a"]]), 1, [package("tuned")])
    async with clusters(env, fakes) as queues:
        try:
            fleet_a = await start_fleet(env, queues["a"], "a", spec_a)
            await phase_is(fleet_a, RolloutPhase.COMPLETE)
            fleet_b = await start_fleet(env, queues["b"], "b", spec_b)

            async def held() -> bool:
                report = await progress(fleet_b)
                assert report.phase is RolloutPhase.WAITING and "differs from the one" in report.message, report.message
                states = {c.cluster: c.state for c in report.global_rollout.clusters}
                assert states["b"] == "held", states
                return True

            await assert_eventually_async(held, timeout=60)
            assert fakes["b"].requests == []
        finally:
            await end_all(env, f"fleet/a/{name}", f"fleet/b/{name}", f"global/{name}")


async def test_pause_and_resume_on_global_reach_every_fleet(temporal_test_env: WorkflowEnvironment) -> None:
    env = temporal_test_env
    fakes = {"a": FakeNodes.of(2, auto=False), "b": FakeNodes.of(2)}
    name = unique_name("gr")
    spec = FleetSpec(name, staged([["a"], ["b"]]), 1, [package("tuned")])
    async with clusters(env, fakes) as queues:
        try:
            fleet_a = await start_fleet(env, queues["a"], "a", spec)
            fleet_b = await start_fleet(env, queues["b"], "b", spec)
            await assert_eventually_async(lambda: _requested(fakes["a"]), timeout=60)
            handle = env.client.get_workflow_handle(names.global_workflow_id(name))
            await handle.signal(names.SIGNAL_PAUSE)
            await phase_is(fleet_b, RolloutPhase.PAUSED)
            await fakes["a"].finish(env.client)
            await phase_is(fleet_a, RolloutPhase.PAUSED)
            assert (await global_view(env, name)).paused
            await handle.signal(names.SIGNAL_RESUME)
            for _ in range(10):
                await fakes["a"].finish(env.client)
                if (await progress(fleet_a)).phase is RolloutPhase.COMPLETE:
                    break
                await skip(env, 1, fleet_a, fleet_b, handle)
            await phase_is(fleet_b, RolloutPhase.COMPLETE)
        finally:
            await end_all(env, f"fleet/a/{name}", f"fleet/b/{name}", f"global/{name}")


async def _requested(nodes: FakeNodes) -> bool:
    assert nodes.outstanding
    return True


async def test_a_fleet_without_spec_clusters_reports_nothing(temporal_test_env: WorkflowEnvironment) -> None:
    env = temporal_test_env
    fakes = {"a": FakeNodes.of(2)}
    name = unique_name("gn")
    spec = FleetSpec(name, policy(EXPONENTIAL, budget=2), 1, [package("tuned")])
    async with clusters(env, fakes) as queues:
        try:
            fleet_a = await start_fleet(env, queues["a"], "a", spec)
            await phase_is(fleet_a, RolloutPhase.COMPLETE)
            history = await fleet_a.fetch_history()
            scheduled = [e.activity_task_scheduled_event_attributes.activity_type.name for e in history.events
                         if e.HasField("activity_task_scheduled_event_attributes")]
            assert "report_to_global" not in scheduled and "request_windows" in scheduled
            assert (await progress(fleet_a)).global_rollout is None
        finally:
            await end_all(env, f"fleet/a/{name}")


async def test_a_global_workflow_that_lost_its_state_hears_the_clusters_again(
        temporal_test_env: WorkflowEnvironment) -> None:
    """global/<policy> terminated after stage 1 completed: the next report starts it afresh, it asks the
    fleet of the cluster it never heard from to report again, learns a is complete and grants b."""
    env = temporal_test_env
    fakes = {"a": FakeNodes.of(1), "b": FakeNodes.of(1)}
    name = unique_name("gl")
    spec = FleetSpec(name, staged([["a"], ["b"]]), 1, [package("tuned")])
    async with clusters(env, fakes) as queues:
        try:
            fleet_a = await start_fleet(env, queues["a"], "a", spec)
            await phase_is(fleet_a, RolloutPhase.COMPLETE)
            await env.client.get_workflow_handle(names.global_workflow_id(name)).terminate("state lost")
            fleet_b = await start_fleet(env, queues["b"], "b", spec)
            await phase_is(fleet_b, RolloutPhase.COMPLETE)
            view = await global_view(env, name)
            assert {c.cluster: c.state for c in view.clusters} == {"a": "complete", "b": "complete"}, view
        finally:
            await end_all(env, f"fleet/a/{name}", f"fleet/b/{name}", f"global/{name}")


async def test_global_ends_once_every_clusters_fleet_ended(temporal_test_env: WorkflowEnvironment) -> None:
    """Both clusters complete, then each one's last Package goes: its fleet reports `ended` and ends; the
    global workflow stays open while one fleet is left and completes after the last one."""
    env = temporal_test_env
    fakes = {"a": FakeNodes.of(1), "b": FakeNodes.of(1)}
    name = unique_name("ge")
    spec = FleetSpec(name, staged([["a"], ["b"]]), 1, [package("tuned")])
    empty = FleetSpec(name, spec.policy, 1, [])  # the bridge keeps the policy when the Packages go
    global_handle = env.client.get_workflow_handle(names.global_workflow_id(name))
    async with clusters(env, fakes) as queues:
        try:
            fleet_a = await start_fleet(env, queues["a"], "a", spec)
            fleet_b = await start_fleet(env, queues["b"], "b", spec)
            await phase_is(fleet_b, RolloutPhase.COMPLETE)
            await fleet_a.signal(names.SIGNAL_FLEET_SPEC, empty)
            assert await closed(fleet_a) == WorkflowExecutionStatus.COMPLETED

            async def a_ended() -> bool:
                view = await global_view(env, name)
                assert view.phase == "Complete", view
                history = await global_handle.fetch_history()
                signals = [e.workflow_execution_signaled_event_attributes for e in history.events
                           if e.HasField("workflow_execution_signaled_event_attributes")]
                reports = [json.loads(s.input.payloads[0].data) for s in signals
                           if s.signal_name == names.SIGNAL_CLUSTER_REPORT]
                assert [r["cluster"] for r in reports if r.get("ended")] == ["a"], reports
                return True

            await assert_eventually_async(a_ended, timeout=60)
            assert (await global_handle.describe()).status.name == "RUNNING"  # b's fleet is still there
            await fleet_b.signal(names.SIGNAL_FLEET_SPEC, empty)
            assert await closed(fleet_b) == WorkflowExecutionStatus.COMPLETED
            await asyncio.wait_for(global_handle.result(), 60)  # completes: nothing left open for a deleted policy
            assert (await global_handle.describe()).status.name == "COMPLETED"
        finally:
            await end_all(env, f"fleet/a/{name}", f"fleet/b/{name}", f"global/{name}")


async def test_global_stays_open_for_a_staged_cluster_it_never_heard_from(
        temporal_test_env: WorkflowEnvironment) -> None:
    """Stages [[a], [b]]: a completes and ends before b's fleet ever ran. The global workflow stays open
    (b may still come, and needs a's `complete`); b then rolls out, ends, and the global completes."""
    env = temporal_test_env
    fakes = {"a": FakeNodes.of(1), "b": FakeNodes.of(1)}
    name = unique_name("gx")
    spec = FleetSpec(name, staged([["a"], ["b"]]), 1, [package("tuned")])
    empty = FleetSpec(name, spec.policy, 1, [])
    global_handle = env.client.get_workflow_handle(names.global_workflow_id(name))
    async with clusters(env, fakes) as queues:
        try:
            fleet_a = await start_fleet(env, queues["a"], "a", spec)
            await phase_is(fleet_a, RolloutPhase.COMPLETE)
            await fleet_a.signal(names.SIGNAL_FLEET_SPEC, empty)
            assert await closed(fleet_a) == WorkflowExecutionStatus.COMPLETED
            await skip(env, 3600, global_handle)
            assert (await global_handle.describe()).status.name == "RUNNING"
            fleet_b = await start_fleet(env, queues["b"], "b", spec)
            await phase_is(fleet_b, RolloutPhase.COMPLETE)  # granted on a's complete, kept
            await fleet_b.signal(names.SIGNAL_FLEET_SPEC, empty)
            assert await closed(fleet_b) == WorkflowExecutionStatus.COMPLETED
            await asyncio.wait_for(global_handle.result(), 60)
        finally:
            await end_all(env, f"fleet/a/{name}", f"fleet/b/{name}", f"global/{name}")

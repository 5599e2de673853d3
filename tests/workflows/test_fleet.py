"""Fleet workflow on the time-skipping server with fake activities under the real names.

Covers: one window per node for every pending Package (dependency pairs and service + reboot
together), the budget never exceeded, a Package added mid-wave, pausing one Package, halt and
resume, retry of one node, the watchdog for node workflows that closed without answering, waves
on spec changes, an uninstall that waits for a node its listing found blocked, continue-as-new, and
the fleet's end when its last Package goes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from api.enums import RolloutPhase, State
from planning.fleet.codec import progress_from_json
from planning.views.fleet_status import FleetProgress
from protocol import names
from protocol.fleet import Filter, FleetInput, FleetSpec, PackageEntry
from tests.helpers import assert_eventually_async, new_task_queue, unique_name
from tests.helpers.histories import replay_and_record
from tests.helpers.progress import EVERY_NODE
from tests.workflows.fleet_fakes import FakeNodes
from tests.workflows.node_harness import register_search_attributes
from tests.workflows.skipping import end, quiesce, skip
from workflows.fleet import FleetWorkflow

SELECTOR = {"matchLabels": {"pool": "gpu"}}


def package(name: str, version: str = "1.0.0", **extra: Any) -> PackageEntry:
    spec: dict[str, Any] = {"version": version, "image": f"example.test/{name}:{version}", "nodeSelector": SELECTOR}
    spec.update(extra.pop("spec", {}))
    return PackageEntry(name=name, spec=spec, generation=extra.pop("generation", 1), **extra)


def policy(strategy: dict[str, Any], budget: int = 10, canary: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"default": {"budget": {"count": budget}, "strategy": strategy}}
    if canary:
        spec["canary"] = canary
    return spec


EXPONENTIAL = {"type": "exponential", "initialBatch": 1, "growthFactor": 2}
RELIST_NEVER = 30 * 24 * 3600


@asynccontextmanager
async def fleet(
    env: WorkflowEnvironment, nodes: FakeNodes, spec: FleetSpec, **extra: Any
) -> AsyncIterator[WorkflowHandle[Any, Any]]:
    """Run a worker with the fakes and start `fleet/<policy>` with `spec` (signal-with-start, as the bridge)."""
    task_queue = new_task_queue()
    await register_search_attributes(env.client)
    async with Worker(env.client, task_queue=task_queue, workflows=[FleetWorkflow], activities=nodes.activities()):
        # No periodic re-list within a test (the fleet re-lists before every batch anyway): a re-list
        # that runs when the test terminates the fleet leaves the time-skipping test server's lock
        # taken, and every later test that sleeps in virtual time hangs (seen after
        # test_watchdog_reports_a_node_that_keeps_closing, whose 600 s ended on the 300 s re-list).
        extra.setdefault("relist_seconds", RELIST_NEVER)
        handle = await env.client.start_workflow(
            FleetWorkflow.run, FleetInput(policy_name=spec.policy_name, **extra),
            id=names.fleet_workflow_id(spec.policy_name), task_queue=task_queue,
            start_signal=names.SIGNAL_FLEET_SPEC, start_signal_args=[spec],
        )
        try:
            yield handle
        finally:
            await end(handle)


# A query is answered by the worker; with both test processes and the integration stacks busy on 2 cores
# the default RPC deadline expired before the answer ("Timeout expired", load 10): give it a minute.
QUERY_DEADLINE = timedelta(seconds=60)


async def progress(handle: WorkflowHandle[Any, Any]) -> FleetProgress:
    return progress_from_json(await handle.query(names.QUERY_PROGRESS, EVERY_NODE, rpc_timeout=QUERY_DEADLINE))


async def settled(handle: WorkflowHandle[Any, Any], phase: RolloutPhase = RolloutPhase.COMPLETE,
                  wave: int = 1) -> FleetProgress:
    async def check() -> FleetProgress:
        report = await progress(handle)
        assert report.phase is phase and report.wave >= wave, (report.phase, report.wave, report.message)
        return report

    return await assert_eventually_async(check, timeout=60)


async def drive(env: WorkflowEnvironment, handle: WorkflowHandle[Any, Any], nodes: FakeNodes,
                budget: int) -> int:
    """Answer windows batch by batch until the fleet is Complete; return the most windows out at once."""
    most = 0
    for _ in range(100):
        report = await progress(handle)
        if report.phase is RolloutPhase.COMPLETE and not nodes.outstanding:
            return most
        most = max(most, len(nodes.outstanding))
        assert len(nodes.outstanding) <= budget, f"{len(nodes.outstanding)} windows out, budget {budget}"
        await nodes.finish(env.client)
        await skip(env, 1, handle)
    raise AssertionError("fleet did not complete")


async def test_one_window_per_node_for_three_packages(temporal_test_env: WorkflowEnvironment) -> None:
    """Two reboot Packages (one depends on the other) and a service Package: ONE window per node."""
    nodes = FakeNodes.of(12, reboot={"driver", "kernel"})
    spec = FleetSpec(unique_name("gpu"), policy(EXPONENTIAL, budget=4, canary={"count": 1}), 1, [
        package("kernel", uid="uid-kernel"),
        package("driver", spec={"dependsOn": {"kernel": "1.0.0"}}),
        package("tuned"),
    ])
    async with fleet(temporal_test_env, nodes, spec) as handle:
        report = await settled(handle)
        assert sorted(nodes.requested()) == sorted(nodes.nodes)
        assert all(nodes.carried(n) == [["driver", "kernel", "tuned"]] for n in nodes.nodes)
        # SKYHOOK_NODE_ORDER: each node's position in the order the wave asked them.
        assert sorted(r.node_order for _, r in nodes.requests) == list(range(12))
        assert all(p.drains == 1 and p.interrupts == 1 and p.windows == 1 for p in report.nodes.values())
        assert {n: r.phase for n, r in report.packages.items()} == dict.fromkeys(
            ["driver", "kernel", "tuned"], RolloutPhase.COMPLETE)
        assert report.packages["driver"].counts == {State.COMPLETE.value: 12}
        # Each order names its Package's uid (SKYHOOK_RESOURCE_ID without reading the Package).
        assert {o.uid for _, r in nodes.requests for o in r.packages if o.name == "kernel"} == {"uid-kernel"}


async def test_budget_is_never_exceeded_with_three_packages(temporal_test_env: WorkflowEnvironment) -> None:
    nodes = FakeNodes.of(10, auto=False)
    spec = FleetSpec(unique_name("b"), policy(EXPONENTIAL, budget=3, canary={"count": 1}), 1,
                     [package("a"), package("b"), package("c")])
    async with fleet(temporal_test_env, nodes, spec) as handle:
        most = await drive(temporal_test_env, handle, nodes, budget=3)
        assert most == 3
        assert sorted(nodes.requested()) == sorted(nodes.nodes)


async def test_package_added_mid_wave(temporal_test_env: WorkflowEnvironment) -> None:
    """Nodes not yet reached get both Packages in one window; nodes done get exactly one more."""
    nodes = FakeNodes.of(8, auto=False)
    name = unique_name("mid")
    first = FleetSpec(name, policy({"type": "fixed", "initialBatch": 2}, budget=2), 1, [package("a")])
    async with fleet(temporal_test_env, nodes, first) as handle:
        await assert_eventually_async(lambda: _outstanding(nodes, 2))
        reached = await nodes.finish(temporal_test_env.client)
        await assert_eventually_async(lambda: _outstanding(nodes, 2))
        in_batch = sorted(nodes.outstanding)
        await handle.signal(names.SIGNAL_FLEET_SPEC, FleetSpec(name, first.policy, 1, [package("a"), package("b")]))
        await drive(temporal_test_env, handle, nodes, budget=2)
        for node in nodes.nodes:
            carried = nodes.carried(node)
            if node in reached or node in in_batch:
                assert carried == [["a"], ["b"]], (node, carried)
            else:
                assert carried == [["a", "b"]], (node, carried)
        report = await settled(handle, wave=2)
        assert report.packages["b"].counts == {State.COMPLETE.value: 8}


async def _outstanding(nodes: FakeNodes, count: int) -> bool:
    assert len(nodes.outstanding) == count, sorted(nodes.outstanding)
    return True


async def test_pausing_one_package_leaves_the_others_rolling(temporal_test_env: WorkflowEnvironment) -> None:
    nodes = FakeNodes.of(4)
    name = unique_name("pause")
    spec = FleetSpec(name, None, 0, [package("a"), package("b", paused=True)])
    async with fleet(temporal_test_env, nodes, spec) as handle:
        report = await settled(handle)
        assert all(nodes.carried(n) == [["a"]] for n in nodes.nodes)
        assert report.packages["b"].phase is RolloutPhase.PAUSED
        assert report.packages["a"].phase is RolloutPhase.COMPLETE
        await handle.signal(names.SIGNAL_FLEET_SPEC, FleetSpec(name, None, 0, [package("a"), package("b")]))

        async def b_done() -> bool:
            assert (await progress(handle)).packages["b"].phase is RolloutPhase.COMPLETE
            return True

        await assert_eventually_async(b_done, timeout=60)
        assert all(nodes.carried(n) == [["a"], ["b"]] for n in nodes.nodes)


async def test_operator_pause_filter_and_resume(temporal_test_env: WorkflowEnvironment) -> None:
    nodes = FakeNodes.of(3)
    name = unique_name("opause")
    spec = FleetSpec(name, None, 0, [package("a"), package("b")])
    async with fleet(temporal_test_env, nodes, spec) as handle:
        await handle.signal(names.SIGNAL_PAUSE, Filter(packages=["b"]))
        report = await settled(handle)
        assert report.packages["b"].phase is RolloutPhase.PAUSED
        await handle.signal(names.SIGNAL_RESUME, Filter(packages=["b"]))

        async def b_done() -> bool:
            assert (await progress(handle)).packages["b"].phase is RolloutPhase.COMPLETE
            return True

        await assert_eventually_async(b_done, timeout=60)


async def test_halt_and_resume(temporal_test_env: WorkflowEnvironment) -> None:
    nodes = FakeNodes.of(6, auto=False)
    spec = FleetSpec(unique_name("halt"), policy({"type": "fixed", "initialBatch": 2}, budget=2), 1, [package("a")])
    async with fleet(temporal_test_env, nodes, spec) as handle:
        await assert_eventually_async(lambda: _outstanding(nodes, 2))
        await handle.signal(names.SIGNAL_HALT)
        await settled(handle, RolloutPhase.HALTED)
        await nodes.finish(temporal_test_env.client)  # windows already running finish
        report = await settled(handle, RolloutPhase.HALTED)
        assert report.counts.get(State.COMPLETE.value) == 2
        assert len(nodes.requests) == 2
        await handle.signal(names.SIGNAL_RESUME)
        await drive(temporal_test_env, handle, nodes, budget=2)
        assert sorted(nodes.requested()) == sorted(nodes.nodes)


async def test_retry_of_one_node(temporal_test_env: WorkflowEnvironment) -> None:
    nodes = FakeNodes.of(3, fail={"n01"})
    spec = FleetSpec(unique_name("retry"), None, 0, [package("a")])
    async with fleet(temporal_test_env, nodes, spec) as handle:
        report = await settled(handle, RolloutPhase.FAILED)
        assert report.packages["a"].erroring == {"n01": "apply failed: exit 7"}
        assert report.packages["a"].phase is RolloutPhase.FAILED
        nodes.fail.clear()
        await handle.signal(names.SIGNAL_RETRY, Filter(nodes=["n01"]))
        await settled(handle)
        assert nodes.requested().count("n01") == 2
        assert nodes.requested().count("n00") == 1


async def test_watchdog_asks_again_when_a_node_workflow_closed(temporal_test_env: WorkflowEnvironment) -> None:
    nodes = FakeNodes.of(1, auto=False)
    spec = FleetSpec(unique_name("lost"), None, 0, [package("a")])
    async with fleet(temporal_test_env, nodes, spec) as handle:
        await assert_eventually_async(lambda: _outstanding(nodes, 1))
        nodes.closed.add("n00")  # terminated from the UI: it will never answer
        nodes.outstanding.clear()
        # The watchdog looks every 60 s (virtual): the first round after the request asks again; the
        # next one, 60 s after that, may already ask a third time (when no virtual time passed during
        # the round), so look before it.
        await skip(temporal_test_env, 90, handle)
        assert len(nodes.requests) == 2  # asked again within the watchdog's minute
        nodes.closed.clear()
        await nodes.finish(temporal_test_env.client)
        await settled(handle)


async def test_watchdog_reports_a_node_that_keeps_closing(temporal_test_env: WorkflowEnvironment) -> None:
    nodes = FakeNodes.of(1, auto=False)
    spec = FleetSpec(unique_name("lost2"), None, 0, [package("a")])
    async with fleet(temporal_test_env, nodes, spec) as handle:
        nodes.closed.add("n00")
        await skip(temporal_test_env, 600, handle)
        report = await settled(handle, RolloutPhase.FAILED)
        assert "closed (TERMINATED) without answering" in report.packages["a"].erroring["n00"]
        assert len(nodes.requests) == 3


async def test_version_bump_starts_a_new_wave_and_the_fleet_ends_without_packages(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    nodes = FakeNodes.of(3)
    name = unique_name("wave")
    async with fleet(temporal_test_env, nodes, FleetSpec(name, None, 0, [package("a")])) as handle:
        await settled(handle)
        await handle.signal(names.SIGNAL_FLEET_SPEC, FleetSpec(name, None, 0, [package("a", "1.1.0", generation=2)]))
        report = await settled(handle, wave=2)
        assert report.packages["a"].version == "1.1.0" and report.packages["a"].generation == 2
        assert all(n.recorded["a"][0] == "1.1.0" for n in nodes.nodes.values())
        await handle.signal(names.SIGNAL_FLEET_SPEC, FleetSpec(name, None, 0, []))
        await handle.result()


async def test_an_uninstall_waits_for_a_node_its_listing_found_blocked(temporal_test_env: WorkflowEnvironment) -> None:
    """The deletion test's flake (2026-12-04): a node listed right after its own reboot still carries
    `node.kubernetes.io/not-ready`; the uninstall wave found it blocked, the Package was reported
    uninstalled with the other nodes done, its finalizer went, and the node kept it. Now the Package
    stays Uninstalling (not `uninstalled`) until that node's window has run."""
    nodes = FakeNodes.of(3)
    name = unique_name("uninst")
    async with fleet(temporal_test_env, nodes, FleetSpec(name, None, 0, [package("a")])) as handle:
        await settled(handle)
        rebooted = nodes.nodes["n02"]
        rebooted.taints = [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]
        await handle.signal(names.SIGNAL_FLEET_SPEC, FleetSpec(name, None, 0, [package("a", uninstall=True)]))
        report = await settled(handle, wave=2)
        a = report.packages["a"]
        assert (a.phase, a.uninstalled) == (RolloutPhase.UNINSTALLING, False), (a.phase, a.counts)
        assert "n02" in a.blocked and "not-ready" in a.blocked["n02"], a.blocked
        assert "a" in rebooted.recorded and not any("a" in n.recorded for n in nodes.nodes.values() if n is not rebooted)
        # The taint lifts (a node event: the bridge signals nodes_changed): the node gets its uninstall.
        rebooted.taints = []
        await handle.signal(names.SIGNAL_NODES_CHANGED)

        async def uninstalled() -> bool:
            a = (await progress(handle)).packages["a"]
            assert (a.phase, a.uninstalled) == (RolloutPhase.COMPLETE, True), (a.phase, a.counts)
            return True

        await assert_eventually_async(uninstalled, timeout=60)
        assert not any("a" in n.recorded for n in nodes.nodes.values())


async def test_continue_as_new_keeps_the_work_done(temporal_test_env: WorkflowEnvironment) -> None:
    """The results are sent while the fleet is idle (`quiesce`), one window at a time: a result signalled
    while the task that continues the run as new is with the worker strands the new run on the
    time-skipping test server (its queries time out; seen under load in CI, 2026-12-07). The real server
    refuses such a completion and sends the task again; the SDK tests that, not this one."""
    nodes = FakeNodes.of(6, auto=False)
    spec = FleetSpec(unique_name("can"), policy({"type": "fixed", "initialBatch": 1}, budget=1), 1, [package("a")])
    async with fleet(temporal_test_env, nodes, spec, history_limit=40) as handle:
        for _ in range(len(nodes.nodes)):
            await assert_eventually_async(lambda: _outstanding(nodes, 1))
            await quiesce(handle)
            await nodes.finish(temporal_test_env.client)
        await settled(handle)
        assert sorted(nodes.requested()) == sorted(nodes.nodes)
        described = await handle.describe()
        assert described.run_id != handle.first_execution_run_id


async def test_rolling_starts_the_next_node_as_soon_as_one_ends(temporal_test_env: WorkflowEnvironment) -> None:
    """`rolling` (issue 26 item 3): after the canary, the budget's windows at all times; a window's
    end starts the next node while the others still run (no batch barrier)."""
    nodes = FakeNodes.of(7, auto=False)
    spec = FleetSpec(unique_name("roll"), policy({"type": "rolling"}, budget=3, canary={"count": 1}), 1,
                     [package("a")])
    async with fleet(temporal_test_env, nodes, spec) as handle:
        await assert_eventually_async(lambda: _outstanding(nodes, 1))  # the canary alone
        await nodes.finish(temporal_test_env.client)
        await assert_eventually_async(lambda: _outstanding(nodes, 3))
        running = sorted(nodes.outstanding)
        await nodes.finish_one(temporal_test_env.client, running[0])
        # The next node starts while the other two still run: three out again, two of them the same.
        await assert_eventually_async(lambda: _outstanding(nodes, 3))
        assert set(running[1:]) < set(nodes.outstanding)
        most = await drive(temporal_test_env, handle, nodes, budget=3)
        assert most == 3 and sorted(nodes.requested()) == sorted(nodes.nodes)
        report = await progress(handle)
        assert report.counts == {State.COMPLETE.value: 7}


async def test_rolling_takes_a_node_whose_blocking_taint_lifts_while_it_rolls(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    """A rolling fleet re-lists on `nodes_changed` as it rolls (at most every 30 s). Before, it deferred
    the re-list to "the next batch", which a rolling fleet never has: in the 200-node benchmark 25 nodes
    still carrying the node-lifecycle controller's not-ready taint at the first listing waited until the
    175 others were done, and the percent budget was taken of 175."""
    nodes = FakeNodes.of(6, auto=False)
    late = nodes.nodes["n05"]
    late.taints = [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]
    spec = FleetSpec(unique_name("rolljoin"), policy({"type": "rolling"}, budget=2), 1, [package("a")])
    async with fleet(temporal_test_env, nodes, spec) as handle:
        await assert_eventually_async(lambda: _outstanding(nodes, 2))
        listed = nodes.listings
        late.taints = []
        await handle.signal(names.SIGNAL_NODES_CHANGED)
        await skip(temporal_test_env, 31, handle)  # the re-list's rate limit since the first listing
        await nodes.finish_one(temporal_test_env.client, sorted(nodes.outstanding)[0])
        await assert_eventually_async(lambda: _outstanding(nodes, 2))

        async def listed_again() -> bool:
            assert nodes.listings > listed, "no re-list while the fleet rolls"
            return True

        await assert_eventually_async(listed_again)
        # Known while 4 of the 5 first-listed nodes are still to finish: n05 gets its window in this roll.
        assert len(nodes.requests) < 5
        await drive(temporal_test_env, handle, nodes, budget=2)
        assert sorted(nodes.requested()) == sorted(nodes.nodes)
        assert (await progress(handle)).counts == {State.COMPLETE.value: 6}
        # The patched path's history (tests/workflows/test_replay.py): replayed here, saved with
        # NODEROLL_RECORD_FLEET_HISTORIES=tests/histories.
        await replay_and_record({"fleet/fleet-rolling-relists-while-rolling": await handle.fetch_history()},
                                "NODEROLL_RECORD_FLEET_HISTORIES")


async def test_rolling_halts_on_failures_over_the_last_windows(temporal_test_env: WorkflowEnvironment) -> None:
    nodes = FakeNodes.of(10, auto=False, fail_versions={"1.0.0"})  # every window fails
    spec = FleetSpec(unique_name("rollfail"), policy({"type": "rolling", "failureThreshold": 2}, budget=2), 1,
                     [package("a")])
    async with fleet(temporal_test_env, nodes, spec) as handle:
        await assert_eventually_async(lambda: _outstanding(nodes, 2))
        first, second = sorted(nodes.outstanding)
        # One answer at a time: two answers in one workflow task count together (2 of the last 2 at once).
        await nodes.finish_one(temporal_test_env.client, first)
        # The first failure (1 of the last 1) lets one more node start; after the second, nothing more.
        await assert_eventually_async(lambda: _outstanding(nodes, 2))
        assert len(nodes.requests) == 3
        await nodes.finish_one(temporal_test_env.client, second)
        report = await settled(handle, RolloutPhase.HALTED)
        assert "2 of its last 2 window(s) failed" in report.message
        assert len(nodes.requests) == 3
        await skip(temporal_test_env, 60, handle)
        assert len(nodes.requests) == 3

"""GPU budgets in the fleet workflow (time-skipping server, fake activities): capacity floors and topology
limits cap every batch, a fleet held by them reports `Waiting` with the reason and goes on once the
node that went down on its own is back.
"""

from __future__ import annotations

from typing import Any

from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from api.enums import RolloutPhase
from protocol import names
from protocol.fleet import FleetSpec
from tests.helpers import assert_eventually_async, unique_name
from tests.workflows.fleet_fakes import FakeNodes
from tests.workflows.skipping import skip
from tests.workflows.test_fleet import fleet, package, progress, settled

GPU = "nvidia.com/gpu"
RACK = "example.com/rack"


def gpu_fleet(count: int, gpus: list[int], racks: int = 0, **kwargs: Any) -> FakeNodes:
    nodes = FakeNodes.of(count, **kwargs)
    for index, node in enumerate(nodes.nodes.values()):
        node.allocatable = {GPU: str(gpus[index % len(gpus)]), "cpu": "96"}
        if racks:
            node.labels[RACK] = f"r{index % racks}"
    return nodes


def gpu_policy(budget: dict[str, Any], initial: int = 8) -> dict[str, Any]:
    return {"default": {"budget": {"percent": 100, **budget}, "strategy": {"type": "fixed", "initialBatch": initial}}}


async def drive_checking(env: WorkflowEnvironment, handle: WorkflowHandle[Any, Any], nodes: FakeNodes,
                         check: Any) -> list[list[str]]:
    """Answer batch by batch (checking each batch while it is out) until every node was asked."""
    batches = []
    for _ in range(60):
        if nodes.outstanding:
            batch = sorted(nodes.outstanding)
            check(batch)
            batches.append(batch)
            await nodes.finish(env.client)
        if sorted(set(nodes.requested())) == sorted(nodes.nodes) and not nodes.outstanding:
            return batches
        await skip(env, 1, handle)
    raise AssertionError(f"not every node was asked: {sorted(set(nodes.requested()))}")


async def test_a_gpu_floor_caps_every_batch_of_mixed_nodes(temporal_test_env: WorkflowEnvironment) -> None:
    # 4 x 8 + 4 x 4 = 48 GPUs, floor 36: at most 12 GPUs in windows at once (budget 100 %, batches of 8).
    nodes = gpu_fleet(8, [8, 4], auto=False)
    gpus = {n: int(node.allocatable[GPU]) for n, node in nodes.nodes.items()}
    spec = FleetSpec(unique_name("floor"), gpu_policy({"minAvailable": {"resource": GPU, "count": 36}}), 1,
                     [package("driver")])

    def within_floor(batch: list[str]) -> None:
        assert 48 - sum(gpus[n] for n in batch) >= 36, batch

    async with fleet(temporal_test_env, nodes, spec) as handle:
        batches = await drive_checking(temporal_test_env, handle, nodes, within_floor)
        assert max(sum(gpus[n] for n in b) for b in batches) == 12  # the floor, not the batch size, capped
        report = await settled(handle)
        assert report.capacity and report.capacity[0].floor == 36 and report.capacity[0].total == 48


async def test_at_most_one_node_per_rack_in_windows(temporal_test_env: WorkflowEnvironment) -> None:
    nodes = gpu_fleet(9, [8], racks=3, auto=False)
    racks = {n: node.labels[RACK] for n, node in nodes.nodes.items()}
    spec = FleetSpec(unique_name("rack"), gpu_policy({"maxUnavailablePerTopology": [{"key": RACK, "max": 1}]}), 1,
                     [package("driver")])

    def one_per_rack(batch: list[str]) -> None:
        assert len({racks[n] for n in batch}) == len(batch), batch

    async with fleet(temporal_test_env, nodes, spec) as handle:
        batches = await drive_checking(temporal_test_env, handle, nodes, one_per_rack)
        assert [len(b) for b in batches] == [3, 3, 3]
        await settled(handle)


async def test_a_node_down_on_its_own_makes_the_fleet_wait_and_say_why(temporal_test_env: WorkflowEnvironment) -> None:
    # 3 x 8 = 24 GPUs, floor 16: with n02 NotReady only 16 are up, so no node may go.
    nodes = gpu_fleet(3, [8])
    nodes.nodes["n02"].ready = False
    name = unique_name("down")
    spec = FleetSpec(name, gpu_policy({"minAvailable": {"resource": GPU, "count": 16}}), 1, [package("driver")])
    async with fleet(temporal_test_env, nodes, spec) as handle:

        async def waiting() -> bool:
            report = await progress(handle)
            assert report.phase is RolloutPhase.WAITING, (report.phase, report.message)
            assert report.message.startswith("waiting: 8 of 16 GPUs would remain; down: n02 (NotReady)"), report.message
            assert report.packages["driver"].phase is RolloutPhase.WAITING
            assert [(w.rule, w.nodes) for w in report.waits] == [("floor", 2)]
            return True

        await assert_eventually_async(waiting, timeout=60)
        # n02 itself takes nothing away from the floor: it may enter a window while the others wait.
        assert nodes.requested() == ["n02"]
        listings = nodes.listings
        await skip(temporal_test_env, 45, handle)
        assert nodes.listings > listings, "a waiting fleet lists its nodes again soon"
        nodes.nodes["n02"].ready = True
        await handle.signal(names.SIGNAL_NODES_CHANGED)
        report = await settled(handle)
        assert sorted(set(nodes.requested())) == ["n00", "n01", "n02"] and not report.waits


# --- drain-ahead ----------------------------------------------------------------------------------

AHEAD = 120


def ahead_policy(taint: bool = True) -> dict[str, Any]:
    return {"default": {"budget": {"count": 2}, "strategy": {"type": "fixed", "initialBatch": 2}},
            "drainAhead": {"seconds": AHEAD, "taint": taint}}


async def test_drain_ahead_marks_each_node_before_its_window_and_removes_it_after(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    env = temporal_test_env
    nodes = gpu_fleet(6, [8], auto=False)
    spec = FleetSpec(unique_name("ahead"), ahead_policy(), 1, [package("driver")])
    async with fleet(env, nodes, spec) as handle:

        async def first_batch_marked() -> bool:
            assert len(nodes.marked()) == 2, nodes.events
            return True

        await assert_eventually_async(first_batch_marked, timeout=60)
        first = nodes.marked()
        assert not nodes.requests, "no window before its node was marked"
        assert all(any(t["key"] == "noderoll.io/upcoming" for t in nodes.nodes[n].taints) for n in first)
        await skip(env, AHEAD / 2, handle)
        assert not nodes.requests, f"no window within {AHEAD} s of its mark"
        report = await progress(handle)
        assert report.message.startswith("drain-ahead: 2 node(s) of batch 1 marked noderoll.io/upcoming"), report.message
        await skip(env, AHEAD, handle)

        async def first_requested() -> bool:
            assert sorted(nodes.outstanding) == first
            return True

        await assert_eventually_async(first_requested, timeout=60)

        async def next_batch_marked_while_the_first_is_out() -> bool:
            assert len(nodes.marked()) == 4 and sorted(nodes.outstanding) == first, nodes.events
            return True

        # The batch after is predicted and marked while the first runs (no window of it answered yet).
        await assert_eventually_async(next_batch_marked_while_the_first_is_out, timeout=60)
        for _ in range(30):
            if nodes.outstanding:
                await nodes.finish(env.client)
            if len(set(nodes.requested())) == 6 and not nodes.outstanding:
                break
            await skip(env, 30, handle)
        report = await settled(handle)
        assert sorted(nodes.requested()) == sorted(nodes.nodes), "every node once"

        async def unmarked() -> bool:
            assert nodes.marked() == [] and all(not a for a in nodes.upcoming.values()), nodes.upcoming
            return True

        await assert_eventually_async(unmarked, timeout=60)
    for node in nodes.nodes:
        order = [kind for kind, n in nodes.events if n == node]
        assert order == ["mark", "request", "unmark"], f"{node} {order} {nodes.events}"


async def test_a_halt_takes_the_marks_of_nodes_not_started_away(temporal_test_env: WorkflowEnvironment) -> None:
    env = temporal_test_env
    nodes = gpu_fleet(4, [8], auto=False)
    spec = FleetSpec(unique_name("ahalt"), ahead_policy(taint=False), 1, [package("driver")])
    async with fleet(env, nodes, spec) as handle:

        async def marked() -> bool:
            assert len(nodes.marked()) == 2
            return True

        await assert_eventually_async(marked, timeout=60)
        assert all(not nodes.nodes[n].taints for n in nodes.marked()), "taint: false marks with the label only"
        await handle.signal(names.SIGNAL_HALT)

        async def released() -> bool:
            assert nodes.marked() == [], nodes.events
            return True

        await assert_eventually_async(released, timeout=60)
        assert not nodes.requests

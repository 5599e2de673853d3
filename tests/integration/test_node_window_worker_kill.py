"""`noderoll worker` killed with SIGKILL in the middle of a node window, then restarted.

The window must complete, no stage pod may run twice (each mode has one pod),
and the node must not stay cordoned.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient
from temporalio.client import Client
from temporalio.worker import Worker

from api.keys import CORDONED_BY_ANNOTATION
from localstack.state import StackInfo
from protocol.node_activities import RunStagePodResult
from tests.helpers import assert_eventually_async, new_task_queue
from tests.helpers.fleet import running_fleet
from tests.helpers.packages import BENCH_PACKAGES, SLEEP_IMAGE, package_spec
from tests.helpers.processes import NoderollProcesses
from tests.integration.node_window_support import Window, activity_results, close_workflows
from tests.workflows.node_collector import ResultCollector

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture
def fleet(local_stack: StackInfo) -> Iterator[Any]:
    # bench-sleep's stages take BENCH_STAGE_SECONDS: the kill lands while a stage pod runs (the
    # examples' stages are instant, and a stage with its check in one pod can end before the kill).
    with running_fleet(local_stack, nodes=1, image_stores=[BENCH_PACKAGES]) as running:
        yield running


async def test_sigkill_mid_window_then_restart_completes_without_rerunning_jobs(
    local_stack: StackInfo, temporal_client: Client, kube_api_client: ApiClient, fleet: Any, tmp_path: Path,
) -> None:
    window = Window(temporal_client, kube_api_client, fleet.node_names[0])
    procs = NoderollProcesses(local_stack, tmp_path, task_queue=window.task_queue)
    # The collector (a test workflow the real worker does not know) runs on its own queue, in-process.
    collector_queue = new_task_queue()
    try:
        async with Worker(temporal_client, task_queue=collector_queue, workflows=[ResultCollector]):
            window.collector = await temporal_client.start_workflow(
                ResultCollector.run, id=f"collector-{window.node}", task_queue=collector_queue)
            procs.start_worker()
            await window.request("bench-sleep", package_spec(
                SLEEP_IMAGE, interrupt={"type": "service", "services": ["systemd-sysctl"]}, stage_seconds=2))

            # Kill once the first stage pod's activity runs and has reported its pod (a heartbeat):
            # the node is cordoned and drained, and the pod, created by the drain (ADR 0022), runs
            # while its run_stage_pod activity waits for it in the worker that dies.
            async def waiting_for_its_pod() -> bool:
                described = await temporal_client.get_workflow_handle(f"node/{window.node}").describe()
                assert any(a.activity_type.name == "run_stage_pod" and a.heartbeat_details.payloads
                           for a in described.raw_description.pending_activities)
                return True

            await assert_eventually_async(waiting_for_its_pod, timeout=30, interval=0.05)
            assert len(window.stage_pods()) >= 1
            procs.kill("worker")
            assert window.node_object().spec.unschedulable
            procs.start_worker()

            async def answered() -> bool:
                assert len(await window.results()) == 1
                return True

            await assert_eventually_async(answered, timeout=60)
            [result] = await window.results()
            assert result.state == "complete", (result, procs.log("worker")[-3000:])
            jobs = await activity_results(temporal_client, window.node, "run_stage_pod", RunStagePodResult)
            # The activity that was running when the worker died ran again and adopted its pod.
            assert [j.adopted for j in jobs].count(True) == 1, jobs
    finally:
        procs.stop_all()
        window.close()
        await close_workflows(temporal_client, [f"node/{window.node}", f"collector-{window.node}"])
    modes = collections.Counter(window.modes_run())
    assert modes == collections.Counter(["apply", "apply-check", "config", "config-check", "interrupt",
                                         "post-interrupt", "post-interrupt-check"]), modes
    for job in window.stage_pods():
        # One pod per name, ever (recorded: the window deleted them at its end).
        assert len(window.pods_of(job.metadata.name)) == 1, job.metadata.name
    node = window.node_object()
    assert not node.spec.unschedulable
    assert CORDONED_BY_ANNOTATION not in (node.metadata.annotations or {})
    assert window.state().packages["bench-sleep"].state == "complete"

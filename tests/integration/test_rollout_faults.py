"""Rollouts on the real stack under faults: a failing stage and a bridge killed mid-rollout.

* fleetsim fails every `apply` of the Package (fault `fail-stage`): the first batch fails, the
  rollout halts at `failureThreshold` (phase Halted, condition Degraded with reason Halted and the
  threshold in its message); the fault is removed and `retry` (the contract signal) completes it.
* The bridge is killed (SIGKILL, no Lease release) while a rollout runs and a new one takes over:
  the rollout completes, `fleet/<policy>` was started once, every node was asked once, and no stage
  stage pod was created twice.

Small on purpose (6 nodes, 1 s stages, one attempt per stage through the worker's
`NODEROLL_NODE_STAGE_ATTEMPTS`): the default test tier runs them.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient
from temporalio.client import Client

from api import keys
from fleetsim.faults import Fault, Faults
from localstack.state import StackInfo
from protocol import names
from tests.helpers import assert_eventually, unique_name
from tests.helpers.chaos import StagePodAudit
from tests.helpers.fleet import running_fleet
from tests.helpers.packages import BENCH_PACKAGES, SLEEP_IMAGE, package_spec
from tests.helpers.processes import NoderollProcesses, noderoll_fixture
from tests.integration.bridge_support import (
    condition,
    create_package,
    create_policy,
    delete_package,
    delete_policy,
    read_package,
)

pytestmark = pytest.mark.integration
NODES = 6
TIMEOUT = 120.0


run = noderoll_fixture(stage_attempts=1, retry_backoff_seconds=1)


def status_of(api: ApiClient, name: str) -> dict[str, Any]:
    return dict(read_package(api, name).get("status") or {})


def complete_everywhere(api: ApiClient, name: str, fleet_label: str) -> None:
    """Every node of the fleet records the package complete (AssertionError otherwise)."""
    nodes = client.CoreV1Api(api).list_node(label_selector=f"faults-fleet={fleet_label}").items
    assert len(nodes) == NODES
    for node in nodes:
        raw = (node.metadata.annotations or {}).get(keys.NODE_STATE_ANNOTATION, "{}")
        entry = json.loads(raw).get("packages", {}).get(name) or {}
        assert entry.get("state") == "complete", (node.metadata.name, entry)


async def test_failure_threshold_halts_and_retry_completes(
    run: NoderollProcesses, local_stack: StackInfo, kube_api_client: ApiClient, temporal_client: Client
) -> None:
    fleet_label, policy, name = unique_name("faults"), unique_name("pol"), unique_name("failing")
    strategy = {"type": "fixed", "initialBatch": 2, "batchThreshold": 100, "failureThreshold": 1, "safetyLimit": 100}
    faults = Faults([Fault("fail-stage", package=name, mode="apply", exit_code=7)])
    with running_fleet(local_stack, nodes=NODES, labels={"faults-fleet": fleet_label},
                       image_stores=[BENCH_PACKAGES], faults=faults) as fleet:
        try:
            create_policy(kube_api_client, run, policy, {"default": {"budget": {"count": 2}, "strategy": strategy}})
            spec = package_spec(SLEEP_IMAGE, policy=policy, labels={"faults-fleet": fleet_label}, stage_seconds=1)
            create_package(kube_api_client, run.package(name, spec))

            def halted() -> dict[str, Any]:
                status = status_of(kube_api_client, name)
                assert status.get("phase") == "Halted", status
                return status

            status = assert_eventually(halted, timeout=TIMEOUT, interval=0.5)
            degraded = condition(read_package(kube_api_client, name), "Degraded")
            assert degraded["status"] == "True" and degraded["reason"] == "Halted", degraded
            assert "failureThreshold 1" in degraded["message"], degraded
            # The first batch failed: its 2 nodes are erroring, nothing else was started.
            assert status["nodes"]["erroring"] == 2 and status["nodes"]["complete"] == 0, status
            assert len(status["erroringNodes"]) == 2 and "exit code 7" in status["erroringNodes"][0]["reason"], status

            fleet.options.faults.replace([])
            await temporal_client.get_workflow_handle(names.fleet_workflow_id(policy)).signal(names.SIGNAL_RETRY)

            def ready() -> bool:
                cond = condition(read_package(kube_api_client, name), "Ready")
                assert cond["status"] == "True", cond
                return True

            assert_eventually(ready, timeout=TIMEOUT, interval=0.5)
            status = status_of(kube_api_client, name)
            assert status["phase"] == "Complete" and status["progress"] == f"{NODES}/{NODES}", status
            assert status["nodes"]["erroring"] == 0, status
            complete_everywhere(kube_api_client, name, fleet_label)
        finally:
            delete_package(kube_api_client, name)
            delete_policy(kube_api_client, policy)


async def test_bridge_killed_mid_rollout_starts_nothing_twice(
    run: NoderollProcesses, local_stack: StackInfo, kube_api_client: ApiClient, temporal_client: Client
) -> None:
    fleet_label, policy, name = unique_name("faults"), unique_name("pol"), unique_name("killed")
    audit = StagePodAudit(str(local_stack.kubeconfig)).start()
    with running_fleet(local_stack, nodes=NODES, labels={"faults-fleet": fleet_label},
                       image_stores=[BENCH_PACKAGES]):
        try:
            create_policy(kube_api_client, run, policy,
                          {"default": {"budget": {"count": 2}, "strategy": {"type": "fixed", "initialBatch": 2}}})
            create_package(kube_api_client, run.package(name, package_spec(
                SLEEP_IMAGE, policy=policy, labels={"faults-fleet": fleet_label}, stage_seconds=2)))

            def mid_rollout() -> bool:
                status = status_of(kube_api_client, name)
                assert status.get("phase") == "Progressing" and audit.count(name) >= 1, status
                return True

            assert_eventually(mid_rollout, timeout=TIMEOUT, interval=0.2)
            bridge = next(n for n in run.processes if n.startswith("bridge"))
            run.kill(bridge)
            assert status_of(kube_api_client, name)["nodes"]["complete"] < NODES, "killed mid-rollout"
            run.wait_leading(run.start_bridge(unique_name("bridge")))

            def ready() -> bool:
                cond = condition(read_package(kube_api_client, name), "Ready")
                assert cond["status"] == "True" and cond["observedGeneration"] == 1, cond
                return True

            assert_eventually(ready, timeout=TIMEOUT, interval=0.5)
            complete_everywhere(kube_api_client, name, fleet_label)
            query = f"WorkflowId = '{names.fleet_workflow_id(policy)}'"
            runs = [w.run_id async for w in temporal_client.list_workflows(query)]
            assert len(runs) == 1, runs
            handle = temporal_client.get_workflow_handle(names.fleet_workflow_id(policy))
            starts = [e for e in (await handle.fetch_history()).events
                      if e.HasField("activity_task_scheduled_event_attributes")
                      and e.activity_task_scheduled_event_attributes.activity_type.name == "request_windows"]
            requested = [n for e in starts
                         for n in json.loads(e.activity_task_scheduled_event_attributes.input.payloads[0].data)["nodes"]]
            assert sorted(requested) == sorted(set(requested)) and len(requested) == NODES, requested
            assert audit.count(name) >= NODES and audit.duplicates(name) == {}, audit.duplicates(name)
        finally:
            audit.stop()
            delete_package(kube_api_client, name)
            delete_policy(kube_api_client, policy)

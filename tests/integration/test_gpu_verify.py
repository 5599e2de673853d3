"""GPU health verified before uncordon (`spec.verify`, issue 44 item 4) on the real stack with fleetsim.

`noderoll worker` and `noderoll bridge` processes, fleetsim nodes whose simulated GPUs answer the
window's verify pod (fleetsim/verify.py; the fault `unhealthy-gpus` makes them fail it):

* a one-node canary whose verify fails halts the fleet: the canary node stays cordoned by noderoll,
  labelled `noderoll.io/status=verify-failed`, its Package recorded complete next to the failed
  verify, a Warning Event and the kept verify pod (`noderoll logs`) say what failed, no other node
  was touched; `retry`
  runs its window again, the verify passes (the fault is spent), the node is uncordoned and the
  rollout completes on every node;
* with `onFailure: Uncordon` and `canary.onFailure: rollback`, the failed verify counts as a failed
  canary (the rollback follows) and the canary node is schedulable again.

The node workflow's histories of the failed and of the passing verify are replayed (and recorded with
`NODEROLL_RECORD_FLEET_HISTORIES=tests/histories`, as node/window-verify-*).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, TypeVar

import pytest
from kubernetes import client
from kubernetes.client import ApiClient
from temporalio.client import Client, WorkflowHistory

from api import keys
from cli.main import main as cli_main
from fleetsim.faults import Fault, Faults
from localstack.state import StackInfo
from protocol import names
from protocol.node_activities import RunVerifyPodInput
from tests.helpers import assert_eventually, unique_name
from tests.helpers.fleet import running_fleet
from tests.helpers.histories import replay_and_record
from tests.helpers.packages import BENCH_PACKAGES, SLEEP_IMAGE, package_spec
from tests.helpers.processes import NoderollProcesses, noderoll_fixture
from tests.helpers.stagepods import StagePodRecorder
from tests.integration.bridge_support import (
    condition,
    create_package,
    create_policy,
    delete_package,
    delete_policy,
    read_package,
    read_policy,
    windows_of,
)

# The halt and the retry (3 nodes, 4 windows of 1 s stages): about 60 s at load 2; the rollback
# (2 windows): about 30 s.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
TIMEOUT = 240.0
SERVICE = {"type": "service", "services": ["nvidia-persistenced"]}
VERIFY_IMAGE = "registry.example/noderoll/gpu-verify:1.0.0"
T = TypeVar("T")

run = noderoll_fixture(retry_backoff_seconds=1)


def node_of(api: ApiClient, name: str) -> client.V1Node:
    return client.CoreV1Api(api).read_node(name)


def state_of(node: client.V1Node) -> dict[str, Any]:
    raw = (node.metadata.annotations or {}).get(keys.NODE_STATE_ANNOTATION, "{}")
    state: dict[str, Any] = json.loads(raw)
    return state


def node_condition(node: client.V1Node, kind: str) -> client.V1NodeCondition:
    return next(c for c in node.status.conditions if c.type == kind)


def node_events(api: ApiClient, node: str, reason: str) -> list[client.CoreV1Event]:
    selector = f"involvedObject.name={node},reason={reason}"
    return list(client.CoreV1Api(api).list_namespaced_event("default", field_selector=selector).items)


def verify_pods(api: ApiClient, node: str) -> list[client.V1Pod]:
    selector = f"{keys.STAGE_NODE_LABEL}={node},{keys.STAGE_MODE_LABEL}=verify"
    return list(client.CoreV1Api(api).list_namespaced_pod(keys.PACKAGE_POD_NAMESPACE, label_selector=selector).items)


async def record_node_history(temporal: Client, node: str, name: str) -> WorkflowHistory:
    """The node workflow's latest run (one window), replayed, and recorded as `node/<name>` when asked."""
    history = await temporal.get_workflow_handle(names.node_workflow_id(node)).fetch_history()
    await replay_and_record({f"node/{name}": history}, "NODEROLL_RECORD_FLEET_HISTORIES")
    return history


async def activity_inputs(temporal: Client, history: WorkflowHistory, activity: str, kind: type[T]) -> list[T]:
    """The decoded input of every `activity` the history scheduled."""
    found: list[T] = []
    for event in history.events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            attrs = event.activity_task_scheduled_event_attributes
            if attrs.activity_type.name == activity:
                [value] = await temporal.data_converter.decode(list(attrs.input.payloads), [kind])
                found.append(value)
    return found


async def test_a_failing_verify_halts_the_canary_and_retry_completes_the_rollout(
    run: NoderollProcesses, local_stack: StackInfo, kube_api_client: ApiClient, temporal_client: Client,
    capsys: pytest.CaptureFixture[str],
) -> None:
    labels = {"verify-test": unique_name("halt")}
    policy, name = unique_name("pol"), unique_name("verified")
    # The first verify pod anywhere fails (the canary's); the fault is then spent.
    faults = Faults([Fault("unhealthy-gpus", exit_code=4, times=1)])
    recorder = StagePodRecorder(kube_api_client).start()
    with running_fleet(local_stack, nodes=3, labels=labels, image_stores=[BENCH_PACKAGES], faults=faults) as fleet:
        try:
            create_policy(kube_api_client, run, policy, {
                "canary": {"count": 1},
                "default": {"budget": {"count": 2}, "strategy": {"type": "fixed", "initialBatch": 2}},
                "verify": {"image": VERIFY_IMAGE, "timeoutSeconds": 60}})
            create_package(kube_api_client, run.package(name, package_spec(
                SLEEP_IMAGE, policy=policy, labels=labels, stage_seconds=0.5, interrupt=SERVICE)))

            def halted() -> dict[str, Any]:
                status = read_package(kube_api_client, name).get("status") or {}
                assert status.get("phase") == "Halted" and status.get("erroringNodes"), status
                return status

            status = assert_eventually(halted, timeout=TIMEOUT, interval=0.5)
            [erroring] = status["erroringNodes"]
            canary = erroring["node"]
            assert "complete on the host; GPU verify" in erroring["reason"], erroring
            assert "failed (exit code 4)" in erroring["reason"], erroring
            node = node_of(kube_api_client, canary)
            # Left cordoned by noderoll, labelled verify-failed, the Package complete next to the failure.
            assert node.spec.unschedulable and node.metadata.annotations[keys.CORDONED_BY_ANNOTATION] == "noderoll"
            assert node.metadata.labels[keys.NODE_STATUS_LABEL] == "verify-failed"
            state = state_of(node)
            assert state["packages"][name]["state"] == "complete", state
            assert state["verifyFailed"]["packages"] == [name] and state["verifyFailed"]["image"] == VERIFY_IMAGE
            erroring_condition = node_condition(node, keys.CONDITION_ERRORING)
            assert erroring_condition.status == "True" and "verify: GPU verify" in erroring_condition.message
            [event] = node_events(kube_api_client, canary, "VerifyFailed")
            assert event.type == "Warning" and "the node stays cordoned" in event.message, event.message
            [left] = node_events(kube_api_client, canary, "LeftCordoned")
            assert "its GPU verify failed" in left.message, left.message
            # The failed verify pod is kept for `noderoll logs`, with what the GPUs said.
            [kept] = verify_pods(kube_api_client, canary)
            assert kept.status.phase == "Failed", kept.status
            assert "FAIL" in kept.status.container_statuses[0].state.terminated.message
            assert kept.spec.containers[0].image == VERIFY_IMAGE
            capsys.readouterr()
            flags = ["--temporal-address", local_stack.temporal_address, "--kubeconfig", str(local_stack.kubeconfig)]
            # The CLI runs its own event loop: in a thread, beside the test's.
            assert await asyncio.to_thread(cli_main, ["logs", name, "--node", canary, "--mode", "verify", *flags]) == 0
            out, err = capsys.readouterr()
            assert "FAIL" in out and "(mode verify, Failed, exit 4)" in err, (out, err)
            others = [n for n in fleet.node_names if n != canary]
            assert [windows_of(kube_api_client, n).count for n in others] == [0, 0]
            history = await record_node_history(temporal_client, canary, "window-verify-fails-keeps-cordoned")
            # The last post-interrupt pod created the verify pod once its stages succeeded (ADR 0022).
            [verify_input] = await activity_inputs(temporal_client, history, "run_verify_pod", RunVerifyPodInput)
            assert verify_input.prestarted is not None and verify_input.prestarted.name == kept.metadata.name

            # retry: the canary's window runs again, then its verify, which passes now.
            await temporal_client.get_workflow_handle(names.fleet_workflow_id(policy)).signal(names.SIGNAL_RETRY)

            def ready() -> bool:
                cond = condition(read_package(kube_api_client, name), "Ready")
                assert cond["status"] == "True", cond
                return True

            assert_eventually(ready, timeout=TIMEOUT, interval=0.5)
            await record_node_history(temporal_client, canary, "window-verify-retry-passes")
            for node_name in fleet.node_names:
                node = node_of(kube_api_client, node_name)
                assert not node.spec.unschedulable, node_name
                assert node.metadata.labels[keys.NODE_STATUS_LABEL] == "complete", node_name
                assert "verifyFailed" not in state_of(node), node_name
                assert node_events(kube_api_client, node_name, "Verified"), node_name
            assert verify_pods(kube_api_client, canary) == []  # the kept pod went with the retry's window
            ran = [p for p in recorder.pods() if p.metadata.labels[keys.STAGE_MODE_LABEL] == "verify"
                   and p.spec.node_name in fleet.node_names]
            # One verify per window: the failed one, the retry's, and one on each of the other two nodes.
            assert len(ran) == 4, [(p.metadata.name, p.spec.node_name) for p in ran]
        finally:
            recorder.stop()
            delete_package(kube_api_client, name)
            delete_policy(kube_api_client, policy)


async def test_a_failing_verify_with_uncordon_rolls_the_canary_back_schedulable(
    run: NoderollProcesses, local_stack: StackInfo, kube_api_client: ApiClient
) -> None:
    labels = {"verify-test": unique_name("rb")}
    policy, name = unique_name("pol"), unique_name("verified")
    faults = Faults([Fault("unhealthy-gpus")])
    with running_fleet(local_stack, nodes=2, labels=labels, image_stores=[BENCH_PACKAGES], faults=faults) as fleet:
        try:
            create_policy(kube_api_client, run, policy, {
                "canary": {"count": 1, "onFailure": "rollback"},
                "default": {"budget": {"count": 1}},
                "verify": {"image": VERIFY_IMAGE, "timeoutSeconds": 60, "onFailure": "Uncordon"}})
            create_package(kube_api_client, run.package(name, package_spec(
                SLEEP_IMAGE, policy=policy, labels=labels, stage_seconds=0.5, interrupt=SERVICE)))

            def rolled_back() -> dict[str, Any]:
                status = read_policy(kube_api_client, policy).get("status") or {}
                assert status.get("phase") == "RolledBack", (status.get("phase"), status.get("message"))
                return status

            rollback = assert_eventually(rolled_back, timeout=TIMEOUT, interval=0.5)["rollback"]
            [failure] = rollback["canaryFailures"]
            assert "GPU verify" in failure["reason"] and rollback["uninstalled"] == [name], rollback
            canary = failure["node"]
            node = node_of(kube_api_client, canary)
            assert not node.spec.unschedulable, "onFailure: Uncordon lifts noderoll's cordon"
            [event] = node_events(kube_api_client, canary, "VerifyFailed")
            assert "is uncordoned (onFailure: Uncordon)" in event.message, event.message
            [other] = [n for n in fleet.node_names if n != canary]
            assert windows_of(kube_api_client, other).count == 0
            # The rollback's window asked for no verify: the failure stays recorded and shown.
            node = node_of(kube_api_client, canary)
            assert state_of(node)["verifyFailed"]["packages"] == [name], state_of(node)
            assert node.metadata.labels[keys.NODE_STATUS_LABEL] == "verify-failed" and not node.spec.unschedulable
        finally:
            delete_package(kube_api_client, name)
            delete_policy(kube_api_client, policy)

"""`noderoll bridge` on the real stack: validation, idempotent starts, status, pause/resume, deletion,
outside cordons and NotReady nodes signalled to their fleet.

`noderoll worker` and `noderoll bridge` run as processes on a fresh task queue; a fleet of simulated
nodes (fleetsim, in-process) carries the rollouts. The bridge only sees this module's Packages
(`--label-selector`) and uses its own Lease name, so one session stack serves every test.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client import ApiClient, CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from api import keys
from cli.rollout_history import fleet_histories
from localstack.state import StackInfo
from planning.fleet.codec import progress_from_json
from planning.views.rollout_report import Signal
from planning.views.status import RolloutProgress
from protocol import names
from tests.helpers import assert_eventually, assert_eventually_async, unique_name
from tests.helpers.fleet import running_fleet
from tests.helpers.packages import package_spec
from tests.helpers.processes import NoderollProcesses, noderoll_fixture
from tests.helpers.progress import EVERY_NODE
from tests.integration.bridge_support import (
    condition,
    create_package,
    delete_package,
    kubectl_wait_ready,
    patch_package,
    read_package,
    reasons,
)

pytestmark = pytest.mark.integration
NODES = 2
ROLLOUT_TIMEOUT = 180.0


run = noderoll_fixture()


@pytest.fixture(scope="module", autouse=True)
def fleet(run: NoderollProcesses, local_stack: StackInfo) -> Iterator[None]:
    """A 2-node fleet labelled for this module's worker and bridge."""
    with running_fleet(local_stack, nodes=NODES, labels={"bridge-fleet": run.run_id}):
        yield


@pytest.fixture
def packages(kube_api_client: ApiClient) -> Iterator[list[str]]:
    """Names of the Packages a test created; deleted (finalizers dropped) after it."""
    names: list[str] = []
    yield names
    for name in names:
        delete_package(kube_api_client, name)


def fleet_spec(run: NoderollProcesses, **fields: Any) -> dict[str, Any]:
    """A sysctl-tuning Package spec selecting this module's fleet."""
    return package_spec(labels={"bridge-fleet": run.run_id}, **fields)


# The module's Packages name no DeploymentPolicy: they roll out in the built-in fleet.
FLEET_ID = names.fleet_workflow_id(None)


async def runs_of_fleet(temporal: Client) -> list[str]:
    """Run ids of every `fleet/default` execution started on this module's task queue."""
    return [w.run_id async for w in temporal.list_workflows(f"WorkflowId = '{FLEET_ID}'")]


async def progress(temporal: Client, package: str) -> RolloutProgress:
    """The Package's part of its fleet's `progress` answer."""
    answer = progress_from_json(await temporal.get_workflow_handle(FLEET_ID).query(names.QUERY_PROGRESS, EVERY_NODE))
    assert package in answer.packages, f"{FLEET_ID} does not carry {package} yet"
    return answer.packages[package]


async def test_invalid_package_gets_condition_and_event_and_no_workflow(
    run: NoderollProcesses, kube_api_client: ApiClient, temporal_client: Client, packages: list[str]
) -> None:
    name = unique_name("bad")
    packages.append(name)
    # The admission webhook refuses what a Package gets wrong on its own; a dependency that does not
    # exist (yet) is admitted and reported here, by the bridge.
    spec = fleet_spec(run, dependsOn={"missing-pkg": "1.0"})
    create_package(kube_api_client, run.package(name, spec))

    def invalid() -> dict[str, Any]:
        ready = condition(read_package(kube_api_client, name), "Ready")
        assert ready["status"] == "False" and ready["reason"] == "Invalid", ready
        return ready

    ready = assert_eventually(invalid, timeout=30)
    assert ready["observedGeneration"] == 1
    assert "no Package 'missing-pkg'" in ready["message"]
    assert read_package(kube_api_client, name)["status"]["phase"] == "Invalid"
    assert_eventually(lambda: "InvalidSpec" in reasons(kube_api_client, name), timeout=15)
    # Never handed to a fleet: no fleet was started for it.
    with pytest.raises(RPCError) as err:
        await temporal_client.get_workflow_handle(FLEET_ID).describe()
    assert err.value.status is RPCStatusCode.NOT_FOUND


async def test_one_rollout_across_a_bridge_restart_and_status_ready(
    run: NoderollProcesses, local_stack: StackInfo, kube_api_client: ApiClient, temporal_client: Client,
    packages: list[str],
) -> None:
    name = unique_name("once")
    packages.append(name)
    runs_before = len(await runs_of_fleet(temporal_client))
    create_package(kube_api_client, run.package(name, fleet_spec(run)))
    kubectl_wait_ready(local_stack, name, ROLLOUT_TIMEOUT)
    status = read_package(kube_api_client, name)["status"]
    assert status["phase"] == "Complete" and status["progress"] == f"{NODES}/{NODES}", status
    assert condition(read_package(kube_api_client, name), "Ready")["observedGeneration"] == 1

    # Killed without a goodbye (no Lease release): the new bridge waits out the Lease, then reconciles.
    run.kill("bridge")
    run.wait_leading(run.start_bridge("bridge-2"))
    patch_package(kube_api_client, name, {"spec": {"env": [{"name": "TUNING", "value": "2"}]}})

    def generation_two() -> bool:
        ready = condition(read_package(kube_api_client, name), "Ready")
        assert ready["observedGeneration"] == 2 and ready["status"] == "True", ready
        return True

    assert_eventually(generation_two, timeout=ROLLOUT_TIMEOUT)
    # One fleet run across the restart: the new bridge read back what the fleet had, started nothing.
    assert len(await runs_of_fleet(temporal_client)) == runs_before + 1
    seen = reasons(kube_api_client, name)
    assert seen.count("RolloutStarted") == 1, seen
    assert seen.count("SpecChanged") == 1, seen


async def test_pause_annotation_reaches_the_rollout_and_resume_continues(
    run: NoderollProcesses, local_stack: StackInfo, kube_api_client: ApiClient, temporal_client: Client,
    packages: list[str],
) -> None:
    name = unique_name("pause")
    packages.append(name)
    create_package(kube_api_client, run.package(name, fleet_spec(run), {keys.PAUSE_ANNOTATION: "true"}))

    async def phase_is(phase: str) -> None:
        report = await progress(temporal_client, name)
        assert report.phase.value == phase, report

    async def paused() -> bool:
        await phase_is("Paused")
        return True

    await assert_eventually_async(paused, timeout=60, retry_on=(AssertionError, RPCError))
    assert_eventually(
        lambda: (read_package(kube_api_client, name).get("status") or {}).get("phase") == "Paused", timeout=30
    )
    patch_package(kube_api_client, name, {"metadata": {"annotations": {keys.PAUSE_ANNOTATION: None}}})
    kubectl_wait_ready(local_stack, name, ROLLOUT_TIMEOUT)

    # Paused again by annotation (the `pause` signal), then a new spec: the re-planned rollout waits.
    patch_package(kube_api_client, name, {"metadata": {"annotations": {keys.PAUSE_ANNOTATION: "true"}}})
    assert_eventually(lambda: "Paused" in reasons(kube_api_client, name), timeout=30)
    # A config edit: every node has work again (the config stage), which a paused rollout must not start.
    patch_package(kube_api_client, name, {"spec": {"config": {"sysctl.conf": "vm.max_map_count = 262144\n"}}})
    await assert_eventually_async(paused, timeout=60)
    patch_package(kube_api_client, name, {"metadata": {"annotations": {keys.PAUSE_ANNOTATION: None}}})

    def ready_at_generation_two() -> bool:
        ready = condition(read_package(kube_api_client, name), "Ready")
        assert ready["status"] == "True" and ready["observedGeneration"] == 2, ready
        return True

    assert_eventually(ready_at_generation_two, timeout=ROLLOUT_TIMEOUT)
    seen = reasons(kube_api_client, name)
    assert seen.count("Resumed") == 2 and seen.count("RolloutStarted") == 1, seen


async def test_deleted_package_uninstalls_before_its_finalizer_goes(
    run: NoderollProcesses, local_stack: StackInfo, kube_api_client: ApiClient, temporal_client: Client,
    packages: list[str],
) -> None:
    name = unique_name("gone")
    packages.append(name)
    create_package(kube_api_client, run.package(name, fleet_spec(run, uninstall={"enabled": True})))
    assert_eventually(
        lambda: keys.FINALIZER in read_package(kube_api_client, name)["metadata"].get("finalizers", []), timeout=30
    )
    kubectl_wait_ready(local_stack, name, ROLLOUT_TIMEOUT)
    handle = temporal_client.get_workflow_handle(FLEET_ID)
    CustomObjectsApi(kube_api_client).delete_cluster_custom_object(keys.GROUP, keys.VERSION, keys.PACKAGE_PLURAL, name)

    def gone() -> bool:
        try:
            read_package(kube_api_client, name)
        except ApiException as err:
            assert err.status == 404
            return True
        raise AssertionError("Package still there")

    assert_eventually(gone, timeout=ROLLOUT_TIMEOUT)

    async def fleet_ended() -> bool:
        # Its last Package is gone: the fleet ends.
        assert (await handle.describe()).status is WorkflowExecutionStatus.COMPLETED
        return True

    await assert_eventually_async(fleet_ended, timeout=60)
    # The uninstall ran on every node before the finalizer went: no node records the Package.
    for node in CoreV1Api(kube_api_client).list_node(label_selector=f"bridge-fleet={run.run_id}").items:
        recorded = json.loads((node.metadata.annotations or {}).get(keys.NODE_STATE_ANNOTATION) or "{}")
        assert name not in recorded.get("packages", {}), (node.metadata.name, recorded)
    assert "Deleting" in reasons(kube_api_client, name)



def set_ready(core: CoreV1Api, node: str, ready: bool) -> None:
    """Write the node's Ready condition as a kubelet (or a node problem) would: from outside noderoll."""
    condition = {"type": "Ready", "status": "True" if ready else "False",
                 "reason": "KubeletReady" if ready else "KubeletNotReady", "message": "set by test_bridge"}
    core.patch_node_status(node, {"status": {"conditions": [condition]}})


async def test_outside_cordons_and_not_ready_nodes_reach_their_fleet_at_once(
    run: NoderollProcesses, local_stack: StackInfo, kube_api_client: ApiClient, temporal_client: Client,
    packages: list[str],
) -> None:
    # Issue 43 item 3: a floor must hear of someone else's cordon and of a NotReady node within
    # seconds. A reboot Package first: noderoll's own cordons and its reboots' NotReady are no such news.
    name = unique_name("avail")
    packages.append(name)
    create_package(kube_api_client, run.package(name, fleet_spec(run, interrupt={"type": "reboot"})))
    kubectl_wait_ready(local_stack, name, ROLLOUT_TIMEOUT)
    core = CoreV1Api(kube_api_client)
    cordoned, not_ready = sorted(n.metadata.name for n in core.list_node(
        label_selector=f"bridge-fleet={run.run_id}").items)

    async def availability_signals() -> list[Signal]:
        return [s for h in await fleet_histories(temporal_client, names.DEFAULT_FLEET) for s in h.signals
                if s.name == names.SIGNAL_AVAILABILITY_CHANGED
                and {cordoned, not_ready} & set((s.payload or {}).get("nodes") or [])]

    assert await availability_signals() == [], "noderoll's own cordons and reboots were signalled"
    try:
        core.patch_node(cordoned, {"spec": {"unschedulable": True}})  # `kubectl cordon`
        set_ready(core, not_ready, False)

        async def both_heard() -> list[Signal]:
            signals = await availability_signals()
            assert {n for s in signals for n in s.payload["nodes"]} == {cordoned, not_ready}, signals
            return signals

        signals = await assert_eventually_async(both_heard, timeout=30)
        # Both changes came within the bridge's coalescing interval of each other: one signal, or two
        # when the watch delivered them on either side of a hand-over.
        assert len(signals) <= 2, signals
    finally:
        core.patch_node(cordoned, {"spec": {"unschedulable": None}})
        set_ready(core, not_ready, True)

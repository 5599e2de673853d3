"""Fleet rollouts on the real stack: 20 simulated nodes, `noderoll worker` and `noderoll bridge` processes.

* Two Packages with a service interrupt (so every window cordons and drains) share one
  DeploymentPolicy (exponential, canary first, budget 4): the batches grow, a Node watch that
  counts cordoned nodes at every change never sees more than the budget, and every node is
  cordoned once for both (one window carries both).
* The second Package depends on the first: on every node it finished after its dependency.
* A version bump of the first Package runs `upgrade` on every node through the same batching (wave 2).
* A `runtimeRequired` Package and a node joining mid-rollout: the node gets the taint, is updated,
  and the taint goes once the package is complete there.
* `temporal workflow signal --name pause` holds the rollout; `resume` continues it.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client import ApiClient
from temporalio.client import Client, WorkflowExecutionStatus

from api import keys
from api.enums import RolloutPhase
from localstack.state import StackInfo
from planning.fleet.codec import progress_from_json
from planning.views.status import RolloutProgress
from protocol import names
from tests.helpers import assert_eventually, assert_eventually_async, unique_name
from tests.helpers.fleet import running_fleet
from tests.helpers.packages import SERVICE_IMAGE, package_spec
from tests.helpers.processes import NoderollProcesses, noderoll_fixture
from tests.helpers.progress import EVERY_NODE
from tests.integration.bridge_support import (
    create_package,
    create_policy,
    delete_package,
    delete_policy,
    kubectl_wait_ready,
    patch_package,
    read_package,
    temporal_signal,
)

pytestmark = pytest.mark.integration
NODES = 20
BUDGET = 4
ROLLOUT_TIMEOUT = 420.0


@dataclass
class CordonWatch:
    """Counts the fleet's cordoned nodes at every Node change (a watch: no polling, no sleep)."""

    api: ApiClient
    selector: str
    cordoned: set[str] = field(default_factory=set)
    # node -> times it became cordoned
    cordons: dict[str, int] = field(default_factory=dict)
    peak: int = 0
    changes: int = 0
    _watch: watch.Watch = field(default_factory=watch.Watch)
    _stopped: bool = False

    def run(self) -> None:
        core = client.CoreV1Api(self.api)
        try:
            for event in self._watch.stream(core.list_node, label_selector=self.selector, timeout_seconds=900):
                node = event["object"]
                if event["type"] != "DELETED" and node.spec.unschedulable:
                    if node.metadata.name not in self.cordoned:
                        self.cordons[node.metadata.name] = self.cordons.get(node.metadata.name, 0) + 1
                    self.cordoned.add(node.metadata.name)
                else:
                    self.cordoned.discard(node.metadata.name)
                self.changes += 1
                self.peak = max(self.peak, len(self.cordoned))
        except Exception as err:  # noqa: BLE001 - `stop()` closes the stream under the reader
            if not self._stopped:
                raise RuntimeError("cordon watch broke before the test ended") from err

    def stop(self) -> None:
        self._stopped = True
        self._watch.stop()


run = noderoll_fixture()


async def progress(temporal: Client, package: str, policy: str | None = None) -> RolloutProgress:
    """The Package's part of its fleet's `progress`."""
    answer = progress_from_json(
        await temporal.get_workflow_handle(names.fleet_workflow_id(policy)).query(names.QUERY_PROGRESS, EVERY_NODE))
    return answer.packages[package]


async def wait_closed(temporal: Client, policy: str | None) -> None:
    """Until the fleet has ended (its last Package is gone)."""
    handle = temporal.get_workflow_handle(names.fleet_workflow_id(policy))

    async def closed() -> bool:
        assert (await handle.describe()).status != WorkflowExecutionStatus.RUNNING
        return True

    await assert_eventually_async(closed, timeout=60)


def node_records(api: ApiClient, selector: str) -> dict[str, dict[str, Any]]:
    """node -> its `noderoll.io/state` packages."""
    out = {}
    for node in client.CoreV1Api(api).list_node(label_selector=selector).items:
        raw = (node.metadata.annotations or {}).get(keys.NODE_STATE_ANNOTATION, "{}")
        out[node.metadata.name] = json.loads(raw).get("packages", {})
    return out


async def test_shared_budget_canary_growth_dependency_and_upgrade(
    run: NoderollProcesses, local_stack: StackInfo, kube_api_client: ApiClient, temporal_client: Client
) -> None:
    fleet_label = unique_name("fleet")
    selector = f"rollout-fleet={fleet_label}"
    policy, first, second = unique_name("pol"), unique_name("base"), unique_name("dep")
    strategy = {"type": "exponential", "initialBatch": 1, "growthFactor": 2, "batchThreshold": 100}
    with running_fleet(local_stack, nodes=NODES, labels={"rollout-fleet": fleet_label}):
        watcher = CordonWatch(kube_api_client, selector)
        thread = threading.Thread(target=watcher.run, daemon=True)
        thread.start()
        try:
            create_policy(kube_api_client, run, policy, {
                "canary": {"count": 1, "soakSeconds": 2, "promotion": "auto"},
                "default": {"budget": {"count": BUDGET}, "strategy": strategy},
            })

            def spec(**extra: Any) -> dict[str, Any]:
                return package_spec(SERVICE_IMAGE, policy=policy, labels={"rollout-fleet": fleet_label},
                                    interrupt={"type": "service", "services": ["containerd"]}, **extra)

            create_package(kube_api_client, run.package(first, spec()))
            create_package(kube_api_client, run.package(second, spec(dependsOn={first: "1.0.0"})))
            kubectl_wait_ready(local_stack, first)
            kubectl_wait_ready(local_stack, second)
            report = await progress(temporal_client, first, policy)
            # Canary, then 1, 2, 4, 4, ... (exponential growth capped by the budget).
            assert report.batch_number >= 1 + 5, report
            assert report.canary_phase.value == "Passed" and len(report.canary_nodes) == 1
            status = read_package(kube_api_client, first)["status"]
            assert status["phase"] == "Complete" and status["progress"] == f"{NODES}/{NODES}", status

            records = node_records(kube_api_client, selector)
            assert len(records) == NODES
            for node, packages in records.items():
                assert packages[first]["state"] == "complete" and packages[second]["state"] == "complete", node
                # The dependent ran after its dependency on every node.
                assert packages[second]["updatedAt"] >= packages[first]["updatedAt"], (node, packages)

            # A version bump runs `upgrade` through the same batching (the dependent goes first, so
            # only the upgrade runs; its rollout ends without uninstalling).
            delete_package(kube_api_client, second)
            patch_package(kube_api_client, first, {"spec": {"version": "1.1.0"}})

            def upgraded() -> bool:
                ready = [c for c in read_package(kube_api_client, first).get("status", {}).get("conditions", [])
                         if c["type"] == "Ready"]
                assert ready and ready[0]["status"] == "True" and ready[0]["observedGeneration"] == 2, ready
                return True

            assert_eventually(upgraded, timeout=ROLLOUT_TIMEOUT, interval=2)
            for node, packages in node_records(kube_api_client, selector).items():
                assert packages[first]["version"] == "1.1.0" and packages[first]["action"] == "upgrade", node
            report = await progress(temporal_client, first, policy)
            assert report.version == "1.1.0" and report.batch_number >= 5, report
        finally:
            watcher.stop()
            for name in (second, first):
                delete_package(kube_api_client, name)
            delete_policy(kube_api_client, policy)
            await wait_closed(temporal_client, policy)
    assert watcher.changes > NODES, "the watch saw the cordons"
    assert 1 <= watcher.peak <= BUDGET, f"{watcher.peak} nodes cordoned at once; budget {BUDGET}"
    # Wave 1 carried both Packages in one window per node; wave 2 (the upgrade) one more.
    assert all(count == 2 for count in watcher.cordons.values()) and len(watcher.cordons) == NODES, watcher.cordons


async def test_runtime_required_joining_node_and_pause_by_temporal_signal(
    run: NoderollProcesses, local_stack: StackInfo, kube_api_client: ApiClient, temporal_client: Client
) -> None:
    fleet_label = unique_name("rr")
    name = unique_name("rr-pkg")
    labels = {"rr-fleet": fleet_label}
    spec = package_spec(labels=labels, runtimeRequired=True)
    workflow_id = names.fleet_workflow_id(None)

    with running_fleet(local_stack, nodes=3, labels=labels) as fleet:
        try:
            create_package(kube_api_client, run.package(name, spec))
            kubectl_wait_ready(local_stack, name, timeout=180)

            # Pause through Temporal directly; a node joining now is tainted but not updated.
            temporal_signal(local_stack, workflow_id, names.SIGNAL_PAUSE)

            async def paused() -> bool:
                assert (await progress(temporal_client, name)).phase is RolloutPhase.PAUSED
                return True

            with running_fleet(local_stack, nodes=1, labels=labels) as late:
                joiner = late.node_names[0]
                core = client.CoreV1Api(kube_api_client)

                def taint_keys() -> list[str]:
                    return [t.key for t in core.read_node(joiner).spec.taints or []]

                assert_eventually(lambda: keys.RUNTIME_REQUIRED_TAINT_KEY in taint_keys(), timeout=60)
                await assert_eventually_async(paused, timeout=60)
                report = await progress(temporal_client, name)
                assert report.total_nodes == 4 and report.counts.get("complete") == 3, report

                temporal_signal(local_stack, workflow_id, names.SIGNAL_RESUME)

                def joiner_done() -> bool:
                    record = node_records(kube_api_client, f"rr-fleet={fleet_label}")[joiner]
                    assert record.get(name, {}).get("state") == "complete", record
                    assert keys.RUNTIME_REQUIRED_TAINT_KEY not in taint_keys()
                    return True

                assert_eventually(joiner_done, timeout=180, interval=1)
            assert all(keys.RUNTIME_REQUIRED_TAINT_KEY not in [t.key for t in core.read_node(n).spec.taints or []]
                       for n in fleet.node_names)
        finally:
            delete_package(kube_api_client, name)
            await wait_closed(temporal_client, None)

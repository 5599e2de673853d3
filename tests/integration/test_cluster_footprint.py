"""Nothing grows without bound in the cluster (issue #14 item 1), on the real stack with fleetsim nodes.

A rollout counts, in the apiserver, the stage pods, their Pods and ConfigMaps and the Events of
its nodes before and after:

* a window deletes its stage pods (and their pods and ConfigMaps) once its outcome is written on the
  node; the latest failed attempt of a package that ended erroring stays (`noderoll logs`) until
  that package's next window on the node (here: a retry) deletes it;
* Events are one per (node, reason), raised in place (`count`): a node's second window adds none.

So a rollout on nodes noderoll worked on before returns every count to where it started, and the
first rollout on fresh nodes leaves only its bounded set of Events (and the kept failure).
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient
from temporalio.client import Client

from api import keys
from fleetsim.faults import Fault
from localstack.state import StackInfo
from tests.helpers import assert_eventually, assert_eventually_async, unique_name
from tests.helpers.fleet import running_fleet
from tests.helpers.packages import BENCH_PACKAGES, SLEEP_IMAGE, package_spec
from tests.helpers.processes import NoderollProcesses, noderoll_fixture
from tests.integration.bridge_support import (
    create_package,
    create_policy,
    delete_package,
    delete_policy,
    fleet_progress,
    patch_package,
)

pytestmark = pytest.mark.integration
NODES = 4
TIMEOUT = 300.0
# The Event reasons of a node window (workflows/node_window.py, activities/nodes.py).
WINDOW_REASONS = ("WindowStarted", "Cordoned", "Drained", "Interrupted", "PackageComplete", "PackageErroring",
                  "LeftCordoned")


# The worker makes 2 attempts per stage, 1 s apart.
run = noderoll_fixture(stage_attempts=2, retry_backoff_seconds=1)


def footprint(api: ApiClient, nodes: list[str]) -> dict[str, int]:
    """The objects the apiserver holds for these nodes: stage pods and ConfigMaps, and noderoll's Events
    (and Jobs: noderoll makes none, ADR 0018; counted so that one showing up fails)."""
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    selector = f"noderoll.io/node in ({','.join(nodes)})"
    # noderoll's Events (the node controllers record their own, e.g. RegisteredNode, once per node).
    events = [e for e in core.list_namespaced_event("default", field_selector="involvedObject.kind=Node").items
              if e.involved_object.name in nodes and e.source is not None and e.source.component == "noderoll"]
    return {
        "jobs": len(batch.list_namespaced_job(keys.PACKAGE_POD_NAMESPACE, label_selector=selector).items),
        "pods": len(core.list_namespaced_pod(keys.PACKAGE_POD_NAMESPACE, label_selector=selector).items),
        "configmaps": len(core.list_namespaced_config_map(keys.PACKAGE_POD_NAMESPACE, label_selector=selector).items),
        "events": len(events),
    }


def cordons(api: ApiClient, node: str) -> int:
    """The `count` of the node's `Cordoned` Event (0 when none)."""
    events = client.CoreV1Api(api).list_namespaced_event(
        "default", field_selector=f"involvedObject.name={node},reason=Cordoned").items
    assert len(events) <= 1, [e.metadata.name for e in events]
    return sum(e.count or 1 for e in events)


def retry(stack: StackInfo, policy: str, package: str, node: str) -> None:
    """`noderoll retry PACKAGE --node N`, as an operator would."""
    subprocess.run([sys.executable, "-m", "cli", "retry", package, "--node", node, "--temporal-address",
                    stack.temporal_address, "--kubeconfig", str(stack.kubeconfig)],
                   check=True, capture_output=True, timeout=120)


def spec(policy: str, labels: dict[str, str], version: str) -> dict[str, Any]:
    """bench-sleep at `version` (the image stays 1.0.0), instant stages, a reboot."""
    return package_spec(SLEEP_IMAGE, policy=policy, labels=labels, stage_seconds=0, version=version,
                        interrupt={"type": "reboot"})


async def test_a_rollout_leaves_the_cluster_as_it_found_it_but_the_failure_kept_for_logs(
    run: NoderollProcesses, local_stack: StackInfo, kube_api_client: ApiClient, temporal_client: Client
) -> None:
    labels = {"footprint-test": unique_name("fp")}
    selector = ",".join(f"{k}={v}" for k, v in labels.items())
    policy, name = unique_name("pol"), unique_name("fp")
    with running_fleet(local_stack, nodes=NODES, labels=labels, image_stores=[BENCH_PACKAGES],
                       reboot_seconds=1.0) as fleet:
        nodes = fleet.node_names
        bad = nodes[0]
        # Both attempts of `config` fail on one node: it ends erroring; the fault is then spent.
        fleet.options.faults.add(Fault("fail-stage", nodes=bad, mode="config", package=name, exit_code=3, times=2))
        start = footprint(kube_api_client, nodes)
        assert start == {"jobs": 0, "pods": 0, "configmaps": 0, "events": 0}, start
        try:
            create_policy(kube_api_client, run, policy, {"default": {"budget": {"count": NODES}}})
            create_package(kube_api_client, run.package(name, spec(policy, labels, "1.0.0")))

            async def three_done_one_erroring() -> bool:
                report = await fleet_progress(temporal_client, policy)
                assert report.packages[name].counts == {"complete": NODES - 1, "erroring": 1}, report.packages[name]
                assert list(report.packages[name].erroring) == [bad]
                return True

            await assert_eventually_async(three_done_one_erroring, timeout=TIMEOUT)
            # Only the failed node's latest attempt is left (its pod); no ConfigMap; a bounded set of Events.
            kept = {"jobs": 0, "pods": 1, "configmaps": 0}
            assert_eventually(lambda: {k: v for k, v in footprint(kube_api_client, nodes).items() if k != "events"}
                              == kept, timeout=60)
            assert footprint(kube_api_client, nodes)["events"] <= NODES * len(WINDOW_REASONS)

            # The retry succeeds and deletes the kept failure with its own pods.
            retry(local_stack, policy, name, bad)

            async def all_done() -> bool:
                report = await fleet_progress(temporal_client, policy)
                assert report.packages[name].counts == {"complete": NODES}, report.packages[name]
                return True

            await assert_eventually_async(all_done, timeout=TIMEOUT)
            assert_eventually(lambda: footprint(kube_api_client, nodes)["pods"] == 0, timeout=60)
            settled = footprint(kube_api_client, nodes)
            assert (settled["jobs"], settled["configmaps"]) == (0, 0), settled

            # A second rollout on the same nodes (a new version): every count returns to where it was.
            patch_package(kube_api_client, name, {"spec": spec(policy, labels, "1.0.1")})

            async def second_done() -> bool:
                report = await fleet_progress(temporal_client, policy)
                read = client.CoreV1Api(kube_api_client).list_node(label_selector=selector).items
                records = [json.loads((n.metadata.annotations or {}).get(keys.NODE_STATE_ANNOTATION, "{}")) for n in read]
                versions = {r.get("packages", {}).get(name, {}).get("version") for r in records}
                assert versions == {"1.0.1"} and report.packages[name].counts == {"complete": NODES}, versions
                return True

            await assert_eventually_async(second_done, timeout=TIMEOUT)
            assert_eventually(lambda: footprint(kube_api_client, nodes) == settled, timeout=60)
            # The Events were raised in place: each node's one `Cordoned` Event counts its cordons (the
            # retry found the failed node still cordoned by noderoll: no new cordon there).
            assert {n: cordons(kube_api_client, n) for n in nodes} == dict.fromkeys(nodes, 2)
        finally:
            delete_package(kube_api_client, name)
            delete_policy(kube_api_client, policy)

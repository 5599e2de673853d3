"""Two Kubernetes clusters, one Temporal (issue 29, ADR 0017): ids that never collide, promotion by stages.

Cluster a is the session's stack (its Temporal dev server is the one Temporal); cluster b is a second
control plane (its own etcd, apiserver, controllers and webhook: `localstack.stack.up(temporal=False)`).
Each cluster has its own `noderoll worker` and `noderoll bridge` (`--cluster a-<id>`, `--cluster b-<id>`)
and a fleetsim fleet with THE SAME node names; the same DeploymentPolicy and Package are applied to both.
* (a) without `spec.clusters` both complete on their own: `fleet/<a>/<p>` and `fleet/<b>/<p>`, node
  workflows `node/<a>/<n>` and `node/<b>/<n>` for every node name, `NoderollCluster` finds each side;
* (b) stages `[[a], [b]]` with a soak: no node of b enters a window (its `noderoll.io/status` turns
  `in-progress`) before every node of a is `complete` and the soak passed (a Node watch on each
  cluster); `status.globalRollout`, `noderoll status --global` and the global `progress` show both done;
  the global workflow's and cluster b's fleet histories replay (recorded with
  `NODEROLL_RECORD_CLUSTER_HISTORIES=tests/histories`); then the Package and the policy deleted in both
  clusters: each fleet reports that it ended, and `global/<policy>` completes;
* (c) a Package failing in a halts the promotion: b's fleet is Halted and b's nodes never get a window;
* (e) a policy that drops `spec.clusters` in a (its windows hanging) tells `global/<policy>` its fleet
  ended: b's stage no longer waits for a; once b's drops it too, `global/<policy>` ends;
* (d) b's worker killed (SIGKILL) and restarted while b rolls out: every node of b completes with one
  window, nothing lost;
* the start-up guard: a worker of cluster b on cluster a's task queue, and an unnamed worker of b on
  the queue of an unnamed worker of a, refuse to start, naming the other worker.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client import ApiClient
from temporalio.client import Client
from temporalio.service import RPCError

from api import keys
from fleetsim.faults import Fault
from localstack.state import StackInfo
from planning.clusters.global_codec import global_view_from_json
from planning.fleet.codec import progress_from_json
from planning.views.fleet_status import FleetProgress
from protocol import names
from protocol.clusters import GlobalView
from tests.helpers import assert_eventually, assert_eventually_async, unique_name
from tests.helpers.fleet import running_fleet
from tests.helpers.histories import replay_and_record
from tests.helpers.nodewatch import watching_nodes
from tests.helpers.packages import BENCH_PACKAGES, SLEEP_IMAGE, SYSCTL_IMAGE, package_spec
from tests.helpers.processes import NoderollProcesses
from tests.helpers.progress import EVERY_NODE
from tests.helpers.workflows_cleanup import end_workflows
from tests.integration.bridge_support import (
    create_package,
    create_policy,
    delete_package,
    delete_policy,
    policy_events,
    read_package,
)

pytestmark = [pytest.mark.integration, pytest.mark.multicluster, pytest.mark.timeout(600)]
ROLLOUT_TIMEOUT = 300.0
SOAK_SECONDS = 15
RECORD_ENV = "NODEROLL_RECORD_CLUSTER_HISTORIES"
SUFFIX = uuid.uuid4().hex[:6]
A, B = f"a-{SUFFIX}", f"b-{SUFFIX}"
WORKER_ENV = {"NODEROLL_NODE_RETRY_BACKOFF_SECONDS": "1", "NODEROLL_NODE_STAGE_ATTEMPTS": "1"}


@pytest.fixture(scope="module")
def second_stack(local_stack: StackInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackInfo]:
    """Cluster b: a second control plane (no Temporal of its own), pointed at the session's Temporal."""
    from localstack.stack import down, up

    state_dir = tmp_path_factory.mktemp("cluster-b")
    try:
        info = up(state_dir, die_with_parent=True, temporal=False)
    except BaseException:
        down(state_dir)
        raise
    try:
        yield dataclasses.replace(info, temporal_address=local_stack.temporal_address)
    finally:
        down(state_dir)


@pytest.fixture(scope="module")
def api_b(second_stack: StackInfo) -> Iterator[ApiClient]:
    api = config.new_client_from_config(config_file=second_stack.kubeconfig)
    try:
        yield api
    finally:
        api.close()


def cluster_run(stack: StackInfo, logs: Path, cluster: str) -> NoderollProcesses:
    return NoderollProcesses(stack, logs, task_queue=names.cluster_task_queue(cluster), extra=["--cluster", cluster])


@pytest.fixture(scope="module")
def runs(local_stack: StackInfo, second_stack: StackInfo,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, NoderollProcesses]]:
    """A worker and a bridge per cluster."""
    started = {A: cluster_run(local_stack, tmp_path_factory.mktemp(A), A),
               B: cluster_run(second_stack, tmp_path_factory.mktemp(B), B)}
    try:
        for run in started.values():
            run.start_worker(env=WORKER_ENV)
            run.wait_leading(run.start_bridge())
        yield started
    finally:
        for run in started.values():
            run.stop_all()


@pytest.fixture(scope="module")
def apis(kube_api_client: ApiClient, api_b: ApiClient) -> dict[str, ApiClient]:
    return {A: kube_api_client, B: api_b}


def apply_everywhere(runs: dict[str, NoderollProcesses], apis: dict[str, ApiClient], policy: str,
                     policy_spec: dict[str, Any], package: str, spec: dict[str, Any]) -> None:
    for cluster, run in runs.items():
        create_policy(apis[cluster], run, policy, policy_spec)
        create_package(apis[cluster], run.package(package, spec))


def remove_everywhere(apis: dict[str, ApiClient], temporal: str, policy: str, package: str) -> None:
    for api in apis.values():
        delete_package(api, package)
        delete_policy(api, policy)
    end_workflows(temporal, f"WorkflowId = '{names.global_workflow_id(policy)}' AND ExecutionStatus = 'Running'")


def policy_spec(stages: list[list[str]] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"default": {"budget": {"count": 2}, "strategy": {"type": "fixed", "initialBatch": 2}}}
    if stages:
        body["clusters"] = {"stages": stages, "soakSeconds": SOAK_SECONDS}
    return body


async def fleet_progress(temporal: Client, policy: str, cluster: str) -> FleetProgress:
    try:
        answer = await temporal.get_workflow_handle(names.fleet_workflow_id(policy, cluster)).query(
            names.QUERY_PROGRESS, EVERY_NODE)
    except RPCError as err:
        raise AssertionError(f"fleet/{cluster}/{policy} does not answer yet: {err}") from err
    return progress_from_json(answer)


async def global_progress(temporal: Client, policy: str) -> GlobalView:
    try:
        answer = await temporal.get_workflow_handle(names.global_workflow_id(policy)).query(names.QUERY_PROGRESS)
    except RPCError as err:
        raise AssertionError(f"global/{policy} does not answer yet: {err}") from err
    return global_view_from_json(answer)


def windows_started(api: ApiClient, node: str) -> int:
    """Windows begun on `node`: the count of its aggregated `WindowStarted` Event (one per node, issue 14)."""
    events = client.CoreV1Api(api).list_namespaced_event(
        "default", field_selector=f"involvedObject.name={node},reason=WindowStarted").items
    return sum(e.count or 1 for e in events)


def ready(api: ApiClient, package: str) -> dict[str, Any]:
    status = read_package(api, package).get("status") or {}
    assert status.get("phase") == "Complete", status
    return status


def noderoll(stack: StackInfo, *argv: str) -> subprocess.CompletedProcess[str]:
    """`noderoll ARGV` against `stack` (its kubeconfig, the one Temporal), as a process."""
    return subprocess.run([str(Path(sys.executable).parent / "noderoll"), *argv, "--temporal-address",
                           stack.temporal_address, "--kubeconfig", str(stack.kubeconfig)],
                          capture_output=True, text=True, timeout=120)


async def test_a_without_spec_clusters_both_clusters_complete_without_collisions(
    runs: dict[str, NoderollProcesses], apis: dict[str, ApiClient], local_stack: StackInfo, second_stack: StackInfo,
    temporal_client: Client, tmp_path: Path,
) -> None:
    labels = {"mc-test": unique_name("a")}
    prefix = unique_name("gpu")
    policy, package = unique_name("pol"), unique_name("tune")
    with running_fleet(local_stack, nodes=2, labels=labels, name_prefix=prefix) as fleet_a, \
            running_fleet(second_stack, nodes=2, labels=labels, name_prefix=prefix) as fleet_b:
        assert fleet_a.node_names == fleet_b.node_names  # the same node names in both clusters
        try:
            apply_everywhere(runs, apis, policy, policy_spec(), package, package_spec(SYSCTL_IMAGE, policy=policy, labels=labels))
            for cluster in (A, B):
                assert_eventually(lambda c=cluster: ready(apis[c], package), timeout=ROLLOUT_TIMEOUT)
            for cluster in (A, B):
                report = await fleet_progress(temporal_client, policy, cluster)
                assert report.counts == {"complete": 2}, (cluster, report.counts)
                assert all(windows_started(apis[cluster], n) == 1 for n in fleet_a.node_names)
                found = {w.id async for w in temporal_client.list_workflows(
                    f"{names.SEARCH_ATTR_CLUSTER} = '{cluster}' AND {names.SEARCH_ATTR_PACKAGE} = '{package}'")}
                assert {names.fleet_workflow_id(policy, cluster)} | {
                    names.node_workflow_id(n, cluster) for n in fleet_a.node_names} <= found, found
                policy_status = client.CustomObjectsApi(apis[cluster]).get_cluster_custom_object(
                    keys.GROUP, keys.VERSION, keys.POLICY_PLURAL, policy)["status"]
                assert policy_status["fleet"] == names.fleet_workflow_id(policy, cluster)
                assert "globalRollout" not in policy_status
            # Nothing ran under the single-cluster ids.
            with pytest.raises(RPCError):
                await temporal_client.get_workflow_handle(names.fleet_workflow_id(policy)).describe()
            # `plan --cluster` asks the cluster's fleet (it holds the Package: nothing counts as changed),
            # `report --cluster` reads the cluster's fleet and node runs (issue 43 item 4).
            planned = noderoll(second_stack, "plan", "--cluster", B, "--fleet", policy, "-o", "json")
            assert planned.returncode == 0, planned.stdout + planned.stderr
            assert json.loads(planned.stdout)["fleets"][0]["changed"] == [], planned.stdout
            page = tmp_path / "report.html"
            reported = noderoll(second_stack, "report", "--cluster", B, policy, "-o", str(page))
            assert reported.returncode == 0, reported.stdout + reported.stderr
            html = page.read_text()
            assert f"<title>noderoll report: {names.fleet_workflow_id(policy, B)}</title>" in html
            for node in fleet_b.node_names:  # each node's row has its window's bars (node/<b>/<node>'s runs)
                row = html.split(f'<g class="node-row" data-node="{node}">', 1)[1].split("</g>", 1)[0]
                assert '<rect class="bar ' in row, (node, row[:300])
        finally:
            remove_everywhere(apis, local_stack.temporal_address, policy, package)


async def test_b_stage_b_waits_for_a_complete_and_soaked(
    runs: dict[str, NoderollProcesses], apis: dict[str, ApiClient], local_stack: StackInfo, second_stack: StackInfo,
    temporal_client: Client,
) -> None:
    labels = {"mc-test": unique_name("b")}
    selector = ",".join(f"{k}={v}" for k, v in labels.items())
    prefix = unique_name("gpu")
    policy, package = unique_name("pol"), unique_name("tune")
    with running_fleet(local_stack, nodes=2, labels=labels, name_prefix=prefix), \
            running_fleet(second_stack, nodes=2, labels=labels, name_prefix=prefix), \
            watching_nodes(apis[A], selector) as seen_a, watching_nodes(apis[B], selector) as seen_b:
        try:
            apply_everywhere(runs, apis, policy, policy_spec([[A], [B]]), package, package_spec(SYSCTL_IMAGE, policy=policy, labels=labels))
            for cluster in (A, B):
                assert_eventually(lambda c=cluster: ready(apis[c], package), timeout=ROLLOUT_TIMEOUT)
            a_done, b_began = seen_a.last("complete"), seen_b.first("in-progress")
            assert a_done is not None and b_began is not None, (seen_a.timeline, seen_b.timeline)
            assert b_began - a_done >= SOAK_SECONDS, (a_done, b_began, seen_a.timeline, seen_b.timeline)

            async def both_complete() -> GlobalView:
                view = await global_progress(temporal_client, policy)
                assert view.phase == "Complete", view
                assert {c.cluster: c.state for c in view.clusters} == {A: "complete", B: "complete"}, view
                return view

            await assert_eventually_async(both_complete, timeout=60)

            def shown_in_status() -> bool:
                status = read_package(apis[B], package)["status"]
                shown = status.get("globalRollout") or {}
                assert shown.get("phase") == "Complete", status
                assert {c["name"]: c["state"] for c in shown["clusters"]} == {A: "complete", B: "complete"}
                return True

            assert_eventually(shown_in_status, timeout=60)
            out = subprocess.run([sys.executable, "-m", "cli", "status", "--global", policy, "--temporal-address",
                                  local_stack.temporal_address, "--kubeconfig", str(local_stack.kubeconfig)],
                                 capture_output=True, text=True, timeout=60)
            assert out.returncode == 0 and f"global/{policy}  Complete" in out.stdout, out
            assert A in out.stdout and B in out.stdout
            await replay_and_record({
                "global/global-two-stages": await temporal_client.get_workflow_handle(
                    names.global_workflow_id(policy)).fetch_history(),
                "fleet/clusters-second-stage-waits-its-turn": await temporal_client.get_workflow_handle(
                    names.fleet_workflow_id(policy, B)).fetch_history(),
            }, RECORD_ENV)
            # The Package and the policy deleted in every cluster, as a user deletes them (finalizers
            # honoured): each fleet reports `ended` and ends, and global/<policy> completes.
            for api in apis.values():
                client.CustomObjectsApi(api).delete_cluster_custom_object(
                    keys.GROUP, keys.VERSION, keys.PACKAGE_PLURAL, package)
                client.CustomObjectsApi(api).delete_cluster_custom_object(
                    keys.GROUP, keys.VERSION, keys.POLICY_PLURAL, policy)
            global_handle = temporal_client.get_workflow_handle(names.global_workflow_id(policy))
            await asyncio.wait_for(global_handle.result(), ROLLOUT_TIMEOUT)
            await replay_and_record({
                "global/global-ended-in-every-cluster": await global_handle.fetch_history(),
                "fleet/clusters-fleet-ended-reports-it": await temporal_client.get_workflow_handle(
                    names.fleet_workflow_id(policy, B)).fetch_history(),
            }, RECORD_ENV)
        finally:
            remove_everywhere(apis, local_stack.temporal_address, policy, package)


async def test_c_a_failure_in_a_halts_everything_and_b_is_never_touched(
    runs: dict[str, NoderollProcesses], apis: dict[str, ApiClient], local_stack: StackInfo, second_stack: StackInfo,
    temporal_client: Client,
) -> None:
    labels = {"mc-test": unique_name("c")}
    selector = ",".join(f"{k}={v}" for k, v in labels.items())
    prefix = unique_name("gpu")
    policy, package = unique_name("pol"), unique_name("bad")
    with running_fleet(local_stack, nodes=2, labels=labels, name_prefix=prefix) as fleet_a, \
            running_fleet(second_stack, nodes=2, labels=labels, name_prefix=prefix), \
            watching_nodes(apis[B], selector) as seen_b:
        fleet_a.options.faults.add(Fault("fail-stage", mode="apply", package=package, exit_code=7))
        try:
            apply_everywhere(runs, apis, policy, policy_spec([[A], [B]]), package, package_spec(SYSCTL_IMAGE, policy=policy, labels=labels))

            async def halted() -> GlobalView:
                view = await global_progress(temporal_client, policy)
                assert view.phase == "Halted" and f"cluster {A} failed" in view.halted, view
                assert {c.cluster: c.state for c in view.clusters}.get(A) == "failed", view
                return view

            await assert_eventually_async(halted, timeout=ROLLOUT_TIMEOUT)

            async def b_halted() -> bool:
                report = await fleet_progress(temporal_client, policy, B)
                assert report.phase.value == "Halted" and "is halted" in report.message, report.message
                return True

            await assert_eventually_async(b_halted, timeout=60)

            def b_status_says_so() -> bool:
                shown = (read_package(apis[B], package).get("status") or {}).get("globalRollout") or {}
                assert shown.get("phase") == "Halted" and f"cluster {A} failed" in shown.get("halted", ""), shown
                return True

            assert_eventually(b_status_says_so, timeout=60)
            # Each cluster's policy carries one Warning Event saying so (`GlobalHalted`).
            for cluster in (A, B):
                events = assert_eventually(lambda c=cluster: policy_events(apis[c], policy, "GlobalHalted"), timeout=60)
                assert len(events) == 1 and events[0].type == "Warning", events
                assert f"global/{policy} halted every cluster: cluster {A} failed" in events[0].message, events[0].message
            # Cluster b was never touched: no window, no node workflow, no label, no cordon.
            assert seen_b.timeline == [] and seen_b.cordons == {}, (seen_b.timeline, seen_b.cordons)
            started = [w.id async for w in temporal_client.list_workflows(
                f"WorkflowType = '{names.NODE_WORKFLOW_TYPE}' AND {names.SEARCH_ATTR_CLUSTER} = '{B}' "
                f"AND {names.SEARCH_ATTR_PACKAGE} = '{package}'")]
            assert started == []
        finally:
            remove_everywhere(apis, local_stack.temporal_address, policy, package)


async def test_e_a_policy_that_drops_spec_clusters_holds_no_stage_and_global_ends(
    runs: dict[str, NoderollProcesses], apis: dict[str, ApiClient], local_stack: StackInfo, second_stack: StackInfo,
    temporal_client: Client,
) -> None:
    """Stages [[a], [b]]: while a's windows hang, a's policy drops spec.clusters; a's fleet tells
    global/<policy> it ended, and b's stage no longer waits for a (it is granted after the soak and
    completes while a still hangs). Once b's policy drops it too, b's fleet says so and global/<policy>
    ends (issue 43: it stayed open, and b waited for a for ever). The histories of global/<policy> and of
    a's fleet (patches `global-ended-release`, `global-dropped-report`) replay and are recorded."""
    labels = {"mc-test": unique_name("e")}
    prefix = unique_name("gpu")
    policy, package = unique_name("pol"), unique_name("tune")
    drop = {"spec": {"clusters": None}}
    with running_fleet(local_stack, nodes=2, labels=labels, name_prefix=prefix) as fleet_a, \
            running_fleet(second_stack, nodes=2, labels=labels, name_prefix=prefix):
        fleet_a.options.faults.add(Fault("hang", mode="apply", package=package))
        try:
            apply_everywhere(runs, apis, policy, policy_spec([[A], [B]]), package,
                             package_spec(SYSCTL_IMAGE, policy=policy, labels=labels))

            async def a_rolls() -> bool:
                view = await global_progress(temporal_client, policy)
                assert {c.cluster: c.state for c in view.clusters}.get(A) == "running", view
                return True

            await assert_eventually_async(a_rolls, timeout=ROLLOUT_TIMEOUT)
            client.CustomObjectsApi(apis[A]).patch_cluster_custom_object(
                keys.GROUP, keys.VERSION, keys.POLICY_PLURAL, policy, drop)
            # b's stage is granted without a's complete, after the soak; b completes while a's windows hang.
            assert_eventually(lambda: ready(apis[B], package), timeout=ROLLOUT_TIMEOUT)
            assert (read_package(apis[A], package).get("status") or {}).get("phase") != "Complete"
            client.CustomObjectsApi(apis[B]).patch_cluster_custom_object(
                keys.GROUP, keys.VERSION, keys.POLICY_PLURAL, policy, drop)
            global_handle = temporal_client.get_workflow_handle(names.global_workflow_id(policy))
            await asyncio.wait_for(global_handle.result(), ROLLOUT_TIMEOUT)
            await replay_and_record({
                "global/global-dropped-clusters-ends": await global_handle.fetch_history(),
                "fleet/clusters-dropped-reports-ended": await temporal_client.get_workflow_handle(
                    names.fleet_workflow_id(policy, A)).fetch_history(),
            }, RECORD_ENV)
        finally:
            remove_everywhere(apis, local_stack.temporal_address, policy, package)


async def test_d_cluster_b_worker_killed_mid_stage_loses_nothing(
    runs: dict[str, NoderollProcesses], apis: dict[str, ApiClient], local_stack: StackInfo, second_stack: StackInfo,
    temporal_client: Client,
) -> None:
    labels = {"mc-test": unique_name("d")}
    prefix = unique_name("gpu")
    policy, package = unique_name("pol"), unique_name("slow")
    slow = package_spec(SLEEP_IMAGE, policy=policy, labels=labels, stage_seconds=4)
    with running_fleet(local_stack, nodes=2, labels=labels, name_prefix=prefix, image_stores=[BENCH_PACKAGES]), \
            running_fleet(second_stack, nodes=2, labels=labels, name_prefix=prefix,
                          image_stores=[BENCH_PACKAGES]) as fleet_b:
        try:
            apply_everywhere(runs, apis, policy, policy_spec([[A], [B]]), package, slow)

            async def b_in_window() -> bool:
                report = await fleet_progress(temporal_client, policy, B)
                assert report.counts.get("in_progress", 0) >= 1, (report.phase, report.counts, report.message)
                return True

            await assert_eventually_async(b_in_window, timeout=ROLLOUT_TIMEOUT)
            runs[B].kill("worker", signal.SIGKILL)
            runs[B].start_worker(env=WORKER_ENV)
            assert_eventually(lambda: ready(apis[B], package), timeout=ROLLOUT_TIMEOUT)
            report = await fleet_progress(temporal_client, policy, B)
            assert report.counts == {"complete": 2}, report.counts
            # One window per node: a window the worker's death cut off resumed, it did not start again.
            assert {n: windows_started(apis[B], n) for n in fleet_b.node_names} == dict.fromkeys(
                fleet_b.node_names, 1)
            view = await global_progress(temporal_client, policy)
            assert {c.cluster: c.state for c in view.clusters} == {A: "complete", B: "complete"}, view
        finally:
            remove_everywhere(apis, local_stack.temporal_address, policy, package)


def start_worker(stack: StackInfo, task_queue: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "cli", "worker", "--temporal-address", stack.temporal_address, "--kubeconfig",
         str(stack.kubeconfig), "--task-queue", task_queue, *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def refused(stack: StackInfo, task_queue: str, *extra: str) -> str:
    """The output of a worker that must refuse to start (exits non-zero by itself)."""
    proc = start_worker(stack, task_queue, *extra)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0, out
    return out


async def test_a_worker_of_another_cluster_on_the_same_task_queue_refuses_to_start(
    runs: dict[str, NoderollProcesses], local_stack: StackInfo, second_stack: StackInfo, temporal_client: Client,
) -> None:
    # Cluster b's worker given cluster a's task queue: a's worker polls it.
    out = refused(second_stack, names.cluster_task_queue(A), "--cluster", B)
    assert "refusing to start" in out and f"cluster name '{A}'" in out, out
    # Two clusters without names on one task queue (today's collision): refused, naming the other cluster.
    queue = unique_name("unnamed")
    first = start_worker(local_stack, queue)
    try:
        async def polled() -> bool:
            from service.cluster_guard import task_queue_pollers

            assert await task_queue_pollers(temporal_client, queue)
            return True

        await assert_eventually_async(polled, timeout=60)
        out = refused(second_stack, queue)
        assert "refusing to start" in out and "another Kubernetes cluster" in out, out
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=30)

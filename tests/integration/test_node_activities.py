"""Node window activities one by one (ActivityEnvironment) against the real apiserver and fleetsim.

Bounded waits end in non-retryable errors naming what blocks them; waiting activities heartbeat;
a stage pod is adopted, not re-created; cordon ownership is respected; a blocked node's mark is
written once and never over a window that starts meanwhile.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import pytest
from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

import kube
from activities import node_marks as node_marks_activity
from activities.drain import drain_node, policy_version, wait_protected_pods
from activities.interrupts import run_interrupt
from activities.node_marks import mark_blocked_nodes
from activities.nodes import (
    cordon_node,
    node_condition,
    read_node,
    uncordon_node,
    write_node_state,
)
from activities.pod_create import ensure_pod, pod_name
from activities.stage_run import run_stage_pod
from activities.stage_wait import wait_job
from api.enums import NodeMarkKind
from api.keys import (
    CONDITION_DRAINING,
    CORDONED_BY_ANNOTATION,
    NODE_STATE_ANNOTATION,
    NODE_STATUS_LABEL,
    PACKAGE_POD_NAMESPACE,
)
from fleetsim.faults import Fault
from kube.nodes import patch_node_with_retry
from localstack.state import StackInfo
from planning.fleet.codec import marks_to_json
from planning.node.node_marks import NodeMark, decide_mark
from protocol import errors
from protocol.activities import MarkBlockedNodesInput
from protocol.node_activities import (
    DrainNodeInput,
    NodeInput,
    RunInterruptInput,
    RunStagePodInput,
    StageJob,
    WaitProtectedPodsInput,
    WriteNodeStateInput,
)
from tests.helpers import assert_eventually, unique_name
from tests.helpers.fleet import running_fleet
from tests.helpers.packages import SCRIPT_IMAGE, SYSCTL_IMAGE, WORKLOAD_IMAGE
from tests.integration.node_window_support import cordon, wait_pods_running

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


class Beats:
    """An ActivityEnvironment that records heartbeats."""

    def __init__(self) -> None:
        self.details: list[Any] = []
        self.env = ActivityEnvironment()
        self.env.on_heartbeat = lambda *details: self.details.append(details)


def run_pod(core: client.CoreV1Api, namespace: str, node: str, name: str, **spec: Any) -> None:
    labels = spec.pop("labels", {"app": name})
    core.create_namespaced_pod(namespace, {
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "c", "image": WORKLOAD_IMAGE}], **spec},
    })
    wait_pods_running(core, namespace, f"app={labels['app']}", 1, node)


def test_eviction_speaks_policy_v1beta1_on_kubernetes_1_20(node: str) -> None:
    assert policy_version() == "policy/v1beta1"


def test_drain_timeout_names_blocking_pods_and_pdbs(
    node: str, kube_api_client: ApiClient, k8s_namespace: str,
) -> None:
    core = client.CoreV1Api(kube_api_client)
    run_pod(core, k8s_namespace, node, "solo")
    kube.request_json("POST", f"/apis/policy/v1beta1/namespaces/{k8s_namespace}/poddisruptionbudgets", {
        "apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget", "metadata": {"name": "solo-pdb"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "solo"}}},
    })
    beats = Beats()
    with pytest.raises(ApplicationError) as failure:
        beats.env.run(drain_node, DrainNodeInput(node, timeout_seconds=3, poll_seconds=0.5))
    assert failure.value.type == errors.DRAIN_TIMEOUT and failure.value.non_retryable
    assert f"{k8s_namespace}/solo" in failure.value.message
    assert f"{k8s_namespace}/solo-pdb" in failure.value.message
    assert beats.details, "drain_node did not heartbeat while waiting"
    assert core.read_namespaced_pod("solo", k8s_namespace).metadata.deletion_timestamp is None


def _draining(core: client.CoreV1Api, node: str) -> client.V1NodeCondition | None:
    return next((c for c in core.read_node_status(node).status.conditions if c.type == CONDITION_DRAINING), None)


def _node_events(core: client.CoreV1Api, node: str, reason: str) -> list[client.CoreV1Event]:
    events = core.list_namespaced_event("default", field_selector=f"involvedObject.name={node}").items
    return [e for e in events if e.reason == reason]


@pytest.mark.timeout(240)
def test_blocked_drain_reports_pods_and_budgets_while_it_waits(
    node: str, kube_api_client: ApiClient, k8s_namespace: str,
) -> None:
    """Issue 12 item 8: within a minute of being blocked, the node says which pods and PDBs block it."""
    core = client.CoreV1Api(kube_api_client)
    run_pod(core, k8s_namespace, node, "solo")
    pdb_path = f"/apis/policy/v1beta1/namespaces/{k8s_namespace}/poddisruptionbudgets"
    kube.request_json("POST", pdb_path, {
        "apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget", "metadata": {"name": "solo-pdb"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "solo"}}},
    })
    beats = Beats()
    with ThreadPoolExecutor(1) as pool:
        drain = pool.submit(beats.env.run, drain_node, DrainNodeInput(node, timeout_seconds=120, poll_seconds=0.5))

        def reported() -> client.V1NodeCondition:
            assert not drain.done(), drain.result()  # a drain that ended would raise or return here
            condition = _draining(core, node)
            assert condition is not None and condition.reason == "EvictionRefused", condition
            return condition

        condition = assert_eventually(reported, timeout=60, interval=1)
        assert condition.status == "True"
        assert f"eviction refused for pod(s) {k8s_namespace}/solo by" in condition.message
        assert f"{k8s_namespace}/solo-pdb (disruptionsAllowed=0, currentHealthy=1, desiredHealthy=1" in condition.message
        def one_event() -> client.CoreV1Event:
            # The activity writes the condition, then the Event: the Event may follow a moment later.
            [event] = _node_events(core, node, "DrainBlocked")
            return event

        event = assert_eventually(one_event, timeout=30, interval=0.5, retry_on=(AssertionError, ValueError))
        assert event.type == "Warning" and event.message == condition.message
        refused = max(d[0]["refused"] for d in beats.details)
        assert refused >= 3 and event.count >= 3, (refused, event.count)  # one Event for many refusals
        assert any("blocked" in d[0] for d in beats.details)
        # A second blocker: the condition and the same Event follow it (updated, not a second Event).
        run_pod(core, k8s_namespace, node, "duo")
        kube.request_json("POST", pdb_path, {
            "apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget", "metadata": {"name": "duo-pdb"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "duo"}}},
        })

        def both() -> client.CoreV1Event:
            [updated] = _node_events(core, node, "DrainBlocked")
            assert f"{k8s_namespace}/duo-pdb (disruptionsAllowed=0" in updated.message, updated.message
            assert f"{k8s_namespace}/solo-pdb (disruptionsAllowed=0" in updated.message
            return updated

        updated = assert_eventually(both, timeout=60, interval=1)
        assert updated.count > event.count and updated.message == _draining(core, node).message
        assert updated.first_timestamp == event.first_timestamp and updated.last_timestamp >= event.last_timestamp
        kube.request_json("DELETE", f"{pdb_path}/duo-pdb")
        kube.request_json("DELETE", f"{pdb_path}/solo-pdb")
        result = drain.result(timeout=60)
    assert {f"{k8s_namespace}/solo", f"{k8s_namespace}/duo"} <= set(result.evicted)
    ended = _draining(core, node)
    assert ended is not None and (ended.status, ended.reason) == ("False", "Drained")
    assert len(_node_events(core, node, "DrainBlocked")) == 1


def test_protected_pods_wait_is_reported_while_it_waits(
    node: str, kube_api_client: ApiClient, k8s_namespace: str,
) -> None:
    core = client.CoreV1Api(kube_api_client)
    run_pod(core, k8s_namespace, node, "train", labels={"app": "train", "workload": "training"})
    selector = {"matchLabels": {"workload": "training"}}
    with ThreadPoolExecutor(1) as pool:
        wait = pool.submit(ActivityEnvironment().run, wait_protected_pods,
                           WaitProtectedPodsInput(node, [selector], timeout_seconds=120, poll_seconds=0.5))

        def reported() -> client.V1NodeCondition:
            condition = _draining(core, node)
            assert condition is not None and condition.reason == "WaitingForProtectedPods", condition
            return condition

        condition = assert_eventually(reported, timeout=30)
        assert condition.status == "True" and f"{k8s_namespace}/train" in condition.message
        [event] = assert_eventually(lambda: _node_events(core, node, "WaitingForProtectedPods"), timeout=30, interval=0.5)
        assert event.type == "Normal" and f"{k8s_namespace}/train" in event.message
        core.delete_namespaced_pod("train", k8s_namespace)
        assert wait.result(timeout=60).waited_for == [f"{k8s_namespace}/train"]
    ended = _draining(core, node)
    assert ended is not None and (ended.status, ended.reason) == ("False", "ProtectedPodsFinished")


def test_drain_skips_daemonset_pods_and_respects_empty_dir_setting(
    node: str, kube_api_client: ApiClient, k8s_namespace: str,
) -> None:
    core = client.CoreV1Api(kube_api_client)
    client.AppsV1Api(kube_api_client).create_namespaced_daemon_set(k8s_namespace, {
        "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": {
            "metadata": {"labels": {"app": "agent"}},
            "spec": {"containers": [{"name": "c", "image": WORKLOAD_IMAGE}],
                     "tolerations": [{"operator": "Exists"}]},
        }},
    })
    wait_pods_running(core, k8s_namespace, "app=agent", 1, node)
    run_pod(core, k8s_namespace, node, "scratch", volumes=[{"name": "tmp", "emptyDir": {}}])
    with pytest.raises(ApplicationError) as failure:
        ActivityEnvironment().run(drain_node, DrainNodeInput(node, timeout_seconds=10))
    assert failure.value.type == errors.DRAIN_BLOCKED and f"{k8s_namespace}/scratch" in failure.value.message

    result = ActivityEnvironment().run(drain_node, DrainNodeInput(node, timeout_seconds=20, delete_empty_dir_data=True))
    assert f"{k8s_namespace}/scratch" in result.evicted
    assert not any("agent" in name for name in result.evicted)
    # The DaemonSet's pod on this node (on a stack shared with other tests it also runs on their nodes).
    agent_pods = core.list_namespaced_pod(k8s_namespace, label_selector="app=agent",
                                          field_selector=f"spec.nodeName={node}").items
    assert len(agent_pods) == 1 and agent_pods[0].metadata.deletion_timestamp is None


def test_protected_pods_wait_is_bounded_and_reported(
    node: str, kube_api_client: ApiClient, k8s_namespace: str,
) -> None:
    core = client.CoreV1Api(kube_api_client)
    run_pod(core, k8s_namespace, node, "train", labels={"app": "train", "workload": "training"})
    beats = Beats()
    selector = {"matchLabels": {"workload": "training"}}
    with pytest.raises(ApplicationError) as failure:
        beats.env.run(wait_protected_pods, WaitProtectedPodsInput(node, [selector], timeout_seconds=2, poll_seconds=0.5))
    assert failure.value.type == errors.PROTECTED_PODS_TIMEOUT
    assert f"{k8s_namespace}/train" in failure.value.message
    assert beats.details and beats.details[0][0]["waiting_for"] == [f"{k8s_namespace}/train"]
    # Other selectors (or none) do not wait at all.
    result = ActivityEnvironment().run(
        wait_protected_pods, WaitProtectedPodsInput(node, [{"matchLabels": {"workload": "other"}}], 2))
    assert result.waited_for == []


def test_cordon_is_owned_and_idempotent(node: str, kube_api_client: ApiClient) -> None:
    core = client.CoreV1Api(kube_api_client)
    env = ActivityEnvironment()
    first = env.run(cordon_node, NodeInput(node))
    again = env.run(cordon_node, NodeInput(node))
    assert first.cordoned_by_noderoll and again.cordoned_by_noderoll and again.was_unschedulable
    assert (core.read_node(node).metadata.annotations or {})[CORDONED_BY_ANNOTATION] == "noderoll"
    assert env.run(uncordon_node, NodeInput(node)).uncordoned
    assert not env.run(uncordon_node, NodeInput(node)).uncordoned
    cordon(core, node, True)  # an operator's cordon
    assert not env.run(cordon_node, NodeInput(node)).cordoned_by_noderoll
    assert not env.run(uncordon_node, NodeInput(node)).uncordoned
    assert core.read_node(node).spec.unschedulable
    cordon(core, node, False)


def test_write_node_state_keeps_other_keys_and_sets_conditions(node: str, kube_api_client: ApiClient) -> None:
    core = client.CoreV1Api(kube_api_client)
    core.patch_node(node, {"metadata": {"labels": {"team": "ml"}, "annotations": {"owner": "ops"}}})
    ActivityEnvironment().run(write_node_state, WriteNodeStateInput(
        node=node, state_annotation='{"packages":{}}', status="in-progress", updating=True, erroring=False))
    got = core.read_node(node)
    assert got.metadata.labels["team"] == "ml" and got.metadata.annotations["owner"] == "ops"
    assert got.metadata.labels[NODE_STATUS_LABEL] == "in-progress"
    assert got.metadata.annotations[NODE_STATE_ANNOTATION] == '{"packages":{}}'
    conditions = {c.type: c.status for c in got.status.conditions}
    assert conditions["noderoll.io/Updating"] == "True" and conditions["Ready"] == "True"
    snapshot = ActivityEnvironment().run(read_node, NodeInput(node))
    assert snapshot.ready and snapshot.boot_id and snapshot.state_annotation == '{"packages":{}}'


def test_missing_node_is_non_retryable(node: str) -> None:
    with pytest.raises(ApplicationError) as failure:
        ActivityEnvironment().run(read_node, NodeInput(unique_name("gone")))
    assert failure.value.type == errors.NODE_NOT_FOUND and failure.value.non_retryable


def test_stage_pod_is_adopted_when_the_activity_runs_again(node: str, kube_api_client: ApiClient) -> None:
    job = _stage_and_check(node)
    beats = Beats()
    first = beats.env.run(run_stage_pod, RunStagePodInput(job))
    second = ActivityEnvironment().run(run_stage_pod, RunStagePodInput(job))
    assert (first.adopted, second.adopted) == (False, True)
    assert first.job_name == second.job_name and first.exit_code == second.exit_code
    assert len(_pods_named(client.CoreV1Api(kube_api_client), first.job_name)) == 1


def test_a_retry_whose_predecessor_saw_its_pod_never_creates_it_again(node: str, kube_api_client: ApiClient) -> None:
    """A bare pod has no Job to hold the attempt's record: a retried activity whose predecessor had
    seen the pod (its heartbeat: uid, version) adopts it, and a pod deleted since fails the attempt
    instead of being created again to run the stages a second time under the same attempt."""
    core = client.CoreV1Api(kube_api_client)
    job = _stage_and_check(node)
    beats = Beats()
    first = beats.env.run(run_stage_pod, RunStagePodInput(job))
    # Its very first heartbeat, before any watch event, names the pod it created (its uid).
    assert first.exit_code == 0 and beats.details and beats.details[0][0]["pod"], beats.details
    core.delete_namespaced_pod(first.job_name, PACKAGE_POD_NAMESPACE, grace_period_seconds=0)
    _assert_pod_gone(core, first.job_name)
    retried = ActivityEnvironment()
    retried.info = dataclasses.replace(retried.info, attempt=2, heartbeat_details=list(beats.details[-1]))
    second = retried.run(run_stage_pod, RunStagePodInput(job))
    assert (second.adopted, second.exit_code) == (True, -1) and "deleted before it finished" in second.log_tail
    assert not _pods_named(core, first.job_name), "created again"


def test_metadata_patch_retries_a_resource_version_conflict(node: str, kube_api_client: ApiClient) -> None:
    core = client.CoreV1Api(kube_api_client)
    calls: list[str] = []

    def build(current: client.V1Node) -> dict[str, Any]:
        calls.append(current.metadata.resource_version)
        if len(calls) == 1:
            # Someone else writes the node between our read and our patch: ours must get a 409.
            core.patch_node(node, {"metadata": {"labels": {"other-writer": "was-here"}}})
        return {"metadata": {"labels": {NODE_STATUS_LABEL: "waiting"}}}

    patch_node_with_retry(node, build)
    assert len(calls) == 2 and calls[0] != calls[1]
    labels = core.read_node(node).metadata.labels
    assert labels["other-writer"] == "was-here" and labels[NODE_STATUS_LABEL] == "waiting"


def test_reboot_is_confirmed_by_a_new_boot_id_and_never_repeated(node: str, kube_api_client: ApiClient) -> None:
    boot_before = ActivityEnvironment().run(read_node, NodeInput(node)).boot_id
    job = StageJob(package="script-config", version="1.0.0", node=node, mode="interrupt",
                   image=SCRIPT_IMAGE, window=unique_name("w"),
                   tolerations=[{"operator": "Exists"}], interrupt={"type": "reboot", "services": []},
                   timeout_seconds=60)
    beats = Beats()
    result = beats.env.run(run_interrupt, RunInterruptInput(job, boot_before, reboot_timeout_seconds=30))
    assert result.exit_code == 0 and result.boot_id_after and result.boot_id_after != boot_before
    assert beats.details, "run_interrupt did not heartbeat while the node rebooted"
    # A later attempt (new pod name) for the same window sees the reboot happened: no second reboot.
    again = dataclasses.replace(job, attempt=2)
    second = ActivityEnvironment().run(run_interrupt, RunInterruptInput(again, boot_before, 30))
    assert second.exit_code == 0 and second.boot_id_after == result.boot_id_after
    with pytest.raises(ApiException) as missing:
        client.CoreV1Api(kube_api_client).read_namespaced_pod(pod_name(again), PACKAGE_POD_NAMESPACE)
    assert missing.value.status == 404


def _reboot_job(node: str) -> StageJob:
    return StageJob(package="script-config", version="1.0.0", node=node, mode="interrupt", image=SCRIPT_IMAGE,
                    window=unique_name("w"), tolerations=[{"operator": "Exists"}],
                    interrupt={"type": "reboot", "services": []}, timeout_seconds=60)


def kept_alive_env() -> ActivityEnvironment:
    """An ActivityEnvironment with the window's 15 s heartbeat timeout: `keep_alive` runs, as in the worker."""
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=15))
    return env


def test_a_reboot_is_confirmed_with_one_watch_of_its_node(node: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside `keep_alive` the node is watched until it is back (new boot id, Ready): the whole reboot,
    NotReady and Ready again, costs one watch of the node and no reads of it every few seconds."""
    boot_before = ActivityEnvironment().run(read_node, NodeInput(node)).boot_id
    api = kube.api_client()
    requests: list[tuple[str, str]] = []
    real = api.call_api

    def counted(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        # (verb, resource): the watch flag from the query, the resource from the path (`.../nodes/<name>`).
        parsed = urlsplit(url)
        parts = parsed.path.strip("/").split("/")
        resource = next((p for p in reversed(parts) if p in ("nodes", "pods", "jobs", "events", "configmaps")), "")
        requests.append(("WATCH" if "watch=true" in parsed.query else method, resource))
        return real(method, url, *args, **kwargs)

    monkeypatch.setattr(api, "call_api", counted)
    result = kept_alive_env().run(run_interrupt, RunInterruptInput(_reboot_job(node), boot_before, 30))
    assert result.exit_code == 0 and result.boot_id_after not in ("", boot_before)
    assert requests.count(("WATCH", "nodes")) == 1, requests
    assert requests.count(("GET", "nodes")) == 1, requests  # before the pod: has the node rebooted already?
    # The interrupt pod: one short watch from its resourceVersion at creation (no list, no read of it).
    assert [r for r in requests if r[1] in ("pods", "jobs") and r[0] != "POST"] == [("WATCH", "pods")], requests


def test_an_interrupt_pod_that_fails_without_rebooting_fails_the_interrupt(local_stack: StackInfo) -> None:
    kube.configure(local_stack.kubeconfig)
    with running_fleet(local_stack, nodes=1) as fleet:
        node = fleet.node_names[0]
        fleet.options.faults.add(Fault("fail-stage", nodes=node, mode="interrupt", exit_code=3))
        boot_before = ActivityEnvironment().run(read_node, NodeInput(node)).boot_id
        result = kept_alive_env().run(run_interrupt, RunInterruptInput(_reboot_job(node), boot_before, 60))
    assert result.exit_code == 3 and result.boot_id_after == boot_before, result
    assert "injected fault" in result.log_tail


def _pods_named(core: client.CoreV1Api, name: str) -> list[client.V1Pod]:
    """The stage pods of that name the apiserver holds now (none, or one)."""
    return list(core.list_namespaced_pod(PACKAGE_POD_NAMESPACE, field_selector=f"metadata.name={name}").items)


def _assert_pod_gone(core: client.CoreV1Api, name: str) -> None:
    assert_eventually(lambda: not _pods_named(core, name), timeout=30)


def _stage_and_check(node: str) -> StageJob:
    return StageJob(package="sysctl-tuning", version="1.0.0", node=node, mode="apply", modes=["apply", "apply-check"],
                    image=SYSCTL_IMAGE, window=unique_name("w"), tolerations=[{"operator": "Exists"}],
                    timeout_seconds=60)


@contextmanager
def _hanging_apply(local_stack: StackInfo) -> Iterator[StageJob]:
    """A one-node fleet whose `apply` stage hangs, and the stage-and-check job for its node."""
    kube.configure(local_stack.kubeconfig)
    with running_fleet(local_stack, nodes=1) as fleet:
        node = fleet.node_names[0]
        fleet.options.faults.add(Fault("hang", nodes=node, mode="apply"))
        yield _stage_and_check(node)


def test_a_failing_check_in_the_stage_pod_is_reported_as_the_check(
        local_stack: StackInfo, kube_api_client: ApiClient) -> None:
    kube.configure(local_stack.kubeconfig)
    with running_fleet(local_stack, nodes=1) as fleet:
        node = fleet.node_names[0]
        fleet.options.faults.add(Fault("fail-stage", nodes=node, mode="apply-check", exit_code=4))
        result = ActivityEnvironment().run(run_stage_pod, RunStagePodInput(_stage_and_check(node)))
    assert (result.exit_code, result.mode) == (4, "apply-check") and "injected fault" in result.log_tail
    pod = client.CoreV1Api(kube_api_client).read_namespaced_pod(result.job_name, PACKAGE_POD_NAMESPACE)
    [copy, stage] = pod.status.init_container_statuses
    assert copy.name == "package" and copy.state.terminated.exit_code == 0
    assert stage.name == "apply" and stage.state.terminated.exit_code == 0


def test_a_stage_pod_deleted_before_it_finished_fails_the_attempt_and_nothing_runs_it_again(
        local_stack: StackInfo, kube_api_client: ApiClient) -> None:
    core = client.CoreV1Api(kube_api_client)
    with _hanging_apply(local_stack) as job:
        name = pod_name(job)

        def running_pod() -> str:
            pods = _pods_named(core, name)
            assert pods and pods[0].status.phase == "Running"
            return str(pods[0].metadata.name)

        with ThreadPoolExecutor(1) as pool:
            deleting = pool.submit(lambda: core.delete_namespaced_pod(
                assert_eventually(running_pod, timeout=30), PACKAGE_POD_NAMESPACE))
            result = ActivityEnvironment().run(run_stage_pod, RunStagePodInput(job))
            deleting.result()
    assert result.exit_code == -1 and "deleted before it finished" in result.log_tail
    # No controller puts a pod back under the same attempt: the next attempt is a new pod.
    _assert_pod_gone(core, name)


def test_a_stage_pod_still_running_at_its_waits_deadline_is_deleted(
        local_stack: StackInfo, kube_api_client: ApiClient) -> None:
    """A bare pod has no Job deadline behind it: when noderoll's wait gives up (the kubelet enforces
    the pod's own `activeDeadlineSeconds`; fleetsim does not), the wait deletes the pod, so nothing
    runs on after the attempt was counted as failed."""
    core = client.CoreV1Api(kube_api_client)
    with _hanging_apply(local_stack) as job:
        pod = ensure_pod(job)
        assert not pod.adopted and pod.uid
        outcome = ActivityEnvironment().run(wait_job, pod.name, time.monotonic() + 5, job.node,
                                            pod.resource_version)
        name = pod.name
        assert outcome.exit_code == -1 and "did not finish in time" in outcome.log_tail, outcome
        _assert_pod_gone(core, name)


def _conditions(core: client.CoreV1Api, node: str) -> dict[str, client.V1NodeCondition]:
    return {c.type: c for c in core.read_node(node).status.conditions or []}


def test_mark_blocked_nodes_shows_a_held_node_once_and_clears_it(node: str, kube_api_client: ApiClient) -> None:
    core = client.CoreV1Api(kube_api_client)
    core.patch_node(node, {"metadata": {"annotations": {NODE_STATE_ANNOTATION: "{{{ garbage"},
                                        "labels": {NODE_STATUS_LABEL: "complete"}}})
    malformed = MarkBlockedNodesInput(marks_to_json([NodeMark(node, NodeMarkKind.STATE_MALFORMED)]))
    assert ActivityEnvironment().run(mark_blocked_nodes, malformed).written == [node]
    got = core.read_node(node)
    assert got.metadata.labels[NODE_STATUS_LABEL] == "blocked"
    assert got.metadata.annotations[NODE_STATE_ANNOTATION] == "{{{ garbage", "never written by a mark"
    condition = _conditions(core, node)["noderoll.io/StateMalformed"]
    assert (condition.status, condition.reason) == ("True", "ParseError") and "unreadable" in condition.message
    assert _conditions(core, node)["Ready"].status == "True", "the kubelet's conditions stay"
    events = core.list_namespaced_event("default", field_selector=f"involvedObject.name={node}").items
    assert [e.type for e in events if e.reason == "StateMalformed"] == ["Warning"]
    # Shown already: a repeated mark writes nothing (and records no second Event).
    assert ActivityEnvironment().run(mark_blocked_nodes, malformed).written == []
    # Removed by an operator: the condition turns False, our `blocked` label goes (nothing recorded).
    core.patch_node(node, {"metadata": {"annotations": {NODE_STATE_ANNOTATION: None}}})
    repaired = MarkBlockedNodesInput(marks_to_json([NodeMark(node, NodeMarkKind.STATE_REPAIRED)]))
    assert ActivityEnvironment().run(mark_blocked_nodes, repaired).written == [node]
    assert _conditions(core, node)["noderoll.io/StateMalformed"].status == "False"
    assert NODE_STATUS_LABEL not in (core.read_node(node).metadata.labels or {})


def test_mark_blocked_nodes_never_writes_over_a_window_that_starts_meanwhile(
    node: str, kube_api_client: ApiClient, monkeypatch: pytest.MonkeyPatch,
) -> None:
    core = client.CoreV1Api(kube_api_client)
    core.patch_node(node, {"metadata": {"annotations": {NODE_STATE_ANNOTATION: "[1, 2]"}}})
    decisions: list[str] = []

    def window_starts_after_the_read(mark: NodeMark, current: Any) -> Any:
        decisions.append(current.status_label)
        if len(decisions) == 1:
            # A node window's first state write lands between the mark's read and its write.
            ActivityEnvironment().run(write_node_state, WriteNodeStateInput(
                node=node, state_annotation='{"packages":{}}', status="in-progress", updating=True, erroring=False))
        return decide_mark(mark, current)

    monkeypatch.setattr(node_marks_activity, "decide_mark", window_starts_after_the_read)
    marks = MarkBlockedNodesInput(marks_to_json([NodeMark(node, NodeMarkKind.STATE_MALFORMED)]))
    assert ActivityEnvironment().run(mark_blocked_nodes, marks).written == []
    # The stale write was refused (409), the node read again and left to its window.
    assert decisions == ["", "in-progress"]
    got = core.read_node(node)
    assert got.metadata.labels[NODE_STATUS_LABEL] == "in-progress"
    assert _conditions(core, node)["noderoll.io/StateMalformed"].status == "False"  # the window's write


def test_a_status_patch_with_a_stale_resource_version_is_refused(node: str, kube_api_client: ApiClient) -> None:
    # The guard of mark_blocked_nodes relies on this for its condition write, not only for labels.
    core = client.CoreV1Api(kube_api_client)
    stale = core.read_node(node).metadata.resource_version
    core.patch_node(node, {"metadata": {"labels": {"other-writer": "was-here"}}})
    patch = {"metadata": {"resourceVersion": stale},
             "status": {"conditions": [node_condition("noderoll.io/StateMalformed", True, "ParseError", "x")]}}
    with pytest.raises(ApiException) as refused:
        core.patch_node_status(node, patch, _content_type="application/strategic-merge-patch+json")
    assert refused.value.status == 409


def test_close_window_lifts_its_cordon_in_the_state_write_and_deletes_the_jobs(
    node: str, kube_api_client: ApiClient,
) -> None:
    """`close_window` (issue 26 item 2): the final state, noderoll's own cordon lifted in the same
    patch, then the stage pods' deletion (none here: nothing to find is no failure)."""
    from activities.window_close import close_window
    from protocol.node_activities import CloseWindowInput, DeleteStageJobsInput

    core = client.CoreV1Api(kube_api_client)
    env = ActivityEnvironment()
    core.patch_node(node, {"metadata": {"labels": {"team": "ml"}}})
    assert env.run(cordon_node, NodeInput(node)).cordoned_by_noderoll
    state = WriteNodeStateInput(node=node, state_annotation='{"packages":{}}', status="complete", updating=False,
                                erroring=False)
    result = env.run(close_window, CloseWindowInput(state, uncordon=True,
                                                    delete=DeleteStageJobsInput(node, ["nothing-here"])))
    assert result.delete_error == ""
    obj = core.read_node(node)
    assert not obj.spec.unschedulable and CORDONED_BY_ANNOTATION not in (obj.metadata.annotations or {})
    assert obj.metadata.labels["noderoll.io/status"] == "complete" and obj.metadata.labels["team"] == "ml"
    # Without `uncordon` (left cordoned after a failure, or someone else's cordon) the cordon stays.
    assert env.run(cordon_node, NodeInput(node)).cordoned_by_noderoll
    env.run(close_window, CloseWindowInput(state, uncordon=False))
    assert core.read_node(node).spec.unschedulable
    assert env.run(uncordon_node, NodeInput(node)).uncordoned

"""Pure helpers of the node window: tolerations, drain settings, backoff, status label, pod names/manifests."""

from __future__ import annotations

import dataclasses
import json
import uuid
from datetime import timedelta
from typing import Any

import pytest
from kubernetes import client
from temporalio.testing import ActivityEnvironment

from activities.heartbeats import keep_alive, wait_slice, watch_slice
from activities.pod_create import pod_name
from activities.stage_pod import pod_manifest
from api.enums import NodeStatus, Stage, State
from api.node_state import NodeState, PackageNodeState
from api.package import PackageSpec
from kube.pod_wait import pod_outcome
from planning.node.window import (
    EntryUpdate,
    drain_settings,
    log_tail,
    node_status,
    protected_selectors,
    retry_backoff,
    stage_tolerations,
    updated_entry,
    window_key,
)
from protocol.node_activities import StageJob


def a_spec(**fields: Any) -> PackageSpec:
    return PackageSpec.model_validate({"version": "1.0.0", "image": "registry.local/pkg:1.0.0", **fields})


def a_job(**fields: Any) -> StageJob:
    values: dict[str, Any] = dict(package="nvidia-driver", version="550.1.0", node="gpu-node-0001", mode="apply",
                                  image="registry.local/driver:550", attempt=1, window="abcd1234-1")
    values.update(fields)
    return StageJob(**values)


def test_tolerations_cover_node_taints_cordon_and_additional() -> None:
    taints = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
              {"key": "node.kubernetes.io/unschedulable", "value": "", "effect": "NoSchedule"},
              {"key": "dedicated", "value": "", "effect": "NoExecute"}]
    spec = a_spec(additionalTolerations=[{"key": "x", "operator": "Exists"}])
    assert stage_tolerations(taints, spec) == [
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "nvidia.com/gpu", "effect": "NoSchedule", "operator": "Equal", "value": "present"},
        {"key": "dedicated", "effect": "NoExecute", "operator": "Exists"},
        {"key": "x", "operator": "Exists"},
    ]


def test_drain_settings_merge_most_patient_timeout_shortest_grace_and_unanimous_empty_dir() -> None:
    merged = drain_settings([
        a_spec(drain={"timeoutSeconds": 100, "gracePeriodSeconds": 30, "deleteEmptyDirData": True}),
        a_spec(drain={"timeoutSeconds": 300, "deleteEmptyDirData": False}),
        a_spec(drain={"timeoutSeconds": 50, "gracePeriodSeconds": 5, "deleteEmptyDirData": True}),
    ])
    assert (merged.timeout_seconds, merged.grace_period_seconds, merged.delete_empty_dir_data) == (300, 5, False)


def test_protected_selectors_skip_empty_ones() -> None:
    specs = [a_spec(podNonInterruptLabels={"matchLabels": {"job": "training"}}), a_spec(),
             a_spec(podNonInterruptLabels={})]
    assert protected_selectors(specs) == [{"matchLabels": {"job": "training"}}]


@pytest.mark.parametrize(("attempt", "seconds"), [(1, 30), (2, 60), (3, 120), (10, 600)])
def test_backoff_doubles_and_is_capped(attempt: int, seconds: float) -> None:
    assert retry_backoff(30, attempt) == seconds


def test_log_tail_keeps_last_lines() -> None:
    assert log_tail("\n".join(str(i) for i in range(50)), 3) == "47\n48\n49"


@pytest.mark.parametrize(("states", "in_window", "expected"), [
    pytest.param([State.COMPLETE, State.ERRORING], False, NodeStatus.ERRORING, id="erroring-wins"),
    pytest.param([State.COMPLETE], True, NodeStatus.IN_PROGRESS, id="window-running"),
    pytest.param([State.COMPLETE, State.BLOCKED], False, NodeStatus.BLOCKED, id="blocked"),
    pytest.param([State.COMPLETE], False, NodeStatus.COMPLETE, id="complete"),
    pytest.param([], False, NodeStatus.COMPLETE, id="nothing-recorded"),
])
def test_node_status_label(states: list[State], in_window: bool, expected: NodeStatus) -> None:
    state = NodeState(packages={f"p{i}": PackageNodeState(version="1.0.0", state=s) for i, s in enumerate(states)})
    assert node_status(state, in_window) is expected


def test_updated_entry_is_a_copy() -> None:
    entry = PackageNodeState(version="1.0.0", image="img", state=State.IN_PROGRESS)
    done = updated_entry(entry, EntryUpdate(Stage.CONFIG, State.COMPLETE, 2), "2026-01-01T00:00:00Z")
    assert (done.stage, done.state, done.attempts, done.image) == (Stage.CONFIG, State.COMPLETE, 2, "img")
    assert entry.state is State.IN_PROGRESS


def test_pod_name_is_deterministic_bounded_and_distinct_per_attempt_and_window() -> None:
    long = a_job(package="a" * 43, mode="post-interrupt-check", node="n" * 63)
    assert len(pod_name(long)) <= 63
    assert pod_name(a_job()) == pod_name(a_job())
    names = {pod_name(a_job()), pod_name(a_job(attempt=2)), pod_name(a_job(window="other-1")),
             pod_name(a_job(mode="apply-check")), pod_name(a_job(version="550.2.0")),
             pod_name(a_job(modes=["apply", "apply-check"]))}
    assert len(names) == 6
    assert pod_name(a_job()).startswith("nr-nvidia-driver-apply-")


def test_pod_manifest_follows_the_stage_pod_contract() -> None:
    job = a_job(mode="interrupt", interrupt={"type": "reboot", "services": []}, config={"a.conf": "x"},
                env=[{"name": "EXTRA", "value": "1"}], tolerations=[{"operator": "Exists"}])
    manifest = pod_manifest(job, "nr-x")
    pod = manifest["spec"]
    [container] = pod["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    # A bare pod (ADR 0018): no Job, pinned, never restarted, its deadline the stage timeout.
    assert (manifest["apiVersion"], manifest["kind"], manifest["metadata"]["name"]) == ("v1", "Pod", "nr-x")
    assert pod["nodeName"] == "gpu-node-0001" and pod["restartPolicy"] == "Never"
    assert pod["activeDeadlineSeconds"] == job.timeout_seconds
    assert container["name"] == "interrupt" and container["args"] == ["interrupt"] and "initContainers" not in pod
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert env["NODEROLL_INTERRUPT"] == '{"services": [], "type": "reboot"}'
    assert env["NODEROLL_ROOT"] == "/host" and env["NODEROLL_CONFIG_DIR"] == "/noderoll-config"
    assert env["EXTRA"] == "1" and env["NODEROLL_MODE"] == "interrupt"
    # An interrupt needs no package files: no copy container, no ConfigMap, only the host root.
    assert [v["name"] for v in pod["volumes"]] == ["host"]
    assert manifest["metadata"]["labels"]["noderoll.io/component"] == "stage"


def test_a_stage_and_its_check_run_in_one_pod() -> None:
    manifest = pod_manifest(a_job(modes=["apply", "apply-check"]), "nr-x")
    pod = manifest["spec"]
    [copy, stage], [check] = pod["initContainers"], pod["containers"]
    assert copy["name"] == "package" and copy["image"] == "registry.local/driver:550"
    assert (stage["name"], stage["args"], check["name"], check["args"]) == (
        "apply", ["apply"], "apply-check", ["apply-check"])
    assert {e["name"]: e["value"] for e in check["env"]}["NODEROLL_MODE"] == "apply-check"
    # No config: no config volume; the node metadata comes only when ensure_pod made its ConfigMap.
    assert [v["name"] for v in pod["volumes"]] == ["host", "package"]
    assert manifest["metadata"]["labels"]["noderoll.io/mode"] == "apply"


def _status(name: str, exit_code: int | None, message: str = "") -> client.V1ContainerStatus:
    state = client.V1ContainerState(
        terminated=client.V1ContainerStateTerminated(exit_code=exit_code, message=message) if exit_code is not None
        else None,
        waiting=client.V1ContainerStateWaiting(reason="PodInitializing") if exit_code is None else None)
    return client.V1ContainerStatus(name=name, image="i", image_id="", ready=False, restart_count=0, state=state)


@pytest.mark.parametrize(("phase", "init", "main", "expected"), [
    pytest.param("Failed", (0, "staged"), (4, "check says no"), (4, "check says no", "apply-check"), id="check-fails"),
    pytest.param("Failed", (3, "stage broke"), None, (3, "stage broke", "apply"), id="stage-fails"),
    pytest.param("Succeeded", (0, "staged"), (0, "checked"), (0, "checked", "apply-check"), id="both-succeed"),
])
def test_pod_outcome_names_the_container_that_decided(
        phase: str, init: tuple[int, str], main: tuple[int, str] | None, expected: tuple[int, str, str]) -> None:
    pod = client.V1Pod(status=client.V1PodStatus(
        phase=phase, init_container_statuses=[_status("apply", *init)],
        container_statuses=[_status("apply-check", *(main or (None,)))]))
    outcome = pod_outcome(pod)
    assert outcome is not None and (outcome.exit_code, outcome.log_tail, outcome.mode) == expected


def test_pod_outcome_reads_exit_code_and_termination_message() -> None:
    running = client.V1Pod(status=client.V1PodStatus(phase="Running"))
    assert pod_outcome(running) is None
    failed = client.V1Pod(status=client.V1PodStatus(phase="Failed", container_statuses=[client.V1ContainerStatus(
        name="agent", image="i", image_id="", ready=False, restart_count=0,
        state=client.V1ContainerState(terminated=client.V1ContainerStateTerminated(exit_code=7, message="boom")),
    )]))
    outcome = pod_outcome(failed)
    assert outcome is not None and (outcome.exit_code, outcome.log_tail) == (7, "boom")


def test_waits_are_sliced_below_the_heartbeat_timeout() -> None:
    info = ActivityEnvironment().info
    short = ActivityEnvironment()
    short.info = dataclasses.replace(info, heartbeat_timeout=timedelta(seconds=6))
    assert short.run(lambda: wait_slice(5)) == 2.0
    assert short.run(lambda: wait_slice(1)) == 1
    none = ActivityEnvironment()
    none.info = dataclasses.replace(info, heartbeat_timeout=None)
    assert none.run(lambda: wait_slice(5)) == 5
    assert wait_slice(5) == 5  # outside an activity


def test_a_watch_slice_is_long_only_while_a_keep_alive_heartbeats() -> None:
    """Inside `keep_alive` (its thread heartbeats) a watch may outlast the heartbeat timeout: one
    request per pod or reboot; without it the slice stays a third of the timeout."""
    info = ActivityEnvironment().info
    env = ActivityEnvironment()
    env.info = dataclasses.replace(info, heartbeat_timeout=timedelta(seconds=15))
    assert env.run(lambda: watch_slice(5, 30)) == 5
    assert env.run(keep_alive(lambda: watch_slice(5, 30))) == 30
    short = ActivityEnvironment()
    short.info = dataclasses.replace(info, heartbeat_timeout=timedelta(seconds=6))
    assert short.run(lambda: watch_slice(5, 30)) == 2.0
    assert watch_slice(5, 30) == 5  # outside an activity


def test_completed_modes_are_the_agent_containers_that_exited_zero_in_order() -> None:
    from kubernetes import client as k8s

    from kube.pod_wait import completed_modes

    def status(name: str, code: int | None) -> k8s.V1ContainerStatus:
        state = k8s.V1ContainerState(terminated=k8s.V1ContainerStateTerminated(exit_code=code)) if code is not None \
            else k8s.V1ContainerState(running=k8s.V1ContainerStateRunning())
        return k8s.V1ContainerStatus(name=name, state=state, image="i", image_id="", ready=False, restart_count=0)

    pod = k8s.V1Pod(status=k8s.V1PodStatus(
        phase="Failed",
        init_container_statuses=[status("package", 0), status("apply", 0), status("apply-check", 0),
                                 status("config", 0), status("config-check", 4)],
        container_statuses=[status("interrupt", None)]))
    assert completed_modes(pod) == ("apply", "apply-check", "config")


def _raw_pod(uid: str, phase: str, version: str, **status: Any) -> dict[str, Any]:
    """A stage pod as the watch delivers it: raw JSON (camelCase)."""
    return {"kind": "Pod", "metadata": {"uid": uid, "name": f"nr-job-{uid}", "resourceVersion": version},
            "status": {"phase": phase, **status}}


def _container(state: dict[str, Any], name: str = "apply") -> dict[str, Any]:
    """A container status as the apiserver sends it (the typed client requires these fields)."""
    return {"name": name, "image": "i", "imageID": "", "ready": False, "restartCount": 0, "state": state}


def _event(kind: str, raw: dict[str, Any]) -> dict[str, Any]:
    # What `watch.Watch.stream` yields for a list call without a return type: the JSON twice.
    return {"type": kind, "object": raw, "raw_object": raw}


def test_a_bookmark_moves_the_pod_watch_on_and_a_finished_pod_ends_it() -> None:
    # Issue #14: the stage pod watch asks for bookmarks, and reads every event as raw JSON.
    from kube.pod_wait import PodWait

    wait = PodWait("nr-job", "", created="100")
    assert wait.on_event(_event("BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": "150"}})) is None
    assert wait.resource_version == "150"
    running = _raw_pod("u1", "Running", "155", containerStatuses=[
        _container({"running": {"startedAt": "2026-12-02T00:00:00Z"}})])
    assert wait.on_event(_event("MODIFIED", running)) is None
    assert (wait.resource_version, wait.pod_uid, wait.seen) == ("155", "u1", "155")
    done = _raw_pod("u1", "Succeeded", "160", containerStatuses=[
        _container({"terminated": {"exitCode": 0, "startedAt": "2026-12-02T00:00:00Z",
                                   "finishedAt": "2026-12-02T00:00:05Z"}})])
    outcome = wait.on_event(_event("MODIFIED", done))
    assert outcome is not None and (outcome.exit_code, outcome.completed) == (0, ("apply",))
    assert outcome.durations == {"apply": 5.0}
    assert (wait.resource_version, wait.pod_uid, wait.seen) == ("160", "u1", "160")


def test_an_undecided_event_of_another_pod_of_our_name_means_ours_is_gone() -> None:
    from kube import pod_wait

    wait = pod_wait.PodWait("nr-job", "", created="100")
    assert wait.on_event(_event("ADDED", _raw_pod("u1", "Pending", "110"))) is None
    outcome = wait.on_event(_event("ADDED", _raw_pod("u2", "Pending", "120")))
    assert outcome is not None and outcome.exit_code == -1 and "was deleted before it finished" in outcome.log_tail


@pytest.mark.parametrize(("status", "decides"), [
    pytest.param({"phase": "Pending"}, False, id="pending"),
    pytest.param({"phase": "Running", "containerStatuses": [_container({"running": {}})]}, False, id="running"),
    pytest.param({"phase": "Pending", "initContainerStatuses": [_container({"waiting": {"reason": "PodInitializing"}})]},
                 False, id="initializing"),
    pytest.param({"phase": "Pending", "initContainerStatuses": [_container({"waiting": {"reason": "ErrImagePull"}})]},
                 True, id="unstartable-init"),
    pytest.param({"phase": "Pending", "containerStatuses": [_container({"waiting": {"reason": "ImagePullBackOff"}})]},
                 True, id="unstartable"),
    pytest.param({"phase": "Succeeded"}, True, id="succeeded"),
    pytest.param({"phase": "Failed"}, True, id="failed"),
    pytest.param({}, False, id="no-status"),
])
def test_only_a_finished_or_unstartable_pod_may_decide(status: dict[str, Any], decides: bool) -> None:
    from kube.pod_wait import finished_outcome, may_decide, pod_from_json

    raw = {"kind": "Pod", "metadata": {"uid": "u1", "name": "p"}, "status": status}
    assert may_decide(raw) is decides
    if not decides:
        # What the raw check skips, the typed one would have found undecided too.
        assert finished_outcome("nr-job", pod_from_json(raw)) is None


def test_a_decoded_watch_event_keeps_what_the_wait_reads_and_decides_as_the_whole_pod() -> None:
    from kube.pod_wait import _decoder, pod_from_json, pod_outcome

    finished = {"terminated": {"exitCode": 3, "message": "sysctl failed", "startedAt": "2026-12-05T01:00:00Z",
                               "finishedAt": "2026-12-05T01:00:05Z"}}
    raw = {
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "noderoll-system", "uid": "u1", "resourceVersion": "42",
                     "labels": {"noderoll.io/node": "n"}, "managedFields": [{"manager": "noderoll"}]},
        "spec": {"nodeName": "n", "containers": [{"name": "apply", "image": "i"}],
                 "volumes": [{"name": "root", "hostPath": {"path": "/"}}]},
        "status": {"phase": "Failed", "containerStatuses": [_container(finished)]},
    }
    whole = _decoder().deserialize(json.dumps(raw), "V1Pod", "application/json")
    pod = pod_from_json(raw)
    assert (pod.metadata.name, pod.metadata.uid, pod.metadata.resource_version) == ("p", "u1", "42")
    assert pod.spec is None and pod.metadata.managed_fields is None  # not decoded: nothing reads them
    assert pod_outcome(pod) == pod_outcome(whole)
    assert pod_outcome(pod) is not None and pod_outcome(pod).exit_code == 3


@pytest.mark.parametrize(("version", "floor", "expected"), [
    pytest.param("120", "100", True, id="cache-ahead"),
    pytest.param("100", "100", True, id="cache-at-the-cordon"),
    pytest.param("99", "100", False, id="cache-behind"),
    pytest.param("", "100", False, id="no-version"),
    pytest.param("abc", "100", False, id="not-etcd"),
])
def test_the_drain_uses_the_cache_only_when_it_has_seen_the_cordon(version: str, floor: str, expected: bool) -> None:
    from kube.node_pods import _at_least

    assert _at_least(version, floor) is expected


def test_pod_outcome_keeps_each_finished_containers_start_and_end_for_the_report() -> None:
    from datetime import UTC, datetime

    def finished(name: str, start: int, end: int) -> client.V1ContainerStatus:
        return client.V1ContainerStatus(
            name=name, image="i", image_id="", ready=False, restart_count=0,
            state=client.V1ContainerState(terminated=client.V1ContainerStateTerminated(
                exit_code=0, started_at=datetime(2025, 1, 1, 0, 0, start, tzinfo=UTC),
                finished_at=datetime(2025, 1, 1, 0, 0, end, tzinfo=UTC))))

    pod = client.V1Pod(status=client.V1PodStatus(phase="Succeeded", init_container_statuses=[finished("apply", 1, 5)],
                                                 container_statuses=[finished("apply-check", 5, 6)]))
    outcome = pod_outcome(pod)
    assert outcome is not None and outcome.times == {
        "apply": ["2025-01-01T00:00:01+00:00", "2025-01-01T00:00:05+00:00"],
        "apply-check": ["2025-01-01T00:00:05+00:00", "2025-01-01T00:00:06+00:00"]}


def _uuid7(unix_ms: int) -> str:
    """A UUIDv7 (RFC 9562) as Temporal's servers hand out run ids: 48 bits of Unix milliseconds first."""
    rand = uuid.uuid4().int & ((1 << 74) - 1)
    value = (unix_ms << 80) | (0x7 << 76) | ((rand >> 62) << 64) | (0b10 << 62) | (rand & ((1 << 62) - 1))
    return str(uuid.UUID(int=value))


def test_windows_of_runs_started_a_second_apart_name_different_jobs() -> None:
    # A retried window's run starts seconds after the failed one; with the key a run id prefix the two
    # shared the first window's pod name and the retry adopted the failed pod (issue 26's merge).
    first, retry = _uuid7(1_796_350_785_000), _uuid7(1_796_350_786_000)
    assert first[:8] == retry[:8]
    assert window_key(first, 1) != window_key(retry, 1)
    job = StageJob(package="p", version="1.0.0", node="n", mode="apply", image="i")
    names = {pod_name(dataclasses.replace(job, window=window_key(run, 1))) for run in (first, retry)}
    assert len(names) == 2
    assert window_key(first, 1) != window_key(first, 2)

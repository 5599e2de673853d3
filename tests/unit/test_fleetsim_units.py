"""fleetsim's pure parts: fault rules, image references, pod status documents, node naming."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from fleetsim import podstatus, stagepods
from fleetsim.command import parse_gpus, parse_labels, parse_taints
from fleetsim.context import DOMAIN_LABEL, RACK_LABEL, FleetOptions, SimContext, SimNode
from fleetsim.faults import Fault, Faults, load_faults_file, parse_flag
from fleetsim.images import ImageStore, split_reference
from fleetsim.nodes import node_labels, node_name, node_status
from tests.helpers.packages import SYSCTL_IMAGE


@pytest.mark.parametrize(
    ("kind", "value", "expected"),
    [
        pytest.param("fail-stage", "sim-00[12]:apply:7", Fault("fail-stage", nodes="sim-00[12]", mode="apply", exit_code=7), id="fail-with-code"),
        pytest.param("fail-stage", "sim-.*:config", Fault("fail-stage", nodes="sim-.*", mode="config"), id="fail-default-code"),
        pytest.param("hang", "sim-003:apply-check", Fault("hang", nodes="sim-003", mode="apply-check"), id="hang"),
        pytest.param("reboot-never-returns", "sim-004", Fault("reboot-never-returns", nodes="sim-004"), id="reboot"),
        pytest.param("slow-termination", "sim-.*:20", Fault("slow-termination", nodes="sim-.*", seconds=20), id="slow"),
    ],
)
def test_fault_flags(kind: str, value: str, expected: Fault) -> None:
    assert parse_flag(kind, value) == expected


def test_bad_fault_flag_and_kind() -> None:
    with pytest.raises(ValueError):
        parse_flag("hang", "only-a-regex")
    with pytest.raises(ValueError):
        Fault("explode")


def test_faults_match_whole_names_and_spend_times(tmp_path: Path) -> None:
    path = tmp_path / "faults.yaml"
    path.write_text("faults:\n  - kind: fail-stage\n    nodes: 'sim-00[0-1]'\n    mode: 'apply*'\n    exitCode: 9\n    times: 1\n")
    faults = Faults(load_faults_file(path))
    assert faults.take("fail-stage", "sim-0010", "apply") is None  # fullmatch, not prefix
    assert faults.take("fail-stage", "sim-001", "config") is None
    rule = faults.take("fail-stage", "sim-001", "apply-check")
    assert rule is not None and rule.exit_code == 9
    assert faults.take("fail-stage", "sim-000", "apply") is None  # spent


def test_a_fault_can_hit_one_version_of_a_package(tmp_path: Path) -> None:
    path = tmp_path / "faults.yaml"
    path.write_text("faults:\n  - {kind: fail-stage, package: tune, version: '2.*', exitCode: 7}\n")
    faults = Faults(load_faults_file(path))
    assert faults.take("fail-stage", "sim-001", "apply", "tune", "1.0.0") is None  # the previous version is spared
    assert faults.take("fail-stage", "sim-001", "upgrade", "other", "2.0.0") is None
    rule = faults.take("fail-stage", "sim-001", "upgrade", "tune", "2.0.1")
    assert rule is not None and rule.exit_code == 7


def test_image_references_resolve_to_folders(tmp_path: Path) -> None:
    assert split_reference("registry.local:5000/team/sysctl-tuning:1.2.3") == ("sysctl-tuning", "1.2.3")
    assert split_reference("driver@sha256:abc") == ("driver", "latest")
    (tmp_path / "driver" / "2.0.0").mkdir(parents=True)
    (tmp_path / "driver" / "2.0.0" / "config.json").write_text("{}")
    (tmp_path / "custom" / "skyhook-package").mkdir(parents=True)
    (tmp_path / "custom" / "skyhook-package" / "config.json").write_text("{}")
    (tmp_path / "index.json").write_text(json.dumps({"images": {"nvcr.io/x/odd-name:5": "custom"}}))
    store = ImageStore([tmp_path])
    assert store.resolve("r.example/driver:2.0.0") == tmp_path / "driver" / "2.0.0"
    assert store.resolve("r.example/driver:3.0.0") is None
    assert store.resolve("nvcr.io/x/odd-name:5") == tmp_path / "custom" / "skyhook-package"
    assert store.resolve(SYSCTL_IMAGE).name == "sysctl-tuning"  # examples by default


def test_log_tail_keeps_last_lines_within_two_kib() -> None:
    text = "".join(f"line {i} " + "x" * 60 + "\n" for i in range(200))
    tail = podstatus.log_tail(text)
    assert tail.endswith("line 199 " + "x" * 60)
    assert len(tail.encode()) <= podstatus.LOG_TAIL_BYTES
    assert podstatus.log_tail("a\nb\n") == "a\nb"


def test_terminated_status_reports_exit_code() -> None:
    pod = {"metadata": {"uid": "u1"}, "spec": {"containers": [{"name": "agent", "image": "i:1"}]}, "status": {}}
    failed = podstatus.terminated_status(pod, 3, "boom", ("t0", "t1"))
    assert failed["phase"] == "Failed"
    assert failed["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
    assert podstatus.terminated_status(pod, 0, "", ("t0", "t1"))["phase"] == "Succeeded"


def test_finished_status_of_a_stage_and_its_check() -> None:
    pod = {"metadata": {"uid": "u1"}, "status": {}, "spec": {
        "initContainers": [{"name": "apply", "image": "i:1"}], "containers": [{"name": "apply-check", "image": "i:1"}]}}
    stage_failed = podstatus.finished_status(pod, [("apply", 5, "stage broke")], ("t0", "t1"))
    assert stage_failed["phase"] == "Failed"
    [init], [check] = stage_failed["initContainerStatuses"], stage_failed["containerStatuses"]
    assert init["state"]["terminated"]["exitCode"] == 5 and init["state"]["terminated"]["message"] == "stage broke"
    assert check["state"] == {"waiting": {"reason": "PodInitializing"}}  # never started
    check_failed = podstatus.finished_status(pod, [("apply", 0, ""), ("apply-check", 4, "no")], ("t0", "t1"))
    assert check_failed["phase"] == "Failed"
    assert check_failed["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 4
    both = podstatus.finished_status(pod, [("apply", 0, ""), ("apply-check", 0, "")], ("t0", "t1"))
    assert both["phase"] == "Succeeded"


def test_kubelet_conditions_overwrite_a_foreign_not_ready_and_keep_other_types() -> None:
    marked = [{"type": "Ready", "status": "False", "lastTransitionTime": "t1"},
              {"type": "ContainersReady", "status": "True", "lastTransitionTime": "t0"},
              {"type": "DisruptionTarget", "status": "True", "lastTransitionTime": "t1"}]
    pod = {"metadata": {"uid": "u1"}, "spec": {"containers": [{"name": "c"}]}, "status": {"conditions": marked}}
    assert not podstatus.is_ready(pod)
    conditions = {c["type"]: c for c in podstatus.kubelet_conditions(pod, True, "t2")}
    assert {k: c["status"] for k, c in conditions.items()} == {
        "Initialized": "True", "Ready": "True", "ContainersReady": "True", "PodScheduled": "True",
        "DisruptionTarget": "True"}
    assert conditions["Ready"]["lastTransitionTime"] == "t2"  # changed
    assert conditions["ContainersReady"]["lastTransitionTime"] == "t0"  # unchanged: kept
    assert podstatus.is_ready({"status": {"conditions": list(conditions.values())}})


def test_running_status_after_a_reboot_restarts_containers_and_forgets_not_ready() -> None:
    pod = {"metadata": {"uid": "u1"}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}, "status": {
        "conditions": [{"type": "Ready", "status": "False"}],
        "containerStatuses": [{"name": "c", "restartCount": 2, "state": {"running": {"startedAt": "t0"}}}]}}
    status = podstatus.running_status(pod, "10.0.0.1", "172.16.0.9", ("t0", "t5"), restarted=True)
    [container] = status["containerStatuses"]
    assert container["restartCount"] == 3 and container["state"] == {"running": {"startedAt": "t5"}}
    assert container["lastState"]["terminated"]["exitCode"] == 255
    assert podstatus.is_ready({"status": status})
    assert status["podIP"] == "172.16.0.9" and status["startTime"] == "t0"


def test_a_never_restarted_pod_running_at_a_reboot_fails() -> None:
    pod = {"metadata": {"uid": "u1"}, "spec": {"restartPolicy": "Never", "containers": [{"name": "c"}]}, "status": {
        "phase": "Running", "containerStatuses": [{"name": "c", "restartCount": 0, "state": {"running": {"startedAt": "t0"}}}]}}
    status = podstatus.lost_in_reboot_status(pod, "t9")
    assert status["phase"] == "Failed"
    terminated = status["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["startedAt"], terminated["finishedAt"]) == (255, "t0", "t9")
    assert not podstatus.is_ready({"status": status})


def test_stage_pod_steps_run_init_containers_first() -> None:
    pod = {"metadata": {"name": "p", "namespace": "n", "labels": {}}, "spec": {
        "initContainers": [{"name": "apply", "args": ["apply"], "env": [{"name": "NODEROLL_MODE", "value": "apply"}]}],
        "containers": [{"name": "apply-check", "args": ["apply-check"]}]}}
    steps = stagepods.pod_steps(pod)
    assert [stagepods.pod_mode(pod, c) for c in steps] == ["apply", "apply-check"]
    assert stagepods.pod_env(pod, steps[0]) == {"NODEROLL_MODE": "apply"}


def test_node_names_and_labels() -> None:
    assert node_name("sim", 7, 50) == "sim-007"
    assert node_name("sim", 7, 1000) == "sim-007"
    assert node_name("sim", 7, 10000) == "sim-0007"
    assert parse_labels("a=1, b=two,") == {"a": "1", "b": "two"}


def test_register_with_taints_flag() -> None:
    assert parse_taints("noderoll.io/runtime-required=true:NoSchedule, dedicated:NoExecute") == [
        {"key": "noderoll.io/runtime-required", "value": "true", "effect": "NoSchedule"},
        {"key": "dedicated", "effect": "NoExecute"},
    ]
    for bad in ("k=v", "k=v:Sometimes", ":NoSchedule"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_taints(bad)


def test_gpus_racks_and_domains_of_simulated_nodes() -> None:
    assert parse_gpus("4,8") == [4, 8] and parse_gpus("0") == [0]
    for bad in ("", "x", "-1"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_gpus(bad)
    options = FleetOptions(nodes=24, gpus=[4, 8], racks=6, domains=3)
    ctx = SimContext(options=options, kube=None, scheduler=None, images=None)  # type: ignore[arg-type]
    labels = [node_labels(ctx, SimNode(f"n{i}", i, "boot")) for i in range(24)]
    assert [la[RACK_LABEL] for la in labels[:5]] == ["r0", "r0", "r0", "r0", "r1"], "racks are contiguous blocks"
    assert sorted({la[RACK_LABEL] for la in labels}) == [f"r{i}" for i in range(6)]
    assert [la[DOMAIN_LABEL] for la in (labels[0], labels[8], labels[23])] == ["d0", "d1", "d2"]
    assert [la["nvidia.com/gpu.count"] for la in labels[:2]] == ["4", "8"]
    assert node_status(SimNode("n", 0, "b"), 4)["allocatable"]["nvidia.com/gpu"] == "4"
    cpu = node_status(SimNode("n", 0, "b"), 0)
    assert "nvidia.com/gpu" not in cpu["allocatable"] and "nvidia.com/gpu" not in cpu["capacity"]
    plain = node_labels(SimContext(options=FleetOptions(nodes=2), kube=None, scheduler=None, images=None),  # type: ignore[arg-type]
                        SimNode("n", 0, "b"))
    assert RACK_LABEL not in plain and plain["nvidia.com/gpu.count"] == "8"
    custom = SimContext(options=FleetOptions(nodes=2, racks=2, rack_label="example.com/rack"),  # type: ignore[arg-type]
                        kube=None, scheduler=None, images=None)
    assert node_labels(custom, SimNode("n", 1, "b"))["example.com/rack"] == "r1"


def test_a_training_pod_asks_for_its_nodes_gpus() -> None:
    from fleetsim.workloads import WorkloadSpec, training_pod

    spec = WorkloadSpec(namespace="ns", prefix="sim", nodes=["a", "b", "c"], gpus={"a": 4, "c": 0})
    limits = [training_pod(spec, i, node)["spec"]["containers"][0]["resources"] for i, node in enumerate("abc")]
    assert limits == [{"limits": {"nvidia.com/gpu": "4"}}, {"limits": {"nvidia.com/gpu": "8"}}, {}]


def test_jitter_gives_each_node_its_own_time_factor_the_same_on_every_run() -> None:
    from fleetsim.context import jitter_factor

    names = [f"sim-{i:03d}" for i in range(200)]
    factors = [jitter_factor(n, 50) for n in names]
    assert all(0.5 <= f <= 1.5 for f in factors) and min(factors) < 0.6 and max(factors) > 1.4
    assert factors == [jitter_factor(n, 50) for n in names]
    assert {jitter_factor(n, 0) for n in names} == {1.0}

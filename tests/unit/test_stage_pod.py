"""The stage pod manifest (activities.stage_pod): NodeWright's shape, environment and real-cluster options."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from activities import stage_pod
from activities.stage_pod import StagePodIdentity, StagePodSettings, pod_manifest
from protocol.node_activities import StageJob
from tests.helpers.hostroot import a_host_root, add_binary, can_chroot

IDENTITY = StagePodIdentity(package_uid="6f1c-uid", generation=3, metadata=True)


def a_job(**fields: Any) -> StageJob:
    values: dict[str, Any] = dict(package="gpu-tuning", version="2.0.2", node="gpu-7", mode="apply",
                                  image="ghcr.io/nvidia/skyhook-packages/tuning:2.0.2", modes=["apply", "apply-check"],
                                  config={"sysctl.conf": "vm.swappiness = 1"}, node_order=4)
    values.update(fields)
    return StageJob(**values)


def pod_of(job: StageJob, settings: StagePodSettings | None = None,
           identity: StagePodIdentity = IDENTITY) -> dict[str, Any]:
    return pod_manifest(job, "nr-x", identity, settings or StagePodSettings(agent_image="reg/agent:1.4.0"))["spec"]


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"]}


def test_package_image_is_copied_by_an_init_container_and_the_agent_image_runs_the_modes() -> None:
    pod = pod_of(a_job())
    copy, stage = pod["initContainers"]
    [check] = pod["containers"]
    assert copy["name"] == "package" and copy["image"] == "ghcr.io/nvidia/skyhook-packages/tuning:2.0.2"
    assert copy["command"][:2] == ["/bin/sh", "-c"] and "/skyhook-package" in copy["command"][2]
    assert copy["volumeMounts"] == [{"name": "package", "mountPath": stage_pod.PACKAGE_COPY_DIR}]
    assert [(c["name"], c["image"], c["args"]) for c in (stage, check)] == [
        ("apply", "reg/agent:1.4.0", ["apply"]), ("apply-check", "reg/agent:1.4.0", ["apply-check"])]
    mounts = {m["name"]: m["mountPath"] for m in stage["volumeMounts"]}
    assert mounts == {"host": "/host", "package": "/noderoll-package", "config": "/noderoll-config",
                      "node-metadata": "/noderoll-node-metadata"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["package"] == {"name": "package", "emptyDir": {}}
    assert volumes["config"]["configMap"]["items"] == [{"key": "sysctl.conf", "path": "sysctl.conf"}]
    assert volumes["node-metadata"]["configMap"] == {"name": "nr-x", "items": [
        {"key": "noderoll.node-metadata.labels.json", "path": "labels.json"},
        {"key": "noderoll.node-metadata.annotations.json", "path": "annotations.json"},
        {"key": "noderoll.node-metadata.packages.json", "path": "packages.json"}]}


def test_a_package_may_override_the_agent_image() -> None:
    pod = pod_of(a_job(agent_image="mirror.local/noderoll-agent:1.3.9"))
    assert {c["image"] for c in [*pod["initContainers"][1:], *pod["containers"]]} == {"mirror.local/noderoll-agent:1.3.9"}


def test_nodewright_environment_of_the_agent_containers() -> None:
    env = env_of(pod_of(a_job())["containers"][0])
    # NodeWright's form <skyhook>-<uid>-<generation>_<package>_<version>, the Package in place of the Skyhook.
    assert env["SKYHOOK_RESOURCE_ID"] == "gpu-tuning-6f1c-uid-3_gpu-tuning_2.0.2"
    assert env["SKYHOOK_RESOURCE_ID"].split("_")[1] == "gpu-tuning"  # what NodeWright's tuning reads
    assert env["SKYHOOK_NODE_ORDER"] == "4"
    assert env["NODEROLL_PACKAGE_DIR"] == "/noderoll-package" and env["NODEROLL_NODE_METADATA_DIR"] == "/noderoll-node-metadata"


def test_interrupt_pod_is_the_agent_alone() -> None:
    pod = pod_of(a_job(mode="interrupt", modes=[], interrupt={"type": "service", "services": ["containerd"]}),
                 identity=StagePodIdentity("u", 1, metadata=False))
    assert "initContainers" not in pod
    [agent] = pod["containers"]
    assert agent["image"] == "reg/agent:1.4.0" and agent["args"] == ["interrupt"]
    assert [v["name"] for v in pod["volumes"]] == ["host"]
    assert env_of(agent)["SKYHOOK_RESOURCE_ID"] == "gpu-tuning-u-1_gpu-tuning_2.0.2"


@pytest.mark.parametrize(
    ("settings", "job", "expected"),
    [
        pytest.param(StagePodSettings(), {}, {}, id="defaults-add-nothing"),
        pytest.param(StagePodSettings(image_pull_secrets=("corp",)), {"image_pull_secrets": ["nvcr", "corp"]},
                     {"imagePullSecrets": [{"name": "corp"}, {"name": "nvcr"}]}, id="pull-secrets-merged"),
        pytest.param(StagePodSettings(host_network=True), {},
                     {"hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet"}, id="host-network"),
        pytest.param(StagePodSettings(priority_class_name="system-node-critical"), {},
                     {"priorityClassName": "system-node-critical"}, id="priority-class"),
    ],
)
def test_real_cluster_options(settings: StagePodSettings, job: dict[str, Any], expected: dict[str, Any]) -> None:
    pod = pod_of(a_job(**job), settings)
    options = {k: pod[k] for k in ("imagePullSecrets", "hostNetwork", "dnsPolicy", "priorityClassName") if k in pod}
    assert options == expected


def test_settings_from_the_environment() -> None:
    assert stage_pod.settings_from_env({}) == StagePodSettings(agent_image=stage_pod.DEFAULT_AGENT_IMAGE)
    assert stage_pod.settings_from_env({
        "NODEROLL_AGENT_IMAGE": "r/a:2", "NODEROLL_IMAGE_PULL_SECRETS": "a, b,", "NODEROLL_STAGE_HOST_NETWORK": "true",
        "NODEROLL_STAGE_PRIORITY_CLASS": "p"}) == StagePodSettings("r/a:2", ("a", "b"), True, "p")
    assert stage_pod.DEFAULT_AGENT_IMAGE.endswith(f":{stage_pod.AGENT_VERSION}")


def test_node_metadata_is_nodewrights_three_files() -> None:
    state = {"packages": {"kdump": {"version": "1.1.0", "image": "r/kdump:1.1.0", "stage": "config", "state": "complete"}}}
    node = {"metadata": {"labels": {"zone": "a"}, "annotations": {"noderoll.io/state": json.dumps(state), "x": "y"}}}
    data = stage_pod.node_metadata(node, a_job(), StagePodSettings(agent_image="reg/agent:1.4.0"))
    assert json.loads(data["noderoll.node-metadata.labels.json"]) == {"zone": "a"}
    assert json.loads(data["noderoll.node-metadata.annotations.json"])["x"] == "y"
    packages = json.loads(data["noderoll.node-metadata.packages.json"])
    assert packages["agentVersion"] == "1.4.0"
    assert packages["packages"]["kdump"] == {"name": "kdump", "version": "1.1.0", "image": "r/kdump:1.1.0",
                                             "stage": "config", "state": "complete"}
    assert packages["packages"]["gpu-tuning"] == {"name": "gpu-tuning", "version": "2.0.2", "agentImage": "reg/agent:1.4.0",
                                                  "image": "ghcr.io/nvidia/skyhook-packages/tuning:2.0.2"}


def _image(tmp: Path, layout: dict[str, str]) -> Path:
    """An unpacked image: this machine's sh and cp, plus the given files."""
    root = a_host_root(tmp / "image")
    add_binary(root, "cp", "/bin/cp")
    (root / stage_pod.PACKAGE_COPY_DIR.lstrip("/")).mkdir()
    for path, text in layout.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


def _run_copy(root: Path) -> subprocess.CompletedProcess[str]:
    def enter() -> None:
        os.chroot(root)
        os.chdir("/")

    return subprocess.run(["/bin/sh", "-c", stage_pod.COPY_SCRIPT], capture_output=True, text=True,
                          env={"PATH": "/bin"}, preexec_fn=enter, timeout=30, check=False)  # noqa: PLW1509


@pytest.mark.skipif(bool(can_chroot()), reason=can_chroot() or "root")
@pytest.mark.parametrize(
    ("layout", "copied"),
    [
        pytest.param({"skyhook-package/config.json": "{}", "skyhook-package/skyhook_dir/apply.sh": "x",
                      "skyhook-package/.hidden": "h"}, ["config.json", "skyhook_dir/apply.sh", ".hidden"],
                     id="nodewright-image"),
        pytest.param({"noderoll-package/config.json": "{}", "skyhook-package/config.json": "{}",
                      "noderoll-package/apply.sh": "x"}, ["config.json", "apply.sh"], id="noderoll-layout-first"),
    ],
)
def test_copy_script_copies_the_package_folder(tmp_path: Path, layout: dict[str, str], copied: list[str]) -> None:
    root = _image(tmp_path, layout)
    result = _run_copy(root)
    assert result.returncode == 0, result.stderr
    target = root / stage_pod.PACKAGE_COPY_DIR.lstrip("/")
    assert sorted(str(p.relative_to(target)) for p in target.rglob("*") if p.is_file()) == sorted(copied)


@pytest.mark.skipif(bool(can_chroot()), reason=can_chroot() or "root")
def test_copy_script_fails_with_the_agent_code_without_a_package_folder(tmp_path: Path) -> None:
    result = _run_copy(_image(tmp_path, {"etc/motd": "hi"}))
    assert result.returncode == 66
    assert result.stderr.strip().splitlines()[-1].startswith("noderoll-agent: FAILED: image has no /noderoll-package")


def test_a_pod_of_several_stages_runs_each_then_its_check_and_the_interrupt_last() -> None:
    # Issue #14: everything before the interrupt in one pod, the merged interrupt as its last container.
    modes = ["apply", "apply-check", "config", "config-check", "interrupt"]
    pod = pod_of(a_job(modes=modes, interrupt={"type": "reboot", "services": []}))
    assert [c["name"] for c in pod["initContainers"]] == ["package", *modes[:-1]]
    [interrupt] = pod["containers"]
    assert interrupt["name"] == "interrupt" and interrupt["args"] == ["interrupt"]
    assert json.loads(env_of(interrupt)["NODEROLL_INTERRUPT"]) == {"type": "reboot", "services": []}
    assert all("NODEROLL_INTERRUPT" not in env_of(c) for c in pod["initContainers"][1:])
    # The interrupt needs no package files; the stages do.
    assert {m["name"] for m in interrupt["volumeMounts"]} == {"host", "node-metadata"}
    assert {m["name"] for m in pod["initContainers"][3]["volumeMounts"]} == {"host", "package", "config",
                                                                              "node-metadata"}
    assert {v["name"] for v in pod["volumes"]} == {"host", "package", "config", "node-metadata"}


def test_an_interrupt_pod_alone_has_no_copy_container_and_no_package_volume() -> None:
    pod = pod_of(a_job(mode="interrupt", modes=[], interrupt={"type": "reboot", "services": []}),
                 identity=StagePodIdentity())
    assert "initContainers" not in pod
    assert [v["name"] for v in pod["volumes"]] == ["host"]


def test_a_pod_of_several_packages_gives_each_its_containers_volumes_config_and_environment() -> None:
    first = a_job(tolerations=[{"key": "gpu", "operator": "Exists"}], image_pull_secrets=["one"])
    second = a_job(package="driver", version="550.1.0", image="reg/driver:550", modes=["apply", "apply-check"],
                   config={"driver.conf": "x=1"}, env=[{"name": "DRIVER", "value": "yes"}],
                   resources={"limits": {"cpu": "1"}}, agent_image="reg/agent:custom",
                   tolerations=[{"key": "gpu", "operator": "Exists"}, {"key": "b", "operator": "Exists"}],
                   image_pull_secrets=["two", "one"])
    ids = [IDENTITY, StagePodIdentity(package_uid="77-uid", generation=9, metadata=True)]
    manifest = pod_manifest([first, second], "nr-x", ids, StagePodSettings(agent_image="reg/agent:1.4.0"))
    pod = manifest["spec"]
    containers = [*pod["initContainers"], *pod["containers"]]
    assert [c["name"] for c in containers] == ["p0-package", "p0-apply", "p0-apply-check",
                                               "p1-package", "p1-apply", "p1-apply-check"]
    assert manifest["metadata"]["annotations"]["noderoll.io/packages"] == '["gpu-tuning", "driver"]'
    assert manifest["metadata"]["labels"]["noderoll.io/package"] == "gpu-tuning"
    # Each Package its own package volume and config projection (keys prefixed by its index).
    by_name = {c["name"]: c for c in containers}
    mounts = {m["mountPath"]: m["name"] for m in by_name["p1-apply"]["volumeMounts"]}
    assert mounts["/noderoll-package"] == "p1-package" and mounts["/noderoll-config"] == "p1-config"
    assert by_name["p1-package"]["volumeMounts"][0]["name"] == "p1-package"
    assert by_name["p1-package"]["image"] == "reg/driver:550" and by_name["p1-apply"]["image"] == "reg/agent:custom"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["p1-config"]["configMap"]["items"] == [{"key": "p1.driver.conf", "path": "driver.conf"}]
    assert volumes["p0-config"]["configMap"]["items"] == [{"key": "p0.sysctl.conf", "path": "sysctl.conf"}]
    assert stage_pod.config_map_data([first, second]) == {"p0.sysctl.conf": "vm.swappiness = 1",
                                                          "p1.driver.conf": "x=1"}
    # Each its own environment: NODEROLL_PACKAGE, SKYHOOK_RESOURCE_ID (its uid and generation), its env.
    env = env_of(by_name["p1-apply"])
    assert (env["NODEROLL_PACKAGE"], env["NODEROLL_VERSION"], env["DRIVER"]) == ("driver", "550.1.0", "yes")
    assert env["SKYHOOK_RESOURCE_ID"] == "driver-77-uid-9_driver_550.1.0"
    assert env_of(by_name["p0-apply"])["SKYHOOK_RESOURCE_ID"] == "gpu-tuning-6f1c-uid-3_gpu-tuning_2.0.2"
    assert "DRIVER" not in env_of(by_name["p0-apply"]) and by_name["p1-apply"]["resources"] == {"limits": {"cpu": "1"}}
    # Pod-level options are the union.
    assert pod["tolerations"] == [{"key": "gpu", "operator": "Exists"}, {"key": "b", "operator": "Exists"}]
    assert pod["imagePullSecrets"] == [{"name": "one"}, {"name": "two"}]
    assert manifest["spec"]["activeDeadlineSeconds"] == first.timeout_seconds + second.timeout_seconds


def test_node_metadata_of_a_pod_of_several_packages_lists_each() -> None:
    node = {"metadata": {"labels": {}, "annotations": {}}}
    data = stage_pod.node_metadata(node, [a_job(), a_job(package="driver", image="reg/driver:1")], StagePodSettings())
    packages = json.loads(data["noderoll.node-metadata.packages.json"])["packages"]
    assert set(packages) == {"gpu-tuning", "driver"} and packages["driver"]["image"] == "reg/driver:1"

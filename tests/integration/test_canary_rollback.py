"""Automatic rollback of a failed canary on the real stack (`canary.onFailure: rollback`, ADR 0009).

`noderoll worker` and `noderoll bridge` processes, four fleetsim nodes. A DeploymentPolicy with a
one-node canary that rolls back; Package `tune` 1.0.0 rolls out everywhere. Then one change set: `tune`
goes to 2.0.0, which a fleetsim fault makes fail on every node (a `fail-stage` fault matching version
2.0.0 only), and a new Package `mods` (a reboot) is added (the fleet paused meanwhile, so both are one
wave). The canary node fails; the fleet rolls it
back: its record ends with `tune` 1.0.0 complete and no `mods`, the stage pods of its rollback window
ran (`apply` and `config` of `tune` 1.0.0, `uninstall` of `mods`, one reboot), it is schedulable again;
the other nodes never got a window or a stage pod of the new change set; the DeploymentPolicy and both
Packages show phase `RolledBack` with `status.rollback`, and a Warning Event `CanaryRolledBack` is on the
policy. A fixed spec (`tune` 2.0.1, the fault gone) then starts a new wave that updates every node.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient
from temporalio.client import Client

from api import keys
from api.stage_containers import is_copy, pod_packages, split_container
from fleetsim.faults import Fault
from localstack.state import StackInfo
from protocol import names
from tests.helpers import assert_eventually, assert_eventually_async, unique_name
from tests.helpers.fleet import running_fleet
from tests.helpers.packages import KMOD_IMAGE, package_spec
from tests.helpers.processes import NoderollProcesses, noderoll_fixture
from tests.helpers.stagepods import StagePodRecorder
from tests.integration.bridge_support import (
    create_package,
    create_policy,
    delete_package,
    delete_policy,
    fleet_progress,
    kubectl_wait_ready,
    patch_package,
    policy_events,
    read_package,
    read_policy,
    windows_of,
)

# Two waves, a failed canary (3 attempts), its rollback with a reboot, then a fixed wave over 4 nodes:
# about 80 s at load average 3, more on a loaded machine.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


run = noderoll_fixture(retry_backoff_seconds=1)


def jobs_on(recorder: StagePodRecorder, node: str) -> list[tuple[str, str, str, bool]]:
    """(package, mode, version, succeeded) of every stage that ran on `node` in a stage pod, oldest
    first: a pod runs several stages, one container each (the package copy container left out); recorded, as a
    window deletes its pods once its outcome is on the node (issue #14)."""
    jobs = [j for j in recorder.pods() if j.metadata.labels["noderoll.io/node"] == node]
    # A pod of several Packages (ADR 0016) names its containers by index: api.stage_containers maps them back.
    return [(*split_container(container.name, pod_packages(j.metadata.labels, j.metadata.annotations)),
             {e.name: e.value for e in container.env or []}.get("NODEROLL_VERSION", ""),
             bool(j.status and j.status.phase == "Succeeded"))
            for j in jobs
            for container in [*(j.spec.init_containers or []), *j.spec.containers]
            if not is_copy(container.name)]


def record_of(api: ApiClient, node: str) -> dict[str, Any]:
    annotations = client.CoreV1Api(api).read_node(node).metadata.annotations or {}
    packages: dict[str, Any] = json.loads(annotations.get(keys.NODE_STATE_ANNOTATION, "{}")).get("packages", {})
    return packages


async def test_failed_canary_is_rolled_back_and_the_rest_is_untouched(
    run: NoderollProcesses, local_stack: StackInfo, kube_api_client: ApiClient, temporal_client: Client
) -> None:
    labels = {"fleet-test": unique_name("rb")}
    policy, tune, mods = unique_name("pol"), unique_name("tune"), unique_name("mods")
    recorder = StagePodRecorder(kube_api_client).start()
    with running_fleet(local_stack, nodes=4, labels=labels) as fleet:
        try:
            create_policy(kube_api_client, run, policy, {
                "canary": {"count": 1, "onFailure": "rollback"},
                "default": {"budget": {"count": 2}, "strategy": {"type": "fixed", "initialBatch": 2}}})
            create_package(kube_api_client, run.package(tune, package_spec(policy=policy, labels=labels)))
            kubectl_wait_ready(local_stack, tune)
            before = {n: windows_of(kube_api_client, n).count for n in fleet.node_names}
            assert set(before.values()) == {1}, before

            # The new version fails whatever stage it runs, on any node; 1.0.0 is spared.
            fleet.options.faults.add(Fault("fail-stage", package=tune, version="2.0.0", exit_code=7))
            # One change set: the fleet is paused while both changes reach it (on a loaded machine the
            # two writes can be further apart than the bridge's settle time), then resumed.
            fleet_handle = temporal_client.get_workflow_handle(names.fleet_workflow_id(policy))
            await fleet_handle.signal(names.SIGNAL_PAUSE)
            patch_package(kube_api_client, tune, {"spec": {"version": "2.0.0"}})
            mods_spec = package_spec(KMOD_IMAGE, policy=policy, labels=labels, interrupt={"type": "reboot"})
            create_package(kube_api_client, run.package(mods, mods_spec))

            async def both_handed_over() -> bool:
                report = await fleet_progress(temporal_client, policy)
                assert report.packages[tune].version == "2.0.0" and mods in report.packages, report.packages
                return True

            await assert_eventually_async(both_handed_over, timeout=120)
            await fleet_handle.signal(names.SIGNAL_RESUME)

            def rolled_back() -> dict[str, Any]:
                status = read_policy(kube_api_client, policy).get("status") or {}
                assert status.get("phase") == "RolledBack", (status.get("phase"), status.get("message"))
                return status

            status = assert_eventually(rolled_back, timeout=240)
            rollback = status["rollback"]
            [canary] = rollback["nodes"]
            assert (rollback["versions"], rollback["uninstalled"]) == ({tune: "1.0.0"}, [mods])
            assert [f["node"] for f in rollback["canaryFailures"]] == [canary]
            assert rollback["canaryFailures"][0]["reason"] == f"{tune}: upgrade failed after 3 attempts (exit code 7)"
            assert status["message"].startswith(f"wave {rollback['wave']} rolled back: canary failed on {canary}")

            # The canary node: back at tune 1.0.0, mods uninstalled, by its rollback window's stage pods.
            record = record_of(kube_api_client, canary)
            assert record[tune]["version"] == "1.0.0" and record[tune]["state"] == "complete", record
            assert mods not in record, record
            jobs = jobs_on(recorder, canary)
            failed = [i for i, j in enumerate(jobs) if j[0] == tune and j[2] == "2.0.0"]
            assert failed and not any(jobs[i][3] for i in failed), jobs
            after = jobs[failed[-1] + 1:]
            for job in ((tune, "apply", "1.0.0", True), (tune, "config", "1.0.0", True), (mods, "uninstall", "1.0.0", True)):
                assert job in after, (job, jobs)
            listing = "\n".join(map(str, jobs))
            # The wave's window still rebooted once for mods (it does not depend on tune, and its stages
            # before the interrupt had succeeded); the rollback window, from mods' uninstall on, merges
            # its changes into one reboot.
            start = after.index((mods, "uninstall", "1.0.0", True))
            wave, rollback = after[:start], after[start:]
            # (By position: the merged interrupt has a pod of its own, named after the first Package by
            # name asking for a reboot, so both windows' interrupt entries can be equal tuples.)
            assert [j for j in wave if j[1] == "interrupt"] == [(mods, "interrupt", "1.0.0", True)], listing
            assert sum(1 for j in rollback if j[1] == "interrupt") == 1, listing  # one merged reboot
            assert not client.CoreV1Api(kube_api_client).read_node(canary).spec.unschedulable

            # Nodes outside the canary: no window and no stage pod of the change set.
            for node in fleet.node_names:
                if node != canary:
                    assert windows_of(kube_api_client, node).count == 1, (node, windows_of(kube_api_client, node))
                    assert not [j for j in jobs_on(recorder, node) if j[0] == mods or j[2] == "2.0.0"]
                    assert record_of(kube_api_client, node)[tune]["version"] == "1.0.0"

            for name, versions, uninstalled in ((tune, {tune: "1.0.0"}, []), (mods, {}, [mods])):
                package = read_package(kube_api_client, name)["status"]
                assert package["phase"] == "RolledBack", package
                shown = package["rollback"]
                assert (shown.get("versions") or {}, shown.get("uninstalled") or []) == (versions, uninstalled), shown
            def event() -> str:
                events = policy_events(kube_api_client, policy, "CanaryRolledBack")
                assert len(events) == 1, [e.message for e in events]
                return str(events[0].message)

            assert f"rolled back on {canary}" in assert_eventually(event, timeout=60)

            # A fixed spec starts a new wave (canary first) that updates every node.
            fleet.options.faults.replace([])
            patch_package(kube_api_client, tune, {"spec": {"version": "2.0.1"}})
            kubectl_wait_ready(local_stack, tune)
            kubectl_wait_ready(local_stack, mods)
            assert all(record_of(kube_api_client, n)[tune]["version"] == "2.0.1" for n in fleet.node_names)
            assert "rollback" not in read_policy(kube_api_client, policy)["status"]
        finally:
            recorder.stop()
            for name in (mods, tune):
                delete_package(kube_api_client, name)
            delete_policy(kube_api_client, policy)
